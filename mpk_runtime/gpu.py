"""GPU discovery: the target architecture of a device, its worker thread count, and the default
worker / scheduler configuration."""

from __future__ import annotations

import torch

from .errors import ConfigError, DeviceError

TARGET_CCS = (80, 90, 100)
NUM_SCHEDULERS = 4


def arch_name(target_cc: int) -> str:
    return f"sm{target_cc}"


def worker_threads(target_cc: int) -> int:
    """Threads per worker CTA: 128 on the sm80 path, 256 on sm90 and sm100."""
    return 256 if target_cc >= 90 else 128


def require_gpu(what: str) -> None:
    if not torch.cuda.is_available():
        raise DeviceError(
            f"{what} needs a CUDA GPU and torch sees none (torch {torch.__version__}); for a build without "
            f"a GPU pass compile_only=True and target_cc=80, 90 or 100"
        )


def device_index(rank: int) -> int:
    require_gpu("get_configurations_from_gpu")
    n = torch.cuda.device_count()
    if not isinstance(rank, int) or not 0 <= rank < n:
        raise DeviceError(f"rank={rank!r} names no GPU: {n} visible (CUDA_VISIBLE_DEVICES); use 0..{n - 1}")
    return rank


def native_target_cc(index: int) -> int:
    """The build target that runs natively on device ``index``: sm90 on Hopper, sm100 on
    Blackwell (10.x), and the sm80 path (PTX, JIT-compiled by the driver) on everything else."""
    major, minor = torch.cuda.get_device_capability(index)
    if major < 8:
        raise DeviceError(f"GPU {index} has compute capability {major}.{minor}; the runtime needs 8.0 or newer")
    if (major, minor) == (9, 0):
        return 90
    if major == 10:
        return 100
    return 80


def check_target_runs(target_cc: int, index: int) -> None:
    """ConfigError when code built for target_cc cannot run on device ``index``."""
    if target_cc == 80:
        return  # PTX for compute_80 runs on every GPU from 8.0 on
    native = native_target_cc(index)
    if native != target_cc:
        name = torch.cuda.get_device_name(index)
        raise ConfigError(
            f"target_cc={target_cc} builds sm_{target_cc}a code, which cannot run on GPU {index} ({name}, "
            f"target {native}); use target_cc={native} or 80 here, or compile_only=True to only build"
        )


def get_configurations_from_gpu(rank: int) -> tuple[int, int]:
    """``(num_workers, num_schedulers)`` for GPU ``rank``: one worker CTA per SM but one, whose SM
    hosts the scheduler warps (4 schedulers fit in one CTA on every architecture)."""
    index = device_index(rank)
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    return sms - 1, NUM_SCHEDULERS
