"""Real task bodies (csrc/tasks/common/rmsnorm.cuh and silu_mul.cuh), in the dispatcher that
codegen.generate writes for them, built for the host and run on the CPU against their PyTorch
references; a race-checking build of the same source finds nothing in them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from mpk_runtime.codegen import abi
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.graph.variants import Variant
from mpk_runtime.run import host_runner
from mpk_runtime.tasks import registry

ARCH = "sm90"  # 256 threads
REFERENCE = Path(__file__).resolve().parents[3] / "reference"
VARIANTS = [
    ("rmsnorm", ["__nv_bfloat16", 4, 1024]),  # 16-byte vectors, the row kept in registers
    ("rmsnorm", ["float", 2, 99]),  # the scalar path
    ("silu_mul", ["__nv_bfloat16", 4, 256, 1024, 512]),  # one [gate | up] group of two
]


def reference(layer: str):
    spec = importlib.util.spec_from_file_location(f"ref_{layer}", REFERENCE / layer / "pytorch_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, layer)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "race_check"])
def tasks(request) -> host_runner.HostModule:
    """The generated dispatcher of VARIANTS, built for the host (plain, and race-checking)."""
    variants = [Variant(i, registry.get(name), args) for i, (name, args) in enumerate(VARIANTS)]
    source = codegen.generate(variants, ARCH)
    return host_runner.load(source, ARCH, codegen.module_name(variants), race_check=request.param)


def meta_batch(max_tokens: int = 1, active: int = 1) -> tuple[abi.MpkMeta, abi.MpkBatchConfig, torch.Tensor]:
    num_new_tokens = torch.tensor([active], dtype=torch.int32)
    meta = abi.MpkMeta(num_new_tokens=num_new_tokens.data_ptr())
    return meta, abi.MpkBatchConfig(max_num_batched_tokens=max_tokens), num_new_tokens


def run_rmsnorm(tasks, variant, x, w, y, max_tokens=1, active=1):
    meta, batch, keep = meta_batch(max_tokens, active)
    desc = host_runner.task_desc(
        variant,
        [x.data_ptr(), w.data_ptr()],
        [y.data_ptr()],
        [{"f": 1e-6}, {"i": x.shape[0]}],
        task_id=3,
        task_type=registry.get("rmsnorm").opcode,
    )
    return tasks.run_task(variant, desc, meta, batch)


def test_rmsnorm_bf16(tasks):
    torch.manual_seed(0)
    x, w = torch.randn(4, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    run = run_rmsnorm(tasks, 0, x, w, y)
    assert run.ok, run.report
    torch.testing.assert_close(y, reference("rmsnorm")(x, w))


def test_rmsnorm_computes_only_the_active_rows(tasks):
    torch.manual_seed(1)
    x, w = torch.randn(4, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    assert run_rmsnorm(tasks, 0, x, w, y, max_tokens=4, active=3).ok  # 4 rows of tokens, 3 live
    torch.testing.assert_close(y[:3], reference("rmsnorm")(x[:3], w))
    assert y[3].isnan().all()


def test_rmsnorm_fp32_scalar_path(tasks):
    torch.manual_seed(2)
    x, w = torch.randn(2, 99), torch.randn(99)
    y = torch.full_like(x, float("nan"))
    run = run_rmsnorm(tasks, 1, x, w, y)
    assert run.ok, run.report
    torch.testing.assert_close(y, reference("rmsnorm")(x, w))


def test_silu_mul_two_tasks(tasks):
    torch.manual_seed(3)
    x = torch.randn(4, 1024, dtype=torch.bfloat16)  # two groups of [gate (256) | up (256)]
    y = torch.full((4, 512), float("nan"), dtype=torch.bfloat16)
    meta, batch, keep = meta_batch()
    for g in range(2):
        desc = host_runner.task_desc(
            2,
            [x[:, 512 * g :].data_ptr()],
            [y[:, 256 * g :].data_ptr()],
            task_id=10 + g,
            grid_idx=(g, 0, 0),
            task_type=registry.get("silu_mul").opcode,
        )
        run = tasks.run_task(2, desc, meta, batch)
        assert run.ok, run.report
    torch.testing.assert_close(y, reference("silu_mul")(x, num_groups=2))


def test_a_launch_leaves_no_fiber_stacks_mapped(tasks):
    """A block's 256 fiber stacks are 2 n + 1 memory mappings per module; release_stacks (which the
    emulator calls after each launch) unmaps them, so that a process running many modules stays far
    from vm.max_map_count (65530: a default suite once failed to load its 128th module)."""

    def mappings() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    torch.manual_seed(2)
    x, w = torch.randn(4, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16)
    # The first run in a process maps memory it keeps (run alone, the race_check case had 2 anonymous
    # mappings more after its first run than before, and none more after later runs): measure the second.
    assert run_rmsnorm(tasks, 0, x, w, torch.empty_like(x)).ok
    tasks.release_stacks()
    before = mappings()
    assert run_rmsnorm(tasks, 0, x, w, torch.empty_like(x)).ok
    assert mappings() >= before + 2 * 256  # a guard page and a stack per thread
    tasks.release_stacks()
    assert mappings() <= before
