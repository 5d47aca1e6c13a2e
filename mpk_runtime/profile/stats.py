"""The profile CSV (one row per task run), the phases CSV (one row per phase a task body marked)
and the statistics ``mpk-profile`` computes from them.

The writer (``mpk_runtime.profiler.export``) and the reader (the CLI) share this module, so the
column set is defined once. The reader validates every row: a file that is not ours, or was cut
short, is an error that names the line, never a silently wrong statistic.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..errors import ProfileError

STATS = ("min", "max", "avg", "median", "p90", "all", "wall")


class Row(NamedTuple):
    """One task run on one worker, as a CSV row (column order = COLUMNS; a tuple, so rows are written
    as they are, without conversion)."""

    task_type_id: int
    task_type_name: str
    layer: str
    worker: int
    event_no: int
    begin_ns: int
    end_ns: int
    duration_ns: int


COLUMNS: tuple[str, ...] = Row._fields


class PhaseRow(NamedTuple):
    """One phase of one task run (Runtime::mark): phase_no is the mark that ended it, -1 for the
    time after the body's last mark; phase is its name (TaskSpec.phases) or "phase <n>"."""

    task_type_id: int
    task_type_name: str
    layer: str
    worker: int
    event_no: int  # the task run's event_no in the profile CSV
    phase_no: int
    phase: str
    begin_ns: int
    end_ns: int
    duration_ns: int


PHASE_COLUMNS: tuple[str, ...] = PhaseRow._fields
_TEXT = ("task_type_name", "layer", "phase")


def phases_path(profile_csv: str | Path) -> Path:
    """The phases CSV written next to a profile CSV: ``trace.csv`` -> ``trace.phases.csv``."""
    p = Path(profile_csv)
    return p.with_name(p.name.removesuffix(".csv") + ".phases.csv")


def write_csv(path: Path, rows: Iterable[tuple], columns: tuple[str, ...] = COLUMNS) -> None:
    """Write to a temporary file and rename it, so a reader never sees half a profile."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    os.replace(tmp, path)


def read_csv(path: str | Path) -> list[Row]:
    rows = _read(path, Row, "profile CSV")
    if not rows:
        raise ProfileError(f"{path}: no rows (the profile recorded no complete task)")
    return rows


def read_phases_csv(path: str | Path) -> list[PhaseRow]:
    """The phases CSV; empty when no task body marked a phase."""
    return _read(path, PhaseRow, "phases CSV")


def _read(path: str | Path, kind: type[Row] | type[PhaseRow], what: str) -> list:
    columns = kind._fields
    try:
        f = open(path, newline="")
    except OSError as e:
        raise ProfileError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None or tuple(header) != columns:
                raise ProfileError(f"{path}: not a {what}; the header must be {','.join(columns)}, got {header!r}")
            return [_parse_row(path, reader.line_num, fields, kind) for fields in reader if fields]
        except (UnicodeDecodeError, csv.Error) as e:
            raise ProfileError(
                f"{path}:{reader.line_num + 1}: not a {what} (not UTF-8 CSV text: {e}); pass the .csv written next to the trace"
            ) from None


def _parse_row(path: str | Path, line: int, fields: list[str], kind: type[Row] | type[PhaseRow]) -> Any:
    columns = kind._fields
    if len(fields) != len(columns):
        raise ProfileError(f"{path}:{line}: expected {len(columns)} fields, got {len(fields)}: {fields!r}")
    values: list[int | str] = []
    for name, text in zip(columns, fields):
        if name in _TEXT:
            values.append(text)
            continue
        # phase_no -1: the time after a body's last mark; duration_ns: checked against end - begin below
        low = {"phase_no": -1, "duration_ns": -(2**64)}.get(name, 0)
        try:
            value = int(text) if text.isascii() and len(text) <= 21 else None
        except ValueError:
            value = None
        if value is None or not low <= value < 2**64:
            raise ProfileError(f"{path}:{line}: {name}={text[:40]!r} is not an integer in [{low}, 2**64)") from None
        values.append(value)
    row = kind(*values)  # type: ignore[arg-type]
    if row.duration_ns != row.end_ns - row.begin_ns or row.duration_ns < 0:
        raise ProfileError(
            f"{path}:{line}: duration_ns={row.duration_ns} does not equal end_ns - begin_ns = {row.end_ns - row.begin_ns} (>= 0)"
        )
    return row


RowT = TypeVar("RowT", Row, PhaseRow)


def select(rows: list[RowT], task: str) -> list[RowT]:
    """The rows of one task type, given by name (``rmsnorm``) or numeric task_type_id (``2``)."""
    if task.isascii() and task.isdigit():  # compared as text: int() of thousands of digits raises
        picked = [r for r in rows if str(r.task_type_id) == (task.lstrip("0") or "0")]
    else:
        picked = [r for r in rows if r.task_type_name == task]
    if not picked:
        known = ", ".join(f"{name} ({tid})" for tid, name in sorted({(r.task_type_id, r.task_type_name) for r in rows}))
        raise ProfileError(f"no task type {task[:40]!r} in this profile; it has: {known}")
    return picked


def p90(values: list[int]) -> int:
    """The nearest-rank 90th percentile: the smallest value with at least 90 % of the values at or
    below it. Always a duration that was actually measured (no interpolation)."""
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def _duration_stats(durations: list[int]) -> dict[str, float | int]:
    """min, max, avg, median and p90 of some durations, keyed ``<stat>_ns``."""
    return {
        "min_ns": min(durations),
        "max_ns": max(durations),
        "avg_ns": round(statistics.fmean(durations), 3),
        "median_ns": statistics.median(durations),
        "p90_ns": p90(durations),
    }


def stats(rows: list[Row], which: str) -> dict[str, float | int]:
    """``which`` is one of STATS; ``all`` gives every one. ``wall`` is first begin to last end."""
    if which not in STATS:
        raise ProfileError(f"--stat {which!r} is not a statistic; use one of {', '.join(STATS)}")
    computed = {
        **_duration_stats([r.duration_ns for r in rows]),
        "wall_ns": max(r.end_ns for r in rows) - min(r.begin_ns for r in rows),
    }
    names = [s for s in STATS if s != "all"] if which == "all" else [which]
    return {"count": len(rows), **{f"{s}_ns": computed[f"{s}_ns"] for s in names}}


def task_types(rows: list[Row]) -> list[dict]:
    """Every task type with its number of runs and its total time, by task_type_id."""
    out: dict[tuple[int, str], dict] = {}
    for r in rows:
        e = out.setdefault(
            (r.task_type_id, r.task_type_name),
            {"task_type_id": r.task_type_id, "task_type_name": r.task_type_name, "count": 0, "total_ns": 0},
        )
        e["count"] += 1
        e["total_ns"] += r.duration_ns
    return [out[k] for k in sorted(out)]


def per_layer(rows: list[Row]) -> list[dict]:
    """Time per layer, in the order the layers started: the sum of task durations (work) and the
    span from the first begin to the last end (how long the layer was in flight)."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.layer, []).append(r)
    out = []
    for layer, rs in groups.items():
        begin, end = min(r.begin_ns for r in rs), max(r.end_ns for r in rs)
        total = sum(r.duration_ns for r in rs)
        out.append(
            {
                "layer": layer,
                "task_type_name": rs[0].task_type_name,
                "task_type_id": rs[0].task_type_id,
                "count": len(rs),
                "total_ns": total,
                "avg_ns": round(total / len(rs), 3),
                "min_ns": min(r.duration_ns for r in rs),
                "max_ns": max(r.duration_ns for r in rs),
                "first_begin_ns": begin,
                "last_end_ns": end,
                "span_ns": end - begin,
            }
        )
    return sorted(out, key=lambda e: (e["first_begin_ns"], e["layer"]))


def per_phase(rows: list[PhaseRow]) -> list[dict]:
    """Per task type and phase, in phase order (the time after the last mark last): how many
    task runs had it and their min, median, avg, p90 and max durations."""
    groups: dict[tuple[int, str, int, str], list[int]] = {}
    for r in rows:
        groups.setdefault((r.task_type_id, r.task_type_name, r.phase_no, r.phase), []).append(r.duration_ns)
    order = sorted(groups, key=lambda k: (k[0], k[2] < 0, k[2]))
    return [
        {
            "task_type_id": tid,
            "task_type_name": name,
            "phase_no": no,
            "phase": phase,
            "count": len(groups[tid, name, no, phase]),
            **_duration_stats(groups[tid, name, no, phase]),
        }
        for tid, name, no, phase in order
    ]
