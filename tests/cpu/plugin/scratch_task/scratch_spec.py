"""A user's own task that stages its rows in its layer's workspace (tests/cpu/plugin/test_scratch_task_bugs.py).
SCRATCH_STAGE says where: "own" (right: rows of the workspace indexed by the task's grid index),
"shared" (the workspace row every task uses) or "device" (a __device__ array every task uses): the
last two are races on the GPU, where the tasks of a layer run at once, which the emulator's results
never show. Every task also counts itself on the workspace's first word
with an atomic, a word the tasks share by design. SCRATCH_TASK_HEADER is the body to build."""

import os

import torch

from mpk_runtime import resources
from mpk_runtime.tasks.registry import TaskSpec, register_task, split

HEADER = os.path.relpath(os.environ["SCRATCH_TASK_HEADER"], resources.CSRC_TASKS)
COUNT_FLOATS = 4  # the count, padded to 16 bytes


@register_task
class RotateRows(TaskSpec):
    name = "rotate_rows"
    inputs = {"input": split(x=0)}
    outputs = {"output": split(x=0)}
    headers = {arch: HEADER for arch in ("sm80", "sm90", "sm100")}
    function = "user::rotate_rows"
    reference = "rotate_rows"

    def workspace(self, args, values, grid):
        cols = args["input"].tensor.shape[1]
        return {"stage": ((COUNT_FLOATS + grid[0] * cols,), torch.float32)}

    def template_args(self, s, values):
        stage = ("own", "shared", "device").index(os.environ["SCRATCH_STAGE"])  # scratch.cuh's Stage
        return [s["input"].dtype.cpp, s["output"].shape[0], s["input"].shape[1], COUNT_FLOATS, stage]

    def cost_ns(self, s):
        return 200.0
