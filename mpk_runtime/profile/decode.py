"""Profiler buffer -> task spans (trace.py writes them as a Perfetto trace and a CSV).

The device writes the buffer as csrc/runtime/profiler.cuh describes: one equal region per recorder
(workers first, then schedulers), each ``[attempted][record 0][record 1]...`` with a record being
``(timestamp_ns, id | kind << 32 | iteration << 40)``. A region that filled up keeps its first
records and counts the rest in ``attempted``, so what was lost is known exactly.

``decode`` pairs begins with ends. A begin whose end was lost (or an end whose begin was) is
reported as *dangling*, never given a made-up duration; lost records are reported as *dropped*.
The phase marks a task body records (``Runtime::mark``) go with the task they fall in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import contract
from ..errors import ProfileError

MASK64 = (1 << 64) - 1
RECORD_WORDS = 2  # (timestamp, id | kind | iteration)
PREPARE = "prepare_next_batch"
_PAIRS = {  # begin kind -> (end kind, what it measures, recorded by workers?)
    contract.PROF_TASK_BEGIN: (contract.PROF_TASK_END, "task", True),
    contract.PROF_PREPARE_BEGIN: (contract.PROF_PREPARE_END, PREPARE, False),
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
    marks: tuple[tuple[int, int], ...] = ()  # (phase number, timestamp_ns) of the body's marks, in order

    def phases(self) -> list[tuple[int | None, int, int]]:
        """The body's phases as (phase number, begin_ns, end_ns): phase k ends at mark k (it began
        at the previous mark, or the task's begin); the time after the last mark is phase None.
        Empty for a body that marks nothing."""
        if not self.marks:
            return []
        out: list[tuple[int | None, int, int]] = []
        begin = self.begin_ns
        for phase, ts in self.marks:
            out.append((phase, begin, ts))
            begin = ts
        out.append((None, begin, self.end_ns))
        return out


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
        return (
            f"incomplete profile: {self.dropped} records dropped because the profiler buffer was full"
            f"{f' ({where})' if where else ''}, {len(self.dangling)} dangling begin/end records left "
            f"unpaired{fix}"
        )


def decode(buffer: Any, num_workers: int, num_schedulers: int) -> Profile:
    """Split the buffer into recorder regions and pair every begin with its end, in record order."""
    if num_workers < 1 or num_schedulers < 1:
        raise ProfileError(f"num_workers={num_workers} and num_schedulers={num_schedulers} must both be >= 1")
    words = _words(buffer)
    recorders = num_workers + num_schedulers
    size = len(words) // recorders
    if size < 1 + RECORD_WORDS:
        raise ProfileError(
            f"a profiler buffer of {len(words)} entries cannot hold one record for each of {recorders} "
            f"recorders ({num_workers} workers + {num_schedulers} schedulers); give at least "
            f"{recorders * (1 + RECORD_WORDS)} entries"
        )
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
            raise ProfileError(
                f"the profiler buffer must be a 1-D uint64 tensor, got {buffer.dtype} of shape {tuple(buffer.shape)}"
            )
        buffer = buffer.detach().cpu().tolist()
    return [int(v) & MASK64 for v in buffer]  # int64 views show the high bit as a sign


def _pair(
    region: int,
    num_workers: int,
    records: Sequence[tuple[int, int]],
    tasks: list[TaskSpan],
    prepare: list[PrepareSpan],
    dangling: list[Dangling],
) -> None:
    is_worker = region < num_workers
    who = f"worker {region}" if is_worker else f"scheduler {region - num_workers}"
    open_: tuple[int, int, int, int] | None = None  # (begin kind, id, iteration, timestamp)
    marks: list[tuple[int, int]] = []  # of the open task
    event_no = 0

    def lost(edge: str, kind: int, id_: int, iteration: int, ts: int) -> None:
        what = _PAIRS[kind if edge == "begin" else _ENDS[kind]][1]
        dangling.append(Dangling(who, edge, what, id_, iteration, ts))

    for ts, word in records:
        id_, kind, iteration = word & 0xFFFFFFFF, (word >> 32) & 0xFF, word >> 40
        if kind == contract.PROF_TASK_MARK and is_worker:
            # A worker records a body's marks between the task's begin and end, so a mark with no
            # task open, or before the last record, means the buffer is not what a worker wrote.
            if open_ is None or open_[0] != contract.PROF_TASK_BEGIN or ts < (marks[-1][1] if marks else open_[3]):
                raise ProfileError(
                    f"{who}: a phase mark (phase {id_}, iteration {iteration}, at {ts} ns) outside a running task "
                    f"or before the record preceding it; the buffer is corrupt"
                )
            marks.append((id_, ts))
            continue
        begin_kind = kind if kind in _PAIRS else _ENDS.get(kind)
        if begin_kind is None or _PAIRS[begin_kind][2] != is_worker:
            raise ProfileError(
                f"{who}: record kind {kind} (word 0x{word:016x}) is not one a {who.split()[0]} writes; "
                f"the buffer does not match this decoder (MPK_PROF_* in csrc/runtime/abi.h)"
            )
        if kind in _PAIRS:
            if open_ is not None:
                lost("begin", *open_)
            open_, marks = (kind, id_, iteration, ts), []
            continue
        if open_ is None or open_[:3] != (begin_kind, id_, iteration):
            if open_ is not None:
                lost("begin", *open_)
            lost("end", kind, id_, iteration, ts)
            open_, marks = None, []
            continue
        begin = open_[3]
        open_ = None
        if ts < begin:
            raise ProfileError(
                f"{who}: the end of {_PAIRS[begin_kind][1]} {id_} (iteration {iteration}) at {ts} ns "
                f"precedes its begin at {begin} ns; the buffer is corrupt"
            )
        if is_worker:
            if marks and ts < marks[-1][1]:
                raise ProfileError(
                    f"{who}: the end of task {id_} (iteration {iteration}) at {ts} ns precedes its phase mark at "
                    f"{marks[-1][1]} ns; the buffer is corrupt"
                )
            tasks.append(TaskSpan(id_, iteration, region, event_no, begin, ts, tuple(marks)))
            event_no += 1
            marks = []
        else:
            prepare.append(PrepareSpan(id_, region - num_workers, begin, ts))  # id: the full 32-bit iteration
    if open_ is not None:
        lost("begin", *open_)
