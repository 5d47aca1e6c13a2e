"""rmsnorm_linear without a GPU: its argument errors (each names the value and the fix) and
compile-only builds of both body paths for sm80, sm90 and sm100 (tests/scenes/rmsnorm_linear runs
the body itself, emulated)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.errors import ConfigError, DTypeError, ShapeError

bf = torch.bfloat16


def layer(pk, batch=4, k=1024, n=256, norm_shape=None, norm_dtype=bf, tasks=4, **scalars):
    x = pk.attach_input(torch.empty(batch, k, dtype=bf), "x")
    w = pk.attach_input(torch.empty(n, k, dtype=bf), "w")
    nw = pk.attach_input(torch.empty(*(norm_shape or (k,)), dtype=norm_dtype), "nw")
    y = pk.attach_input(torch.empty(batch, n, dtype=bf), "y")
    grid = (tasks, 1, 1)
    pk.rmsnorm_linear_layer(input=x, weight=w, norm_weight=nw, output=y, grid_dim=grid, block_dim=pk.block_dim, **scalars)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(norm_shape=(512,)), ShapeError, r"norm_weight must have shape \(1024,\) to match input \(4, 1024\), got \(512,\)"),
        (dict(norm_shape=(1, 1024)), ShapeError, r"norm_weight must have shape \(1024,\)"),
        (dict(norm_dtype=torch.float16), DTypeError, r"norm_weight is fp16 but input is bf16; use one dtype"),
        (dict(eps=0.0), ConfigError, r"eps=0.0 must be a positive number, e.g. 1e-6"),
        (dict(eps=float("nan")), ConfigError, r"eps=nan must be a positive number"),
    ],
)
def test_bad_arguments_are_named_with_the_fix(make_pk, kwargs, error, match):
    pk = make_pk(90)
    with pytest.raises(error, match=match):
        layer(pk, **kwargs)


def test_a_weight_of_other_in_features_is_refused_as_for_linear(make_pk):
    pk = make_pk(90)
    x = pk.attach_input(torch.empty(2, 64, dtype=bf), "x")
    w = pk.attach_input(torch.empty(16, 32, dtype=bf), "w")
    nw = pk.attach_input(torch.empty(64, dtype=bf), "nw")
    y = pk.attach_input(torch.empty(2, 16, dtype=bf), "y")
    with pytest.raises(ShapeError, match=r"rmsnorm_linear: weight \(16, 32\) must have in_features=64"):
        pk.rmsnorm_linear_layer(input=x, weight=w, norm_weight=nw, output=y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)


@pytest.mark.parametrize("cc", [80, 90, 100])
def test_both_paths_compile_for_every_arch(make_pk, cc):
    pk = make_pk(cc)
    layer(pk)  # the tensor-core path
    x = pk.attach_input(torch.empty(3, 100, dtype=bf), "x2")
    w = pk.attach_input(torch.empty(40, 100, dtype=bf), "w2")
    nw = pk.attach_input(torch.empty(100, dtype=bf), "nw2")
    y = pk.attach_input(torch.empty(3, 40, dtype=bf), "y2")
    pk.rmsnorm_linear_layer(input=x, weight=w, norm_weight=nw, output=y, grid_dim=(5, 1, 1), block_dim=pk.block_dim)
    pk.compile()


def test_a_variant_past_the_blocks_shared_memory_is_named_by_the_build(make_pk, monkeypatch, tmp_path):
    """512 rows of a 256-wide input in one task: the kernel's own assertion had named no layer
    (a model with max_batch_tokens=512 failed so inside nvcc)."""
    from mpk_runtime.errors import BuildError

    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    pk = make_pk(90, max_num_batched_tokens=512, max_seq_length=512, max_num_pages=512)
    layer(pk, batch=512, k=256, n=64, tasks=4)
    with pytest.raises(BuildError, match=r"variant 0 \(rmsnorm_linear: rmsnorm_linear_0\) needs more dynamic shared memory"):
        pk.compile()
