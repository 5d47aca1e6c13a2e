"""The primitive kernels of primitives.cuh: their inputs, how to run them on the host emulator and
(tests/gpu/test_primitives_gpu.py) on the device, and independent PyTorch models of what each
primitive's semantics comment promises. Shared by the CPU and the GPU tests, so both run the same
kernels on the same inputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mpk_runtime.codegen import abi
from mpk_runtime.run import host_runner

HERE = Path(__file__).resolve().parent
HEADER = HERE / "primitives.cuh"
ARCH = "sm80"  # 128 threads, 4 warps; sm80 code also runs on every GPU the runtime supports
N = 128
WARPS = N // 32
SMEM = N * 16  # cp_async_copy's shared memory


@dataclass(frozen=True)
class Kernel:
    name: str
    call: str  # the C++ call, as the dispatcher writes it


KERNELS = [
    Kernel("mma_bf16", "mpk::prim_test::mma_tiles<__nv_bfloat16>(task, rt);"),
    Kernel("mma_fp16", "mpk::prim_test::mma_tiles<__half>(task, rt);"),
    Kernel("cp_async_copy", "mpk::prim_test::cp_async_copy(task, rt);"),
    Kernel("loads", "mpk::prim_test::loads(task, rt);"),
    Kernel("memory_order", "mpk::prim_test::memory_order(task, rt);"),
    Kernel("timer", "mpk::prim_test::timer(task, rt);"),
    Kernel("reductions", "mpk::prim_test::reductions(task, rt);"),
    Kernel("vec_bf16", "mpk::prim_test::vec_round_trip<__nv_bfloat16>(task, rt);"),
    Kernel("vec_fp16", "mpk::prim_test::vec_round_trip<__half>(task, rt);"),
    Kernel("named_barriers", "mpk::prim_test::named_barriers(task, rt);"),
]
VARIANT = {k.name: i for i, k in enumerate(KERNELS)}


def host_source() -> str:
    """A dispatcher in codegen's shape with one case per kernel (for build/host.py)."""
    cases = "\n".join(f"    case {i}: {k.call} break;" for i, k in enumerate(KERNELS))
    return f"""// primitive kernels of tests/cpu/emulation
#include "runtime/task_api.cuh"
#include "primitives.cuh"

namespace mpk {{
constexpr unsigned kDynamicSmemBytes = {SMEM}u;
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


def device_source(module: str) -> str:
    """The same kernels as a task-body extension for nvcc (runtime/task_body.cuh: one thread block
    per descriptor), primitives.cuh pasted in since nvcc searches csrc only."""
    bodies = "\n".join(f"MPK_TASK_BODY({i}, ({k.call.rstrip(';')}), ({SMEM}u))" for i, k in enumerate(KERNELS))
    return f"""// primitive kernels of tests/cpu/emulation, for the device
#include <pybind11/pybind11.h>
#include <string>
#include "runtime/task_api.cuh"
{HEADER.read_text()}
#include "runtime/task_body.cuh"
namespace mpk {{
{bodies}
}}  // namespace mpk
PYBIND11_MODULE({module}, m) {{
  m.def("launch", &mpk::launch_body);
  m.def("smem_bytes", &mpk::body_smem_bytes);
}}
"""


def inputs(name: str, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(inputs, outputs) of kernel ``name``: CPU tensors, outputs poisoned or zeroed as it expects."""
    g = torch.Generator().manual_seed(seed)
    if name.startswith("mma"):
        dtype = torch.bfloat16 if name.endswith("bf16") else torch.float16
        a = (torch.randn(WARPS, 16, 16, generator=g) * 2).to(dtype)
        b = (torch.randn(WARPS, 16, 8, generator=g) * 2).to(dtype)
        c = torch.randn(WARPS, 16, 8, generator=g)
        return [a.view(torch.int16), b.view(torch.int16), c], [torch.full((WARPS, 16, 8), float("nan"))]
    if name in ("cp_async_copy", "loads"):
        data = torch.randint(-(2**31), 2**31 - 1, (N, 4), generator=g, dtype=torch.int32)
        rows = N if name == "cp_async_copy" else 3 * N
        return [data], [torch.full((rows, 4), -1, dtype=torch.int32)]
    if name == "memory_order":
        return [], [torch.zeros(8, dtype=torch.int64)]
    if name == "timer":
        return [], [torch.zeros(4, dtype=torch.int64)]
    if name == "reductions":
        x = torch.randn(N, generator=g) * torch.logspace(-3, 3, N)  # sums whose order shows in the bits
        return [x], [torch.full((4 * N,), float("nan"))]
    if name.startswith("vec"):
        dtype = torch.bfloat16 if name.endswith("bf16") else torch.float16
        per = 16 // dtype.itemsize
        x = torch.randn(N * per, generator=g) * torch.logspace(-8, 6, N * per)
        x[:8] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, 7e4, 3.5e38])
        # ties: halfway between two representable values must round to even
        x[8:16] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 2**-9, 3.0, -(1 + 2**-8), 1.0])
        return [x], [torch.empty(N * per, dtype=dtype), torch.full((N * per,), float("nan"))]
    if name == "named_barriers":
        return [torch.randint(0, 1 << 20, (N,), generator=g, dtype=torch.int32)], [torch.full((5 * N,), -1, dtype=torch.int32)]
    raise KeyError(name)


def run_host(module: host_runner.HostModule, name: str, ins: list[torch.Tensor], outs: list[torch.Tensor], **options):
    """Run kernel ``name`` as one task on the host module, on ``ins`` / ``outs`` (in place)."""
    desc = host_runner.task_desc(VARIANT[name], [t.data_ptr() for t in ins], [t.data_ptr() for t in outs], task_id=1)
    return module.run_task(VARIANT[name], desc, abi.MpkMeta(), abi.MpkBatchConfig(), dynamic_smem=SMEM, **options)


def load_host(race_check: bool = False) -> host_runner.HostModule:
    return host_runner.load(host_source(), ARCH, "primitive_kernels", race_check=race_check, include_dirs=[HERE])


# -- the models: the semantics comments of csrc/primitives, in PyTorch ---------------------------------


def mma_model(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """D = A B + C in fp32, k summed in order onto C (every product of two 16-bit values is exact)."""
    af, bf = a.view(dtype).float(), b.view(dtype).float()
    d = c.clone()
    for k in range(16):
        d = d + af[:, :, k : k + 1] * bf[:, k : k + 1, :]
    return d


def butterfly(x: torch.Tensor, op) -> torch.Tensor:
    """warp_reduce: lane l combines its value with lane l ^ o's, for o = 16, 8, 4, 2, 1."""
    v = x.view(-1, 32)
    lanes = torch.arange(32)
    for o in (16, 8, 4, 2, 1):
        v = op(v, v[:, lanes ^ o])
    return v.flatten()


def block_model(x: torch.Tensor, op) -> torch.Tensor:
    """block_reduce: each warp's butterfly result, then warp 0's, op'ed with warps 1, 2, ... in order."""
    per_warp = butterfly(x, op).view(-1, 32)[:, 0]
    r = per_warp[0]
    for w in range(1, per_warp.numel()):
        r = op(r, per_warp[w])
    return r.expand(x.numel())


def named_barriers_model(x: torch.Tensor) -> torch.Tensor:
    """Each half of the block, its own rounds (3, then 5): round r, thread t reads its half's next
    thread's value + r; 0 past its half's rounds."""
    half = N // 2
    t = torch.arange(N)
    neighbour = t // half * half + (t % half + 1) % half
    rounds = torch.where(t < half, 3, 5)
    return torch.stack([torch.where(r < rounds, x[neighbour] + r, 0) for r in range(5)]).flatten().to(torch.int32)


def maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """MaxOp: a > b ? a : b."""
    return torch.where(a > b, a, b)
