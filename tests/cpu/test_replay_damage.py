"""Replays of compile output directories damaged in ways test_replay_inputs.py does not cover: JSON
that Python cannot even parse into values, empty or misplaced meta files, a layer whose opcode or
scalar values are not its task's, variants that are not the instantiation their layers make,
derived tensors whose recipe cannot be applied, the wrong kind of ``tensors`` or ``rank``, and a
source that lost the runtime's entry points. Each is an MpkError that
names the file (or argument) and the fix, never a raw exception from deep inside."""

from __future__ import annotations

import re

import pytest
import test_replay_inputs
import torch
from test_replay_inputs import edit, graph_file, signature_file, tensors_of

import mpk_runtime as mpk
from mpk_runtime.build import artifacts, replay
from mpk_runtime.errors import BuildError, ConfigError, GraphError, MetaTensorError

saved = test_replay_inputs.saved  # the fixture: a compile output directory of two rmsnorm layers


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, r"not ours \(RecursionError: maximum recursion depth exceeded"),
        ('{"format": ' + "9" * 5000 + "}", r"not ours \(ValueError: Exceeds the limit \(4300 digits\)"),
    ],
    ids=["nested too deeply", "an integer of 5000 digits"],
)
def test_json_python_cannot_parse(saved, text, message):
    signature_file(saved).write_text(text)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(signature_file(saved)))}: {message}.*recompile to refresh"):
        artifacts.read(saved, 0)


def test_a_graph_of_another_version_is_refused_by_its_own_reader(saved):
    edit(graph_file(saved), lambda g: g.update(version=2))
    with pytest.raises(
        GraphError, match=r"task_graph_rank0\.json: expected mpk-task-graph version 1, found mpk-task-graph version 2"
    ):
        artifacts.read(saved, 0)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(b""), r"cannot be loaded \(EOFError: no message\); recompile to refresh it"),
        (lambda p: p.mkdir(), r"cannot be loaded \(IsADirectoryError: .*\); recompile to refresh it"),
    ],
    ids=["empty", "a directory"],
)
def test_a_meta_file_that_is_no_file_of_meta_tensors(saved, damage, message):
    damage(saved / "meta_rank0.pt")  # a directory was skipped: the replay ran with default meta tensors
    with pytest.raises(GraphError, match=rf"meta_rank0\.pt: {message}"):
        artifacts.read(saved, 0)


def test_saved_meta_tensors_that_the_kernel_refuses_name_the_file(saved):
    torch.save({"bogus": torch.zeros(3)}, saved / "meta_rank0.pt")
    with pytest.raises(MetaTensorError, match=r"meta_rank0\.pt: unknown meta tensor 'bogus'; .*; recompile the directory$"):
        mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), compile_only=True)


LAYER_FAULTS = {
    "an opcode of another task": (
        lambda g: g["layers"][0].update(opcode=70000),
        r"layers\[0\]\.opcode: 70000, but rmsnorm has opcode \d+; recompile the directory",
    ),
    "a scalar value missing": (
        lambda g: g["layers"][1].update(values={}),
        r"layers\[1\]\.values: rmsnorm needs the numbers eps, missing \['eps'\], not numbers none",
    ),
    "a scalar value of text": (
        lambda g: g["layers"][0]["values"].update(eps="1e-6"),
        r"layers\[0\]\.values: rmsnorm needs the numbers eps, missing none, not numbers \['eps'\]",
    ),
    # the kernel reads the descriptor's scalars, the slice references the values: a file where they
    # differ had shown as a wrong result of the body
    "a value the descriptor does not carry": (
        lambda g: g["layers"][0]["values"].update(eps=0.5),
        r"layers\[0\]\.scalars\[0\]: 1e-06, but values.eps is 0.5, which the descriptor carries as 0.5; the file is damaged",
    ),
    "a descriptor scalar the values do not give": (
        lambda g: g["layers"][0].update(scalars=[{"f": 0.5}, {"i": 2}]),
        r"layers\[0\]\.scalars\[0\]: 0.5, but values.eps is 1e-06, which the descriptor carries as 9.99",
    ),
}


@pytest.mark.parametrize("fault", LAYER_FAULTS, ids=list(LAYER_FAULTS))
def test_a_layer_that_is_not_its_tasks(saved, fault):
    change, message = LAYER_FAULTS[fault]
    edit(graph_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(graph_file(saved)))}: {message}"):
        replay.plan(saved, 0)


def test_a_derived_tensor_whose_recipe_does_not_apply(saved):
    recipe = {"op": "shuffle_tensors", "inputs": ["x"], "shuffled_dim": 0, "num_groups": 3}
    edit(signature_file(saved), lambda s: s["tensors"][3].update(kind="derived", derived_from=recipe))
    edit(graph_file(saved), lambda g: g["tensors"][3].update(kind="derived"))
    tensors = tensors_of(saved)
    del tensors["w"]
    with pytest.raises(
        GraphError, match=r"replay of .*/out: 'w' cannot be derived as its signature says: shuffle_tensors: num_groups=3"
    ):
        mpk.PersistentKernel.from_artifacts(saved, tensors, compile_only=True)


@pytest.mark.parametrize("tensors", [None, []], ids=["None", "a list"])
def test_tensors_that_are_not_a_dict(saved, tensors):
    with pytest.raises(GraphError, match=r"tensors must be a dict of name -> tensor, got (NoneType|list)$"):
        mpk.PersistentKernel.from_artifacts(saved, tensors, compile_only=True)


@pytest.mark.parametrize("rank", [-1, "0", True])
def test_a_rank_that_is_not_one(saved, rank):
    with pytest.raises(ConfigError, match=rf"^rank={re.escape(repr(rank))} must be an integer >= 0"):
        artifacts.read(saved, rank)


@pytest.mark.parametrize("where", [None, 3])
def test_a_directory_that_is_not_a_path(where):
    """from_artifacts(None, ...) had ended in pathlib's TypeError."""
    with pytest.raises(ConfigError, match=rf"^output_dir={where!r} must be the path of a compile output directory"):
        mpk.PersistentKernel.from_artifacts(where, {})


def test_a_source_without_the_runtimes_entry_points(saved):
    """An edited test_rank0.cu emptied by mistake: nvcc and g++ build it, the loader finds nothing."""
    (saved / "test_rank0.cu").write_text("// nothing left\n")
    pk = mpk.PersistentKernel.from_artifacts(saved, tensors_of(saved), emulate=True)
    try:
        with pytest.raises(BuildError, match=r"undefined symbol: mpk_emu_\w+: the module was built from a source that lacks"):
            pk.compile()
    finally:
        pk.finalize()


VARIANT_FAULTS = {  # the fixture's two layers are two variants: rmsnorm of 2 and of 4 rows a task
    "a call edited in the graph alone": (
        lambda g: g["variants"][0].update(call="rmsnorm_v2<__nv_bfloat16, 2, 64>(task, rt);"),
        r"variants\[0\]\.call: 'rmsnorm_v2<__nv_bfloat16, 2, 64>\(task, rt\);', but rmsnorm with its layers' template "
        r"arguments gives 'mpk::tasks::rmsnorm<__nv_bfloat16, 2, 64>\(task, rt\);'; recompile the directory \(to try "
        r"another instantiation, edit the source instead\)",
    ),
    "template arguments edited in a layer alone": (
        lambda g: g["layers"][1].update(template_args=["__half", "4", "64"]),
        r"variants\[1\]\.call: 'mpk::tasks::rmsnorm<__nv_bfloat16, 4, 64>\(task, rt\);', but rmsnorm with its layers' "
        r"template arguments gives 'mpk::tasks::rmsnorm<__half, 4, 64>\(task, rt\);'",
    ),
    "a shared memory expression edited": (
        lambda g: g["variants"][1].update(smem="4096"),
        r"variants\[1\]\.smem: '4096', but rmsnorm with its layers' template arguments gives None",
    ),
}


@pytest.mark.parametrize("fault", VARIANT_FAULTS, ids=list(VARIANT_FAULTS))
def test_a_variant_that_is_not_what_its_layers_make(saved, fault):
    """The source is generated from a variant's task and its layers' template arguments; a graph
    whose variant says another call is refused, not replayed as if that call ran."""
    change, message = VARIANT_FAULTS[fault]
    edit(graph_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(graph_file(saved)))}: {message}"):
        replay.plan(saved, 0)


STRUCTURE_FAULTS = {
    "layers of one variant with different template arguments": (
        lambda g: g["variants"][1].update(layers=["rmsnorm_1", "rmsnorm_0"]),
        r"variants\[1\]\.layers: names layers of different template arguments "
        r"\(<__nv_bfloat16, 2, 64>, <__nv_bfloat16, 4, 64>\); one variant is one set",
    ),
    "a variant of another task": (
        lambda g: g["variants"][0].update(task="silu_mul"),
        r"variants\[0\]\.layers: names \['rmsnorm_0'\], which are not silu_mul layers",
    ),
    "a variant of no layer": (
        lambda g: g["variants"][1].update(layers=[]),
        r"variants\[1\]\.layers: names no layer; a variant is made for the layers that use it",
    ),
    "a layer in two variants": (
        lambda g: (
            g["layers"][1].update(template_args=["__nv_bfloat16", "2", "64"]),
            g["variants"][1].update(layers=["rmsnorm_1", "rmsnorm_0"]),
        ),
        r"variants\[1\]\.layers: names \['rmsnorm_0'\], which variants\[0\] names too",
    ),
    "a task of a variant that leaves out its layer": (
        lambda g: g["tasks"][4].update(variant=0),
        r"tasks\[4\]\.variant: 0, whose layers \['rmsnorm_0'\] leave out rmsnorm_1",
    ),
}


@pytest.mark.parametrize("fault", STRUCTURE_FAULTS, ids=list(STRUCTURE_FAULTS))
def test_a_variant_that_is_not_one_instantiation(saved, fault):
    """A variant is one instantiation of its task, and the tasks of its layers run it; a graph that
    says otherwise is refused when it is read."""
    change, message = STRUCTURE_FAULTS[fault]
    edit(graph_file(saved), change)
    with pytest.raises(GraphError, match=rf"^{re.escape(str(graph_file(saved)))}: {message}"):
        artifacts.read(saved, 0)
