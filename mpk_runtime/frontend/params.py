"""PersistentKernel's init parameters: their defaults and their validation, in one place."""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..archs import TARGET_CCS, TARGET_CCS_TEXT
from ..contract import MAX_RANKS, MAX_SCHEDULERS, WATCHDOG_MAX_S
from ..errors import ConfigError, near_hint
from ..graph.schedule import POLICIES
from ..run import bootstrap

DEFAULTS: dict[str, Any] = {
    "mode": "offline",
    "world_size": 1,
    "mpi_rank": 0,
    "num_workers": 1,
    "num_local_schedulers": 4,
    "max_num_batched_tokens": 1,
    "max_num_batched_requests": 1,
    "max_num_pages": 1,
    "page_size": 1,
    "max_seq_length": 1,
    "meta_tensors": {},
    "profiler_tensor": None,
    "trace_name": None,  # None: "mpk_rank{mpi_rank}"
    "eos_token_id": -1,
}

# Accepted but not part of the defaults (test_mode must be asked for explicitly).
OPTIONAL: dict[str, Any] = {
    "test_mode": False,
    "target_cc": None,  # None: the GPU's own target
    "compile_only": False,
    # Run on the CPU emulator (nvcc still builds the device code for target_cc): True, the CUDA task bodies
    # built for the host; "reference", each task's PyTorch slice reference instead (quick, no CUDA).
    "emulate": False,
    "emulate_check": False,  # emulate=True only: race checking and slice bounds on every access (slower)
    # GPU builds: after every __syncthreads() a warp now and then sleeps a few microseconds, so a
    # missing barrier changes the results (csrc/runtime/warp_jitter.cuh). The test harness sets it.
    "warp_jitter": False,
    "watchdog_timeout": 5.0,  # seconds without progress before the device watchdog stops a launch
    "placement": "locality",
    "comm_timeout": 120.0,  # seconds compile() and finalize() wait for the other ranks' messages
}

MODES = ("offline",)
INT64 = (-(2**63), 2**63 - 1)  # eos_token_id is an int64 on the device


@dataclass(frozen=True)
class KernelParams:
    mode: str
    world_size: int
    mpi_rank: int
    num_workers: int
    num_local_schedulers: int
    max_num_batched_tokens: int
    max_num_batched_requests: int
    max_num_pages: int
    page_size: int
    max_seq_length: int
    eos_token_id: int
    trace_name: str
    test_mode: bool
    target_cc: int | None
    compile_only: bool
    emulate: bool | str  # False, True (CUDA bodies on the CPU) or "reference" (slice references)
    emulate_check: bool
    warp_jitter: bool
    watchdog_timeout: float
    placement: str
    comm_timeout: float
    meta_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    profiler_tensor: torch.Tensor | None = None
    # Settings raised so that test mode's default prompt fits: name -> (as given, as used).
    fitted: dict[str, tuple[int, int]] = field(default_factory=dict)


def _positive_int(name: str, v: Any, limit: int = 2**31 - 1) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= limit:
        raise ConfigError(f"{name}={v!r} must be an integer in [1, {limit}]")
    return v


def check_names(what: str, given: Iterable[str], known: Collection[str]) -> None:
    """A ConfigError for the first name of ``given`` that is not in ``known``, with the closest known one."""
    for key in given:
        if key not in known:
            raise ConfigError(f"unknown {what} parameter {key!r}; {near_hint(key, sorted(known), 'known parameters:')}")


def names() -> list[str]:
    """Every init parameter PersistentKernel accepts."""
    return [*DEFAULTS, *OPTIONAL]


def defaults() -> dict[str, Any]:
    """DEFAULTS, with world_size and mpi_rank from MPI.COMM_WORLD when this process was started by
    mpirun (with mpi4py importable)."""
    d = copy.deepcopy(DEFAULTS)
    launched = bootstrap.launched()
    if launched is not None:
        d["world_size"], d["mpi_rank"], _ = launched
    return d


def parse(params: dict[str, Any]) -> KernelParams:
    check_names("PersistentKernel", params, names())
    p = {**defaults(), **OPTIONAL, **params}

    if p["mode"] not in MODES:
        raise ConfigError(f"mode={p['mode']!r} is not supported; use mode='offline'")
    for name in (
        "world_size",
        "num_workers",
        "max_num_batched_tokens",
        "max_num_batched_requests",
        "max_num_pages",
        "page_size",
        "max_seq_length",
    ):
        _positive_int(name, p[name])
    _positive_int("num_local_schedulers", p["num_local_schedulers"], MAX_SCHEDULERS)
    rank = p["mpi_rank"]
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < p["world_size"]:
        raise ConfigError(f"mpi_rank={rank!r} must be in [0, world_size={p['world_size']})")
    eos = p["eos_token_id"]
    if not isinstance(eos, int) or isinstance(eos, bool) or not INT64[0] <= eos <= INT64[1]:
        raise ConfigError(
            f"eos_token_id={eos!r} must be an integer (-1: no end-of-sequence token) in [-2**63, 2**63 - 1]: "
            f"token ids are int64 on the device"
        )
    for name in ("test_mode", "compile_only", "emulate_check", "warp_jitter"):
        if not isinstance(p[name], bool):
            raise ConfigError(f"{name}={p[name]!r} must be True or False")
    if not isinstance(p["emulate"], bool) and p["emulate"] != "reference":
        raise ConfigError(
            f'emulate={p["emulate"]!r} must be True (the CUDA task bodies on the CPU), "reference" (each task\'s '
            f"PyTorch slice reference) or False (the GPU)"
        )
    if p["emulate_check"] and p["emulate"] is not True:
        raise ConfigError(
            f"emulate_check=True checks the CUDA task bodies on the CPU; it needs emulate=True, not emulate={p['emulate']!r}"
        )
    tc = p["target_cc"]
    if tc is not None and (not isinstance(tc, int) or isinstance(tc, bool) or tc not in TARGET_CCS):
        raise ConfigError(f"target_cc={p['target_cc']!r} must be one of {TARGET_CCS} (or None for the GPU's own)")
    for name in ("compile_only", "emulate"):
        if p[name] and p["target_cc"] is None:
            raise ConfigError(f"{name}={p[name]!r} needs an explicit target_cc ({TARGET_CCS_TEXT}): there is no GPU to ask")
    if p["compile_only"] and p["emulate"]:
        raise ConfigError("compile_only=True builds without running and emulate=True runs on the CPU; choose one")
    t = p["watchdog_timeout"]
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= WATCHDOG_MAX_S:
        raise ConfigError(f"watchdog_timeout={t!r} must be a number of seconds in (0, {WATCHDOG_MAX_S}]")
    ct = p["comm_timeout"]
    if not isinstance(ct, (int, float)) or isinstance(ct, bool) or not 0 < ct <= 86400:
        raise ConfigError(f"comm_timeout={ct!r} must be a number of seconds in (0, 86400]")
    if p["world_size"] > MAX_RANKS:
        raise ConfigError(f"world_size={p['world_size']} is more than the {MAX_RANKS} ranks the runtime supports")
    if p["placement"] not in POLICIES:
        raise ConfigError(f"placement={p['placement']!r} must be one of {', '.join(POLICIES)}")
    if not isinstance(p["meta_tensors"], dict):
        raise ConfigError(f"meta_tensors must be a dict of name -> tensor, got {type(p['meta_tensors']).__name__}")
    fitted = fit_default_prompt(p)
    trace = p["trace_name"] if p["trace_name"] is not None else f"mpk_rank{rank}"
    if not isinstance(trace, str) or not trace:
        raise ConfigError(f"trace_name={p['trace_name']!r} must be a non-empty string")
    return KernelParams(
        mode=p["mode"],
        world_size=p["world_size"],
        mpi_rank=rank,
        num_workers=p["num_workers"],
        num_local_schedulers=p["num_local_schedulers"],
        max_num_batched_tokens=p["max_num_batched_tokens"],
        max_num_batched_requests=p["max_num_batched_requests"],
        max_num_pages=p["max_num_pages"],
        page_size=p["page_size"],
        max_seq_length=p["max_seq_length"],
        eos_token_id=p["eos_token_id"],
        trace_name=trace,
        test_mode=p["test_mode"],
        target_cc=p["target_cc"],
        compile_only=p["compile_only"],
        emulate=p["emulate"],
        emulate_check=p["emulate_check"],
        warp_jitter=p["warp_jitter"],
        watchdog_timeout=float(t),
        placement=p["placement"],
        comm_timeout=float(ct),
        meta_tensors=dict(p["meta_tensors"]),
        profiler_tensor=p["profiler_tensor"],
        fitted=fitted,
    )


# A setting that a meta tensor override fixes through its shape is left as it is.
_FIXED_BY = {"max_seq_length": "tokens", "max_num_pages": "paged_kv_indices_buffer"}


def fit_default_prompt(p: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """In test mode with no prompt of the user's (no ``tokens`` nor ``prompt_lengths``), the default
    prompt is one request of max_num_batched_tokens tokens: raise max_seq_length and max_num_pages
    in ``p`` so that it fits whatever max_num_batched_tokens is. Returns what was raised."""
    given = p["meta_tensors"]
    if not p["test_mode"] or "tokens" in given or "prompt_lengths" in given:
        return {}
    prompt = p["max_num_batched_tokens"]
    need = {"max_seq_length": prompt, "max_num_pages": -(-prompt // p["page_size"])}
    fitted = {}
    for name, value in need.items():
        if p[name] < value and _FIXED_BY[name] not in given:
            fitted[name] = (p[name], value)
            p[name] = value
    return fitted


def check_profiler_tensor(p: KernelParams, device: torch.device) -> torch.Tensor | None:
    t = p.profiler_tensor
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.uint64, torch.int64) or t.dim() != 1:
        raise ConfigError(
            f"profiler_tensor must be a 1-D uint64 tensor, got {getattr(t, 'dtype', type(t).__name__)} "
            f"with shape {tuple(getattr(t, 'shape', ()))}; e.g. torch.zeros(3000 * 128, dtype=torch.uint64, device='cuda')"
        )
    if p.compile_only or p.emulate:
        raise ConfigError("profiler_tensor records on the GPU; it cannot be used with compile_only or emulate")
    if t.device != device or not t.is_contiguous():
        raise ConfigError(f"profiler_tensor must be contiguous and on {device}, got {t.device}")
    recorders = p.num_workers + p.num_local_schedulers
    if t.numel() < 3 * recorders:
        raise ConfigError(
            f"profiler_tensor has {t.numel()} entries; it needs at least 3 per recorder ({recorders} workers and "
            f"schedulers), and 2 per task event beyond that: e.g. {recorders * 2 * 64 + recorders} for 64 tasks a worker"
        )
    return t
