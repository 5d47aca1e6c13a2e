"""RMSNorm through the whole runtime in test mode, against the PyTorch reference, on the sm80 path
(128 threads, PTX JIT-compiled on Hopper) and the sm90 path (256 threads)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.harness import find_reference as find

rmsnorm = find("rmsnorm")

SHAPES = [  # batch, hidden, tasks
    (1, 4096, 1),
    (16, 4096, 16),
    (16, 4096, 4),  # 4 rows per task
    (4, 8192, 2),
    (7, 1001, 7),  # odd hidden: the scalar path
]


@pytest.mark.parametrize("target_cc", [80, 90])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("batch,hidden,tasks", SHAPES, ids=[f"b{b}_h{h}_t{t}" for b, h, t in SHAPES])
def test_rmsnorm_matches_reference(make_pk, target_cc, dtype, batch, hidden, tasks):
    pk = make_pk(target_cc=target_cc)
    assert pk.block_dim == ((128 if target_cc == 80 else 256), 1, 1)
    x = torch.randn(batch, hidden, dtype=dtype, device="cuda")
    w = torch.randn(hidden, dtype=dtype, device="cuda")
    out = torch.full((batch, hidden), float("nan"), dtype=dtype, device="cuda")  # poisoned
    pk.rmsnorm_layer(
        input=pk.attach_input(x, "x"),
        weight=pk.attach_input(w, "w"),
        output=pk.attach_input(out, "out"),
        grid_dim=(tasks, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    pk()
    pk.synchronize()
    torch.testing.assert_close(out, rmsnorm(x, w), atol=1e-2, rtol=1e-2)
    # test mode ran exactly one pass, and prepare_next_batch finalized it
    assert pk.meta_tensors["step"][0].item() == pk.meta_tensors["prompt_lengths"][0].item()


def test_running_twice_gives_the_same_result(make_pk):
    pk = make_pk()
    x = torch.randn(8, 2048, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(2048, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(x)
    pk.rmsnorm_layer(
        input=pk.attach_input(x, "x"),
        weight=pk.attach_input(w, "w"),
        output=pk.attach_input(out, "out"),
        grid_dim=(8, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    results = []
    for _ in range(2):
        out.fill_(float("nan"))
        pk()
        pk.synchronize()
        results.append(out.clone())
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
    torch.testing.assert_close(results[0], rmsnorm(x, w), atol=1e-2, rtol=1e-2)
