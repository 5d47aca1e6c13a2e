"""Every graph error is a clear exception raised by the call that caused it, before anything is
compiled, and naming the fix: grids, layouts, names, foreign or unattached tensors, arity."""

from __future__ import annotations

import pytest
import torch
from cpu_helpers import graph_of, rmsnorm_tensors

from mpk_runtime.errors import ArityError, GraphError, GridError, LayoutError, MpkError, NameConflictError, ShapeError


def int_tensors(pk, n: int, rows: int = 8, prefix: str = "t"):
    return [pk.attach_input(torch.zeros(rows, dtype=torch.int32), name=f"{prefix}{i}") for i in range(n)]


def test_grid_not_dividing_a_dim_suggests_divisors(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(
        GridError,
        match=r"rmsnorm_0: grid_dim x=3 does not divide dim 0 \(size 16\) of 'input' "
        r"\(rmsnorm splits input's dim 0 by grid x\); use a divisor of 16, e\.g\. 16, 8",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(3, 1, 1), block_dim=pk.block_dim)


def test_grid_larger_than_the_dim(make_pk):
    pk = make_pk()
    a, b = int_tensors(pk, 2, rows=4)
    with pytest.raises(GridError, match=r"grid_dim x=8 does not divide dim 0 \(size 4\).*e\.g\. 4, 2, 1"):
        pk.noop_layer([a], [b], grid_dim=(8, 1, 1), block_dim=pk.block_dim)


@pytest.mark.parametrize(("grid", "axis"), [((16, 2, 1), "y=2"), ((16, 1, 4), "z=4")])
def test_grid_axis_that_splits_nothing(make_pk, grid, axis):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    a = axis[0]
    with pytest.raises(
        GridError,
        match=rf"grid_dim {axis}, but rmsnorm splits nothing along {a}: every task would do "
        rf"the same work; use {a}=1",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=grid, block_dim=pk.block_dim)


@pytest.mark.parametrize(
    "grid", [(16, 1), (16, 1, 1, 1), (0, 1, 1), (-1, 1, 1), (16.0, 1, 1), (True, 1, 1), 16, "16", (65536, 1, 1), None]
)
def test_malformed_grid_dim(make_pk, grid):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(
        GridError,
        match=r"rmsnorm_layer\(\): grid_dim=.* must be three integers in \[1, 65535\], "
        r"e\.g\. grid_dim=\(16, 1, 1\)",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=grid, block_dim=pk.block_dim)


def test_grid_dim_may_be_a_list(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=[4, 1, 1], block_dim=list(pk.block_dim))
    assert graph_of(pk).layers[0].grid == (4, 1, 1)


def test_non_contiguous_tensor(make_pk):
    pk = make_pk()
    with pytest.raises(
        LayoutError,
        match=r"tensor 'xt' with shape \(64, 16\) and strides \(1, 64\) is not contiguous; "
        r"pass tensor\.contiguous\(\)",
    ):
        pk.attach_input(torch.zeros(16, 64).t(), name="xt")


def test_duplicate_name(make_pk):
    pk = make_pk()
    pk.attach_input(torch.zeros(4), name="x")
    with pytest.raises(
        NameConflictError,
        match=r"a tensor named 'x' is already attached \(DTensor\('x', shape=\(4,\), "
        r"dtype=fp32\)\); give each tensor a unique name",
    ):
        pk.attach_input(torch.zeros(4), name="x")


def test_intermediate_name_conflicts_too(make_pk):
    pk = make_pk()
    pk.attach_input(torch.zeros(4), name="x")
    with pytest.raises(NameConflictError, match="'x'"):
        pk.new_tensor((4,), torch.float32, name="x")


def test_zero_dim_tensor(make_pk):
    with pytest.raises(GraphError, match=r"tensor 's' is a 0-d scalar; attach it as shape \(1,\) with tensor\.reshape\(1\)"):
        make_pk().attach_input(torch.tensor(1.0), name="s")


@pytest.mark.parametrize("name", ["", None, 3])
def test_tensor_name_must_be_a_string(make_pk, name):
    with pytest.raises(GraphError, match=rf"tensor name must be a non-empty string, got {name!r}"):
        make_pk().attach_input(torch.zeros(4), name=name)


def test_attach_needs_a_tensor(make_pk):
    with pytest.raises(GraphError, match=r"tensor 'x' must be a torch\.Tensor, got list"):
        make_pk().attach_input([1, 2], name="x")


def test_unsupported_dtype_is_named(make_pk):
    with pytest.raises(TypeError, match=r"dtype torch\.complex64 is not supported by the runtime; use one of"):
        make_pk().attach_input(torch.zeros(4, dtype=torch.complex64), name="c")


def test_plain_torch_tensor_passed_to_a_layer(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(
        GraphError,
        match=r"rmsnorm_layer\(\): argument 'weight' is a plain torch\.Tensor; attach it "
        r"first: weight = pk\.attach_input\(tensor, name='weight'\)",
    ):
        pk.rmsnorm_layer(
            input=x, weight=torch.ones(64, dtype=torch.bfloat16), output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim
        )


def test_non_tensor_argument(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(GraphError, match=r"argument 'output' must be a tensor from pk\.attach_input / pk\.new_tensor, got 'y'"):
        pk.rmsnorm_layer(input=x, weight=w, output="y", grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_tensor_of_another_kernel(make_pk):
    pk, other = make_pk(), make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    foreign = other.attach_input(torch.ones(64, dtype=torch.bfloat16), name="w")  # even under the same name
    with pytest.raises(GraphError, match=r"argument 'weight' \(DTensor\('w', .*\)\) belongs to another PersistentKernel"):
        pk.rmsnorm_layer(input=x, weight=foreign, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_intermediate_read_but_never_written(make_pk):
    pk = make_pk()
    (out,) = int_tensors(pk, 1)
    tmp = pk.new_tensor((8,), torch.int32, name="tmp")
    pk.noop_layer([tmp], [out], grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    with pytest.raises(GraphError, match=r"intermediate tensor 'tmp' is read but no layer writes it"):
        pk.compile()
    assert pk.build_result is None  # failed before building


def test_intermediate_written_then_read_is_fine_and_owned(make_pk):
    pk = make_pk()
    a, b = int_tensors(pk, 2)
    tmp = pk.new_tensor((8,), torch.int32, name="tmp")
    pk.noop_layer([a], [tmp], grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.noop_layer([tmp], [b], grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    assert tmp.kind == "intermediate" and tmp.direction == "INOUT"
    assert pk.tensor("tmp") is tmp.data and tuple(pk.tensor("tmp").shape) == (8,)


@pytest.mark.parametrize("dims", [(0, 4), (-1,), (2.0,)])
def test_new_tensor_dims_must_be_positive_ints(make_pk, dims):
    with pytest.raises(GraphError, match=r"new_tensor 'tmp': dims=.* must be positive integers"):
        make_pk().new_tensor(dims, torch.float32, name="tmp")


def test_unknown_tensor_name(make_pk):
    pk = make_pk()
    int_tensors(pk, 2)
    with pytest.raises(GraphError, match=r"no tensor named 'nope'; known: t0, t1"):
        pk.tensor("nope")


def test_compile_with_no_layers(make_pk):
    pk = make_pk()
    int_tensors(pk, 1)
    with pytest.raises(GraphError, match=r"nothing to compile: add layers \(pk\.<task>_layer\(\.\.\.\)\) before compile\(\)"):
        pk.compile()


def test_eight_inputs_is_an_arity_error(make_pk):
    pk = make_pk()
    *ins, out = int_tensors(pk, 9)
    with pytest.raises(
        ArityError,
        match=r"noop_0: 8 inputs and 1 outputs per task; a task carries at most 7 inputs "
        r"and 3 outputs\. Split the layer in two",
    ):
        pk.noop_layer(ins, [out], grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_four_outputs_is_an_arity_error(make_pk):
    pk = make_pk()
    a, *outs = int_tensors(pk, 5)
    with pytest.raises(ArityError, match=r"1 inputs and 4 outputs"):
        pk.noop_layer([a], outs, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_seven_inputs_and_three_outputs_fit(make_pk):
    pk = make_pk()
    ts = int_tensors(pk, 10)
    pk.noop_layer(ts[:7], ts[7:], grid_dim=(8, 1, 1), block_dim=pk.block_dim)
    assert len(graph_of(pk).tasks) == 8


def test_noop_needs_an_output(make_pk):
    pk = make_pk()
    (a,) = int_tensors(pk, 1)
    with pytest.raises(ShapeError, match="noop: give at least one output tensor"):
        pk.noop_layer([a], [], grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_probe_needs_int32(make_pk):
    pk = make_pk()
    a = pk.attach_input(torch.zeros(8), name="a")
    (b,) = int_tensors(pk, 1)
    with pytest.raises(TypeError, match=r"noop\(probe=True\): inputs\[0\] .* must be int32"):
        pk.noop_layer([a], [b], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)


def test_missing_layer_argument_is_a_type_error(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(TypeError, match=r"rmsnorm_layer\(\): missing a required argument: 'weight'"):
        pk.rmsnorm_layer(input=x, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_a_rejected_layer_leaves_the_graph_unchanged(make_pk):
    pk = make_pk()
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=64)
    with pytest.raises(GridError):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(3, 1, 1), block_dim=pk.block_dim)
    assert graph_of(pk).layers == [] and graph_of(pk).tasks == []
    assert (x.direction, y.direction) == ("IN", "IN")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    assert graph_of(pk).layers[0].name == "rmsnorm_0"  # the failed call did not use up a name


@pytest.mark.parametrize("views", [lambda x: (x, x), lambda x: (x[:8], x[4:12])], ids=["same", "overlapping"])
def test_aliased_attachments_are_rejected_or_ordered(make_pk, views):
    """Either attach_input refuses memory that another attached tensor already covers, or the
    reader of the alias waits for the writer."""
    pk = make_pk()
    src, out = int_tensors(pk, 2)
    first, second = views(torch.zeros(16, dtype=torch.int32))
    try:
        a = pk.attach_input(first, name="a")
        b = pk.attach_input(second, name="b")
    except MpkError:
        return
    pk.noop_layer([src], [a], grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    pk.noop_layer([b], [out], grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    assert graph_of(pk).tasks[1].deps == {0: "raw"}


def test_probe_slices_must_have_one_size(make_pk):
    pk = make_pk()
    a = pk.attach_input(torch.zeros(8, dtype=torch.int32), name="a")
    b = pk.attach_input(torch.zeros(16, dtype=torch.int32), name="b")
    (c,) = int_tensors(pk, 1, prefix="c")
    with pytest.raises(
        ShapeError,
        match=r"noop\(probe=True\): every input slice must have the same size; got "
        r"inputs\[0\]: 1, inputs\[1\]: 2",
    ):
        pk.noop_layer([a, b], [c], grid_dim=(8, 1, 1), block_dim=pk.block_dim, probe=True)
