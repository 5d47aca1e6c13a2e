"""export(): the CSV has one row per complete task span with names from the graph; the Perfetto
trace, read back with the perfetto package's own protos, has one track per worker plus the
controller's, a slice per span with its task id and layer, and, when records were lost, the
counts on a "profiler" track and in a ProfilerWarning."""

from __future__ import annotations

import csv
import warnings

import pytest
from perfetto_reading import read_trace, slices

from mpk_runtime.graph.compiled import CompiledGraph
from mpk_runtime.profile.decode import ProfilerWarning, decode
from mpk_runtime.profile.stats import COLUMNS, ProfileError, read_csv
from mpk_runtime.profile.trace import export

T0 = 1_700_000_000_000_000_000


@pytest.fixture
def profile(recorder):
    dev = recorder(3 * 64, num_workers=2)
    dev.prepare(0, T0, T0 + 100)
    dev.task(0, task=0, begin=T0 + 200, end=T0 + 1200)
    dev.task(1, task=1, begin=T0 + 210, end=T0 + 1010)
    dev.task(0, task=2, begin=T0 + 1200, end=T0 + 1250)  # starts when task 0 ends: same timestamp
    dev.task(1, task=3, begin=T0 + 1300, end=T0 + 1300)  # zero duration (timer resolution)
    dev.prepare(1, T0 + 1400, T0 + 1450)
    return decode(dev.tensor(), 2, 1)


def test_csv_rows(profile, graph, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete profile warns about nothing
        paths = export(profile, graph, tmp_path / "run")
    assert paths == {"trace": tmp_path / "run.perfetto-trace", "csv": tmp_path / "run.csv", "phases": tmp_path / "run.phases.csv"}
    with open(paths["csv"], newline="") as f:
        rows = list(csv.reader(f))
    assert (
        tuple(rows[0])
        == COLUMNS
        == ("task_type_id", "task_type_name", "layer", "worker", "event_no", "begin_ns", "end_ns", "duration_ns")
    )
    assert rows[1:] == [  # in order of begin
        ["2", "rmsnorm", "rmsnorm_0", "0", "0", str(T0 + 200), str(T0 + 1200), "1000"],
        ["2", "rmsnorm", "rmsnorm_0", "1", "0", str(T0 + 210), str(T0 + 1010), "800"],
        ["1", "noop", "noop_0", "0", "1", str(T0 + 1200), str(T0 + 1250), "50"],
        ["1", "noop", "noop_1", "1", "1", str(T0 + 1300), str(T0 + 1300), "0"],
    ]
    assert len(read_csv(paths["csv"])) == 4  # and the CLI's reader accepts it
    assert not list(tmp_path.glob("*.tmp"))


def test_trace_tracks_and_slices(profile, graph, tmp_path):
    names, parents, events = read_trace(export(profile, graph, tmp_path / "run")["trace"])
    root = next(u for u, p in parents.items() if p is None)
    assert names[root] == f"mpk {tmp_path / 'run'}"
    assert sorted(n for u, n in names.items() if u != root) == ["controller: prepare_next_batch", "worker 0", "worker 1"]
    assert all(p == root for u, p in parents.items() if u != root)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    got = sorted((s["track"], s["ts"] - T0, s["dur"], s["name"]) for s in slices(events))
    assert got == [
        ("controller: prepare_next_batch", 0, 100, "prepare_next_batch"),
        ("controller: prepare_next_batch", 1400, 50, "prepare_next_batch"),
        ("worker 0", 200, 1000, "rmsnorm_0[0]"),
        ("worker 0", 1200, 50, "noop_0[0]"),
        ("worker 1", 210, 800, "rmsnorm_0[1]"),
        ("worker 1", 1300, 0, "noop_1[0]"),
    ]
    first = next(s for s in slices(events) if s["name"] == "rmsnorm_0[1]")
    assert first["categories"] == ["rmsnorm"]
    assert first["notes"] == {"task_id": 1, "layer": "rmsnorm_0", "task": "rmsnorm", "iteration": 0, "event_no": 0}
    prep = [s for s in slices(events) if s["name"] == "prepare_next_batch"]
    assert [s["notes"]["iteration"] for s in prep] == [0, 1]
    assert "profiler" not in names.values()


def test_incomplete_profile_warns_and_marks_the_trace(recorder, graph, tmp_path):
    dev = recorder(3 * 7, num_workers=2)  # 3 records a region
    dev.task(0, task=0, begin=T0, end=T0 + 10)
    dev.task(0, task=2, begin=T0 + 10, end=T0 + 20)  # its end does not fit
    dev.task(0, task=3, begin=T0 + 20, end=T0 + 30)  # dropped entirely
    dev.task(1, task=1, begin=T0 + 5, end=T0 + 6)
    profile = decode(dev.words, 2, 1)
    with pytest.warns(ProfilerWarning, match=r"3 records dropped .*\(worker 0: 3\), 1 dangling") as rec:
        paths = export(profile, graph, tmp_path / "over")
    assert "larger profiler_tensor" in str(rec[0].message)
    assert [r.layer for r in read_csv(paths["csv"])] == ["rmsnorm_0", "rmsnorm_0"]  # only complete spans
    names, _, events = read_trace(paths["trace"])
    assert "profiler" in names.values()
    (status,) = [e for e in events if e["track"] == "profiler"]
    assert status["type"] == "TYPE_INSTANT" and status["ts"] == T0
    assert status["notes"] == {"dropped": 3, "dangling": 1, "dropped worker 0": 3}
    (lost,) = [e for e in events if e["categories"] == ["profiler"] and e["track"] == "worker 0"]
    assert lost["type"] == "TYPE_INSTANT" and lost["ts"] == T0 + 10
    assert lost["name"] == "noop_0[0]: begin without its end"
    assert lost["notes"] == {"dangling": "begin", "iteration": 0, "task_id": 2}
    assert sorted(s["name"] for s in slices(events)) == ["rmsnorm_0[0]", "rmsnorm_0[1]"]  # no invented durations


def test_empty_profile(recorder, graph, tmp_path):
    paths = export(decode([0] * 30, 2, 1), graph, tmp_path / "nested" / "dir" / "empty")
    with open(paths["csv"], newline="") as f:
        assert list(csv.reader(f)) == [list(COLUMNS)]
    names, _, events = read_trace(paths["trace"])
    assert {"worker 0", "worker 1", "controller: prepare_next_batch"} <= set(names.values()) and events == []


def test_a_profile_of_another_graph_is_an_error(recorder, graph, tmp_path):
    dev = recorder(3 * 9, num_workers=2)
    dev.task(0, task=99, begin=T0, end=T0 + 1)
    with pytest.raises(ProfileError, match=r"task ids \[99\] that the task graph \(4 tasks\) does not have"):
        export(decode(dev.words, 2, 1), graph, tmp_path / "x")
    assert not list(tmp_path.iterdir())


def test_export_with_a_real_graph(recorder, compiled_graph, tmp_path):
    """The graph JSON that compile(output_dir=...) writes is what export reads."""
    _, doc = compiled_graph
    graph = CompiledGraph.from_json(doc)
    dev = recorder(5 * 40, num_workers=4)
    for t in graph.tasks:
        dev.task(t.worker, t.id, T0 + 100 * t.id, T0 + 100 * t.id + 60)
    rows = read_csv(export(decode(dev.words, 4, 1), graph, tmp_path / "real")["csv"])
    assert [(r.task_type_name, r.layer, r.worker) for r in rows] == [("noop", f"noop_{t.layer}", t.worker) for t in graph.tasks]
    assert {r.task_type_id for r in rows} == {graph.layers[0].opcode}


def test_a_dangling_prepare_next_batch_is_marked_on_the_controller_track(recorder, graph, tmp_path):
    dev = recorder(3 * 7, num_workers=2)  # 3 records a region
    dev.prepare(0, T0, T0 + 10)
    dev.prepare(1, T0 + 20, T0 + 30)  # its end does not fit
    profile = decode(dev.words, 2, 1)
    with pytest.warns(ProfilerWarning, match=r"1 records dropped .*\(scheduler 0: 1\), 1 dangling"):
        names, _, events = read_trace(export(profile, graph, tmp_path / "p")["trace"])
    assert [(s["track"], s["dur"]) for s in slices(events)] == [("controller: prepare_next_batch", 10)]
    (lost,) = [e for e in events if e["type"] == "TYPE_INSTANT" and e["track"] != "profiler"]
    assert (lost["track"], lost["ts"], lost["name"]) == (
        "controller: prepare_next_batch",
        T0 + 20,
        "prepare_next_batch: begin without its end",
    )
    assert lost["notes"] == {"dangling": "begin", "iteration": 1}
    assert next(e for e in events if e["track"] == "profiler")["notes"] == {"dropped": 1, "dangling": 1, "dropped scheduler 0": 1}
