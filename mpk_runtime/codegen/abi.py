"""The data layout the generated code, the runtime and Python agree on: a Python mirror of
csrc/runtime/abi.h (ctypes structs), the one packer of task descriptors, and the one builder of the
meta / batch structs. ``check_layout`` compares the mirror (and contract.py's constants) with what a
built module reports, so a drift between the two is a load-time error instead of silent corruption."""

from __future__ import annotations

import ctypes as C
import struct
from collections.abc import Mapping
from typing import Any

from .. import contract
from ..errors import BuildError
from ..graph.compiled import EventInfo, LayerInfo, TaskInfo

FLAG_FIRST_TRIGGER_SINGLE = 0x1
TRIGGER_SINGLE = 0x80000000

# MpkTaskDesc, packed with struct for speed (graphs have many tasks): (field, format) in order.
TASK_DESC_FIELDS = [
    ("variant", "H"),
    ("task_type", "H"),
    ("num_triggers", "H"),
    ("flags", "H"),
    ("wait_event", "I"),
    ("wait_count", "I"),
    ("first_trigger", "I"),
    ("trigger_begin", "I"),
    ("task_id", "I"),
    ("layer", "I"),
    ("grid_idx", "3H"),
    ("reserved", "H"),
    ("scalars", "2I"),
    ("inputs", f"{contract.MAX_INPUTS}Q"),
    ("outputs", f"{contract.MAX_OUTPUTS}Q"),
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


def scalar_word(value: int | float, is_int: bool) -> int:
    """A descriptor scalar as its 32 bits (an int32, or the bits of a float32)."""
    if is_int:
        return int(value) & 0xFFFFFFFF
    return struct.unpack("<I", struct.pack("<f", value))[0]


class MpkMeta(C.Structure):
    _fields_ = [(n, C.c_void_p) for n in contract.META_FIELDS]


class MpkBatchConfig(C.Structure):
    _fields_ = [
        (n, C.c_int32)
        for n in (
            "max_num_batched_tokens",
            "max_num_batched_requests",
            "max_num_pages",
            "page_size",
            "max_seq_length",
            "total_num_requests",
            "max_pages_per_request",
            "test_mode",
        )
    ] + [("eos_token_id", C.c_int64)]


class MpkBatchState(C.Structure):
    _fields_ = [
        (n, C.c_void_p)
        for n in (
            "running",
            "batch",
            "request_pages",
            "request_num_pages",
            "page_queue",
            "counters",
            "initial_step",
            "page_order",
        )
    ]


BATCH_NUM_COUNTERS = 5


class MpkControl(C.Structure):
    _fields_ = [
        ("go", C.c_uint64),
        ("end_count", C.c_uint64),
        ("iterations_total", C.c_uint64),
        ("abort", C.c_uint32),
        ("task_error_launch", C.c_uint32),
        ("task_error_task", C.c_uint32),
        ("task_error_code", C.c_int32),
        ("task_error_value", C.c_int64),
        ("scheduler_progress", C.c_uint64 * contract.MAX_SCHEDULERS),
    ]


class MpkWorkerStatus(C.Structure):
    _fields_ = [("task", C.c_uint32), ("launch_id", C.c_uint32), ("peer", C.c_uint32), ("reserved", C.c_uint32)]


WORKER_STATUS_WORDS = C.sizeof(MpkWorkerStatus) // 4  # int32 columns of the host's worker_status tensor


class MpkComm(C.Structure):
    _fields_ = [
        ("heap", C.c_void_p),
        ("peers", C.c_void_p),
        ("signals", C.c_void_p),
        ("rank", C.c_uint32),
        ("world_size", C.c_uint32),
    ]


class MpkStatus(C.Structure):
    _fields_ = [
        ("code", C.c_int32),
        ("iterations", C.c_uint32),
        ("idle_ns", C.c_uint64),
        ("detail", C.c_int32 * 4),
        ("end_seen", C.c_uint64),
    ]


class MpkKernelParams(C.Structure):
    _fields_ = [
        ("tasks", C.c_void_p),
        ("queue_offsets", C.c_void_p),
        ("triggers", C.c_void_p),
        ("event_counters", C.c_void_p),
        ("worker_progress", C.c_void_p),
        ("worker_status", C.c_void_p),
        ("control", C.c_void_p),
        ("status", C.c_void_p),
        ("profiler_buffer", C.c_void_p),
        ("profiler_capacity", C.c_uint64),
        ("launch_id", C.c_uint32),
        ("num_tasks", C.c_uint32),
        ("num_events", C.c_uint32),
        ("num_workers", C.c_uint32),
        ("num_schedulers", C.c_uint32),
        ("end_trigger_count", C.c_uint32),
        ("watchdog_timeout_ns", C.c_uint64),
        ("meta", MpkMeta),
        ("batch", MpkBatchConfig),
        ("state", MpkBatchState),
        ("comm", MpkComm),
    ]


_STRUCTS = {
    "MpkMeta": MpkMeta,
    "MpkBatchConfig": MpkBatchConfig,
    "MpkBatchState": MpkBatchState,
    "MpkControl": MpkControl,
    "MpkWorkerStatus": MpkWorkerStatus,
    "MpkComm": MpkComm,
    "MpkStatus": MpkStatus,
    "MpkKernelParams": MpkKernelParams,
}


def expected_layout() -> dict[str, tuple[int, dict[str, int]]]:
    layout: dict[str, tuple[int, dict[str, int]]] = {"MpkTaskDesc": (TASK_DESC.size, TASK_DESC_OFFSETS)}
    for name, cls in _STRUCTS.items():
        layout[name] = (C.sizeof(cls), {f: getattr(cls, f).offset for f, *_ in cls._fields_})
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
        if name == "Constants":
            wrong = [
                f"{k}={v} (mpk_runtime/contract.py: {contract.CHECKED.get(k)})"
                for k, v in fields.items()
                if contract.CHECKED.get(k) != v
            ]
            if wrong:
                raise BuildError(
                    f"{module}: constants differ from mpk_runtime/contract.py: {'; '.join(wrong)}; "
                    f"csrc/runtime/abi.h and contract.py must change together"
                )
            continue
        if name not in want:
            raise BuildError(f"{module}: reports an unknown struct {name}; rebuild it (clear the cache entry)")
        wsize, wfields = want[name]
        problems = [f"sizeof {size} != {wsize}"] if size != wsize else []
        problems += [f"{f} at {o} != {wfields.get(f)}" for f, o in fields.items() if wfields.get(f) != o]
        if problems:
            raise BuildError(
                f"{module}: {name} layout differs from mpk_runtime/codegen/abi.py ({'; '.join(problems)}); "
                f"csrc/runtime/abi.h and mpk_runtime/codegen/abi.py must change together"
            )


def meta_struct(meta: Mapping[str, Any]) -> MpkMeta:
    """The MpkMeta of the meta tensors ``meta`` (name -> torch tensor): their device pointers."""
    return MpkMeta(**{field: meta[name].data_ptr() for field, name in contract.META_FIELDS.items()})


def batch_struct(cfg: Any) -> MpkBatchConfig:
    """The MpkBatchConfig of a run.batching.BatchConfig."""
    return MpkBatchConfig(
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_batched_requests=cfg.max_num_batched_requests,
        max_num_pages=cfg.max_num_pages,
        page_size=cfg.page_size,
        max_seq_length=cfg.max_seq_length,
        total_num_requests=cfg.total_num_requests,
        max_pages_per_request=cfg.max_pages_per_request,
        test_mode=int(cfg.test_mode),
        eos_token_id=cfg.eos_token_id,
    )


def pack_task(
    task: TaskInfo,
    layer: LayerInfo,
    pointers: Mapping[str, int],
    events: tuple[EventInfo, ...] | None = None,
    extra: list[int] | None = None,
) -> bytes:
    """One task's 128-byte descriptor, its slices bound to the tensors' base addresses ``pointers``
    (name -> int). ``events`` None: no wait and no triggers (a task body launched alone); else
    further triggers are appended to ``extra``, flagged when their event has a single producer."""
    triggers, wait = (task.triggers, task.wait_event) if events is not None else ((), None)
    single = [events[e].trigger_count == 1 for e in triggers] if events is not None else []
    begin = len(extra) if extra is not None else 0
    if triggers and extra is not None:
        extra.extend(e | (TRIGGER_SINGLE if s else 0) for e, s in zip(triggers[1:], single[1:]))
    flags = FLAG_FIRST_TRIGGER_SINGLE if single[:1] == [True] else 0
    scalars = ([scalar_word(s.value, s.is_int) for s in layer.scalars] + [0, 0])[:2]
    ins = [pointers[s.tensor] + s.byte_offset for s in task.inputs]
    outs = [pointers[s.tensor] + s.byte_offset for s in task.outputs]
    wait_count = 0 if wait is None or events is None else events[wait].trigger_count
    return TASK_DESC.pack(
        task.variant,
        layer.opcode,
        len(triggers),
        flags,
        contract.NO_EVENT if wait is None else wait,
        wait_count,
        triggers[0] if triggers else 0,
        begin,
        task.id,
        layer.id,
        *task.grid_idx,
        0,
        *scalars,
        *ins,
        *[0] * (contract.MAX_INPUTS - len(ins)),
        *outs,
        *[0] * (contract.MAX_OUTPUTS - len(outs)),
    )
