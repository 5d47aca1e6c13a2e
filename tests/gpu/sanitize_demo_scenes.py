"""Scenes with one deliberate bug each (tests/gpu/sanitize_demos.cuh), for the --mpk-sanitize
demonstrations in test_sanitize_demos_gpu.py. Not a test module (no test_ prefix): run only when
named, and its task specs are registered only where it is imported."""

import os

import torch

from mpk_runtime import resources
from mpk_runtime.tasks.registry import TaskSpec, register_task, split
from pytest_mpk import Case, Out, SceneTestCase, scene_test

HEADER = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sanitize_demos.cuh"), resources.CSRC_TASKS)
COLS = 64


def demo_spec(body: str) -> type:
    class Demo(TaskSpec):
        name = f"sanitize_demo_{body}"
        inputs = {"x": split(x=0)}
        outputs = {"y": split(x=0)}
        headers = {arch: HEADER for arch in ("sm80", "sm90", "sm100")}
        function = f"mpk::demos::{body}"

        def template_args(self, s, values):
            return [s["y"].numel]

        def cost_ns(self, s):
            return 50.0

    Demo.__qualname__ = Demo.__name__ = f"Demo_{body}"
    return register_task(Demo)


for _body in ("out_of_bounds", "racy", "divergent_sync", "uninitialized", "copy"):
    demo_spec(_body)


class CopyScene(SceneTestCase):
    BODY = ""
    CASES = [Case("b4", batch=4)]

    def generate_args(self, params):
        x = torch.randint(1, 1000, (params["batch"], COLS), dtype=torch.int32)
        return {"x": x, "y": Out(torch.empty_like(x))}

    def build(self, pk, t, params):
        getattr(pk, f"sanitize_demo_{self.BODY}_layer")(x=t.x, y=t.y, grid_dim=(params["batch"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return args.x


@scene_test(layer="sanitize_demo")
class TestOutOfBounds(CopyScene):
    BODY = "out_of_bounds"


@scene_test(layer="sanitize_demo")
class TestRacy(CopyScene):
    BODY = "racy"


@scene_test(layer="sanitize_demo")
class TestDivergentSync(CopyScene):
    BODY = "divergent_sync"


@scene_test(layer="sanitize_demo")
class TestUninitialized(CopyScene):
    BODY = "uninitialized"

    def build(self, pk, t, params):  # x -> scratch (never written, a fresh cudaMalloc) -> y
        scratch = pk.new_tensor((params["batch"], COLS), torch.int32, "scratch")
        grid = (params["batch"], 1, 1)
        pk.sanitize_demo_uninitialized_layer(x=t.x, y=scratch, grid_dim=grid, block_dim=pk.block_dim)
        pk.sanitize_demo_copy_layer(x=scratch, y=t.y, grid_dim=grid, block_dim=pk.block_dim)

    def compare(self, actual, expected, case):  # whatever the uninitialized memory held; initcheck is the test
        pass
