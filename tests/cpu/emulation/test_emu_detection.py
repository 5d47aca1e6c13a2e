"""What the host emulator finds that the device does not say cheaply: divergent barriers, warp
collectives whose mask does not match the lanes that reach them, spins that cannot end, and (in a
race-checking build) shared / global memory races, reads of shared memory no thread wrote and
dynamic shared memory overflows. Each report names the task, the thread and the source line."""

from __future__ import annotations

import pytest
import torch
from emu_helpers import THREADS as N
from emu_helpers import marked

CORRECT = ["barriers", "dynamic_shared", "shuffles", "votes", "atomics", "warp_synced", "named_barriers", "shared_bf16_tile"]


def out_words(n: int = 2 * N) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32)


def detected(kernels, name: str, *outputs, **options) -> str:
    run = kernels.run(name, *(outputs or (out_words(),)), **options)
    assert run.status == "detected", run
    return run.report


def test_barrier_some_threads_returned_from(kernels):
    report = detected(kernels, "barrier_after_return")
    assert report == (
        f"divergent barrier in task 5: __syncthreads() at {marked('barrier-after-return')} is reached "
        f"by threads 0-63, but threads 64-127 returned without reaching it: every thread of the block "
        f"must reach every barrier"
    )


def test_threads_at_different_barriers(kernels):
    report = detected(kernels, "two_barriers")
    assert report == (
        f"divergent barrier in task 5: threads wait at different barriers: threads 0-63 at "
        f"__syncthreads() at {marked('two-barriers-a')}; threads 64-127 at __syncthreads() at "
        f"{marked('two-barriers-b')}"
    )


def test_shuffle_mask_names_lanes_that_returned(kernels):
    report = detected(kernels, "shuffle_after_return")
    assert report == (
        f"warp collective mismatch in task 5: thread 0 (warp 0, lane 0) waits at "
        f"__shfl_xor_sync(mask 0xffffffff) at {marked('shuffle-after-return')}, but lanes 16-31 named "
        f"in its mask returned without reaching it"
    )


def test_shuffle_mask_names_lanes_waiting_elsewhere(kernels):
    report = detected(kernels, "shuffle_in_branch")
    assert report == (
        f"warp collective mismatch in task 5: thread 0 (warp 0, lane 0) waits at "
        f"__shfl_xor_sync(mask 0xffffffff) at {marked('shuffle-in-branch')}, but lanes named in its mask "
        f"never reach it: lanes 16-31 wait at __syncthreads() at {marked('shuffle-in-branch-barrier')} "
        f"(lanes 0-15 wait with it)"
    )


def test_shuffle_mask_without_the_calling_lane(kernels):
    report = detected(kernels, "mask_without_caller")
    assert report == (
        f"warp collective mismatch in task 5: thread 16 (warp 0, lane 16) calls __shfl_xor_sync at "
        f"{marked('mask-without-caller')} with mask 0x0000ffff, which does not include its own lane"
    )


def test_shuffle_source_lane_outside_the_mask(kernels):
    report = detected(kernels, "source_outside_mask")
    assert report == (
        f"warp collective mismatch in task 5: thread 0 (warp 0, lane 0) reads lane 16 in "
        f"__shfl_sync(mask 0x0000ffff) at {marked('source-outside-mask')}, but lane 16 is not in the "
        f"mask: the value it gets is undefined"
    )


def test_two_different_warp_reductions_are_a_mismatch(kernels):
    """On the device the lanes would hang or get undefined values: here the report names both sites."""
    report = detected(kernels, "reductions_differ")
    assert report == (
        f"warp collective mismatch in task 5: thread 0 (warp 0, lane 0) waits at "
        f"__reduce_add_sync(mask 0xffffffff) at {marked('reduce-add')}, but lanes named in its mask never "
        f"reach it: lanes 16-31 wait at __reduce_max_sync(mask 0xffffffff) at {marked('reduce-max')} "
        f"(lanes 0-15 wait with it)"
    )


def test_spin_that_cannot_end(kernels):
    report = detected(kernels, "spin_forever", dynamic_smem=64)
    assert report.startswith(
        f"hang in task 5: thread 0 spins at __nanosleep at {marked('spin-forever')} and nothing "
        f"else can move; thread 1 (warp 0, lane 1) waits at __syncthreads() at "
    )


def test_a_spin_that_never_yields_is_stopped_at_the_time_limit(kernels):
    """A loop on a plain load never returns to the scheduler: the limit's timer stops it and names
    the thread and the line (it had hung the process, without a word)."""
    report = detected(kernels, "spins_without_yielding", time_limit_s=1)
    assert report.startswith(
        "hang in task 5: the block has run past the emulator's limit of 1 s, and thread 0 (warp 0, lane 0) was still "
        f"running at {marked('spins-without-yielding')}"
    ), report


def test_barriers_forever_are_stopped_at_the_time_limit(kernels):
    report = detected(kernels, "barriers_forever", time_limit_s=1)
    assert report.startswith(
        "hang in task 5: the block has run past the emulator's limit of 1 s, and its threads go on without finishing "
        f"(thread 0 (warp 0, lane 0) last synchronized at {marked('barriers-forever')}): a loop that does not end?"
    ), report


def test_trap(kernels):
    assert detected(kernels, "traps") == f"trap in task 5: thread 9 (warp 0, lane 9) at {marked('traps')}: __trap()"


@pytest.mark.parametrize("order", ["in_order", "reversed", "shuffled"])
def test_correct_kernels_have_no_findings(race_kernels, order):
    outs = {"dynamic_shared": (torch.zeros(2 * N),), "atomics": (out_words(16 + N), torch.zeros(2, dtype=torch.int64))}
    for name in CORRECT:
        run = race_kernels.run(name, *outs.get(name, (out_words(40 * N),)), order=order, seed=3, dynamic_smem=2 * N * 4)
        assert run.ok, f"{name}: {run.report}"


@pytest.mark.parametrize("order", ["in_order", "reversed", "shuffled"])
def test_shared_memory_race_in_any_order(race_kernels, order):
    report = detected(race_kernels, "racy_shared", order=order, seed=1)
    race = next(line for line in report.splitlines() if line.startswith("data race in task 5: "))
    assert "4 bytes at shared mpk::test::racy_shared()::s+" in race  # which access comes second depends on the order
    assert f"at {marked('racy-shared-write')}" in race and f"at {marked('racy-shared-read')}" in race
    assert "with no barrier in between" in race


def test_shared_memory_race_report_in_full(race_kernels):
    report = detected(race_kernels, "racy_shared")
    race = next(line for line in report.splitlines() if line.startswith("data race"))
    # In order, thread 0 reads s[1] before thread 1 writes it.
    assert race == (
        f"data race in task 5: thread 1 (warp 0, lane 1) writes 4 bytes at shared mpk::test::racy_shared()::s+4 "
        f"at {marked('racy-shared-write')}; thread 0 (warp 0, lane 0) read it at {marked('racy-shared-read')}, "
        f"with no barrier in between (__syncthreads(), a named barrier of both, or __syncwarp() within a warp)"
    )


def test_global_memory_race(race_kernels):
    report = detected(race_kernels, "racy_global", order="reversed")
    assert report.startswith("data race in task 5: thread 0 (warp 0, lane 0) writes 4 bytes at global memory 0x")
    assert f" at {marked('racy-global-write')}" in report
    assert f"; thread 1 (warp 0, lane 1) read it at {marked('racy-global-read')}" in report


def test_a_shuffle_orders_no_memory(race_kernels):
    report = detected(race_kernels, "shuffle_is_no_fence")
    assert report.startswith(
        "data race in task 5: thread 0 (warp 0, lane 0) reads 4 bytes at shared "
        f"mpk::test::shuffle_is_no_fence()::s+4 at {marked('no-fence-read')}"
    )
    assert f"; thread 1 (warp 0, lane 1) wrote it at {marked('no-fence-write')}" in report


def test_write_write_race(race_kernels):
    report = detected(race_kernels, "last_writer", out_words(1))
    assert report.startswith(
        "data race in task 5: thread 1 (warp 0, lane 1) writes 4 bytes at shared "
        f"mpk::test::last_writer()::s+0 at {marked('last-writer')}"
    )
    assert f"; thread 0 (warp 0, lane 0) wrote it at {marked('last-writer')}" in report


def test_reduction_missing_its_second_barrier(kernels, race_kernels):
    out = out_words(N)
    assert kernels.run("racy_block_reduce", out).ok  # in this order the result even comes out right,
    assert out.tolist() == [N * (N - 1) // 2 + N] * N
    report = detected(race_kernels, "racy_block_reduce", out)  # but the race is there in every order
    assert report == (
        "data race in task 5: thread 0 (warp 0, lane 0) writes 4 bytes at shared "
        f"mpk::test::one_barrier_reduce<unsigned int>()::partial+0 at {marked('one-barrier-write')} (inlined at "
        f"{marked('one-barrier-second-call')}); thread 127 (warp 3, lane 31) read it at {marked('one-barrier-read')} "
        f"(inlined at {marked('one-barrier-first-call')}), with no barrier in between (__syncthreads(), a named barrier "
        "of both, or __syncwarp() within a warp)"
    )


def test_read_of_shared_memory_nobody_wrote(race_kernels):
    report = detected(race_kernels, "reads_unwritten")
    assert report.startswith(
        f"uninitialized shared memory in task 5: thread 0 (warp 0, lane 0) reads 4 bytes at "
        f"dynamic_smem+0 at {marked('reads-unwritten')}"
    )
    assert report.splitlines()[0].endswith(", which no thread of this task wrote")


def test_dynamic_shared_memory_overflow(race_kernels):
    report = detected(race_kernels, "smem_overflow", dynamic_smem=64)
    assert report.startswith(
        f"dynamic shared memory overflow in task 5: thread 16 (warp 0, lane 16) writes 4 bytes at "
        f"dynamic_smem+64 at {marked('smem-overflow')}"
    )
    assert report.endswith(", past the 64 bytes the task was given")


def test_dynamic_shared_memory_overflow_without_race_checking(kernels):
    """The default build finds the write too (a canary past the task's bytes), without the thread."""
    report = detected(kernels, "smem_overflow", dynamic_smem=64)
    assert report.startswith(
        "dynamic shared memory overflow in task 5: bytes 64..127 of dynamic shared memory were written, "
        "past the 64 bytes the task was given"
    ), report


def test_an_overflow_far_past_the_task_s_bytes_is_found_too(kernels):
    report = detected(kernels, "smem_overflow_far", dynamic_smem=64)
    assert report.startswith("dynamic shared memory overflow in task 5: bytes 3000..3003 of dynamic shared memory were written")


def test_misaligned_vector_access(race_kernels):
    report = detected(race_kernels, "misaligned_vector", out_words(1))
    assert report == (
        f"misaligned access in task 5: thread 0 (warp 0, lane 0) reads 16 bytes at dynamic_smem+4 at "
        f"{marked('misaligned-vector')}, not a multiple of 16 (the device stops the kernel with a "
        f"misaligned address error)"
    )


@pytest.mark.parametrize("order", ["in_order", "reversed", "shuffled"])
def test_a_named_barrier_orders_only_its_threads(race_kernels, order):
    report = detected(race_kernels, "named_barrier_other_half", order=order, seed=1)
    race = next(line for line in report.splitlines() if line.startswith("data race in task 5: "))
    assert "shared mpk::test::named_barrier_other_half()::s+" in race
    assert f"at {marked('other-half-write')}" in race and f"at {marked('other-half-read')}" in race


def test_named_barrier_some_threads_returned_from(kernels):
    assert detected(kernels, "named_barrier_short") == (
        f"divergent barrier in task 5: named barrier 1 (128 threads) at {marked('named-short')} is reached by "
        "threads 0-63 only: threads 64-127 returned without reaching it"
    )


def test_named_barrier_with_more_threads_than_its_count(kernels):
    assert detected(kernels, "named_barrier_too_many") == (
        "divergent barrier in task 5: threads 0-127 wait at named barrier 2, which is for 64: which of them it "
        "releases would depend on the order they arrive in"
    )


def test_named_barrier_counts_that_differ(kernels):
    report = detected(kernels, "named_barrier_counts_differ", order="in_order")
    assert report == (
        "divergent barrier in task 5: thread 0 (warp 0, lane 0) waits at named barrier 1 for 64 threads, thread 64 "
        "(warp 2, lane 0) for 128: every thread of a named barrier must give it the same count"
    )


def test_named_barrier_of_half_warps(kernels):
    assert detected(kernels, "named_barrier_half_warps") == (
        f"divergent barrier in task 5: named barrier 1 (32 threads) at {marked('named-half-warps')} is complete "
        "with threads 0-15, 32-47, part of warp 0: a named barrier takes whole warps"
    )


INVALID_NAMED = {
    0: "waits at named barrier 0 at {at}: the ids are 1 to 15 (0 is __syncthreads())",
    1: "waits at named barrier 1 at {at} for 48 threads: a multiple of 32 (whole warps), at most the block's 128",
}


@pytest.mark.parametrize("first,expected", INVALID_NAMED.items())
def test_named_barrier_id_and_count_checked(kernels, first, expected):
    out = out_words()
    out[0] = first
    report = detected(kernels, "named_barrier_invalid", out, order="in_order")
    assert report == "invalid barrier in task 5: thread 0 (warp 0, lane 0) " + expected.format(at=marked("named-invalid"))


def test_race_check_needs_a_race_checking_build(kernels):
    run = kernels.run("barriers", out_words(9 * N), race_check=True)
    assert run.status == "invalid" and "built without it" in run.report
