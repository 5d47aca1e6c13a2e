"""Replay inputs are checked before use: a damaged or hand-edited compile output directory (its task
graph, its signature, the two against each other, its meta tensors) is a GraphError naming the
file and the field, a directory too large for the machine a MemoryBudgetError, and an edited
source is recognised, so that the emulator never passes it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from cpu_helpers import graph_of

import mpk_runtime as mpk
from mpk_runtime.build import artifacts, replay
from mpk_runtime.errors import ConfigError, EmulationError, GraphError, MemoryBudgetError
from mpk_runtime.frontend.lowering import lower


@pytest.fixture
def saved(tmp_path: Path, make_pk) -> Path:
    """A compile output directory of two rmsnorm layers (x -> y by quarters, y -> z by halves) on two
    workers, dealt round robin so that the second layer's tasks wait on events; written without nvcc."""
    pk = make_pk(90, test_mode=True, num_workers=2, placement="round_robin")
    bf = {"dtype": torch.bfloat16}
    x, y, z = (pk.attach_input(torch.zeros(8, 64, **bf), n) for n in "xyz")
    w = pk.attach_input(torch.ones(64, **bf), "w")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.rmsnorm_layer(input=y, weight=w, output=z, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    source, graph, signature = lower(graph_of(pk), pk.params, pk.arch)
    artifacts.write(tmp_path / "out", 0, source, graph, signature, {})
    return tmp_path / "out"


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def graph_file(d: Path) -> Path:
    return d / "task_graph_rank0.json"


def signature_file(d: Path) -> Path:
    return d / "signature_rank0.json"


def test_the_saved_directory_reads_back(saved):
    out = artifacts.read(saved, 0)
    assert [t.name for t in out.signature.tensors] == ["x", "y", "z", "w"] and len(out.graph.tasks) == 6
    assert any(t.wait_event is not None for t in out.graph.tasks)  # the schedule has events to check
    assert replay.plan(saved, 0).output.edited is None


def test_invalid_json_names_the_file_line_and_column(saved):
    graph_file(saved).write_text('{\n "format": "mpk-task-graph",\n "tasks": [oops]\n}')
    with pytest.raises(
        GraphError, match=rf"^{re.escape(str(graph_file(saved)))}: not valid JSON: Expecting value \(line 3, column 12\)$"
    ):
        artifacts.read(saved, 0)


GRAPH_FAULTS = {
    "negative grid index": (
        lambda g: g["tasks"][1].update(grid_idx=[-1, 0, 0]),
        r"tasks\[1\]\.grid_idx\[0\]: expected an integer >= 0, got -1",
    ),
    "grid index outside the grid": (
        lambda g: g["tasks"][1].update(grid_idx=[4, 0, 0]),
        r"tasks\[1\]\.grid_idx: \[4, 0, 0\], but task 1 of layer rmsnorm_0 \(grid \[4, 1, 1\], x fastest\) has grid "
        r"index \[1, 0, 0\]",
    ),
    "slice outside its tensor": (
        lambda g: g["tasks"][3]["outputs"][0].update(lo=[6, 0], hi=[10, 64]),
        r"tasks\[3\]\.outputs\[0\]: lo=\[6, 0\] hi=\[10, 64\], but 'output' of 'y' \[8, 64\] is cut to lo=\[6, 0\] "
        r"hi=\[8, 64\] at grid index \[3, 0, 0\]",
    ),
    "byte offset": (
        lambda g: g["tasks"][1]["inputs"][0].update(byte_offset=4),
        r"tasks\[1\]\.inputs\[0\]\.byte_offset: 4, but lo=\[2, 0\] of bf16 \[8, 64\] is at 256",
    ),
    "wrong type": (lambda g: g["tasks"][0].update(worker="0"), r"tasks\[0\]\.worker: expected an integer in \[0, 2\), got '0'"),
    "unknown dtype": (
        lambda g: g["tensors"][0].update(dtype="bf17"),
        r"tensors\[0\]\.dtype: unknown dtype 'bf17'; expected one of bf16, fp16, fp32, i32, i64, u8",
    ),
    "a dependency nothing waits for": (
        lambda g: (g["tasks"][4].update(wait_event=None), g["schedule"]["events"][0]["consumers"].remove(4)),
        r"tasks\[4\]\.deps: task 1 \(raw\) runs on worker 1, task 4 on worker 0, and no event it waits on counts task 1: "
        r"nothing orders them",
    ),
    "a trigger the event does not count": (
        lambda g: g["tasks"][0].update(triggers=[]),
        r"tasks\[0\]\.triggers: \[\], but the task produces for events \[0\]",
    ),
    "a trigger count that is not the producers'": (
        lambda g: g["schedule"]["events"][0].update(trigger_count=3),
        r"schedule\.events\[0\]\.trigger_count: 3, but the event has 2 producers",
    ),
    "a consumer the task does not know": (
        lambda g: g["schedule"]["events"][0]["consumers"].append(5),
        r"schedule\.events\[0\]\.consumers: \[4, 5\], but tasks \[4\] wait on it",
    ),
    "queues out of program order": (
        lambda g: g["schedule"]["queues"][0].reverse(),
        r"schedule\.queues\[0\]: must list its tasks in increasing order \(program order\)",
    ),
    "too many tasks for the grid": (
        lambda g: g["layers"][0].update(grid=[2, 1, 1]),
        r"layers\[0\]\.num_tasks: 4, but grid \[2, 1, 1\] has 2 blocks",
    ),
    "a tensor listed twice": (
        lambda g: g["tensors"].append(dict(g["tensors"][0])),
        r"tensors\[4\]\.name: tensor 'x' is listed twice",
    ),
}


@pytest.mark.parametrize("fault", GRAPH_FAULTS, ids=list(GRAPH_FAULTS))
def test_a_damaged_task_graph_names_the_file_and_field(saved, fault):
    change, message = GRAPH_FAULTS[fault]
    edit(graph_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(graph_file(saved)))}: {message}"):
        artifacts.read(saved, 0)


def test_the_event_fixtures_hold(saved):
    """The faults above rely on this schedule: tasks 4 and 5 of the second layer wait on events 0
    and 1, produced by tasks 0, 1 and 2, 3 (round robin: task i on worker i % 2)."""
    g = json.loads(graph_file(saved).read_text())
    assert [(e["producers"], e["consumers"]) for e in g["schedule"]["events"]] == [([0, 1], [4]), ([2, 3], [5])]


SIGNATURE_FAULTS = {
    "unknown dtype": (lambda s: s["tensors"][0].update(dtype="bf17"), r"tensors\[0\]\.dtype: unknown dtype 'bf17'"),
    "shape of strings": (
        lambda s: s["tensors"][0].update(shape=["8", 64]),
        r"tensors\[0\]\.shape\[0\]: expected an integer >= 1, got '8'",
    ),
    "param of the wrong type": (
        lambda s: s["params"].update(num_workers="2"),
        r"params\.num_workers: expected an integer, got '2'",
    ),
    "missing param": (lambda s: s["params"].pop("page_size"), r"params\.page_size: missing"),
    "unknown param": (lambda s: s["params"].update(warp_size=32), r"params: warp_size: not parameters a signature records"),
    "unknown arch": (lambda s: s.update(arch="sm75"), r"arch: unknown arch 'sm75'; expected one of sm80, sm90, sm100"),
    "unknown kind": (
        lambda s: s["tensors"][1].update(kind="scratch"),
        r"tensors\[1\]\.kind: expected one of attached, intermediate, workspace, derived, comm",
    ),
    "a derived tensor without recipe": (
        lambda s: s["tensors"][1].update(kind="derived"),
        r"tensors\[1\]: a derived tensor needs derived_from \(how to recompute it\)",
    ),
    "a recipe of an unknown op": (
        lambda s: s["tensors"][1].update(kind="derived", derived_from={"op": "transpose", "inputs": ["x"]}),
        r"tensors\[1\]\.derived_from\.op: unknown op 'transpose'; expected 'shuffle_tensors' or 'tensor_maps'",
    ),
    "tensor maps of another swizzle": (
        lambda s: s["tensors"][1].update(
            kind="derived", derived_from={"op": "tensor_maps", "inputs": ["x"], "box": [64, 8], "swizzle": 96}
        ),
        r"tensors\[1\]\.derived_from\.swizzle: must be one of \[0, 32, 64, 128\] \(bytes\)",
    ),
    "tensor maps without a box": (
        lambda s: s["tensors"][1].update(
            kind="derived", derived_from={"op": "tensor_maps", "inputs": ["x"], "box": [], "swizzle": 0}
        ),
        r"tensors\[1\]\.derived_from\.box: gives no dims",
    ),
    "not an object": (lambda s: s.update(tensors={"x": 1}), r"tensors: expected a list, got dict"),
}


@pytest.mark.parametrize("fault", SIGNATURE_FAULTS, ids=list(SIGNATURE_FAULTS))
def test_a_damaged_signature_names_the_file_and_field(saved, fault):
    change, message = SIGNATURE_FAULTS[fault]
    edit(signature_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(signature_file(saved)))}: {message}"):
        artifacts.read(saved, 0)


MISMATCHES = {
    "8 rows in the signature, 4 in the graph": (
        lambda s: s["tensors"][0].update(shape=[16, 64]),
        "tensor 'x' is bf16 [16, 64] in the signature but bf16 [8, 64] in the task graph",
    ),
    "a tensor the graph lacks": (
        lambda s: s["tensors"].append({"name": "extra", "shape": [4], "dtype": "fp32", "direction": "IN"}),
        "the signature lists tensor 'extra', which the task graph does not have",
    ),
    "a tensor the signature lacks": (
        lambda s: s["tensors"].pop(3),
        "the task graph uses tensor 'w', which the signature does not list",
    ),
    "direction": (
        lambda s: s["tensors"][2].update(direction="IN"),
        "tensor 'z' is IN attached in the signature but OUT attached in the task graph",
    ),
    "worker count": (
        lambda s: s["params"].update(num_workers=4),
        "the signature says num_workers=4, the task graph is scheduled on 2",
    ),
}


@pytest.mark.parametrize("fault", MISMATCHES, ids=list(MISMATCHES))
def test_signature_and_graph_must_agree(saved, fault):
    change, message = MISMATCHES[fault]
    edit(signature_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(saved))}: {re.escape(message)}; the directory is inconsistent"):
        artifacts.read(saved, 0)


def test_a_directory_that_is_not_there_or_has_no_signature(saved, tmp_path):
    with pytest.raises(GraphError, match=r"/nowhere does not exist; a replay needs a compile output directory"):
        artifacts.read(tmp_path / "nowhere", 0)
    signature_file(saved).unlink()
    with pytest.raises(GraphError, match=r"is not a compile output directory of rank 0: missing .*signature_rank0\.json"):
        artifacts.read(saved, 0)


def test_damaged_meta_tensors(saved):
    (saved / "meta_rank0.pt").write_bytes(b"not a torch file")
    with pytest.raises(GraphError, match=r"meta_rank0\.pt: cannot be loaded \(.*\); recompile to refresh it"):
        artifacts.read(saved, 0)
    torch.save([1, 2], saved / "meta_rank0.pt")
    with pytest.raises(GraphError, match=r"meta_rank0\.pt: expected a dict of meta tensor name -> tensor, got list"):
        artifacts.read(saved, 0)


def test_an_unregistered_task(saved):
    edit(graph_file(saved), lambda g: (g["layers"][0].update(task="gelu"), g["variants"][0].update(task="gelu")))
    with pytest.raises(GraphError, match=r"layers\[0\] \(rmsnorm_0\) is a 'gelu' task, which is not registered in this process"):
        replay.plan(saved, 0)


def tensors_of(saved: Path) -> dict[str, torch.Tensor]:
    sig = artifacts.read(saved, 0).signature
    return {t.name: torch.zeros(t.shape, dtype=mpk.harness.torch_dtype(t.dtype)) for t in sig.tensors}


def test_an_edited_source_is_not_run_by_the_slice_references(saved):
    source = saved / "test_rank0.cu"
    source.write_text(source.read_text().replace("case 0:", "case 0:  // edited"))
    assert replay.plan(saved, 0).output.edited.endswith("they differ from line 25 on")
    pk = mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), emulate="reference")
    with pytest.raises(
        EmulationError, match=r"test_rank0\.cu is not the source its task graph generates .*The slice-reference emulator runs"
    ):
        pk.compile()
    pk = mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), emulate=True)  # the CUDA bodies: the edit runs
    pk.compile()
    pk.finalize()


@pytest.mark.parametrize(
    "override",
    [dict(world_size=2), dict(mpi_rank=1), dict(test_mode=False), dict(max_num_batched_tokens=8), dict(placement="locality")],
)
def test_an_override_that_contradicts_the_saved_graph_is_refused(saved, override):
    """Each had been taken: the saved schedule ran anyway, or the launch failed naming another rank."""
    ((k, v),) = override.items()
    with pytest.raises(ConfigError, match=rf"{k}={v!r} contradicts the saved graph, built with {k}=.*; replay it with the saved"):
        mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), emulate="reference", **override)


def test_overrides_of_how_a_replay_runs_are_taken(saved):
    pk = mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), emulate="reference", watchdog_timeout=9.0, test_mode=True)
    assert pk.params.watchdog_timeout == 9.0  # and test_mode=True is what was saved


def test_params_of_the_signature_are_checked_as_the_kernel_checks_them(saved):
    edit(signature_file(saved), lambda s: s["params"].update(page_size=0))
    with pytest.raises(ConfigError, match=r"signature_rank0\.json: params: page_size=0 must be an integer in \[1, 2147483647\]"):
        mpk.PersistentKernel.from_artifacts(saved, {}, compile_only=True)


def test_a_consistent_directory_too_large_for_the_machine(saved, monkeypatch):
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "900")  # the kernel itself needs 572 B
    tensors = tensors_of(saved)
    del tensors["y"]  # an intermediate would be allocated here; say it is one
    edit(signature_file(saved), lambda s: s["tensors"][1].update(kind="intermediate"))
    edit(graph_file(saved), lambda g: g["tensors"][1].update(kind="intermediate"))
    with pytest.raises(
        MemoryBudgetError,
        match=r"replay of .*/out: tensor 'y' \(bf16 \[8, 64\]\) needs 1 KiB of host memory, more than the 900 B set by "
        r"MPK_MEMORY_LIMIT; the signature's shapes are too large for this machine, or set MPK_MEMORY_LIMIT",
    ):
        mpk.PersistentKernel.from_artifacts(saved, tensors, compile_only=True)


def test_a_build_error_of_an_edited_source_names_the_users_file(saved):
    """nvcc's lines pointed at the cache's copy under failed/; the line numbers are the user's file's."""
    source = saved / "test_rank0.cu"
    lines = source.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("namespace mpk"))
    lines.insert(at + 1, "int this is not C++;")
    source.write_text("\n".join(lines) + "\n")
    pk = mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), compile_only=True)
    with pytest.raises(mpk.BuildError, match=rf"{re.escape(str(source))}\({at + 2}\): error"):
        pk.compile()
