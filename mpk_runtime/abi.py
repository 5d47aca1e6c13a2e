"""Python mirror of csrc/runtime/abi.h. ``check_layout`` compares it with the layout a built module
reports, so a drift between the two is a load-time error instead of silent corruption."""

from __future__ import annotations

import ctypes as C
import struct

from .errors import BuildError

ABI_VERSION = 1
NO_EVENT = 0xFFFFFFFF
FLAG_FIRST_TRIGGER_SINGLE = 0x1
TRIGGER_SINGLE = 0x80000000
MAX_SCHEDULERS = 32

STATUS_OK = 0
STATUS_RUNNING = 1
STATUS_WATCHDOG = 2
STATUS_PAGES_EXHAUSTED = 3
STATUS_SKIPPED = 4
STATUS_TASK_ERROR = 5

TASK_ERROR_INDEX = 1

PROF_TASK_BEGIN = 1
PROF_TASK_END = 2
PROF_PREPARE_BEGIN = 3
PROF_PREPARE_END = 4

# MpkTaskDesc, packed with struct for speed (graphs have many tasks): (field, format) in order.
TASK_DESC_FIELDS = [
    ("variant", "H"), ("task_type", "H"), ("num_triggers", "H"), ("flags", "H"),
    ("wait_event", "I"), ("wait_count", "I"), ("first_trigger", "I"), ("trigger_begin", "I"),
    ("task_id", "I"), ("layer", "I"), ("grid_idx", "3H"), ("reserved", "H"),
    ("scalars", "2I"), ("inputs", "7Q"), ("outputs", "3Q"),
]
TASK_DESC = struct.Struct("<" + "".join(f for _, f in TASK_DESC_FIELDS))
assert TASK_DESC.size == 128


def _offsets(fields: list[tuple[str, str]]) -> dict[str, int]:
    out, fmt = {}, "<"
    for name, f in fields:
        out[name] = struct.calcsize(fmt)
        fmt += f
    return out


TASK_DESC_OFFSETS = _offsets(TASK_DESC_FIELDS)


def scalar_word(scalar: dict) -> int:
    """A descriptor scalar of the task graph JSON ({"f": x} or {"i": n}) as its 32 bits."""
    if "i" in scalar:
        return scalar["i"] & 0xFFFFFFFF
    return struct.unpack("<I", struct.pack("<f", scalar["f"]))[0]


class MpkMeta(C.Structure):
    _fields_ = [(n, C.c_void_p) for n in (
        "tokens", "step", "prompt_lengths", "input_tokens", "output_tokens", "num_new_tokens",
        "qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len")]


class MpkBatchConfig(C.Structure):
    _fields_ = [(n, C.c_int32) for n in (
        "max_num_batched_tokens", "max_num_batched_requests", "max_num_pages", "page_size",
        "max_seq_length", "total_num_requests", "max_pages_per_request", "test_mode")] + [("eos_token_id", C.c_int64)]


class MpkBatchState(C.Structure):
    _fields_ = [(n, C.c_void_p) for n in (
        "running", "batch", "request_pages", "request_num_pages", "page_queue", "counters")]


BATCH_NUM_COUNTERS = 5


class MpkControl(C.Structure):
    _fields_ = [("go", C.c_uint64), ("end_count", C.c_uint64), ("iterations_total", C.c_uint64),
                ("abort", C.c_uint32), ("task_error_launch", C.c_uint32), ("task_error_task", C.c_uint32),
                ("task_error_code", C.c_int32), ("task_error_value", C.c_int64),
                ("scheduler_progress", C.c_uint64 * MAX_SCHEDULERS)]


class MpkWorkerStatus(C.Structure):
    _fields_ = [("task", C.c_uint32), ("launch_id", C.c_uint32)]


class MpkStatus(C.Structure):
    _fields_ = [("code", C.c_int32), ("iterations", C.c_uint32), ("idle_ns", C.c_uint64),
                ("detail", C.c_int32 * 4)]


class MpkKernelParams(C.Structure):
    _fields_ = [
        ("tasks", C.c_void_p), ("queue_offsets", C.c_void_p), ("triggers", C.c_void_p),
        ("event_counters", C.c_void_p), ("worker_progress", C.c_void_p), ("worker_status", C.c_void_p),
        ("control", C.c_void_p), ("status", C.c_void_p), ("profiler_buffer", C.c_void_p),
        ("profiler_capacity", C.c_uint64), ("launch_id", C.c_uint32), ("num_tasks", C.c_uint32),
        ("num_events", C.c_uint32), ("num_workers", C.c_uint32), ("num_schedulers", C.c_uint32),
        ("end_trigger_count", C.c_uint32), ("watchdog_timeout_ns", C.c_uint64),
        ("meta", MpkMeta), ("batch", MpkBatchConfig), ("state", MpkBatchState),
    ]


_STRUCTS = {
    "MpkMeta": MpkMeta, "MpkBatchConfig": MpkBatchConfig, "MpkBatchState": MpkBatchState,
    "MpkControl": MpkControl, "MpkWorkerStatus": MpkWorkerStatus, "MpkStatus": MpkStatus,
    "MpkKernelParams": MpkKernelParams,
}


def expected_layout() -> dict[str, tuple[int, dict[str, int]]]:
    layout = {"MpkTaskDesc": (TASK_DESC.size, TASK_DESC_OFFSETS)}
    for name, cls in _STRUCTS.items():
        layout[name] = (C.sizeof(cls), {f: getattr(cls, f).offset for f, _ in cls._fields_})
    return layout


def parse_layout(text: str) -> dict[str, tuple[int, dict[str, int]]]:
    """Parse mpk_abi_layout()'s "Struct=size field:offset ...;..." string."""
    out = {}
    for part in filter(None, text.split(";")):
        head, *fields = part.split()
        name, size = head.split("=")
        out[name] = (int(size), {f: int(o) for f, o in (x.split(":") for x in fields)})
    return out


def check_layout(reported: str, module: str) -> None:
    want = expected_layout()
    for name, (size, fields) in parse_layout(reported).items():
        if name not in want:
            raise BuildError(f"{module}: reports an unknown struct {name}; rebuild it (clear the cache entry)")
        wsize, wfields = want[name]
        problems = [f"sizeof {size} != {wsize}"] if size != wsize else []
        problems += [f"{f} at {o} != {wfields.get(f)}" for f, o in fields.items() if wfields.get(f) != o]
        if problems:
            raise BuildError(
                f"{module}: {name} layout differs from mpk_runtime/abi.py ({'; '.join(problems)}); "
                f"csrc/runtime/abi.h and abi.py must change together"
            )
