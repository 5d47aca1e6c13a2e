"""Graphs of no-op probe tasks on the GPU: chains, fan-out, fan-in and random DAGs, under both
placement policies. Every probe writes its depth in the graph (1 + its deepest input), so a task
that ran before one of its producers shows up as a wrong depth or INT32_MIN."""

from __future__ import annotations

import random

import pytest
import torch

POLICIES = ["locality", "round_robin"]


def probe_tensor(pk, name, n):
    return pk.attach_input(torch.full((n,), -7, dtype=torch.int32, device="cuda"), name)


def run(pk):
    pk.compile()
    pk()
    pk.synchronize()


@pytest.mark.parametrize("placement", POLICIES)
def test_chain(make_pk, placement):
    pk = make_pk(placement=placement)
    n = 300
    ts = [probe_tensor(pk, f"t{i}", 1) for i in range(n + 1)]
    ts[0].data.fill_(1)  # the source's depth (probes treat values < 1 as unwritten)
    for i in range(n):
        pk.noop_layer([ts[i]], [ts[i + 1]], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)
    run(pk)
    assert [t.data.item() for t in ts] == list(range(1, n + 2))


@pytest.mark.parametrize("placement", POLICIES)
def test_fan_out_then_fan_in(make_pk, placement):
    pk = make_pk(placement=placement)
    width = 256
    src, mid, wide, sink = (
        probe_tensor(pk, "src", 1),
        probe_tensor(pk, "mid", width),
        probe_tensor(pk, "wide", width),
        probe_tensor(pk, "sink", 1),
    )
    src.data.fill_(1)
    pk.noop_layer([src], [mid], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)  # writes all of mid
    pk.noop_layer([mid], [wide], grid_dim=(width, 1, 1), block_dim=pk.block_dim, probe=True)  # fan-out
    pk.noop_layer([wide], [sink], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)  # fan-in
    run(pk)
    assert mid.data.eq(2).all() and wide.data.eq(3).all() and sink.data.item() == 4


@pytest.mark.parametrize("placement", POLICIES)
@pytest.mark.parametrize("seed", range(4))
def test_random_dag(make_pk, placement, seed):
    """Layers of random widths reading up to 3 random earlier tensors: slices of different sizes
    overlap partially, so tasks depend on one, several or all tasks of a producer layer. The
    device's depths must equal the ones computed here, slice by slice."""
    rng = random.Random(seed)
    pk = make_pk(placement=placement)
    n = 8
    tensors, expected = [probe_tensor(pk, "t0", n)], [torch.ones(n, dtype=torch.int32)]
    tensors[0].data.fill_(1)
    for i in range(1, 60):
        ins = rng.sample(range(len(tensors)), k=min(len(tensors), rng.randint(1, 3)))
        width = rng.choice([1, 2, 4, 8])
        tensors.append(probe_tensor(pk, f"t{i}", n))
        pk.noop_layer([tensors[j] for j in ins], [tensors[-1]], grid_dim=(width, 1, 1), block_dim=pk.block_dim, probe=True)
        want = torch.empty(n, dtype=torch.int32)
        for k in range(width):
            part = slice(k * n // width, (k + 1) * n // width)
            want[part] = 1 + max(int(expected[j][part].max()) for j in ins)
        expected.append(want)
    run(pk)
    for i, (t, want) in enumerate(zip(tensors, expected)):
        assert torch.equal(t.data.cpu(), want), f"t{i}"


def test_independent_tasks_and_step(make_pk):
    pk = make_pk()
    n = 4096
    src, dst = probe_tensor(pk, "src", n), probe_tensor(pk, "dst", n)
    src.data.fill_(1)
    pk.noop_layer([src], [dst], grid_dim=(n, 1, 1), block_dim=pk.block_dim, probe=True)
    run(pk)
    assert dst.data.eq(2).all()
    assert pk.meta_tensors["step"][0].item() == pk.meta_tensors["prompt_lengths"][0].item()
