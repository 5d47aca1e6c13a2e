"""bench/bench_allreduce.py's chain without a GPU: two ranks emulated. The chain must time the GPU's
all-reduces, not the host's check of every tensor at each launch, so its outputs are two tensors in
turn; each all-reduce still has its own communication buffer, and the last output is exact."""

from __future__ import annotations

import pytest
import torch
from cpu_helpers import bench_module

import mpk_runtime as mpk
from mpk_runtime.tasks import references


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_allreduce")


def rank_kernel(rank: int, batch: int) -> mpk.PersistentKernel:
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(
        test_mode=True,
        target_cc=90,
        world_size=2,
        mpi_rank=rank,
        num_workers=4,
        max_num_batched_tokens=batch,
        max_seq_length=batch,
        max_num_pages=batch,
        emulate=True,
    )
    return mpk.PersistentKernel(**p)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_the_chain_takes_two_outputs_in_turn_and_ends_exact(bench, n):
    batch, hidden = 2, 256
    xs = torch.randn(2, batch, hidden, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
    kernels, lasts = [], []
    for rank in range(2):
        pk = rank_kernel(rank, batch)
        lasts.append(bench.add_chain(pk, xs[rank].clone(), 2, (4, 1, 1), n))
        pk.compile()
        kernels.append(pk)
    tensors = kernels[0].compiled_graph.tensors
    assert [t.name for t in tensors if t.kind == "attached"] == ["x", "out0", "out1"][: 1 + min(n, 2)]
    assert sum(t.kind == "comm" for t in tensors) == n
    for seed in (0, 1):
        mpk.run_emulated_ranks(kernels, seed=seed)
        want = references.find("allreduce")(list(xs)) * 2 ** (n - 1)  # x + x doubles exactly
        for rank in range(2):
            assert torch.equal(lasts[rank], want), f"rank {rank}, seed {seed}"
