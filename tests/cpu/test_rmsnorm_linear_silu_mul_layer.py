"""rmsnorm_linear_silu_mul without a GPU: its argument errors (each names the value and the fix) and
compile-only builds of both body paths for sm80, sm90 and sm100 (tests/scenes/rmsnorm_linear_silu_mul
runs the body itself, emulated)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.errors import ConfigError, DTypeError, GridError, ShapeError

bf = torch.bfloat16


def layer(pk, batch=4, k=1024, inter=256, w_rows=None, w_cols=None, out_shape=None, dtype=bf, nw_shape=None, tasks=4, **scalars):
    x = pk.attach_input(torch.empty(batch, k, dtype=bf), "x")
    w = pk.attach_input(torch.empty(w_rows or 2 * inter, w_cols or k, dtype=dtype), "w")
    nw = pk.attach_input(torch.empty(*(nw_shape or (k,)), dtype=bf), "nw")
    y = pk.attach_input(torch.empty(*(out_shape or (batch, inter)), dtype=bf), "y")
    pk.rmsnorm_linear_silu_mul_layer(
        input=x, weight=w, norm_weight=nw, output=y, grid_dim=(tasks, 1, 1), block_dim=pk.block_dim, **scalars
    )


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            dict(w_rows=256),
            ShapeError,
            r"output must be \(batch, inter\) = \(4, 128\) for weight \(256, 1024\) \(gate and up rows\), got \(4, 256\); "
            r"build the weight with pk.shuffle_tensors\(\[w_gate, w_up\], shuffled_dim=0, num_groups=grid x\)",
        ),
        (dict(w_rows=513), ShapeError, r"output must be \(batch, inter\) = \(4, 256\) for weight \(513, 1024\)"),
        (dict(w_cols=512), ShapeError, r"weight \(512, 512\) must have in_features=1024 columns to match input \(4, 1024\)"),
        (dict(out_shape=(4, 256, 1)), ShapeError, r"output must be \(batch, out_features\) = \(4, 256\), got \(4, 256, 1\)"),
        (dict(out_shape=(2, 256)), ShapeError, r"output must be \(batch, out_features\) = \(4, 256\), got \(2, 256\)"),
        (dict(dtype=torch.float16), DTypeError, r"weight is fp16 but input is bf16; use one dtype"),
        (dict(nw_shape=(512,)), ShapeError, r"norm_weight must have shape \(1024,\) to match input \(4, 1024\), got \(512,\)"),
        (dict(eps=-1.0), ConfigError, r"eps=-1.0 must be a positive number, e.g. 1e-6"),
        (dict(tasks=3), GridError, r"grid_dim x=3 does not divide"),
    ],
)
def test_bad_arguments_are_named_with_the_fix(make_pk, kwargs, error, match):
    pk = make_pk(90)
    with pytest.raises(error, match=match):
        layer(pk, **kwargs)


@pytest.mark.parametrize("cc", [80, 90, 100])
def test_both_paths_compile_for_every_arch(make_pk, cc):
    pk = make_pk(cc)
    layer(pk)  # the tensor-core path: 128 rows a task, 64 gate and 64 up
    x = pk.attach_input(torch.empty(3, 100, dtype=bf), "x2")
    w = pk.attach_input(torch.empty(80, 100, dtype=bf), "w2")
    nw = pk.attach_input(torch.empty(100, dtype=bf), "nw2")
    y = pk.attach_input(torch.empty(3, 40, dtype=bf), "y2")
    pk.rmsnorm_linear_silu_mul_layer(input=x, weight=w, norm_weight=nw, output=y, grid_dim=(5, 1, 1), block_dim=pk.block_dim)
    pk.compile()
