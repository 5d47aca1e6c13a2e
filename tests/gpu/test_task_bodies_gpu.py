"""Every task body alone (one thread block per task slice, no scheduler) against its reference:
the first level of verification, under the persistent kernel's."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.harness import find_reference as find

bf = torch.bfloat16


def run_bodies(pk):
    pk.compile()
    bodies = pk.compile_task_bodies()
    bodies()
    bodies.synchronize()
    return bodies


@pytest.mark.parametrize("target_cc", [80, 90])
@pytest.mark.parametrize(
    "batch,k,n,tasks",
    [(1, 4096, 12288, 96), (4, 4096, 12288, 128), (16, 12288, 4096, 128), (7, 512, 512, 4), (32, 1024, 512, 8), (3, 200, 96, 3)],
)
def test_linear_bodies(make_pk, target_cc, batch, k, n, tasks):
    pk = make_pk(target_cc=target_cc)
    x = torch.randn(batch, k, dtype=bf, device="cuda")
    w = torch.randn(n, k, dtype=bf, device="cuda") / k**0.5
    r = torch.randn(batch, n, dtype=bf, device="cuda")
    y = torch.full((batch, n), float("nan"), dtype=bf, device="cuda")
    yr = torch.full((batch, n), float("nan"), dtype=bf, device="cuda")
    X, W = pk.attach_input(x, "x"), pk.attach_input(w, "w")
    pk.linear_layer(input=X, weight=W, output=pk.attach_input(y, "y"), grid_dim=(tasks, 1, 1), block_dim=pk.block_dim)
    pk.linear_with_residual_layer(
        input=X,
        weight=W,
        residual=pk.attach_input(r, "r"),
        output=pk.attach_input(yr, "yr"),
        grid_dim=(tasks, 1, 1),
        block_dim=pk.block_dim,
    )
    run_bodies(pk)
    torch.testing.assert_close(y, find("linear")(x, w), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(yr, find("linear_with_residual")(x, w, r), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("target_cc", [80, 90])
def test_elementwise_bodies(make_pk, target_cc):
    pk = make_pk(
        target_cc=target_cc,
        max_num_batched_tokens=8,
        max_seq_length=8,
        max_num_pages=8,
        meta_tensors={"tokens": torch.randint(0, 1000, (1, 8), dtype=torch.int64, device="cuda")},
    )
    nan = float("nan")
    mid = torch.randn(8, 2 * 4096, dtype=bf, device="cuda")
    act = torch.full((8, 4096), nan, dtype=bf, device="cuda")
    table = torch.randn(1000, 1024, dtype=bf, device="cuda")
    emb = torch.full((8, 1024), nan, dtype=bf, device="cuda")
    logits = torch.randn(8, 32000, dtype=bf, device="cuda")
    vals = torch.full((8, 32), nan, device="cuda")
    idx = torch.full((8, 32), -1, dtype=torch.int64, device="cuda")
    tok = torch.full((8,), -1, dtype=torch.int64, device="cuda")
    x, nw = torch.randn(8, 1024, dtype=bf, device="cuda"), torch.randn(1024, dtype=bf, device="cuda")
    xn = torch.full((8, 1024), nan, dtype=bf, device="cuda")
    bd = pk.block_dim
    pk.silu_mul_layer(input=pk.attach_input(mid, "mid"), output=pk.attach_input(act, "act"), grid_dim=(32, 1, 1), block_dim=bd)
    ids = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
    pk.embed_layer(
        input=ids, weight=pk.attach_input(table, "table"), output=pk.attach_input(emb, "emb"), grid_dim=(8, 1, 1), block_dim=bd
    )
    V, I = pk.attach_input(vals, "vals"), pk.attach_input(idx, "idx")
    pk.argmax_partial_layer(input=pk.attach_input(logits, "logits"), values=V, indices=I, grid_dim=(32, 1, 1), block_dim=bd)
    pk.argmax_reduce_layer(values=V, indices=I, output=pk.attach_input(tok, "tok"), grid_dim=(2, 1, 1), block_dim=bd)
    pk.rmsnorm_layer(
        input=pk.attach_input(x, "x"),
        weight=pk.attach_input(nw, "nw"),
        output=pk.attach_input(xn, "xn"),
        grid_dim=(8, 1, 1),
        block_dim=bd,
    )
    bodies = run_bodies(pk)
    torch.testing.assert_close(act, find("silu_mul")(mid, num_groups=32), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(emb, table[bodies.meta["input_tokens"]])
    torch.testing.assert_close(tok, torch.argmax(logits.float(), dim=-1))
    torch.testing.assert_close(xn, find("rmsnorm")(x, nw), atol=2e-2, rtol=2e-2)


def test_out_of_range_token_is_an_error_in_bodies_and_in_the_kernel(make_pk):
    tokens = torch.tensor([[3, 99, 5, 7]], dtype=torch.int64, device="cuda")  # 99 is outside a vocabulary of 50
    pk = make_pk(max_num_batched_tokens=4, max_seq_length=4, max_num_pages=4, meta_tensors={"tokens": tokens})
    ids = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
    out = torch.zeros(4, 64, dtype=bf, device="cuda")
    pk.embed_layer(
        input=ids,
        weight=pk.attach_input(torch.randn(50, 64, dtype=bf, device="cuda"), "table"),
        output=pk.attach_input(out, "out"),
        grid_dim=(2, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    with pytest.raises(mpk.KernelError, match=r"token id 99 is outside the vocabulary \[0, 50\) of 'table'"):
        pk()
        pk.synchronize()
    bodies = pk.compile_task_bodies()
    bodies()
    with pytest.raises(mpk.KernelError, match="token id 99"):
        bodies.synchronize()
