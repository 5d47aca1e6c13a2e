"""Hang and error reports: the watchdog record built from the workers' status and progress, its
message (the stuck task, its event, the producers that finished and those still missing), and the
exceptions made from a launch's device status."""

from __future__ import annotations

import pytest
import torch
from cpu_helpers import GraphBuilder, compile_graph

from mpk_runtime import contract
from mpk_runtime.codegen import abi
from mpk_runtime.errors import KernelError, WatchdogError
from mpk_runtime.run import diagnostics

NOT_WAITING = [-1, -1]  # 0xffffffff: the device's "no task"


def fan_in_view(width: int = 2) -> diagnostics.ScheduleView:
    """``width`` producers (noop_0) and one consumer (noop_1, the last task) reading all of them,
    dealt round robin over ``width`` workers, so the consumer waits on one event of ``width``."""
    g = GraphBuilder()
    a, b, c = g.tensor("a", rows=width), g.tensor("b", rows=width), g.tensor("c", rows=1)
    g.noop([a], [b], width)
    g.noop([b], [c], 1)
    return diagnostics.ScheduleView.of(compile_graph(g.graph, width))


def record(view, iteration: int, lid: int, status: list[list[int]], progress: list[int]) -> list[dict]:
    return diagnostics.watchdog_record(
        view, iteration, lid, torch.tensor(status, dtype=torch.int32), torch.tensor(progress, dtype=torch.int64)
    )


def test_view_of_the_fan_in():
    view = fan_in_view()
    assert view.labels == ["noop_0[0]", "noop_0[1]", "noop_1[0]"]
    assert view.queues == [[0, 2], [1]] and view.wait_event == [None, None, 0] and view.producers == [[0, 1]]


def test_record_names_the_stuck_task_its_event_and_the_missing_producer():
    rec = record(fan_in_view(), iteration=0, lid=1, status=[[2, 1], NOT_WAITING], progress=[1, 0])
    assert rec == [
        {
            "worker": 0,
            "task": 2,
            "label": "noop_1[0]",
            "event": 0,
            "producers": 2,
            "finished": 1,
            "missing": [{"task": 1, "label": "noop_0[1]", "worker": 1}],
        }
    ]


def test_progress_of_earlier_iterations_is_discounted():
    """worker_progress counts the whole launch: in iteration 3, worker 0 has 3 * 2 + 1 tasks done."""
    rec = record(fan_in_view(), iteration=3, lid=1, status=[[2, 1], NOT_WAITING], progress=[7, 3])
    assert rec[0]["finished"] == 1 and [m["task"] for m in rec[0]["missing"]] == [1]


def test_status_of_another_launch_is_ignored():
    assert record(fan_in_view(), iteration=0, lid=2, status=[[2, 1], NOT_WAITING], progress=[1, 0]) == []


def test_no_worker_waiting_gives_an_empty_record():
    assert record(fan_in_view(), iteration=0, lid=1, status=[NOT_WAITING, NOT_WAITING], progress=[0, 0]) == []


def test_message_names_task_event_and_producers():
    rec = record(fan_in_view(), iteration=0, lid=1, status=[[2, 1], NOT_WAITING], progress=[1, 0])
    text = diagnostics.format_watchdog(rec, iteration=0, idle_ns=5_200_000_000, timeout=5.0)
    assert text.splitlines() == [
        "watchdog: nothing progressed for 5.20 s (watchdog_timeout=5.0 s) in iteration 0; the launch was stopped.",
        "  worker 0 waits in task 2 noop_1[0] on event 0: 1 of 2 producers finished; still missing task 1 noop_0[1] (worker 1)",
    ]


def test_message_when_every_producer_finished():
    """A count that cannot be reached (e.g. a corrupted wait_count): the report says so."""
    rec = record(fan_in_view(), iteration=0, lid=1, status=[[2, 1], NOT_WAITING], progress=[1, 1])
    assert rec[0]["missing"] == [] and rec[0]["finished"] == 2
    text = diagnostics.format_watchdog(rec, iteration=0, idle_ns=6_000_000_000, timeout=5.0)
    assert "2 of 2 producers finished; all producers finished, yet the count is short: the event's target is unreachable" in text


def test_message_caps_the_missing_list():
    view = fan_in_view(width=8)
    stuck = len(view.labels) - 1  # the consumer, on worker 0 after producer 0
    rec = record(view, iteration=0, lid=1, status=[[stuck, 1]] + [NOT_WAITING] * 7, progress=[1] + [0] * 7)
    assert rec[0]["finished"] == 1 and len(rec[0]["missing"]) == 7
    text = diagnostics.format_watchdog(rec, iteration=0, idle_ns=10**10, timeout=5.0)
    assert "still missing task 1 noop_0[1] (worker 1), " in text and "and 1 more" in text
    assert "task 7 noop_0[7]" not in text


def test_message_without_a_waiting_worker():
    text = diagnostics.format_watchdog([], iteration=2, idle_ns=10**10, timeout=5.0)
    assert "in iteration 2" in text
    assert "no worker was waiting on an event: a task body did not finish (or never started)." in text


@pytest.mark.parametrize(("index", "lid"), [(1, 1), (2, 2), (0xFFFFFFFE, 0xFFFFFFFE), (0xFFFFFFFF, 1)])
def test_launch_ids_wrap_and_are_never_zero(index, lid):
    assert diagnostics.launch_id(index) == lid


def status(code: int, iterations: int = 0, detail: tuple[int, ...] = (0, 0, 0, 0)) -> abi.MpkStatus:
    st = abi.MpkStatus(code=code, iterations=iterations, idle_ns=7_000_000_000)
    for i, v in enumerate(detail):
        st.detail[i] = v
    return st


def test_watchdog_status_becomes_a_watchdog_error_with_the_record():
    rec = [{"worker": 0}]
    err = diagnostics.status_error(status(contract.STATUS_WATCHDOG), 3, lambda st: (f"idle {st.idle_ns}", rec))
    assert isinstance(err, WatchdogError) and err.record == rec
    assert str(err) == "launch 3: idle 7000000000"


def test_pages_exhausted_status():
    err = diagnostics.status_error(status(contract.STATUS_PAGES_EXHAUSTED, 4, (2, 5, 3)), 1, None)
    assert type(err) is KernelError
    assert str(err) == (
        "launch 1: prepare_next_batch ran out of KV pages in iteration 4: request 2 needs 5 pages and "
        "holds 3, and the page queue is empty; raise max_num_pages"
    )


def test_skipped_and_unknown_status():
    assert "launch 2 did not run: an earlier launch stopped half-way" in str(
        diagnostics.status_error(status(contract.STATUS_SKIPPED), 2, None)
    )
    assert str(diagnostics.status_error(status(99), 5, None)) == "launch 5 ended with unknown status 99"


def test_end_of_task_graph_bookkeeping_that_holds_is_silent():
    # 3 workers with tasks, 5 iterations over two launches; the last launch ran 2 of them
    assert diagnostics.end_of_task_graph_error(3, end_count=15, iterations_total=5, seen=15, iterations=2) is None
    assert diagnostics.end_of_task_graph_error(3, end_count=0, iterations_total=0, seen=0, iterations=0) is None


def test_a_controller_that_passed_end_of_task_graph_early_is_named():
    message = diagnostics.end_of_task_graph_error(131, end_count=131, iterations_total=1, seen=130, iterations=1)
    assert message == (
        "END_OF_TASK_GRAPH fired early: the controller passed it after 130 of the 131 signals of the launch's last "
        "iteration (1 worker(s) still running their last task) (csrc/runtime/scheduler.cuh)"
    )


def test_a_worker_signalling_twice_is_named():
    message = diagnostics.end_of_task_graph_error(4, end_count=9, iterations_total=2, seen=9, iterations=2)
    assert message.startswith("END_OF_TASK_GRAPH bookkeeping: the workers signalled 9 drained queues in 2 iterations")


def test_the_status_mirror_has_the_controller_s_count():
    assert abi.MpkStatus.end_seen.offset == 32 and abi.MpkStatus.end_seen.size == 8
