"""Profiler buffer -> task spans -> a Perfetto trace and a CSV.

The device writes the buffer as csrc/runtime/profiler.cuh describes: one equal region per recorder
(workers first, then schedulers), each ``[attempted][record 0][record 1]...`` with a record being
``(timestamp_ns, id | kind << 32 | iteration << 40)``. A region that filled up keeps its first
records and counts the rest in ``attempted``, so what was lost is known exactly.

``decode`` pairs begins with ends. A begin whose end was lost (or an end whose begin was) is
reported as *dangling*, never given a made-up duration; lost records are reported as *dropped*.
``export`` writes the trace and the CSV and warns about both, so an overflowed buffer gives a
smaller, honest profile instead of a corrupt one.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import abi
from .errors import ProfileError
from .profile_stats import Row, write_csv

MASK64 = (1 << 64) - 1
RECORD_WORDS = 2  # (timestamp, id | kind | iteration)
PREPARE = "prepare_next_batch"
_PAIRS = {  # begin kind -> (end kind, what it measures, recorded by workers?)
    abi.PROF_TASK_BEGIN: (abi.PROF_TASK_END, "task", True),
    abi.PROF_PREPARE_BEGIN: (abi.PROF_PREPARE_END, PREPARE, False),
}
_ENDS = {end: begin for begin, (end, _, _) in _PAIRS.items()}


class ProfilerWarning(UserWarning):
    """The profile is incomplete: records were dropped (buffer full) or a begin lost its end."""


class _Timed:
    """begin_ns and end_ns, and the time between them."""

    begin_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.begin_ns


@dataclass(frozen=True)
class TaskSpan(_Timed):
    task: int  # task id in the graph
    iteration: int
    worker: int
    event_no: int  # index of this span among the worker's complete spans, in run order
    begin_ns: int
    end_ns: int


@dataclass(frozen=True)
class PrepareSpan(_Timed):
    """One call of prepare_next_batch by a scheduler (the last call of a launch returns false)."""

    iteration: int
    scheduler: int
    begin_ns: int
    end_ns: int


@dataclass(frozen=True)
class Dangling:
    """A begin without its end, or an end without its begin."""

    recorder: str  # "worker 3" or "scheduler 0"
    edge: str  # "begin" or "end"
    what: str  # "task" or "prepare_next_batch"
    id: int  # task id, or the iteration for prepare_next_batch
    iteration: int
    timestamp_ns: int


@dataclass(frozen=True)
class Profile:
    num_workers: int
    num_schedulers: int
    tasks: list[TaskSpan]
    prepare: list[PrepareSpan]
    dropped_by_region: tuple[int, ...]  # workers first, then schedulers
    dangling: list[Dangling]

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by_region)

    def recorder(self, region: int) -> str:
        w = self.num_workers
        return f"worker {region}" if region < w else f"scheduler {region - w}"

    def problems(self) -> str | None:
        """One sentence with the counts, or None for a complete profile."""
        if not self.dropped and not self.dangling:
            return None
        full = [f"{self.recorder(i)}: {n}" for i, n in enumerate(self.dropped_by_region) if n]
        where = ", ".join(full[:4]) + (f" and {len(full) - 4} more recorders" if len(full) > 4 else "")
        fix = "; give a larger profiler_tensor" if self.dropped else ""
        return (f"incomplete profile: {self.dropped} records dropped because the profiler buffer was full"
                f"{f' ({where})' if where else ''}, {len(self.dangling)} dangling begin/end records left "
                f"unpaired{fix}")


def decode(buffer: Any, num_workers: int, num_schedulers: int) -> Profile:
    """Split the buffer into recorder regions and pair every begin with its end, in record order."""
    if num_workers < 1 or num_schedulers < 1:
        raise ProfileError(f"num_workers={num_workers} and num_schedulers={num_schedulers} must both be >= 1")
    words = _words(buffer)
    recorders = num_workers + num_schedulers
    size = len(words) // recorders
    if size < 1 + RECORD_WORDS:
        raise ProfileError(f"a profiler buffer of {len(words)} entries cannot hold one record for each of {recorders} "
                           f"recorders ({num_workers} workers + {num_schedulers} schedulers); give at least "
                           f"{recorders * (1 + RECORD_WORDS)} entries")
    fits = (size - 1) // RECORD_WORDS
    tasks: list[TaskSpan] = []
    prepare: list[PrepareSpan] = []
    dangling: list[Dangling] = []
    dropped = []
    for region in range(recorders):
        base = region * size
        attempted = words[base]
        n = min(attempted, fits)
        dropped.append(attempted - n)
        records = [(words[base + 1 + 2 * i], words[base + 2 + 2 * i]) for i in range(n)]
        _pair(region, num_workers, records, tasks, prepare, dangling)
    return Profile(num_workers, num_schedulers, tasks, prepare, tuple(dropped), dangling)


def _words(buffer: Any) -> list[int]:
    if hasattr(buffer, "dtype") and hasattr(buffer, "dim"):  # a torch tensor; torch is not imported for lists
        if buffer.dim() != 1 or str(buffer.dtype) not in ("torch.uint64", "torch.int64"):
            raise ProfileError(f"the profiler buffer must be a 1-D uint64 tensor, got {buffer.dtype} of shape "
                               f"{tuple(buffer.shape)}")
        buffer = buffer.detach().cpu().tolist()
    return [int(v) & MASK64 for v in buffer]  # int64 views show the high bit as a sign


def _pair(region: int, num_workers: int, records: Sequence[tuple[int, int]], tasks: list[TaskSpan],
          prepare: list[PrepareSpan], dangling: list[Dangling]) -> None:
    is_worker = region < num_workers
    who = f"worker {region}" if is_worker else f"scheduler {region - num_workers}"
    open_: tuple[int, int, int, int] | None = None  # (begin kind, id, iteration, timestamp)
    event_no = 0

    def lost(edge: str, kind: int, id_: int, iteration: int, ts: int) -> None:
        what = _PAIRS[kind if edge == "begin" else _ENDS[kind]][1]
        dangling.append(Dangling(who, edge, what, id_, iteration, ts))

    for ts, word in records:
        id_, kind, iteration = word & 0xFFFFFFFF, (word >> 32) & 0xFF, word >> 40
        begin_kind = kind if kind in _PAIRS else _ENDS.get(kind)
        if begin_kind is None or _PAIRS[begin_kind][2] != is_worker:
            raise ProfileError(f"{who}: record kind {kind} (word 0x{word:016x}) is not one a {who.split()[0]} writes; "
                               f"the buffer does not match this decoder (MPK_PROF_* in csrc/runtime/abi.h)")
        if kind in _PAIRS:
            if open_ is not None:
                lost("begin", *open_)
            open_ = (kind, id_, iteration, ts)
            continue
        if open_ is None or open_[:3] != (begin_kind, id_, iteration):
            if open_ is not None:
                lost("begin", *open_)
            lost("end", kind, id_, iteration, ts)
            open_ = None
            continue
        begin = open_[3]
        open_ = None
        if ts < begin:
            raise ProfileError(f"{who}: the end of {_PAIRS[begin_kind][1]} {id_} (iteration {iteration}) at {ts} ns "
                               f"precedes its begin at {begin} ns; the buffer is corrupt")
        if is_worker:
            tasks.append(TaskSpan(id_, iteration, region, event_no, begin, ts))
            event_no += 1
        else:
            prepare.append(PrepareSpan(id_, region - num_workers, begin, ts))  # id: the full 32-bit iteration
    if open_ is not None:
        lost("begin", *open_)


def export(profile: Profile, graph: dict, trace_name: str | Path) -> dict[str, Path]:
    """Write ``<trace_name>.perfetto-trace`` and ``<trace_name>.csv``; return {"trace": ..., "csv": ...}.

    ``graph`` is the task graph's JSON (``artifacts.graph_json``): it names every task and layer.
    An incomplete profile is still written (its complete spans, its dangling records as instant
    events, the counts on a "profiler" track) and warns with a ProfilerWarning: a truncated
    profile is still useful, but nobody should mistake it for a complete one."""
    tasks = {t["id"]: t for t in graph["tasks"]}
    layers = {layer["id"]: layer for layer in graph["layers"]}
    unknown = sorted({s.task for s in profile.tasks if s.task not in tasks} |
                     {d.id for d in profile.dangling if d.what == "task" and d.id not in tasks})
    if unknown:
        raise ProfileError(f"the profile names task ids {unknown[:10]} that the task graph ({len(tasks)} tasks) does "
                           f"not have; export it with the graph of the kernel that recorded it")
    rows = []
    for s in sorted(profile.tasks, key=lambda s: (s.begin_ns, s.worker, s.event_no)):
        layer = layers[tasks[s.task]["layer"]]
        rows.append(Row(layer["opcode"], layer["task"], layer["name"], s.worker, s.event_no, s.begin_ns, s.end_ns,
                        s.duration_ns))
    data = _trace(profile, tasks, layers, str(trace_name)).SerializeToString()
    base = Path(trace_name)
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = {"trace": base.with_name(base.name + ".perfetto-trace"), "csv": base.with_name(base.name + ".csv")}
    write_csv(paths["csv"], rows)
    tmp = paths["trace"].with_name(paths["trace"].name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, paths["trace"])
    problems = profile.problems()
    if problems:
        warnings.warn(f"{trace_name}: {problems}", ProfilerWarning, stacklevel=2)
    return paths


# Track uuids: fixed, so traces of one graph line up when compared.
_ROOT, _STATUS, _SCHEDULER0, _WORKER0 = 1, 2, 3, 3 + abi.MAX_SCHEDULERS
_SEQUENCE = 1
_BEGIN, _END, _INSTANT = 1, 2, 3  # TrackEvent.Type: TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT


def _trace(profile: Profile, tasks: dict[int, dict], layers: dict[int, dict], trace_name: str) -> Any:
    """The Perfetto trace: a root track, one child track per worker and one for the controller's
    prepare_next_batch; every span a slice, every dangling record an instant event; when the
    profile is incomplete, a "profiler" track whose one instant event carries the counts."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    except ImportError as e:
        raise ProfileError(f"writing a Perfetto trace needs the perfetto package ({e}); pip install perfetto") from None
    trace = pb.Trace()
    problems = profile.problems()
    schedulers = {0} | {s.scheduler for s in profile.prepare}
    schedulers |= {_track_of(d.recorder) - _SCHEDULER0 for d in profile.dangling if d.recorder.startswith("scheduler")}
    tracks = [(_ROOT, None, f"mpk {trace_name}", 0)]
    if problems:
        tracks.append((_STATUS, _ROOT, "profiler", 0))
    tracks += [(_SCHEDULER0 + s, _ROOT, "controller: prepare_next_batch" if s == 0 else f"scheduler {s}: {PREPARE}",
                1 + s) for s in sorted(schedulers)]
    tracks += [(_WORKER0 + w, _ROOT, f"worker {w}", 100 + w) for w in range(profile.num_workers)]
    for uuid, parent, name, rank in tracks:
        d = _packet(trace).track_descriptor
        d.uuid, d.name, d.sibling_order_rank = uuid, name, rank
        if parent is None:
            d.child_ordering = pb.TrackDescriptor.EXPLICIT
        else:
            d.parent_uuid = parent

    # (timestamp, type, track, name, category, annotations). A stable sort by timestamp keeps each
    # track's own order, so an end and the next begin at the same timestamp stay nested correctly.
    events: list[tuple[int, int, int, str | None, str | None, dict | None]] = []
    if problems:
        notes = {"dropped": profile.dropped, "dangling": len(profile.dangling)}
        notes.update({f"dropped {profile.recorder(i)}": n for i, n in enumerate(profile.dropped_by_region) if n})
        first = min([s.begin_ns for s in profile.tasks] + [p.begin_ns for p in profile.prepare] +
                    [d.timestamp_ns for d in profile.dangling], default=0)
        events.append((first, _INSTANT, _STATUS, f"incomplete: {profile.dropped} records dropped, "
                       f"{len(profile.dangling)} dangling", "profiler", notes))
    for s in profile.tasks:
        t = tasks[s.task]
        layer = layers[t["layer"]]
        events.append((s.begin_ns, _BEGIN, _WORKER0 + s.worker, t["label"], layer["task"],
                       {"task_id": s.task, "layer": layer["name"], "task": layer["task"], "iteration": s.iteration,
                        "event_no": s.event_no}))
        events.append((s.end_ns, _END, _WORKER0 + s.worker, None, None, None))
    for p in profile.prepare:
        events.append((p.begin_ns, _BEGIN, _SCHEDULER0 + p.scheduler, PREPARE, "runtime", {"iteration": p.iteration}))
        events.append((p.end_ns, _END, _SCHEDULER0 + p.scheduler, None, None, None))
    for d in profile.dangling:
        name = tasks[d.id]["label"] if d.what == "task" else PREPARE
        other = "end" if d.edge == "begin" else "begin"
        notes = {"dangling": d.edge, "iteration": d.iteration, **({"task_id": d.id} if d.what == "task" else {})}
        events.append((d.timestamp_ns, _INSTANT, _track_of(d.recorder), f"{name}: {d.edge} without its {other}",
                       "profiler", notes))
    events.sort(key=lambda e: e[0])
    for ts, type_, uuid, name, category, notes in events:
        p = _packet(trace)
        p.timestamp = ts
        e = p.track_event
        e.type, e.track_uuid = type_, uuid
        if name is not None:
            e.name = name
            e.categories.append(category)
        for key, value in (notes or {}).items():
            a = e.debug_annotations.add()
            a.name = key
            if isinstance(value, str):
                a.string_value = value
            else:
                a.uint_value = value
    return trace


def _track_of(recorder: str) -> int:
    kind, num = recorder.split()
    return (_WORKER0 if kind == "worker" else _SCHEDULER0) + int(num)


def _packet(trace: Any) -> Any:
    p = trace.packet.add()
    p.trusted_packet_sequence_id = _SEQUENCE
    return p
