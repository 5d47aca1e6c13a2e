"""GPU discovery: the arch that runs natively on a device, the checks that a target can run
there, and the default worker / scheduler configuration."""

from __future__ import annotations

import torch

from .. import archs
from ..errors import ConfigError, DeviceError
from . import bootstrap

NUM_SCHEDULERS = 4


def require_gpu(what: str) -> None:
    if not torch.cuda.is_available():
        raise DeviceError(
            f"{what} needs a CUDA GPU and torch sees none (torch {torch.__version__}). Without a GPU: to run "
            f"on the CPU emulator pass emulate=True, target_cc={archs.TARGET_CCS_TEXT}, num_workers=N and CPU "
            f"tensors; to build without running, compile_only=True and target_cc"
        )


def device_index(rank: int) -> int:
    require_gpu("get_configurations_from_gpu")
    n = torch.cuda.device_count()
    if not isinstance(rank, int) or not 0 <= rank < n:
        raise DeviceError(f"rank={rank!r} names no GPU: {n} visible (CUDA_VISIBLE_DEVICES); use 0..{n - 1}")
    return rank


def native_arch(index: int) -> archs.Arch:
    """The arch whose code runs natively on device ``index`` (see archs.native_for)."""
    capability = torch.cuda.get_device_capability(index)
    if capability < archs.MIN_CAPABILITY:
        raise DeviceError(
            f"GPU {index} has compute capability {capability[0]}.{capability[1]}; the runtime needs "
            f"{archs.MIN_CAPABILITY[0]}.{archs.MIN_CAPABILITY[1]} or newer"
        )
    return archs.native_for(capability)


def native_target_cc(index: int) -> int:
    return native_arch(index).cc


def check_target_runs(target_cc: int, index: int) -> None:
    """ConfigError when code built for target_cc cannot run on device ``index``."""
    arch = archs.by_cc(target_cc)
    if not arch.native:
        return  # portable PTX (sm80) runs on every GPU the runtime supports
    native = native_arch(index)
    if native.cc != target_cc:
        name = torch.cuda.get_device_name(index)
        raise ConfigError(
            f"target_cc={target_cc} builds sm_{target_cc}a code, which cannot run on GPU {index} ({name}, "
            f"target {native.cc}); use target_cc={native.cc} or 80 here, or compile_only=True to only build"
        )


def select_rank_device(rank: int) -> None:
    """One GPU per rank: make GPU (local rank mod visible GPUs) current, unless this process has used
    CUDA already (then its current device is the caller's choice, e.g. torch.cuda.set_device)."""
    require_gpu("a PersistentKernel with world_size > 1")
    if torch.cuda.is_initialized():
        return
    launched = bootstrap.launched()
    local = launched[2] if launched is not None else rank
    torch.cuda.set_device(local % torch.cuda.device_count())


def device_and_arch(target_cc: int | None, on_cpu: bool) -> tuple[torch.device, archs.Arch]:
    """Where a kernel's tensors live and what it is built for: the CPU and ``target_cc`` (compile-only,
    emulated), else the current GPU and ``target_cc`` (checked to run there) or the GPU's own arch."""
    if on_cpu:
        assert target_cc is not None, "params.parse requires target_cc without a GPU"
        return torch.device("cpu"), archs.by_cc(target_cc)
    require_gpu("PersistentKernel")
    device = torch.device("cuda", torch.cuda.current_device())
    arch = archs.by_cc(target_cc) if target_cc else native_arch(device.index)
    check_target_runs(arch.cc, device.index)
    return device, arch


def get_configurations_from_gpu(rank: int) -> tuple[int, int]:
    """``(num_workers, num_schedulers)`` for GPU ``rank``: one worker CTA per SM but one, whose SM
    hosts the scheduler warps (4 schedulers fit in one CTA on every architecture)."""
    index = device_index(rank)
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    return sms - 1, NUM_SCHEDULERS
