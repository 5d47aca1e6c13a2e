"""bench/bench_moe.torch_group_route, the torch side of `bench_moe.py --routing group` and of
`bench_moe_routing.py`: it must route as the layer's reference does, or the benches time torch doing
something else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_moe(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # bench_moe imports its neighbours layer_bench and timing
    import bench_moe

    yield bench_moe
    for name in ("bench_moe", "layer_bench", "timing", "span_phases"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("experts, groups, kept", [(128, 8, 4), (256, 8, 4), (64, 4, 1)])
def test_torch_group_route_chooses_and_weighs_as_the_reference(bench_moe, experts, groups, kept):
    g = torch.Generator().manual_seed(experts + groups)
    logits = torch.randn(5, experts, generator=g).to(torch.bfloat16)
    bias = torch.randn(experts, generator=g) * 0.1
    weights, experts_chosen = bench_moe.torch_group_route(logits, bias, groups, kept, 8, 2.5)
    ref_weights, ref_routing, _ = bench_moe.group_reference(logits, bias, 8, groups, kept, True, 2.5)
    slots = ref_routing.T.gather(1, experts_chosen)  # the reference's slot (j + 1) of each chosen expert
    assert torch.equal(slots, torch.arange(1, 9).expand(5, 8).to(slots.dtype))
    torch.testing.assert_close(weights, ref_weights)
