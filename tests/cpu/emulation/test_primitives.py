"""The host versions of csrc/primitives against independent PyTorch models of their semantics
comments (primitive_cases.py): mma's fragment layout and fp32 sums, cp.async's copy at the wait,
the 16-byte loads and stores, the memory-order atomics, the timer and sleep, the warp and block
reductions, named barriers, and the vector conversions. Bit-identical everywhere; each kernel also runs race-checked
(nothing to report) and in every thread order."""

from __future__ import annotations

import pytest
import torch
from primitive_cases import (
    N,
    block_model,
    butterfly,
    inputs,
    load_host,
    maximum,
    mma_model,
    named_barriers_model,
    run_host,
)

ORDERS = [("in_order", 0), ("reversed", 0), ("shuffled", 7)]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "race_check"])
def prims(request):
    return load_host(race_check=request.param)


def run(prims, name, order=("in_order", 0), seed=0):
    ins, outs = inputs(name, seed)
    result = run_host(prims, name, ins, outs, order=order[0], seed=order[1])
    assert result.ok, result.report
    return ins, outs


def same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = actual.isnan() if actual.is_floating_point() else torch.zeros_like(actual, dtype=torch.bool)
    if actual.is_floating_point():
        assert torch.equal(nan, expected.isnan()), "NaN in different places"
    width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[actual.element_size()]
    a, e = actual.view(width)[~nan], expected.view(width)[~nan]
    bad = (a != e).nonzero()
    assert not bad.numel(), f"{bad.numel()} elements differ, first at {bad[0].tolist()}: {a[bad[0]]} vs {e[bad[0]]}"


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
@pytest.mark.parametrize("name,dtype", [("mma_bf16", torch.bfloat16), ("mma_fp16", torch.float16)])
def test_mma_computes_the_documented_fragments(prims, name, dtype, order):
    (a, b, c), (d,) = run(prims, name, order)
    same_bits(d, mma_model(a, b, c, dtype))


def test_mma_layout_is_not_transposed(prims):
    """A single 1 in A and in B: D has exactly one nonzero, where the documented layout puts it."""
    (a, b, c), (d,) = inputs("mma_bf16")
    one = torch.tensor(1.0, dtype=torch.bfloat16).view(torch.int16)
    a.zero_(), b.zero_(), c.zero_()
    a[0, 3, 11] = one  # A[3][11]
    b[0, 11, 6] = one  # B[11][6]
    assert run_host(prims, "mma_bf16", [a, b, c], [d]).ok
    expected = torch.zeros_like(d)
    expected[0, 3, 6] = 1.0
    same_bits(d, expected)


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_cp_async_lands_at_the_wait(prims, order):
    (data,), (out,) = run(prims, "cp_async_copy", order)
    same_bits(out, data.roll(-1, dims=0))


def test_loads_and_stores(prims):
    (data,), (out,) = run(prims, "loads")
    same_bits(out, data.repeat(3, 1))


def test_memory_order_atomics(prims):
    _, (out,) = run(prims, "memory_order", ("shuffled", 3))
    total = N * (N + 1) // 2
    words = out.view(torch.int32)
    assert out[:6].tolist() == [total, N, total, N, 0x0123456789ABCDEF, 3 * total]
    assert (words[12] & 0xFFFFFFFF) == 0xDEADBEEF and words[13] == words[12]
    # Its atomic writes, as the scratch check reads them: the reductions and atomic stores, not the
    # plain stores of [2], [3] and the high word of [6].
    base = out.data_ptr()
    assert sorted((a - base, n) for a, n in prims.atomic_words()) == [(0, 8), (8, 8), (32, 8), (40, 8), (48, 4)]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_timer_and_sleep(prims, order):
    """sleep_ns lets the block's other threads run (the poll ends); the timer is in ns and monotonic."""
    _, (out,) = run(prims, "timer", order)
    assert out[2] == 1 and out[3] == 1
    assert 0 < out[0] <= out[1] < out[0] + 10**9


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_warp_and_block_reductions(prims, order):
    (x,), (out,) = run(prims, "reductions", order)
    same_bits(out[:N], butterfly(x, torch.add))
    same_bits(out[N : 2 * N], butterfly(x, maximum))
    same_bits(out[2 * N : 3 * N], block_model(x, torch.add))
    same_bits(out[3 * N :], block_model(x, maximum))


@pytest.mark.parametrize("name,dtype", [("vec_bf16", torch.bfloat16), ("vec_fp16", torch.float16)])
def test_vector_conversions_round_to_nearest_even(prims, name, dtype):
    (x,), (y, back) = run(prims, name)
    same_bits(y, x.to(dtype))
    same_bits(back, x.to(dtype).float())


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_named_barriers_order_their_groups(prims, order):
    (x,), (out,) = run(prims, "named_barriers", order)
    same_bits(out, named_barriers_model(x))
