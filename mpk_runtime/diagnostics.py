"""Turning a launch's device status into an exception that says what went wrong, where."""

from __future__ import annotations

import torch

from . import abi
from .errors import KernelError, WatchdogError
from .graph import TaskGraph
from .schedule import Schedule


def launch_id(launch_index: int) -> int:
    """The launch id the module gave its ``launch_index``-th launch (1-based), see mpk_launch."""
    return (launch_index - 1) % 0xFFFFFFFE + 1


def watchdog_record(graph: TaskGraph, schedule: Schedule, iteration: int, lid: int,
                    worker_status: torch.Tensor, worker_progress: torch.Tensor) -> list[dict]:
    """For every worker stuck in a wait: the task, its event, and which producers had not finished."""
    status = worker_status.cpu().tolist()
    progress = worker_progress.cpu().tolist()
    queue_pos = {t: i for q in schedule.queues for i, t in enumerate(q)}
    done_in_iteration = [progress[w] - iteration * len(q) for w, q in enumerate(schedule.queues)]
    record = []
    for w, (task, lid_w) in enumerate(status):
        task &= 0xFFFFFFFF
        if task == abi.NO_EVENT or (lid_w & 0xFFFFFFFF) != lid or task >= len(graph.tasks):
            continue
        ev = schedule.events[schedule.wait_event[task]]
        missing = [p for p in ev.producers if done_in_iteration[schedule.worker_of[p]] <= queue_pos[p]]
        record.append({
            "worker": w, "task": task, "label": graph.tasks[task].label, "event": ev.id,
            "producers": len(ev.producers), "finished": len(ev.producers) - len(missing),
            "missing": [{"task": p, "label": graph.tasks[p].label, "worker": schedule.worker_of[p]} for p in missing],
        })
    return record


def format_watchdog(record: list[dict], idle_ns: int, timeout: float, iteration: int) -> str:
    lines = [
        f"watchdog: nothing progressed for {idle_ns / 1e9:.2f} s (watchdog_timeout={timeout} s) in iteration "
        f"{iteration}; the launch was stopped."
    ]
    if not record:
        lines.append("  no worker was waiting on an event: a task body did not finish (or never started).")
    for r in record:
        miss = ", ".join(f"task {m['task']} {m['label']} (worker {m['worker']})" for m in r["missing"][:6])
        more = f" and {len(r['missing']) - 6} more" if len(r["missing"]) > 6 else ""
        why = f"; still missing {miss}{more}" if r["missing"] else (
            "; all producers finished, yet the count is short: the event's target is unreachable")
        lines.append(
            f"  worker {r['worker']} waits in task {r['task']} {r['label']} on event {r['event']}: "
            f"{r['finished']} of {r['producers']} producers finished{why}"
        )
    return "\n".join(lines)


def status_error(st: abi.MpkStatus, launch_index: int, message_for_watchdog) -> KernelError:
    if st.code == abi.STATUS_WATCHDOG:
        message, record = message_for_watchdog(st)
        return WatchdogError(f"launch {launch_index}: {message}", record)
    if st.code == abi.STATUS_PAGES_EXHAUSTED:
        req, need, have = st.detail[0], st.detail[1], st.detail[2]
        return KernelError(
            f"launch {launch_index}: prepare_next_batch ran out of KV pages in iteration {st.iterations}: request "
            f"{req} needs {need} pages and holds {have}, and the page queue is empty; raise max_num_pages"
        )
    if st.code == abi.STATUS_SKIPPED:
        return KernelError(
            f"launch {launch_index} did not run: an earlier launch stopped half-way; its error was reported first"
        )
    return KernelError(f"launch {launch_index} ended with unknown status {st.code}")
