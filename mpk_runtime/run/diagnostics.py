"""Turning a launch's device status into an exception that says what went wrong, where."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import contract
from ..errors import KernelError, WatchdogError
from ..graph.compiled import CompiledGraph
from ..tasks import registry


def launch_id(launch_index: int) -> int:
    """The launch id the module gave its ``launch_index``-th launch (1-based), see mpk_launch."""
    return (launch_index - 1) % 0xFFFFFFFE + 1


@dataclass(frozen=True)
class ScheduleView:
    """What a hang report needs to know about a scheduled graph, from live objects or from JSON."""

    labels: list[str]
    queues: list[list[int]]
    worker_of: list[int]
    wait_event: list[int | None]
    producers: list[list[int]]  # per event

    @classmethod
    def of(cls, graph: CompiledGraph) -> ScheduleView:
        s = graph.schedule
        return cls(
            [t.label for t in graph.tasks],
            [list(q) for q in s.queues],
            [t.worker for t in graph.tasks],
            [t.wait_event for t in graph.tasks],
            [list(e.producers) for e in s.events],
        )


def watchdog_record(
    view: ScheduleView,
    iteration: int,
    lid: int,
    worker_status: torch.Tensor,
    worker_progress: torch.Tensor,
    last_signal: Callable[[int, int], int] | None = None,
) -> list[dict]:
    """For every worker stuck in a wait: the task, and the event and the producers that had not
    finished, or, in a cross-rank task, the rank whose signal is missing (``last_signal(task, rank)``:
    the epoch of that rank's last signal to the task, when the heap can be read)."""
    status = worker_status.cpu().tolist()
    progress = worker_progress.cpu().tolist()
    queue_pos = {t: i for q in view.queues for i, t in enumerate(q)}
    done_in_iteration = [progress[w] - iteration * len(q) for w, q in enumerate(view.queues)]
    record: list[dict] = []
    for w, row in enumerate(status):
        task, lid_w = row[0] & 0xFFFFFFFF, row[1] & 0xFFFFFFFF
        if task == contract.NO_EVENT or lid_w != lid or task >= len(view.labels):
            continue
        peer = row[2] & 0xFFFFFFFF if len(row) > 2 else contract.NO_RANK
        if peer != contract.NO_RANK:
            entry = {"worker": w, "task": task, "label": view.labels[task], "rank": peer}
            if last_signal is not None:
                entry["last_signal"] = last_signal(task, peer)
            record.append(entry)
            continue
        event = view.wait_event[task]
        producers = view.producers[event]
        missing = [p for p in producers if done_in_iteration[view.worker_of[p]] <= queue_pos[p]]
        record.append(
            {
                "worker": w,
                "task": task,
                "label": view.labels[task],
                "event": event,
                "producers": len(producers),
                "finished": len(producers) - len(missing),
                "missing": [{"task": p, "label": view.labels[p], "worker": view.worker_of[p]} for p in missing],
            }
        )
    return record


def format_watchdog(record: list[dict], iteration: int, idle_ns: int | None = None, timeout: float = 0.0) -> str:
    """The hang report; ``idle_ns`` None: found by the emulator (a deadlock), not by the device."""
    if idle_ns is None:
        head = f"emulated run deadlocked in iteration {iteration}: no worker can start its next task."
    else:
        head = (
            f"watchdog: nothing progressed for {idle_ns / 1e9:.2f} s (watchdog_timeout={timeout} s) in iteration "
            f"{iteration}; the launch was stopped."
        )
    lines = [head]
    if not record:
        lines.append("  no worker was waiting on an event: a task body did not finish (or never started).")
    for r in record:
        if "rank" in r:
            lines.append(_peer_line(r))
            continue
        miss = ", ".join(f"task {m['task']} {m['label']} (worker {m['worker']})" for m in r["missing"][:6])
        more = f" and {len(r['missing']) - 6} more" if len(r["missing"]) > 6 else ""
        why = (
            f"; still missing {miss}{more}"
            if r["missing"]
            else ("; all producers finished, yet the count is short: the event's target is unreachable")
        )
        lines.append(
            f"  worker {r['worker']} waits in task {r['task']} {r['label']} on event {r['event']}: "
            f"{r['finished']} of {r['producers']} producers finished{why}"
        )
    return "\n".join(lines)


def _peer_line(r: dict) -> str:
    line = f"  worker {r['worker']} waits in task {r['task']} {r['label']} for rank {r['rank']}, whose part of it has not come"
    if "last_signal" in r:
        last = r["last_signal"]
        line += (
            f" (rank {r['rank']} has sent this task nothing since the kernel was built: it has not reached it, or not launched)"
            if last == 0
            else f" (the last rank {r['rank']} sent is for iteration {last - 1}, counting every launch of this kernel)"
        )
    return line


def task_error_message(graph: CompiledGraph, task: int, code: int, value: int) -> str:
    """What a task's Runtime::fail report means, in the words of the task's spec."""
    if not 0 <= task < len(graph.tasks):
        return f"task {task} (not in this graph) failed with error code {code} (value {value})"
    t = graph.tasks[task]
    layer = graph.layer_of(t)
    what = registry.get(layer.task).error_message(code, value, layer, {x.name: x for x in graph.tensors})
    return f"task {task} {t.label} failed: {what}"


def status_error(st, launch_index: int, message_for_watchdog, message_for_task=None) -> KernelError:
    if st.code == contract.STATUS_TASK_ERROR and message_for_task is not None:
        return KernelError(f"launch {launch_index}, iteration {st.iterations - 1}: {message_for_task(st)}")
    if st.code == contract.STATUS_WATCHDOG:
        message, record = message_for_watchdog(st)
        return WatchdogError(f"launch {launch_index}: {message}", record)
    if st.code == contract.STATUS_PAGES_EXHAUSTED:
        req, need, have = st.detail[0], st.detail[1], st.detail[2]
        return KernelError(
            f"launch {launch_index}: prepare_next_batch ran out of KV pages in iteration {st.iterations}: request "
            f"{req} needs {need} pages and holds {have}, and the page queue is empty; raise max_num_pages"
        )
    if st.code == contract.STATUS_SKIPPED:
        return KernelError(f"launch {launch_index} did not run: an earlier launch stopped half-way; its error was reported first")
    return KernelError(f"launch {launch_index} ended with unknown status {st.code}")


def end_of_task_graph_error(trigger_count: int, end_count: int, iterations_total: int, seen: int, iterations: int) -> str | None:
    """The END_OF_TASK_GRAPH bookkeeping after a launch that ended well, or None when it holds. Each of
    the ``trigger_count`` workers with tasks signals once per iteration, so at rest ``end_count`` is
    trigger_count x iterations_total; and the controller may pass an iteration's END_OF_TASK_GRAPH
    only once all of them signalled, so ``seen``, the count it read when it passed the last one (of
    ``iterations`` in the launch), is at least that. Passing early lets the next prepare_next_batch
    (or the end of the launch) overtake a worker still running its last task: in a test-mode launch
    that changes no output, which is why the host checks it here."""
    expected = trigger_count * iterations_total
    if end_count != expected:
        return (
            f"END_OF_TASK_GRAPH bookkeeping: the workers signalled {end_count} drained queues in "
            f"{iterations_total} iterations of {trigger_count} workers with tasks, not {expected}: a worker signals "
            f"other than once per iteration (csrc/runtime/worker.cuh)"
        )
    if iterations > 0 and seen < expected:
        return (
            f"END_OF_TASK_GRAPH fired early: the controller passed it after {seen} of the {expected} signals of "
            f"the launch's last iteration ({expected - seen} worker(s) still running their last task) "
            f"(csrc/runtime/scheduler.cuh)"
        )
    return None
