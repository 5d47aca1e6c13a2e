"""Writing a decoded profile: a Perfetto trace (one track per worker, one for the controller's
prepare_next_batch; the phases a task body marks as slices inside its task's) and two CSVs
(stats.py: the task runs, and their phases), named after the compiled graph's tasks and layers.

An incomplete profile is still written (its complete spans, its dangling records as instant
events, the counts on a "profiler" track) and warns with a ProfilerWarning: a truncated profile is
still useful, but nobody should mistake it for a complete one.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from .. import contract
from ..errors import GraphError, ProfileError
from ..graph.compiled import CompiledGraph, LayerInfo, TaskInfo
from .decode import PREPARE, Profile, ProfilerWarning, decode
from .stats import PHASE_COLUMNS, PhaseRow, Row, phases_path, write_csv


def write_profile(
    buffer: Any, graph: CompiledGraph, num_workers: int, num_schedulers: int, trace_name: str | Path
) -> dict[str, Path]:
    """Decode a launch's profiler buffer and export it (see export)."""
    return export(decode(buffer, num_workers, num_schedulers), graph, trace_name)


def export(profile: Profile, graph: CompiledGraph, trace_name: str | Path) -> dict[str, Path]:
    """Write ``<trace_name>.perfetto-trace``, ``<trace_name>.csv`` and ``<trace_name>.phases.csv``;
    return {"trace": ..., "csv": ..., "phases": ...}.

    ``graph`` is the compiled graph: it names every task and layer.
    An incomplete profile is still written (its complete spans, its dangling records as instant
    events, the counts on a "profiler" track) and warns with a ProfilerWarning: a truncated
    profile is still useful, but nobody should mistake it for a complete one."""
    tasks = {t.id: t for t in graph.tasks}
    layers = {layer.id: layer for layer in graph.layers}
    unknown = sorted(
        {s.task for s in profile.tasks if s.task not in tasks}
        | {d.id for d in profile.dangling if d.what == "task" and d.id not in tasks}
    )
    if unknown:
        raise ProfileError(
            f"the profile names task ids {unknown[:10]} that the task graph ({len(tasks)} tasks) does "
            f"not have; export it with the graph of the kernel that recorded it"
        )
    rows, phase_rows = [], []
    for s in sorted(profile.tasks, key=lambda s: (s.begin_ns, s.worker, s.event_no)):
        layer = layers[tasks[s.task].layer]
        rows.append(Row(layer.opcode, layer.task, layer.name, s.worker, s.event_no, s.begin_ns, s.end_ns, s.duration_ns))
        for no, begin, end in s.phases():
            phase_rows.append(
                PhaseRow(
                    layer.opcode, layer.task, layer.name, s.worker, s.event_no, -1 if no is None else no,
                    phase_name(layer.task, no, s.marks), begin, end, end - begin,
                )
            )  # fmt: skip
    data = _trace(profile, tasks, layers, str(trace_name)).SerializeToString()
    base = Path(trace_name)
    base.parent.mkdir(parents=True, exist_ok=True)
    csv_path = base.with_name(base.name + ".csv")
    paths = {"trace": base.with_name(base.name + ".perfetto-trace"), "csv": csv_path, "phases": phases_path(csv_path)}
    write_csv(paths["csv"], rows)
    write_csv(paths["phases"], phase_rows, PHASE_COLUMNS)
    tmp = paths["trace"].with_name(paths["trace"].name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, paths["trace"])
    problems = profile.problems()
    if problems:
        warnings.warn(f"{trace_name}: {problems}", ProfilerWarning, stacklevel=2)
    return paths


# Track uuids: fixed, so traces of one graph line up when compared.
_ROOT, _STATUS, _SCHEDULER0, _WORKER0 = 1, 2, 3, 3 + contract.MAX_SCHEDULERS
_SEQUENCE = 1
_BEGIN, _END, _INSTANT = 1, 2, 3  # TrackEvent.Type: TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT


def _trace(profile: Profile, tasks: dict[int, TaskInfo], layers: dict[int, LayerInfo], trace_name: str) -> Any:
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
    tracks: list[tuple[int, int | None, str, int]] = [(_ROOT, None, f"mpk {trace_name}", 0)]
    if problems:
        tracks.append((_STATUS, _ROOT, "profiler", 0))
    tracks += [
        (_SCHEDULER0 + s, _ROOT, "controller: prepare_next_batch" if s == 0 else f"scheduler {s}: {PREPARE}", 1 + s)
        for s in sorted(schedulers)
    ]
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
        notes: dict[str, Any] = {"dropped": profile.dropped, "dangling": len(profile.dangling)}
        notes.update({f"dropped {profile.recorder(i)}": n for i, n in enumerate(profile.dropped_by_region) if n})
        first = min(
            [s.begin_ns for s in profile.tasks]
            + [p.begin_ns for p in profile.prepare]
            + [d.timestamp_ns for d in profile.dangling],
            default=0,
        )
        events.append(
            (
                first,
                _INSTANT,
                _STATUS,
                f"incomplete: {profile.dropped} records dropped, {len(profile.dangling)} dangling",
                "profiler",
                notes,
            )
        )
    for s in profile.tasks:
        t = tasks[s.task]
        layer = layers[t.layer]
        events.append(
            (
                s.begin_ns,
                _BEGIN,
                _WORKER0 + s.worker,
                t.label,
                layer.task,
                {"task_id": s.task, "layer": layer.name, "task": layer.task, "iteration": s.iteration, "event_no": s.event_no},
            )
        )
        for no, begin, end in s.phases():  # slices inside the task's: its body's phases
            name = phase_name(layer.task, no, s.marks)
            events.append((begin, _BEGIN, _WORKER0 + s.worker, name, layer.task, None if no is None else {"phase_no": no}))
            events.append((end, _END, _WORKER0 + s.worker, None, None, None))
        events.append((s.end_ns, _END, _WORKER0 + s.worker, None, None, None))
    for p in profile.prepare:
        events.append((p.begin_ns, _BEGIN, _SCHEDULER0 + p.scheduler, PREPARE, "runtime", {"iteration": p.iteration}))
        events.append((p.end_ns, _END, _SCHEDULER0 + p.scheduler, None, None, None))
    for d in profile.dangling:
        name = tasks[d.id].label if d.what == "task" else PREPARE
        other = "end" if d.edge == "begin" else "begin"
        marks: dict[str, Any] = {"dangling": d.edge, "iteration": d.iteration}
        if d.what == "task":
            marks["task_id"] = d.id
        events.append(
            (d.timestamp_ns, _INSTANT, _track_of(d.recorder), f"{name}: {d.edge} without its {other}", "profiler", marks)
        )
    events.sort(key=lambda e: e[0])
    for ts, type_, uuid, title, category, debug in events:
        packet = _packet(trace)
        packet.timestamp = ts
        ev = packet.track_event
        ev.type, ev.track_uuid = type_, uuid
        if title is not None:
            ev.name = title
            ev.categories.append(category)
        for key, value in (debug or {}).items():
            a = ev.debug_annotations.add()
            a.name = key
            if isinstance(value, str):
                a.string_value = value
            else:
                a.uint_value = value
    return trace


def phase_name(task_type: str, phase_no: int | None, marks: tuple[tuple[int, int], ...]) -> str:
    """A phase's name: the task's TaskSpec.phases entry (for the time after the last mark, the
    entry after that mark's), else "phase <n>" / "after phase <n>"."""
    from ..tasks import registry

    try:
        names = registry.get(task_type).phases
    except GraphError:  # a task type this process has not registered: numbers only
        names = ()
    no = phase_no if phase_no is not None else marks[-1][0] + 1
    if no < len(names):
        return names[no]
    return f"phase {phase_no}" if phase_no is not None else f"after phase {marks[-1][0]}"


def _track_of(recorder: str) -> int:
    kind, num = recorder.split()
    return (_WORKER0 if kind == "worker" else _SCHEDULER0) + int(num)


def _packet(trace: Any) -> Any:
    p = trace.packet.add()
    p.trusted_packet_sequence_id = _SEQUENCE
    return p
