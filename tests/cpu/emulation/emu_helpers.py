"""What the host emulation tests share: the test kernels of this folder (kernels.cuh: correct,
faulty.cuh: one bug each), the dispatcher that lists them, and a runner for one of them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from mpk_runtime.codegen import abi
from mpk_runtime.run import host_runner

HERE = Path(__file__).resolve().parent
FAULTY = HERE / "faulty.cuh"
ARCH = "sm80"  # 128 threads: the smallest worker block
THREADS = 128
KERNELS = [
    "barriers",
    "dynamic_shared",
    "shuffles",
    "votes",
    "atomics",
    "warp_synced",
    "task_error",
    "racy_shared",
    "racy_global",
    "shuffle_is_no_fence",
    "last_writer",
    "barrier_after_return",
    "two_barriers",
    "shuffle_after_return",
    "shuffle_in_branch",
    "mask_without_caller",
    "source_outside_mask",
    "reductions_differ",
    "spin_forever",
    "reads_unwritten",
    "smem_overflow",
    "racy_block_reduce",
    "misaligned_vector",
    "traps",
    "cp_async_early_read",
    "mma_half_warp",
    "read_past_end",
    "write_past_slice",
    "wild_read",
    "divides_by_zero",
    "overflows_its_stack",
    "prefetch_past_end",
    "named_barriers",
    "named_barrier_other_half",
    "named_barrier_short",
    "named_barrier_too_many",
    "named_barrier_counts_differ",
    "named_barrier_half_warps",
    "named_barrier_invalid",
    "shared_bf16_tile",
    "spins_without_yielding",
    "barriers_forever",
    "big_local_array",
    "runtime_view",
    "counts_launches",
    "smem_overflow_far",
]


def kernels_source() -> str:
    """A dispatcher in codegen's shape, with one case per test kernel."""
    cases = "\n".join(f"    case {i}: test::{name}(task, rt); break;" for i, name in enumerate(KERNELS))
    return f"""// test kernels of tests/cpu/emulation
#include "runtime/task_api.cuh"
#include "kernels.cuh"
#include "faulty.cuh"

namespace mpk {{
constexpr unsigned kDynamicSmemBytes = 4096u;
inline char const *task_type_name(int) {{ return nullptr; }}
__device__ __forceinline__ void execute_task(uint32_t variant, TaskDesc const &task, Runtime const &rt) {{
  switch (variant) {{
{cases}
    default: break;
  }}
}}
}}  // namespace mpk

#include "runtime/persistent_kernel.cuh"
"""


@dataclass
class Kernels:
    """The test kernels, built for the host."""

    module: host_runner.HostModule

    def run(self, name: str, *outputs: torch.Tensor, task_id: int = 5, **options) -> host_runner.TaskRun:
        """Run test kernel ``name`` with ``outputs`` as its output slices; ``options`` go to run_task."""
        desc = host_runner.task_desc(KERNELS.index(name), [], [t.data_ptr() for t in outputs], task_id=task_id)
        return self.module.run_task(KERNELS.index(name), desc, abi.MpkMeta(), abi.MpkBatchConfig(), **options)


def marked(name: str) -> str:
    """``tests/cpu/emulation/faulty.cuh:<line>`` of the line marked ``// @name``."""
    for i, line in enumerate(FAULTY.read_text().splitlines(), 1):
        if re.search(rf"// @{re.escape(name)}$", line):
            return f"tests/cpu/emulation/faulty.cuh:{i}"
    raise LookupError(f"no line marked @{name} in {FAULTY}")
