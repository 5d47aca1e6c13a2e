"""Every PTX primitive of csrc/primitives (and CUDA's warp reductions and matches, which the host shim
provides) on the device and in the host emulator, on the same inputs:
the kernels of tests/cpu/emulation/primitives.cuh (see primitive_cases.py there), built once with
nvcc as task bodies launched alone (one thread block, 128 threads: the sm80 path, which runs on
every supported GPU) and once for the host. Results must be bit-identical, except:

- mma_m16n8k16: the tensor cores' summation order and rounding are unspecified, so the host's D (k
  summed in order, each step rounded to fp32) may differ from the device's by the rounding of 16
  additions: |D_host - D_device| <= 2**-18 * (|C| + sum_k |A[i][k] * B[k][j]|) for every element
  (two sums of 17 terms, each within 16 * 2**-23 of the exact value relative to that magnitude);
- the global timer: different clocks; both must be monotonic and the poll with sleep_ns must end.

    pytest tests/gpu/test_primitives_gpu.py        # on a machine with a GPU (run on an H100 by the lead)
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
from pathlib import Path

import pytest
import torch

from mpk_runtime.build.cache import build_module
from mpk_runtime.codegen import abi
from mpk_runtime.run import host_runner
from mpk_runtime.run.task_bodies import _load_extension

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu" / "emulation"))
import primitive_cases as cases  # noqa: E402

MMA_BOUND = 2.0**-18


@pytest.fixture(scope="module")
def device_module():
    digest = hashlib.sha256(cases.HEADER.read_bytes()).hexdigest()[:12]
    name = f"mpk_primitive_kernels_{digest}"
    built = build_module(cases.device_source(name), cases.ARCH, "primitive_kernels_gpu", python_extension=True)
    return _load_extension(name, built.path)


@pytest.fixture(scope="module")
def host_module():
    return cases.load_host()


def run_device(module, name: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> list[torch.Tensor]:
    d_ins = [t.cuda() for t in ins]
    d_outs = [t.cuda() for t in outs]
    desc = host_runner.task_desc(cases.VARIANT[name], [t.data_ptr() for t in d_ins], [t.data_ptr() for t in d_outs], task_id=1)
    descs = torch.frombuffer(bytearray(desc), dtype=torch.uint8).cuda()
    control = torch.zeros(ctypes.sizeof(abi.MpkControl) // 8, dtype=torch.int64, device="cuda")
    stream = torch.cuda.current_stream()
    err = module.launch(
        cases.VARIANT[name],
        descs.data_ptr(),
        1,
        bytes(abi.MpkMeta()),
        bytes(abi.MpkBatchConfig()),
        control.data_ptr(),
        stream.cuda_stream,
    )
    assert not err, err
    torch.cuda.synchronize()
    return [t.cpu() for t in d_outs]


def both(device_module, host_module, name: str, seed: int = 0) -> tuple[list[torch.Tensor], list, list]:
    ins, outs = cases.inputs(name, seed)
    device = run_device(device_module, name, ins, [t.clone() for t in outs])
    host_outs = [t.clone() for t in outs]
    run = cases.run_host(host_module, name, ins, host_outs)
    assert run.ok, run.report
    return ins, host_outs, device


def same_bits(host: torch.Tensor, device: torch.Tensor) -> None:
    nan = host.isnan() if host.is_floating_point() else torch.zeros_like(host, dtype=torch.bool)
    if host.is_floating_point():
        assert torch.equal(nan, device.isnan()), "NaN in different places"
    width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[host.element_size()]
    h, d = host.view(width)[~nan], device.view(width)[~nan]
    bad = (h != d).nonzero()
    assert not bad.numel(), f"{bad.numel()} elements differ, first at {bad[0].tolist()}: host {h[bad[0]]}, device {d[bad[0]]}"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name,dtype", [("mma_bf16", torch.bfloat16), ("mma_fp16", torch.float16)])
def test_mma_within_the_stated_bound(device_module, host_module, name, dtype, seed):
    (a, b, c), (host,), (device,) = both(device_module, host_module, name, seed)
    magnitude = c.abs() + torch.einsum("wik,wkj->wij", a.view(dtype).float().abs(), b.view(dtype).float().abs())
    diff = (host - device).abs()
    assert (diff <= MMA_BOUND * magnitude).all(), f"worst excess: {(diff - MMA_BOUND * magnitude).max().item()}"
    # and the layout is the same: the host's D is its model's, bit for bit
    assert torch.equal(host, cases.mma_model(a, b, c, dtype))


@pytest.mark.parametrize(
    "name",
    ["cp_async_copy", "loads", "memory_order", "reductions", "warp_intrinsics", "vec_bf16", "vec_fp16", "named_barriers"],
)
def test_bit_identical(device_module, host_module, name):
    _, host, device = both(device_module, host_module, name)
    for h, d in zip(host, device):
        same_bits(h, d)


def test_timer_and_sleep(device_module, host_module):
    _, (host,), (device,) = both(device_module, host_module, "timer")
    for out in (host, device):
        assert out[2] == 1 and out[3] == 1 and 0 < out[0] <= out[1]
