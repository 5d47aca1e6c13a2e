"""mpk-graph on the task graph of a real compile (conftest.compiled_graph: a chain of three noop
layers, a fan-out to four tasks, a fan-in to one; round robin over 4 workers) and on small
hand-made graphs for the error paths."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mpk_runtime.cli.graph import main

# The entry point of the environment that runs the tests (not whichever one the PATH finds first).
SCRIPT = Path(sys.executable).with_name("mpk-graph")


def call(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def test_summary(capsys, compiled_graph):
    path, g = compiled_graph
    code, out = call(capsys, path)
    assert code == 0
    assert (out["arch"], out["policy"], out["num_workers"]) == ("sm90", "round_robin", 4)
    assert (out["tasks"], out["layers"]) == (8, 5)
    assert out["tasks_by_type"] == {"noop": 8}
    assert out["tasks_by_layer"] == {"noop_0": 1, "noop_1": 1, "noop_2": 1, "noop_3": 4, "noop_4": 1}
    assert out["tasks_by_worker"] == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert out["critical_path"] == {"length_tasks": 5, "tasks": ["noop_0[0]", "noop_1[0]", "noop_2[0]", "noop_3[0]", "noop_4[0]"]}
    assert out["max_fan_in"] == {"deps": 4, "task": 7, "label": "noop_4[0]"}
    assert out["max_fan_out"] == {"dependents": 4, "task": 2, "label": "noop_2[0]"}
    events = g["schedule"]["events"]
    assert out["events"] == len(events) > 0
    assert out["trigger_count_histogram"] == {str(k): v for k, v in Counter(e["trigger_count"] for e in events).items()}
    assert out["trigger_count_histogram"]["4"] == 1  # the fan-in waits for all four producers at once
    assert out["tasks_waiting_on_an_event"] == sum(t["wait_event"] is not None for t in g["tasks"])


def test_task(capsys, compiled_graph):
    path, g = compiled_graph
    code, out = call(capsys, path, "--task", 7)
    assert code == 0
    assert (out["label"], out["layer"], out["task_type"], out["grid_idx"]) == ("noop_4[0]", "noop_4", "noop", [0, 0, 0])
    assert out["worker"] == g["tasks"][7]["worker"]
    assert g["schedule"]["queues"][out["worker"]][out["queue_position"]] == 7
    assert [(d["task"], d["label"], d["hazard"]) for d in out["deps"]] == [
        (3, "noop_3[0]", "raw"),
        (4, "noop_3[1]", "raw"),
        (5, "noop_3[2]", "raw"),
        (6, "noop_3[3]", "raw"),
    ]
    assert out["wait_event"]["trigger_count"] == 4 and out["wait_event"]["producers"] == [3, 4, 5, 6]
    assert out["dependents"] == [] and out["triggers"] == []
    assert out["inputs"] == [{"tensor": "wide", "lo": [0], "hi": [4], "byte_offset": 0}]
    assert out["outputs"][0]["tensor"] == "sink"


def test_task_with_dependents_and_triggers(capsys, compiled_graph):
    path, g = compiled_graph
    _, out = call(capsys, path, "--task", 2)
    assert [d["task"] for d in out["dependents"]] == [3, 4, 5, 6]
    assert [d["label"] for d in out["deps"]] == ["noop_1[0]"]
    consumers = sorted(c for t in out["triggers"] for c in t["consumers"])
    waiting = sorted(t["id"] for t in g["tasks"][3:7] if t["wait_event"] is not None)
    assert consumers == waiting and waiting  # what it triggers is what waits on it across workers


def test_event(capsys, compiled_graph):
    path, g = compiled_graph
    fan_in = next(e for e in g["schedule"]["events"] if e["consumers"] == [7])
    code, out = call(capsys, path, "--event", fan_in["id"])
    assert code == 0
    assert out["trigger_count"] == 4
    assert [p["label"] for p in out["producers"]] == ["noop_3[0]", "noop_3[1]", "noop_3[2]", "noop_3[3]"]
    assert [(c["task"], c["label"], c["worker"]) for c in out["consumers"]] == [(7, "noop_4[0]", g["tasks"][7]["worker"])]


def test_dot(capsys, compiled_graph, tmp_path):
    path, g = compiled_graph
    dot_file = tmp_path / "g.dot"
    code, out = call(capsys, path, "--dot", dot_file)
    assert (code, out) == (0, {"dot": str(dot_file), "nodes": 8, "edges": 1 + 1 + 4 + 4})
    text = dot_file.read_text()
    lines = text.splitlines()
    assert lines[0] == "digraph mpk_task_graph {" and lines[-1] == "}"
    assert text.count("{") == text.count("}") == 1 + 5
    assert re.findall(r"subgraph (cluster_\d+) \{", text) == [f"cluster_{i}" for i in range(5)]
    assert 'label="noop_3 (noop)";' in text
    nodes = re.findall(r"^    t(\d+) \[label=\"([^\"]*)\"\];$", text, re.M)
    assert [int(n) for n, _ in nodes] == list(range(8))
    assert nodes[7][1] == f"noop_4[0]\\nworker {g['tasks'][7]['worker']}"
    edges = re.findall(r"^  t(\d+) -> t(\d+) \[style=solid\];$", text, re.M)
    assert sorted((int(a), int(b)) for a, b in edges) == [
        (0, 1),
        (1, 2),
        (2, 3),
        (2, 4),
        (2, 5),
        (2, 6),
        (3, 7),
        (4, 7),
        (5, 7),
        (6, 7),
    ]
    # inside the cluster of layer 3 are exactly its four tasks
    cluster3 = text.split("subgraph cluster_3 {")[1].split("}")[0]
    assert re.findall(r"t(\d+) \[", cluster3) == ["3", "4", "5", "6"]


def synthetic(deps: dict[int, list[tuple[int, str]]]) -> dict:
    """A minimal valid task graph: one layer (none without tasks), task i depending on deps[i], all
    on worker 0."""
    n = len(deps)
    return {
        "format": "mpk-task-graph",
        "version": 1,
        "arch": "sm90",
        "rank": 0,
        "tensors": [],
        "layers": [
            {
                "id": 0,
                "name": "noop_0",
                "task": "noop",
                "opcode": 1,
                "grid": [n, 1, 1],
                "scalars": [],
                "first_task": 0,
                "num_tasks": n,
                "args": [],
            }
        ][: 1 if n else 0],
        "variants": [{"id": 0, "task": "noop", "call": "noop<>(task, rt);", "layers": ["noop_0"]}][: 1 if n else 0],
        "tasks": [
            {
                "id": i,
                "label": f"noop_0[{i}]",
                "layer": 0,
                "variant": 0,
                "grid_idx": [i, 0, 0],
                "deps": [{"task": d, "hazard": h} for d, h in deps[i]],
                "worker": 0,
                "wait_event": None,
                "triggers": [],
                "inputs": [],
                "outputs": [],
            }
            for i in range(n)
        ],
        "schedule": {
            "policy": "locality",
            "num_workers": 1,
            "queues": [list(range(n))],
            "end_of_task_graph": {"trigger_count": 1 if n else 0},
            "events": [],
        },
    }


def test_hazard_styles_and_diamond_critical_path(capsys, tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(synthetic({0: [], 1: [(0, "raw")], 2: [(0, "war")], 3: [(1, "raw"), (2, "waw")], 4: []})))
    _, out = call(capsys, path)
    assert out["critical_path"] == {"length_tasks": 3, "tasks": ["noop_0[0]", "noop_0[1]", "noop_0[3]"]}
    assert out["trigger_count_histogram"] == {} and out["events"] == 0
    call(capsys, path, "--dot", tmp_path / "g.dot")
    text = (tmp_path / "g.dot").read_text()
    assert "t0 -> t2 [style=dashed];" in text and "t2 -> t3 [style=dotted];" in text and "t0 -> t1 [style=solid];" in text


def test_empty_graph(capsys, tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(synthetic({})))
    _, out = call(capsys, path)
    assert out["tasks"] == 0 and out["critical_path"] == {"length_tasks": 0, "tasks": []}
    assert out["max_fan_in"] == {"deps": 0, "task": None, "label": None}


@pytest.mark.parametrize(
    "content, argv, match",
    [
        (None, [], "cannot read task graph .*No such file"),
        ("{not json", [], "not JSON"),
        (json.dumps({"format": "mpk-signature"}), [], "not a task graph"),
        (json.dumps({"format": "mpk-task-graph", "version": 1}), [], "g.json: tensors: missing"),
        (
            json.dumps(synthetic({0: [(1, "raw")], 1: [(0, "raw")]})),
            [],
            r"tasks\[0\]\.deps: depends on tasks \[1\], which do "
            r"not come before it",
        ),
        (json.dumps(synthetic({0: [(5, "raw")]})), [], r"tasks\[0\]\.deps: depends on tasks \[5\]"),
        (json.dumps({**synthetic({0: []}), "tasks": [{"id": 0, "layer": 0, "deps": []}]}), [], r"tasks\[0\]\.grid_idx: missing"),
        (
            json.dumps({**synthetic({0: []}), "tasks": [{**synthetic({0: []})["tasks"][0], "worker": 3}]}),
            [],
            r"tasks\[0\]\.worker: expected an integer in \[0, 1\), got 3",
        ),
        (json.dumps(synthetic({0: []})), ["--task", "3"], "no task 3; this graph has tasks 0..0"),
        (json.dumps(synthetic({0: []})), ["--task", "x"], "argument --task: invalid int value: 'x'"),
        (json.dumps(synthetic({0: []})), ["--event", "0"], "no event 0; this graph has 0 events"),
        (json.dumps(synthetic({0: []})), ["--task", "0", "--event", "0"], "not allowed with argument"),
        (
            json.dumps({**synthetic({0: []}), "version": 2}),
            [],
            r"g\.json: expected mpk-task-graph version 1, found mpk-task-graph version 2 .*; recompile to refresh it",
        ),
        (json.dumps({**synthetic({0: []}), "arch": "sm75"}), [], r"arch: unknown arch 'sm75'; expected one of sm80, sm90"),
        (
            json.dumps({**synthetic({0: []}), "schedule": {**synthetic({0: []})["schedule"], "policy": "random"}}),
            [],
            r"schedule\.policy: unknown policy 'random'; expected one of locality, round_robin",
        ),
        (
            json.dumps({**synthetic({0: []}), "variants": [{**synthetic({0: []})["variants"][0], "layers": ["nope"]}]}),
            [],
            r"variants\[0\]\.layers: names layers \['nope'\], which the graph does not have",
        ),
        ("[" * 100_000 + "]" * 100_000, [], r"g\.json: not a task graph \(RecursionError: "),
        ('{"version": ' + "9" * 5000 + "}", [], r"g\.json: not a task graph \(ValueError: Exceeds the limit"),
        (json.dumps(synthetic({0: []})), ["--dot", ""], r"--dot '': no file named; name the file to write"),
        (json.dumps(synthetic({0: []})), ["--dot", "/nowhere/g.dot"], r"directory '/nowhere' does not exist"),
    ],
)
def test_errors(capsys, tmp_path, content, argv, match):
    path = tmp_path / "g.json"
    if content is not None:
        path.write_text(content)
    code, out = call(capsys, path, *argv)
    assert code == 2 and list(out) == ["error"]
    assert re.search(match, out["error"]), out["error"]


def test_a_file_that_is_not_text(capsys, tmp_path):
    path = tmp_path / "g.json"
    path.write_bytes(b"\xff\xfe{}")
    code, out = call(capsys, path)
    assert code == 2 and out["error"].startswith(f"{path}: not JSON (not UTF-8 text: ")


def test_dot_never_overwrites_the_graph(capsys, tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(synthetic({0: []})))
    before = path.read_text()
    code, out = call(capsys, path, "--dot", path)
    assert (code, out) == (2, {"error": f"--dot '{path}' is the input '{path}'; writing it would destroy it: name another file"})
    assert path.read_text() == before


def test_unknown_event_of_a_real_graph(capsys, compiled_graph):
    path, g = compiled_graph
    code, out = call(capsys, path, "--event", 999)
    n = len(g["schedule"]["events"])
    assert code == 2 and out["error"] == f"no event 999; this graph has {n} events (ids 0..{n - 1})"


@pytest.mark.skipif(not SCRIPT.is_file(), reason=f"console script not installed beside {sys.executable} (pip install -e .)")
def test_console_script(compiled_graph):
    """One run of the installed entry point, an error: its exit status must reach the shell."""
    path, _ = compiled_graph
    bad = subprocess.run([str(SCRIPT), str(path), "--task", "99"], capture_output=True, text=True)
    assert bad.returncode == 2 and json.loads(bad.stdout) == {"error": "no task 99; this graph has tasks 0..7"}


@pytest.mark.skipif(not SCRIPT.is_file(), reason=f"console script not installed beside {sys.executable} (pip install -e .)")
def test_a_reader_that_went_away_gets_no_traceback(compiled_graph):
    """`mpk-graph g.json | head`, or a pasted line that pipes into a command that fails at once."""
    path, _ = compiled_graph
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        res = subprocess.run([str(SCRIPT), str(path)], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert res.returncode == 2 and res.stderr == ""
