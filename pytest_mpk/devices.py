"""GPUs for the test session: discovery without initialising CUDA, pinning an xdist worker to its
GPU before CUDA starts, the local arch, and which backend runs a case of a given arch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BACKENDS = ("auto", "gpu", "emulate", "emulate-ref", "compile-only")
# What the report says ran a case (the verbose status, the summary line, the failure report). Every
# backend but the GPU also builds the module with nvcc for the case's arch.
SESSION_GPUS_ENV = "MPK_SESSION_GPUS"  # the session's GPUs, kept by an xdist worker pinned to one of them
GPU = "gpu"
EMULATED = "emulated (CUDA bodies on the CPU)"  # the task bodies, compiled for the host, in the emulator
EMULATED_CHECKED = "emulated (CUDA bodies on the CPU, checked)"  # ... with races and slice bounds checked
EMULATED_REF = "emulated (PyTorch slice references)"  # the emulator computing each task with its reference
COMPILED = "compiled"
EMULATED_BACKENDS = (EMULATED, EMULATED_CHECKED, EMULATED_REF)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries. Reads the variable when it is
    set, else asks nvidia-smi: neither starts CUDA, so xdist's controller can count GPUs safely."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        entries = [d.strip() for d in env.split(",") if d.strip()]
        # As CUDA reads it: "-1" hides itself and every entry after it ("0,-1,1": only 0).
        return entries[: entries.index("-1")] if "-1" in entries else entries
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()] if out.returncode == 0 else []


def pin_worker(worker_id: str) -> str | None:
    """Give xdist worker ``gwN`` the GPU N mod #GPUs (of the ones visible to the session), by
    setting CUDA_VISIBLE_DEVICES before CUDA is initialised. Several workers may share a GPU."""
    gpus = visible_gpus()
    if not gpus or not worker_id.startswith("gw"):
        return None
    gpu = gpus[int(worker_id[2:]) % len(gpus)]
    os.environ.setdefault(SESSION_GPUS_ENV, ",".join(gpus))  # for the multi-rank jobs it starts (launcher.py)
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def session_gpus() -> list[str]:
    """Every GPU of the test session, also in an xdist worker pinned to one of them."""
    kept = os.environ.get(SESSION_GPUS_ENV)
    return [g for g in kept.split(",") if g] if kept is not None else visible_gpus()


def pin_rank(local_rank: int) -> None:
    """A rank of an MPI job: make GPU (local rank mod visible GPUs) current before anything else uses
    CUDA. Every GPU stays visible, so the rank can map its peers' memory."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())


def quiet_rank(log: Path) -> None:
    """A rank other than 0 of an MPI job: its terminal output goes to ``log`` (rank 0 reports every
    rank's outcomes), so that the ranks' reports do not interleave."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream in (1, 2):
        os.dup2(fd, stream)
    os.close(fd)


def local_arch() -> str | None:
    """The arch whose code runs natively on this process's GPU, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    from mpk_runtime import harness

    return harness.native_arch(torch.cuda.current_device())


def resolve_archs(requested: list[str]) -> list[str]:
    """``--arch`` values in order, ``auto`` meaning the local GPU's arch (sm90 without a GPU)."""
    out: list[str] = []
    for a in requested or ["auto"]:
        arch = (local_arch() or "sm90") if a == "auto" else a
        if arch not in out:
            out.append(arch)
    return out


def backend_for(arch: str, requested: str, local: str | None, check: bool = False) -> str:
    """Which backend runs a case of ``arch``: the GPU when it can (sm80 code runs on every GPU we
    support, through the PTX JIT), else nvcc plus the CPU emulator running the CUDA bodies (checked
    with ``check``: --mpk-emulate-check), or their slice references (emulate-ref), or nvcc alone."""
    from mpk_runtime.harness import PORTABLE_ARCHS

    runs_here = local is not None and (arch in PORTABLE_ARCHS or arch == local)
    emulated = EMULATED_CHECKED if check else EMULATED
    if requested == "compile-only":
        return COMPILED
    if requested == "emulate-ref":
        return EMULATED_REF
    if requested == "emulate":
        return emulated
    if requested == "gpu" and not runs_here:
        where = f"this GPU is {local}" if local else "no GPU is visible"
        raise RuntimeError(f"--mpk-backend gpu cannot run {arch} here ({where}); use --mpk-backend auto or emulate")
    return GPU if runs_here else emulated


def emulate_param(backend: str) -> bool | str:
    """PersistentKernel's ``emulate`` for a backend: True (CUDA bodies), "reference" or False."""
    if backend == EMULATED_REF:
        return "reference"
    return backend in (EMULATED, EMULATED_CHECKED)


def context_lost() -> bool:
    """True when this process's CUDA context is unusable (a kernel faulted): nothing on the GPU can
    run in this process any more."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except RuntimeError:
        return True
    return False
