"""The host versions of csrc/primitives against independent PyTorch models of their semantics
comments (primitive_cases.py): mma's fragment layout and fp32 sums, cp.async's copy at the wait,
the 16-byte loads and stores, the memory-order atomics, the timer and sleep, the warp and block
reductions, CUDA's warp reductions and matches, named barriers, the vector conversions, and TMA
copies with their mbarriers (and the mistakes the emulator reports in those). Bit-identical
everywhere; each kernel also runs race-checked (nothing to report) and in every thread order."""

from __future__ import annotations

import fnmatch

import pytest
import torch
from primitive_cases import (
    N,
    block_model,
    butterfly,
    inputs,
    load_host,
    marked,
    maximum,
    mma_model,
    named_barriers_model,
    run_host,
    swizzle128_model,
    tma_box_model,
    warp_intrinsics_model,
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


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_cuda_warp_reductions_and_matches(prims, order):
    (v,), (out,) = run(prims, "warp_intrinsics", order)
    got = (out.view(19, N).to(torch.int64) & 0xFFFFFFFF).tolist()
    assert got == warp_intrinsics_model(v)


@pytest.mark.parametrize("name,dtype", [("vec_bf16", torch.bfloat16), ("vec_fp16", torch.float16)])
def test_vector_conversions_round_to_nearest_even(prims, name, dtype):
    (x,), (y, back) = run(prims, name)
    same_bits(y, x.to(dtype))
    same_bits(back, x.to(dtype).float())


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_named_barriers_order_their_groups(prims, order):
    (x,), (out,) = run(prims, "named_barriers", order)
    same_bits(out, named_barriers_model(x))


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
@pytest.mark.parametrize("name", ["tma_tile", "tma_tile_swizzled"])
def test_tma_copies_a_box_with_zeros_outside_the_tensor(prims, name, order):
    (data,), (out, address) = run(prims, name, order)
    box = tma_box_model(data, (48, -1, 2, 0))
    assert (box == 0).sum() > box.numel() // 2  # past dims 0, 1 and 2
    if name == "tma_tile_swizzled":
        expected = swizzle128_model(box, int(address))
        assert not torch.equal(expected, box)
        box = expected
    same_bits(out.flatten(), box)


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"{o[0]}{o[1]}")
def test_tma_pipeline_reuses_one_barrier_over_two_phases(prims, order):
    (data,), (out,) = run(prims, "tma_pipeline", order)
    same_bits(out.flatten(), torch.cat([tma_box_model(data, (0, 0, 0, 0)), tma_box_model(data, (36, 2, 1, 0))]))


TMA_MISTAKES = {
    "tma_uninitialized": "uninitialized mbarrier in task 1: thread 0 (warp 0, lane 0) at {tma-uninitialized} waits on "
    "the mbarrier at dynamic_smem+2048, which no mbarrier_init of this task initialized: on the device it holds what "
    "an earlier task left there",
    "tma_to_global": "invalid TMA copy in task 1: thread 0 (warp 0, lane 0) at {tma-to-global} copies 2048 bytes to "
    "an address that is not shared memory",
    "tma_misaligned": "misaligned TMA copy in task 1: thread 0 (warp 0, lane 0) at {tma-misaligned} copies to "
    "dynamic_smem+16, which is not 128-byte aligned (a TMA tensor copy's shared destination must be)",
    "tma_never_completes": "hang in task 1: threads 0-127 spin at mbarrier_wait_parity(parity 0) at "
    "{tma-never-completes} and nothing else can move (its mbarrier at dynamic_smem+2048 is in phase 0 and waits for "
    "0 of its 1 arrivals and 2048 bytes that no TMA copy queued on it brings)",
    "tma_too_many_bytes": "mbarrier tx-count below zero in task 1: thread 0 (warp 0, lane 0) at {tma-too-many-bytes}: "
    "the TMA copies on the mbarrier at dynamic_smem+2048 have brought 1024 bytes more than arrive_expect_tx announced "
    "for its phase 0, which therefore never completes",
    "tma_never_waited": "TMA copy in flight in task 1: thread 0 (warp 0, lane 0) at {tma-never-waited} started a copy "
    "to dynamic_smem+0 on the mbarrier at dynamic_smem+2048, and the task ended without a wait on it: on the device it "
    "may land in the shared memory of the task that runs next",
    "tma_init_twice": "invalid mbarrier in task 1: thread 0 (warp 0, lane 0) at {tma-init-again} initializes an "
    "mbarrier at dynamic_smem+2048 that is still valid (initialized at [tma-first-init]): the PTX ISA leaves an init "
    "of a valid mbarrier undefined; mbarrier_inval it first",
    "tma_left_valid": "mbarrier left valid in task 1: the mbarrier at dynamic_smem+2048, initialized at "
    "{tma-left-valid}, is still valid when the task ends: its memory is the next task's shared memory, which the PTX "
    "ISA leaves undefined before an mbarrier_inval",
}


@pytest.mark.parametrize("name", TMA_MISTAKES)
def test_tma_mistakes_are_reported(prims, name):
    ins, outs = inputs(name)
    result = run_host(prims, name, ins, outs)
    assert result.status == "detected", result
    line = TMA_MISTAKES[name].split("{")[1].split("}")[0]
    want = TMA_MISTAKES[name].replace(f"{{{line}}}", marked(line))
    if "[" in want:  # a second marked line
        other = want.split("[")[1].split("]")[0]
        want = want.replace(f"[{other}]", marked(other))
    assert result.report == want


def test_tma_destination_read_before_the_wait(prims):
    ins, outs = inputs("tma_early_read")
    result = run_host(prims, "tma_early_read", ins, outs)
    if not prims.race_check:  # the reads see the poison or the copy, as it happens: only race checking sees the bug
        assert result.ok
        return
    assert result.status == "detected", result
    issue = f"csrc/primitives/tma.cuh:* (inlined at {marked('tma-early-read-issue')})"
    assert fnmatch.fnmatchcase(
        result.report,
        f"data race in task 1: thread 0 (warp 0, lane 0) reads 4 bytes at dynamic_smem+0 at {marked('tma-read-in-flight')}; "
        f"thread 0 (warp 0, lane 0) started a TMA copy that writes it at {issue}, which lands only at a wait on its "
        "mbarrier that completes the phase\n"
        f"data race in task 1: thread 1 (warp 0, lane 1) reads 4 bytes at dynamic_smem+4 at {marked('tma-early-read')}; "
        f"the TMA copy started at {issue} wrote it, landed by thread 0 (warp 0, lane 0)'s wait on its mbarrier, and "
        "this thread has not waited for that phase (nor synchronized with a thread that did)",
    ), result.report
