"""The primitive kernels of primitives.cuh: their inputs, how to run them on the host emulator and
(tests/gpu/test_primitives_gpu.py) on the device, and independent PyTorch models of what each
primitive's semantics comment promises. Shared by the CPU and the GPU tests, so both run the same
kernels on the same inputs."""

from __future__ import annotations

import itertools
import re
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
SMEM = 4096  # the most a kernel uses: a TMA box (2048 bytes) and an mbarrier past it


@dataclass(frozen=True)
class Kernel:
    name: str
    call: str  # the C++ call, as the dispatcher writes it
    device: bool = True  # False: the host emulator only (TMA: the device would need an encoded map)


def _tma(name: str, call: str) -> Kernel:
    return Kernel(name, f"mpk::prim_test::{call}(task, rt);", device=False)


KERNELS = [
    Kernel("mma_bf16", "mpk::prim_test::mma_tiles<__nv_bfloat16>(task, rt);"),
    Kernel("mma_fp16", "mpk::prim_test::mma_tiles<__half>(task, rt);"),
    Kernel("cp_async_copy", "mpk::prim_test::cp_async_copy(task, rt);"),
    Kernel("loads", "mpk::prim_test::loads(task, rt);"),
    Kernel("memory_order", "mpk::prim_test::memory_order(task, rt);"),
    Kernel("timer", "mpk::prim_test::timer(task, rt);"),
    Kernel("reductions", "mpk::prim_test::reductions(task, rt);"),
    Kernel("warp_intrinsics", "mpk::prim_test::warp_intrinsics(task, rt);"),
    Kernel("vec_bf16", "mpk::prim_test::vec_round_trip<__nv_bfloat16>(task, rt);"),
    Kernel("vec_fp16", "mpk::prim_test::vec_round_trip<__half>(task, rt);"),
    Kernel("named_barriers", "mpk::prim_test::named_barriers(task, rt);"),
    _tma("tma_tile", "tma_tile<false>"),
    _tma("tma_tile_swizzled", "tma_tile<true>"),
    _tma("tma_pipeline", "tma_pipeline"),
    _tma("tma_uninitialized", "tma_uninitialized"),
    _tma("tma_to_global", "tma_to_global"),
    _tma("tma_misaligned", "tma_misaligned"),
    _tma("tma_never_completes", "tma_never_completes"),
    _tma("tma_too_many_bytes", "tma_too_many_bytes"),
    _tma("tma_early_read", "tma_early_read"),
    _tma("tma_never_waited", "tma_never_waited"),
    _tma("tma_init_twice", "tma_init_twice"),
    _tma("tma_left_valid", "tma_left_valid"),
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
    bodies = "\n".join(f"MPK_TASK_BODY({i}, ({k.call.rstrip(';')}), ({SMEM}u))" for i, k in enumerate(KERNELS) if k.device)
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
    if name == "warp_intrinsics":
        v = torch.randint(-(2**31), 2**31, (N,), generator=g, dtype=torch.int64).to(torch.int32)
        return [v], [torch.full((19 * N,), -1, dtype=torch.int32)]
    if name.startswith("vec"):
        dtype = torch.bfloat16 if name.endswith("bf16") else torch.float16
        per = 16 // dtype.itemsize
        x = torch.randn(N * per, generator=g) * torch.logspace(-8, 6, N * per)
        x[:8] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, 7e4, 3.5e38])
        # ties: halfway between two representable values must round to even
        x[8:16] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 2**-9, 3.0, -(1 + 2**-8), 1.0])
        return [x], [torch.empty(N * per, dtype=dtype), torch.full((N * per,), float("nan"))]
    if name.startswith("tma"):
        data = torch.randint(-(2**15), 2**15, TMA_STORAGE, generator=g, dtype=torch.int16)
        box = torch.full((2 * N if name == "tma_pipeline" else N, 8), -1, dtype=torch.int16)  # 16 bytes a thread (a stage)
        return [data], [box, torch.zeros(1, dtype=torch.int64)] if name.startswith("tma_tile") else [box]
    if name == "named_barriers":
        return [torch.randint(0, 1 << 20, (N,), generator=g, dtype=torch.int32)], [torch.full((5 * N,), -1, dtype=torch.int32)]
    raise KeyError(name)


def run_host(module: host_runner.HostModule, name: str, ins: list[torch.Tensor], outs: list[torch.Tensor], **options):
    """Run kernel ``name`` as one task on the host module, on ``ins`` / ``outs`` (in place)."""
    desc = host_runner.task_desc(VARIANT[name], [t.data_ptr() for t in ins], [t.data_ptr() for t in outs], task_id=1)
    return module.run_task(VARIANT[name], desc, abi.MpkMeta(), abi.MpkBatchConfig(), dynamic_smem=SMEM, **options)


def load_host(race_check: bool = False) -> host_runner.HostModule:
    return host_runner.load(host_source(), ARCH, "primitive_kernels", race_check=race_check, include_dirs=[HERE])


def marked(name: str) -> str:
    """``tests/cpu/emulation/primitives.cuh:<line>`` of the line marked ``// @name``."""
    for i, line in enumerate(HEADER.read_text().splitlines(), 1):
        if re.search(rf"// @{re.escape(name)}$", line):
            return f"tests/cpu/emulation/primitives.cuh:{i}"
    raise LookupError(f"no line marked @{name} in {HEADER}")


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


# The TMA kernels' tensor (primitives.cuh): dims (100, 6, 3, 2), dim 0 first, rows padded to 112.
TMA_DIMS = (100, 6, 3, 2)
TMA_STORAGE = (2, 3, 6, 112)  # dims 3, 2, 1, 0 as PyTorch indexes them, with the padding
TMA_BOX = (64, 4, 2, 2)


def tma_box_model(data: torch.Tensor, coords: tuple[int, ...]) -> torch.Tensor:
    """The box at ``coords`` (dim 0 first) as a TMA copy lays it in shared memory, dense and dim 0
    fastest: element (i0, i1, i2, i3) is the tensor's at coords + i, or 0 where that is outside dims."""
    out = torch.zeros(TMA_BOX[::-1], dtype=data.dtype)
    c0 = coords[0]
    lo, hi = max(0, -c0), min(TMA_BOX[0], TMA_DIMS[0] - c0)  # the run of dim 0 inside the tensor
    for i3, i2, i1 in itertools.product(*(range(b) for b in TMA_BOX[:0:-1])):
        g3, g2, g1 = coords[3] + i3, coords[2] + i2, coords[1] + i1
        if 0 <= g1 < TMA_DIMS[1] and 0 <= g2 < TMA_DIMS[2] and 0 <= g3 < TMA_DIMS[3] and lo < hi:
            out[i3, i2, i1, lo:hi] = data[g3, g2, g1, c0 + lo : c0 + hi]
    return out.flatten()


def swizzle128_model(box: torch.Tensor, shared_address: int) -> torch.Tensor:
    """CU_TENSOR_MAP_SWIZZLE_128B: the 16-byte chunk at shared address a moves to a with bits 4-6
    XOR-ed by bits 7-9."""
    chunks = box.view(torch.uint8).view(-1, 16)
    out = torch.empty_like(chunks)
    for k in range(chunks.shape[0]):
        a = shared_address + 16 * k
        out[((a ^ (((a >> 7) & 7) << 4)) - shared_address) // 16] = chunks[k]
    return out.flatten().view(box.dtype)


def warp_intrinsics_model(v: torch.Tensor) -> list[list[int]]:
    """The 19 rows of warp_intrinsics (primitives.cuh), each N unsigned 32-bit values, from the CUDA
    programming guide's wording: a __reduce_*_sync gives every lane of the mask the op over the mask's
    lanes' values (add wraps; min / max compare as the value's type), a __match_any_sync the lanes of
    the mask whose value has the same bits, a __match_all_sync the mask if every lane's does (pred 1),
    else 0 (pred 0); and warp_max (warp.cuh), the largest 64-bit key of the warp."""
    vals = [int(x) for x in v.tolist()]
    u32 = [x & 0xFFFFFFFF for x in vals]
    rows: list[list[int]] = [[0] * N for _ in range(19)]

    def c_mod(a: int, m: int) -> int:  # C's %: the sign of the dividend
        r = abs(a) % m
        return -r if a < 0 else r

    for w in range(N // 32):
        lanes = range(w * 32, w * 32 + 32)
        sv, uv = [vals[t] for t in lanes], [u32[t] for t in lanes]
        and_, or_, xor = 0xFFFFFFFF, 0, 0
        for x in uv:
            and_, or_, xor = and_ & x, or_ | x, xor ^ x
        full = [sum(sv) & 0xFFFFFFFF, min(sv) & 0xFFFFFFFF, max(sv) & 0xFFFFFFFF, sum(uv) & 0xFFFFFFFF, min(uv), max(uv),
                and_, or_, xor]  # fmt: skip
        part = sum(vals[t] for t in lanes if t % 4 != 3) & 0xFFFFFFFF
        mod5 = [c_mod(vals[t], 5) for t in lanes]
        mod3 = [c_mod(vals[t], 3) for t in lanes]
        last = [7 if t % 32 < 31 else 8 for t in lanes]
        for i, t in enumerate(lanes):
            for k, r in enumerate(full):
                rows[k][t] = r
            rows[9][t] = part if t % 4 != 3 else 0
            rows[10][t] = sum(1 << j for j in range(32) if mod5[j] == mod5[i])
            rows[11][t] = sum(1 << j for j in range(32) if mod3[j] == mod3[i])
            rows[12][t], rows[13][t] = 0xFFFFFFFF, 1  # every lane of a warp has its warp's number
            rows[14][t], rows[15][t] = 0, 0 if len(set(last)) > 1 else 1
            rows[16][t] = sum(1 << j for j in range(16) if vals[w * 32 + j] & 1 == vals[t] & 1) if i < 16 else 0
        best = max((u32[t] % 4) << 32 | (t % 32 * 37 % 101) for t in lanes)
        for t in lanes:
            rows[17][t], rows[18][t] = best & 0xFFFFFFFF, best >> 32
    return rows


def maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """MaxOp: a > b ? a : b."""
    return torch.where(a > b, a, b)
