"""bench/span_phases.py: where one copy's span goes, from its profiled launches' rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mpk_runtime.profile.stats import PhaseRow, Row

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def sp(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import span_phases

    yield span_phases
    sys.modules.pop("span_phases", None)


def task(worker: int, begin: int, marks: list[tuple[str, int]], end: int) -> tuple[Row, list[PhaseRow]]:
    """One task run on `worker` (event 0): its row, and a phase row for each mark (name, time) and
    for the time after the last, named "tail"."""
    row = Row(7, "paged_attention", "attn", worker, 0, begin, end, end - begin)
    phases, at = [], begin
    for no, (name, t) in enumerate([*marks, ("tail", end)]):
        phases.append(PhaseRow(7, "paged_attention", "attn", worker, 0, no if name != "tail" else -1, name, at, t, t - at))
        at = t
    return row, phases


def launch(*tasks: tuple[Row, list[PhaseRow]]) -> tuple[list[Row], list[PhaseRow]]:
    return [t[0] for t in tasks], [p for t in tasks for p in t[1]]


def test_the_span_is_the_chain_of_the_task_that_ends_last(sp):
    run = launch(
        task(0, 1_000, [("keys", 5_000)], 6_000),
        task(1, 1_200, [("keys", 7_000)], 11_000),  # the merger
        task(2, 1_100, [("keys", 4_000)], 5_000),
    )
    s = sp.span_phases([run])
    assert s["span_us"] == pytest.approx(10.0)
    assert s["tasks"] == 3 and s["launches"] == 1
    assert s["begin_max_us"] == pytest.approx(0.2)
    assert s["end_p50_us"] == pytest.approx(5.0)  # task ends 5, 4, 10 us after the first begin
    assert s["end_p90_us"] == pytest.approx(10.0)
    assert s["phase_median_us"] == pytest.approx({"keys": 4.0, "tail": 1.0})  # keys 4.0, 5.8, 2.9; tails 1, 4, 1
    assert s["last_task_phase_ends_us"] == [("keys", pytest.approx(6.0)), ("tail", pytest.approx(10.0))]


def test_launches_give_medians_and_the_median_launch_its_last_task(sp):
    def one(end: int):
        return launch(task(0, 0, [("keys", end // 2)], end), task(1, 0, [("keys", 1_000)], 2_000))

    s = sp.span_phases([one(10_000), one(30_000), one(20_000)])
    assert s["span_us"] == pytest.approx(20.0)
    assert s["last_task_phase_ends_us"] == [("keys", pytest.approx(10.0)), ("tail", pytest.approx(20.0))]
    # per launch, the median of the two tasks' keys phases: 3.0, 8.0, 5.5 us
    assert s["phase_median_us"]["keys"] == pytest.approx(5.5)


def test_a_phase_only_some_launches_have_is_the_median_of_those(sp):
    plain = launch(task(0, 0, [("keys", 1_000)], 2_000))
    merged = launch(task(0, 0, [("keys", 1_000), ("merged", 4_000)], 5_000))
    s = sp.span_phases([plain, merged, merged])
    assert s["phase_median_us"]["merged"] == pytest.approx(3.0)
    assert list(s["phase_median_us"]) == ["keys", "tail", "merged"]


@pytest.mark.parametrize("runs", [[], [([], [])]], ids=["no launch", "a launch without tasks"])
def test_nothing_to_measure_is_refused(sp, runs):
    with pytest.raises(ValueError, match="span_phases needs at least one launch, each with at least one task row"):
        sp.span_phases(runs)


def test_the_printed_lines_carry_the_figures(sp):
    s = sp.span_phases([launch(task(0, 0, [("keys streamed", 3_000)], 4_500), task(1, 0, [("keys streamed", 1_000)], 2_000))])
    lines = sp.describe("decode B=1 S=8192", s)
    assert lines[0].startswith("decode B=1 S=8192: span 4.50 us over 2 tasks (median of 1 launches)")
    assert "task ends: median 3.25, p90 4.50, last 4.50" in lines[0]
    assert lines[1] == "  phases, median us: keys streamed 2.00; tail 1.25"
    assert lines[2] == "  the last task's phase ends, us from the span's start: keys streamed 3.00; tail 4.50"
