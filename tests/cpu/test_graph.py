"""The task graph: slices (regions and byte offsets), layer and task naming, tensor directions,
RAW / WAR / WAW dependencies with full and partial overlaps, and the graph's JSON."""

from __future__ import annotations

import json

import torch
from cpu_helpers import GraphBuilder, compile_graph
from hypothesis import given
from hypothesis import strategies as st

from mpk_runtime.graph import Region, TaskGraph
from mpk_runtime.tasks import registry
from mpk_runtime.tasks.registry import TaskSpec, split, whole


def rmsnorm_graph(batch: int = 8, hidden: int = 64, grid: int = 4) -> TaskGraph:
    g = GraphBuilder()
    bf16 = {"dtype": torch.bfloat16}
    g.rmsnorm(
        g.tensor("x", batch, hidden, **bf16), g.tensor("w", hidden, **bf16), g.tensor("y", batch, hidden, **bf16), grid=grid
    )
    return g.graph


def test_grid_makes_one_task_per_block_with_its_slices():
    g = rmsnorm_graph(batch=8, hidden=64, grid=4)
    assert len(g.tasks) == 4
    for k, t in enumerate(g.tasks):
        assert t.grid_idx == (k, 0, 0)
        x, w = t.reads
        (y,) = t.writes
        assert x.region == Region((2 * k, 0), (2 * k + 2, 64))
        assert x.byte_offset == 2 * k * 64 * 2  # rows of 64 bf16
        assert w.region == Region((0,), (64,)) and w.byte_offset == 0  # the weight is passed whole
        assert y.region == x.region and y.byte_offset == x.byte_offset


def test_slice_json_names_tensor_bounds_and_offset():
    g = rmsnorm_graph(batch=8, hidden=64, grid=4)
    s = g.tasks[3].reads[0]
    assert (s.tensor.name, s.region.lo, s.region.hi, s.byte_offset) == ("x", (6, 0), (8, 64), 6 * 64 * 2)


def test_region_overlap_is_half_open():
    a = Region((0, 0), (2, 4))
    assert a.overlaps(Region((1, 3), (3, 5)))
    assert not a.overlaps(Region((2, 0), (4, 4)))  # touching rows do not overlap
    assert not a.overlaps(Region((0, 4), (2, 8)))
    assert Region((1, 0), (3, 4)).shape == (2, 4)


def test_layers_and_tasks_are_named_per_task_type():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    names = [g.noop([a], [b], 2).name, g.noop([b], [c], 4).name]
    assert names == ["noop_0", "noop_1"]
    assert [t.label for t in g.graph.tasks[:3]] == ["noop_0[0]", "noop_0[1]", "noop_1[0]"]
    assert g.graph.layers[1].first_task == 2 and g.graph.layers[1].num_tasks == 4


def test_direction_in_out_inout():
    g = GraphBuilder()
    a, b, c, unused = g.tensor("a"), g.tensor("b"), g.tensor("c"), g.tensor("unused")
    g.noop([a], [b])
    g.noop([b], [c])
    assert (a.direction, b.direction, c.direction, unused.direction) == ("IN", "INOUT", "OUT", "IN")


def deps(g: GraphBuilder, task: int) -> dict[int, str]:
    return g.graph.tasks[task].deps


def test_read_after_write():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    g.noop([a], [b], 1)
    g.noop([b], [c], 1)
    assert deps(g, 0) == {} and deps(g, 1) == {0: "raw"}


def test_write_after_read():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    g.noop([a], [b], 1)
    g.noop([c], [a], 1)  # overwrites what task 0 reads
    assert deps(g, 1) == {0: "war"}


def test_write_after_write():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    g.noop([a], [b], 1)
    g.noop([c], [b], 1)
    assert deps(g, 1) == {0: "waw"}


def test_full_overlap_is_one_to_one():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    first, second = g.noop([a], [b], 4), g.noop([b], [c], 4)
    for k, t in enumerate(g.tasks_of(second)):
        assert deps(g, t) == {g.tasks_of(first)[k]: "raw"}


def test_partial_overlaps_fan_in_and_fan_out():
    """Slices of 2 rows read as slices of 4 (each consumer needs two producers), then as slices
    of 1 (each consumer needs half of one producer's slice)."""
    g = GraphBuilder()
    a, b, c, d = g.tensor("a"), g.tensor("b"), g.tensor("c"), g.tensor("d")
    narrow = g.tasks_of(g.noop([a], [b], 4))
    wide = g.tasks_of(g.noop([b], [c], 2))
    fine = g.tasks_of(g.noop([b], [d], 8))
    assert [set(deps(g, t)) for t in wide] == [{narrow[0], narrow[1]}, {narrow[2], narrow[3]}]
    assert [set(deps(g, t)) for t in fine] == [{narrow[k // 2]} for k in range(8)]


def test_whole_tensor_reader_depends_on_every_writer():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c", rows=1)
    writers = g.tasks_of(g.noop([a], [b], 8))
    (sink,) = g.tasks_of(g.noop([b], [c], 1))
    assert set(deps(g, sink)) == set(writers)


def test_disjoint_slices_and_other_tensors_give_no_dependency():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    g.noop([a], [b], 2)
    g.noop([a], [c], 2)  # reads what the first layer read: no hazard
    assert all(t.deps == {} for t in g.graph.tasks)


def test_in_place_layer_orders_after_readers_and_writers():
    g = GraphBuilder()
    a, b = g.tensor("a"), g.tensor("b")
    g.noop([a], [b], 2)  # tasks 0, 1 read a, write b
    g.noop([b], [a], 2)  # tasks 2, 3 read b (raw) and overwrite a (war)
    assert deps(g, 2) == {0: "raw"} and deps(g, 3) == {1: "raw"}
    g.noop([a], [a], 1)  # task 4 reads and rewrites all of a
    # Tasks 2 and 3 overwrote what tasks 0 and 1 read: task 4 is ordered after those through them.
    assert deps(g, 4) == {2: "raw", 3: "raw"}


def test_a_write_supersedes_what_it_covers_whole():
    """Layers alternating between two tensors: each task depends on its one producer (the reader
    it overwrites and the writer before are its producer's producers), not on every earlier task."""
    g = GraphBuilder()
    a, b = g.tensor("a"), g.tensor("b")
    for k in range(200):
        g.noop([a], [b]) if k % 2 == 0 else g.noop([b], [a])
    assert [deps(g, t) for t in range(200)] == [{}] + [{t - 1: "raw"} for t in range(1, 200)]


def test_edges_implied_by_whole_layers_are_pruned():
    g = GraphBuilder()
    x, y, z, w = g.tensor("x"), g.tensor("y"), g.tensor("z"), g.tensor("w")
    readers = g.tasks_of(g.noop([x], [y], 4))  # read x by quarters
    (joined,) = g.tasks_of(g.noop([y], [z], 1))  # waits for every reader
    writers = g.tasks_of(g.noop([z, w], [x], 4))  # overwrite x: after the readers, through `joined`
    assert deps(g, joined) == {r: "raw" for r in readers}
    assert [deps(g, w) for w in writers] == [{joined: "raw"}] * 4


def test_a_partial_overwrite_keeps_the_older_writer():
    g = GraphBuilder()
    a, b, c, d = g.tensor("a"), g.tensor("b"), g.tensor("c"), g.tensor("d")
    g.noop([a], [b], 1)  # task 0 writes all of b
    g.noop([c], [b], 2)  # tasks 1, 2 overwrite halves of b
    g.noop([a], [b], 4)  # tasks 3..6 overwrite quarters
    g.noop([b], [d], 1)  # task 7 reads all of b: the quarters' writers, which cover it
    assert deps(g, 1) == {0: "waw"} and deps(g, 3) == {1: "waw"}
    assert deps(g, 7) == {3: "raw", 4: "raw", 5: "raw", 6: "raw"}
    g.noop([b], [c], 8)  # an eighth of b: the quarter's writer only
    assert deps(g, 8) == {3: "raw", 1: "war"}  # and overwrites c, which task 1 read


@st.composite
def programs(draw):
    """Layers over 3 tensors of 8 x 8 fp32: no-ops (rows split 1, 2, 4 or 8 ways, random inputs,
    one output) and linears (the input whole, the output's columns split 1, 2, 4 or 8 ways)."""
    layer = st.one_of(
        st.tuples(
            st.just("noop"), st.sets(st.integers(0, 2), min_size=1, max_size=2), st.integers(0, 2), st.sampled_from([1, 2, 4, 8])
        ),
        st.tuples(st.just("linear"), st.integers(0, 2), st.integers(0, 2), st.sampled_from([1, 2, 4, 8])),
    )
    return draw(st.lists(layer, min_size=1, max_size=12))


@given(program=programs())
def test_dependencies_order_every_hazard(program):
    """Against brute force. Two accesses conflict when they touch overlapping elements of one
    tensor and at least one writes. Every recorded dependency is such a conflict, labelled with
    a kind that applies, and every conflicting pair is ordered through the recorded ones (the
    later task reaches the earlier): the edges may leave out what is already implied (a later
    write that covers an access stands for it), never an ordering."""
    g = GraphBuilder()
    ts = [g.tensor(f"t{i}", 8, 8, dtype=torch.float32) for i in range(3)]
    for op, ins, out, width in program:
        if op == "noop":
            g.noop([ts[i] for i in sorted(ins)], [ts[out]], width)
        elif ins != out:  # the weight is the third tensor
            g.linear(ts[ins], ts[3 - ins - out], ts[out], width)
    accesses = [[(s, False) for s in t.reads] + [(s, True) for s in t.writes] for t in g.graph.tasks]
    reach: list[set[int]] = []
    for j, tj in enumerate(g.graph.tasks):
        want: dict[int, set[str]] = {}
        for i in range(j):
            for si, wi in accesses[i]:
                for sj, wj in accesses[j]:
                    if si.tensor is sj.tensor and (wi or wj) and si.region.overlaps(sj.region):
                        want.setdefault(i, set()).add("waw" if wi and wj else ("raw" if wi else "war"))
        for i, kind in tj.deps.items():
            assert kind in want.get(i, ()), (j, i, kind, want)
        reach.append(set(tj.deps).union(*(reach[i] for i in tj.deps)))
        assert set(want) <= reach[j], (j, set(want) - reach[j])
        assert all(p < j for p in tj.deps)  # program order is a topological order


def test_graph_json_describes_tensors_and_layers():
    g = rmsnorm_graph(batch=8, hidden=64, grid=4)
    data = json.loads(json.dumps(compile_graph(g, 1).to_json()))
    assert data["tensors"] == [
        {"name": "x", "shape": [8, 64], "dtype": "bf16", "kind": "attached", "direction": "IN"},
        {"name": "w", "shape": [64], "dtype": "bf16", "kind": "attached", "direction": "IN"},
        {"name": "y", "shape": [8, 64], "dtype": "bf16", "kind": "attached", "direction": "OUT"},
    ]
    (layer,) = data["layers"]
    assert layer["name"] == "rmsnorm_0" and layer["task"] == "rmsnorm"
    assert layer["opcode"] == registry.get("rmsnorm").opcode
    assert layer["grid"] == [4, 1, 1] and layer["num_tasks"] == 4 and layer["first_task"] == 0
    assert layer["template_args"][:3] == ["__nv_bfloat16", "2", "64"]  # dtype, rows per task, hidden
    assert layer["values"] == {"eps": 1e-6}
    assert [(a["name"], a["partition"], a["direction"]) for a in layer["args"]] == [
        ("input", "dim 0 by grid x", "IN"),
        ("weight", "whole", "IN"),
        ("output", "dim 0 by grid x", "OUT"),
    ]


class RowsChosenAtRunTime(TaskSpec):
    """A test-only spec (never registered): task x writes rows of ``out`` it picks at run time."""

    name = "rows_at_run_time"
    inputs = {"x": whole()}
    outputs = {"out": split(y=1).selecting(x=0)}
    headers = {"sm80": "common/noop.cuh"}
    function = "mpk::tasks::noop"

    def template_args(self, s, values):
        return []


def test_rows_chosen_at_run_time_order_layers_but_not_the_tasks_of_one_layer():
    g = GraphBuilder()
    x, out = g.tensor("x", rows=8, cols=4), g.tensor("out", rows=8, cols=4)
    spec = RowsChosenAtRunTime()
    args, values = spec.bind({"x": x, "out": out})
    first = g.graph.add_layer(spec, (4, 2, 1), args, values)  # 4 requests x 2 column halves
    second = g.graph.add_layer(spec, (4, 2, 1), spec.bind({"x": x, "out": out})[0], {})
    tasks = g.graph.tasks
    assert all(not tasks[t].deps for t in g.tasks_of(first))  # disjoint at run time: no order among them
    assert [s.region for s in tasks[0].writes] == [Region((0, 0), (8, 2))]  # whole rows, its column half
    # the second layer overwrites the same column half of every row: after each first-layer task of it
    for t in g.tasks_of(second):
        half = tasks[t].grid_idx[1]
        assert set(tasks[t].deps) == {p for p in g.tasks_of(first) if tasks[p].grid_idx[1] == half}
    assert first.args[1].partition.describe() == "dim 1 by grid y, dim 0 chosen at run time by grid x"


def test_graph_text_is_the_generic_dump_of_the_json():
    """compile(output_dir=...) writes the task lines directly (compiled_writer); the text is the
    one the generic writer makes of to_json(), and reads back to the same graph."""
    from mpk_runtime.graph.compiled import CompiledGraph
    from mpk_runtime.graph.compiled_writer import dumps, graph_text

    g = GraphBuilder()
    a, b, c = g.tensor("a", 8, 4), g.tensor('b "quoted"', 8, 4), g.tensor("c", 8, 4)
    g.noop([a], [b], 4)
    g.noop([b], [c], 2)
    g.noop([c, a], [a], 8)
    compiled = compile_graph(g.graph, 3)
    text = graph_text(compiled)
    assert text == dumps(compiled.to_json())
    assert CompiledGraph.from_json(json.loads(text), "test") == compiled
