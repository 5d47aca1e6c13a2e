"""Phases a task body marks (Runtime::mark): decode attaches each mark to the task it falls in and
rejects marks no worker could have written; export writes them as slices inside the task's slice
and as rows of the phases CSV, named by the task's TaskSpec.phases; ``mpk-profile --phases`` gives
their statistics per task type."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from perfetto_reading import read_trace, slices

from mpk_runtime import contract
from mpk_runtime.cli.profile import main
from mpk_runtime.errors import ProfileError
from mpk_runtime.graph.compiled import CompiledGraph, LayerInfo, ScheduleInfo, TaskInfo
from mpk_runtime.profile.decode import decode
from mpk_runtime.profile.stats import PhaseRow, per_phase, read_phases_csv
from mpk_runtime.profile.trace import export, phase_name
from mpk_runtime.tasks import registry

T0 = 1_700_000_000_000_000_000
NAMES = registry.get("paged_attention").phases


@pytest.fixture
def attention_graph() -> CompiledGraph:
    """One paged_attention layer of two tasks (whose spec names its phases) and one noop task."""
    layers = (
        LayerInfo(0, "paged_attention_0", "paged_attention", 7, (1, 1, 2), {}, (), (), 0, 2, ()),
        LayerInfo(1, "noop_0", "noop", 1, (1, 1, 1), {}, (), (), 2, 1, ()),
    )
    tasks = tuple(
        TaskInfo(i, label, layer, 0, (0, 0, i), (), (), (), i % 2, None, ())
        for i, (label, layer) in enumerate([("paged_attention_0[0]", 0), ("paged_attention_0[1]", 0), ("noop_0[0]", 1)])
    )
    return CompiledGraph("sm90", 0, (), layers, (), tasks, ScheduleInfo("round_robin", 2, ((0, 2), (1,)), 2, ()))


def marked(recorder):
    """Worker 0: task 0 with marks 0..4 (a split that counted and stopped), then the noop task
    unmarked; worker 1: task 1 with marks 0..4 and the merger's rest."""
    dev = recorder(3 * 64, num_workers=2)
    dev.record(0, contract.PROF_TASK_BEGIN, 0, 0, T0)
    for phase, ts in enumerate([300, 900, 2900, 3500, 4000]):
        dev.mark(0, phase, T0 + ts)
    dev.record(0, contract.PROF_TASK_END, 0, 0, T0 + 4100)
    dev.task(0, task=2, begin=T0 + 4200, end=T0 + 4300)
    dev.record(1, contract.PROF_TASK_BEGIN, 1, 0, T0 + 10)
    for phase, ts in enumerate([310, 1000, 3000, 3600, 4200]):
        dev.mark(1, phase, T0 + ts)
    dev.record(1, contract.PROF_TASK_END, 1, 0, T0 + 6000)
    return dev


def test_decode_attaches_marks_to_their_task(recorder):
    p = decode(marked(recorder).tensor(), 2, 1)
    by_task = {s.task: s for s in p.tasks}
    assert by_task[0].marks == tuple((k, T0 + ts) for k, ts in enumerate([300, 900, 2900, 3500, 4000]))
    assert by_task[2].marks == () and by_task[2].phases() == []
    assert [s.event_no for s in p.tasks if s.worker == 0] == [0, 1]  # marks are not task runs
    phases = by_task[1].phases()
    assert [k for k, _, _ in phases] == [0, 1, 2, 3, 4, None]
    assert phases[0][1] == by_task[1].begin_ns and phases[-1][2] == by_task[1].end_ns
    assert all(a[2] == b[1] for a, b in zip(phases, phases[1:]))  # contiguous: they add up to the task
    assert not p.dangling and not p.dropped


def test_marks_of_a_task_whose_end_was_lost_go_with_it(recorder):
    dev = recorder(2 * (1 + 2 * 4), num_workers=1)  # a region per recorder: worker 0 holds 4 records
    dev.task(0, task=0, begin=T0, end=T0 + 10)
    dev.record(0, contract.PROF_TASK_BEGIN, 1, 0, T0 + 20)
    dev.mark(0, 0, T0 + 30)
    dev.record(0, contract.PROF_TASK_END, 1, 0, T0 + 40)  # dropped: the buffer is full
    p = decode(dev.tensor(), 1, 1)
    assert [s.task for s in p.tasks] == [0] and p.tasks[0].marks == ()
    assert [(d.edge, d.id) for d in p.dangling] == [("begin", 1)] and p.dropped == 1


@pytest.mark.parametrize(
    "records, match",
    [
        ([(contract.PROF_TASK_MARK, 0, 5)], r"worker 0: a phase mark \(phase 0, iteration 0, at \d+ ns\) outside a running task"),
        (
            [(contract.PROF_TASK_BEGIN, 3, 10), (contract.PROF_TASK_END, 3, 20), (contract.PROF_TASK_MARK, 1, 30)],
            "phase 1.* outside a running task",
        ),
        ([(contract.PROF_TASK_BEGIN, 3, 10), (contract.PROF_TASK_MARK, 0, 5)], "before the record preceding it"),
        (
            [(contract.PROF_TASK_BEGIN, 3, 10), (contract.PROF_TASK_MARK, 0, 30), (contract.PROF_TASK_MARK, 1, 20)],
            "before the record preceding it",
        ),
        (
            [(contract.PROF_TASK_BEGIN, 3, 10), (contract.PROF_TASK_MARK, 0, 30), (contract.PROF_TASK_END, 3, 20)],
            r"the end of task 3 \(iteration 0\) at \d+ ns precedes its phase mark",
        ),
    ],
)
def test_marks_no_worker_writes_are_corruption(recorder, records, match):
    dev = recorder(64, num_workers=1)
    for kind, id_, ts in records:
        dev.record(0, kind, id_, 0, T0 + ts)
    with pytest.raises(ProfileError, match=match):
        decode(dev.tensor(), 1, 1)


def test_a_mark_in_a_scheduler_region_is_from_another_abi(recorder):
    dev = recorder(64, num_workers=1)
    dev.record(1, contract.PROF_TASK_MARK, 0, 0, T0)
    with pytest.raises(ProfileError, match="scheduler 0: record kind 5 .* is not one a scheduler writes"):
        decode(dev.tensor(), 1, 1)


def test_phase_names():
    marks = ((0, 1), (1, 2))
    assert phase_name("paged_attention", 1, marks) == NAMES[1]
    assert phase_name("paged_attention", None, marks) == NAMES[2]  # the time after mark 1
    assert phase_name("paged_attention", None, ((4, 1),)) == NAMES[5]  # a split that merged
    assert phase_name("paged_attention", None, ((3, 1),)) == NAMES[4]
    assert phase_name("noop", 2, marks) == "phase 2"  # a spec without names
    assert phase_name("noop", None, marks) == "after phase 1"
    assert phase_name("no_such_task", 0, marks) == "phase 0"


def test_export_writes_phase_slices_and_rows(recorder, attention_graph, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = export(decode(marked(recorder).tensor(), 2, 1), attention_graph, tmp_path / "run")
    rows = read_phases_csv(paths["phases"])
    assert {r.event_no for r in rows if r.worker == 0} == {0}  # the noop run has no phases
    worker1 = [r for r in rows if r.worker == 1]
    assert [(r.phase_no, r.phase) for r in worker1] == [
        (0, NAMES[0]),
        (1, NAMES[1]),
        (2, NAMES[2]),
        (3, NAMES[3]),
        (4, NAMES[4]),
        (-1, NAMES[5]),
    ]
    assert [r.duration_ns for r in worker1] == [300, 690, 2000, 600, 600, 1800]
    assert sum(r.duration_ns for r in worker1) == 6000 - 10  # the task's duration
    _, _, events = read_trace(paths["trace"])
    on_worker1 = [s for s in slices(events) if s["track"] == "worker 1"]
    task = next(s for s in on_worker1 if s["name"] == "paged_attention_0[1]")
    inner = sorted((s for s in on_worker1 if s is not task), key=lambda s: s["ts"])
    assert [s["name"] for s in inner] == list(NAMES)
    assert [s["notes"].get("phase_no") for s in inner] == [0, 1, 2, 3, 4, None]  # the rest has no mark
    assert all(task["ts"] <= s["ts"] and s["ts"] + s["dur"] <= task["ts"] + task["dur"] for s in inner)
    assert all(s["categories"] == ["paged_attention"] for s in inner)


def test_per_phase_statistics_and_the_cli(capsys, recorder, attention_graph, tmp_path):
    paths = export(decode(marked(recorder).tensor(), 2, 1), attention_graph, tmp_path / "run")
    code = main([str(paths["csv"]), "paged_attention", "--phases"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    got = [(e["phase_no"], e["phase"], e["count"], e["min_ns"], e["median_ns"], e["max_ns"]) for e in out["phases"]]
    assert got == [
        (0, NAMES[0], 2, 300, 300, 300),
        (1, NAMES[1], 2, 600, 645, 690),
        (2, NAMES[2], 2, 2000, 2000, 2000),
        (3, NAMES[3], 2, 600, 600, 600),
        (4, NAMES[4], 2, 500, 550, 600),
        (-1, NAMES[5], 2, 100, 950, 1800),  # the time after the last mark comes last
    ]
    assert main([str(paths["csv"]), "--phases"]) == 0  # every task type that marks phases
    assert len(json.loads(capsys.readouterr().out)["phases"]) == 6


def test_per_phase_orders_by_task_type_then_phase():
    rows = [
        PhaseRow(2, "b", "b_0", 0, 0, -1, "rest", 0, 5, 5),
        PhaseRow(2, "b", "b_0", 0, 0, 1, "one", 0, 5, 5),
        PhaseRow(1, "a", "a_0", 0, 1, 0, "zero", 0, 7, 7),
    ]
    assert [(e["task_type_name"], e["phase_no"]) for e in per_phase(rows)] == [("a", 0), ("b", 1), ("b", -1)]


@pytest.mark.parametrize(
    "setup, argv, match",
    [
        ("none", ["{csv}", "--phases"], r"no phases CSV next to it \(run.phases.csv\)"),
        ("unmarked", ["{csv}", "--phases"], "no task type marks phases in this profile; a body marks them with Runtime::mark"),
        # noop runs, unmarked: it is in the profile (this had said it was not), and marks no phases
        ("marked", ["{csv}", "noop", "--phases"], r"'noop' marks no phases in this profile .*; these do: paged_attention"),
        ("marked", ["{csv}", "linear", "--phases"], r"no task type 'linear' in this profile; it has: .*noop"),
    ],
)
def test_phase_query_errors(capsys, recorder, attention_graph, tmp_path, setup, argv, match):
    dev = marked(recorder) if setup == "marked" else recorder(64, num_workers=2)
    if setup != "marked":
        dev.task(0, task=2, begin=T0, end=T0 + 5)
    paths = export(decode(dev.tensor(), 2, 1), attention_graph, tmp_path / "run")
    if setup == "none":
        paths["phases"].unlink()
    code = main([a.format(csv=paths["csv"]) for a in argv])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and list(out) == ["error"]
    assert re.search(match, out["error"]), out["error"]


def test_a_malformed_phases_csv_is_named(capsys, recorder, attention_graph, tmp_path):
    paths = export(decode(marked(recorder).tensor(), 2, 1), attention_graph, tmp_path / "run")
    paths["phases"].write_text("task_type_id,phase\n1,x\n")
    code = main([str(paths["csv"]), "--phases"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "run.phases.csv: not a phases CSV; the header must be task_type_id," in out["error"], out
