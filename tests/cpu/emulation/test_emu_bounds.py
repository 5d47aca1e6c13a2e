"""Faults and out-of-bounds accesses of task code, each reported with the task, the thread and the
source line instead of crashing or silently reading the wrong data: a read past a tensor's end (its
guard page), a prefetch hint past one, an address in no tensor, an integer division by zero, a stack
overflow, a write past the task's output slice (slice checking, race-checking builds); and the two
collectives of the primitives layer that can go wrong: an mma some lanes never reach, a cp.async
destination read before its wait."""

from __future__ import annotations

import ctypes as C

import pytest
import torch
from emu_helpers import THREADS as N
from emu_helpers import marked

from mpk_runtime import resources
from mpk_runtime.run import emu_options
from mpk_runtime.run.host_memory import _ranges, _tensor_table


def detected(kernels, name, *outputs, **options) -> str:
    run = kernels.run(name, *outputs, **options)
    assert run.status == "detected", run
    return run.report


@pytest.fixture
def guarded(kernels):
    """128 words of guarded memory (an inaccessible page right after them), zeroed, and their table."""
    module = kernels.module
    nbytes = 4 * N
    address = module.guarded_alloc(nbytes)
    words = torch.frombuffer((C.c_uint8 * nbytes).from_address(address), dtype=torch.uint8).view(torch.int32)
    words.zero_()
    yield words, emu_options.Memory(tensors=_tensor_table([("y", words, address)]))
    module.guarded_free(address, nbytes)


def test_read_past_the_end_of_a_tensor(kernels, guarded):
    words, memory = guarded
    assert detected(kernels, "read_past_end", words, memory=memory) == (
        f"out-of-bounds access in task 5: thread 0 (warp 0, lane 0) reads past the end of tensor y at "
        f"{marked('read-past-end')} (the fault is 0 bytes after its last byte; it has {4 * N} bytes)"
    )
    assert kernels.run("barriers", torch.zeros(9 * N, dtype=torch.int32)).ok  # the module runs on


def test_a_prefetch_hint_past_the_end_of_a_tensor(kernels, guarded):
    """A hint reads nothing on the device, but its address is computed like a load's: one past the
    tensor is the same bug, so the emulator reads a byte for it and reports the line."""
    words, memory = guarded
    hint = (resources.CSRC / "primitives" / "prefetch.cuh").read_text().splitlines()
    line = next(i for i, text in enumerate(hint, 1) if "volatile" in text)  # the emulation's read
    assert detected(kernels, "prefetch_past_end", words, memory=memory) == (
        f"out-of-bounds access in task 5: thread 0 (warp 0, lane 0) reads past the end of tensor y at "
        f"csrc/primitives/prefetch.cuh:{line} (inlined at {marked('prefetch-past-end')}) (the fault is 0 bytes after "
        f"its last byte; it has {4 * N} bytes)"
    )


def test_an_address_in_no_tensor(kernels):
    out = torch.tensor([1, 0], dtype=torch.int32)  # out[0] << 12: page 1, never mapped
    assert detected(kernels, "wild_read", out) == (
        f"invalid address in task 5: thread 3 (warp 0, lane 3) reads 0x1000 at {marked('wild-read')}, which is "
        f"in no tensor of the graph, no shared memory and no stack"
    )


def test_integer_division_by_zero(kernels):
    assert detected(kernels, "divides_by_zero", torch.zeros(2, dtype=torch.int32)) == (
        f"arithmetic fault in task 5: thread 2 (warp 0, lane 2) at {marked('divides-by-zero')}: an integer division "
        f"by zero (or overflow); the device does not trap, its result would be undefined"
    )


def test_stack_overflow(kernels):
    report = detected(kernels, "overflows_its_stack", torch.zeros(1, dtype=torch.int32))
    assert report.startswith("stack overflow in task 5: thread 5 (warp 0, lane 5) at tests/cpu/emulation/faulty.cuh:")
    assert report.endswith(" ran past its 128 KB stack (large local arrays, or deep recursion)")


def test_write_past_the_output_slice(race_kernels):
    out = torch.zeros(2 * N, dtype=torch.int32)
    lo = out.data_ptr()
    memory = emu_options.Memory(
        tensors=_tensor_table([("y", out, lo)]),
        readable=_ranges([(lo, lo + 4 * N)]),
        writable=_ranges([(lo, lo + 4 * N)]),
        slices=b"task_5 reads nothing and writes y[0:128]",
    )
    report = detected(race_kernels, "write_past_slice", out, memory=memory, check_slices=True)
    assert report == (
        f"write outside the task's output slices in task 5: thread 0 (warp 0, lane 0) writes 4 bytes at y[128] at "
        f"{marked('write-past-slice')}; the task task_5 reads nothing and writes y[0:128]: it clobbers another "
        f"task's data or an input"
    )
    # Without slice checking the same run is fine: the write lands inside the tensor.
    assert race_kernels.run("write_past_slice", out, memory=memory).ok


def test_slice_checking_needs_race_checking(kernels):
    run = kernels.run("barriers", torch.zeros(9 * N, dtype=torch.int32), memory=emu_options.Memory(), check_slices=True)
    assert run.ok  # a Memory without ranges checks nothing
    out = torch.zeros(9 * N, dtype=torch.int32)
    memory = emu_options.Memory(readable=_ranges([]), writable=_ranges([]))
    run = kernels.run("barriers", out, memory=memory, check_slices=True)
    assert run.status == "invalid" and "slice checking needs race checking" in run.report


def test_mma_that_half_a_warp_never_reaches(kernels):
    assert detected(kernels, "mma_half_warp", torch.zeros(N)) == (
        f"warp collective mismatch in task 5: thread 0 (warp 0, lane 0) waits at mma_m16n8k16(mask 0xffffffff) at "
        f"{marked('mma-half-warp')}, but lanes 16-31 named in its mask returned without reaching it"
    )


def test_cp_async_destination_read_before_the_wait(kernels, race_kernels):
    out = torch.arange(8 * N, dtype=torch.int32)
    assert kernels.run("cp_async_early_read", out, task_id=0, dynamic_smem=16 * N).ok
    assert (out[:N] == -1).all()  # what shared memory held (task 0's poison, 0xff): the copy lands only at the wait
    report = detected(race_kernels, "cp_async_early_read", torch.arange(8 * N, dtype=torch.int32), dynamic_smem=16 * N)
    first = report.splitlines()[0]
    assert first.startswith(
        f"data race in task 5: thread 0 (warp 0, lane 0) reads 4 bytes at dynamic_smem+0 at {marked('cp-async-early-read')}; "
        f"thread 0 (warp 0, lane 0) started a cp.async that writes it at csrc/primitives/cp_async.cuh:"
    )
    assert first.endswith(
        f"(inlined at {marked('cp-async-issue')}), which lands only at that thread's cp_async_wait_all() (and, for "
        f"other threads, a __syncthreads() after it)"
    )


@pytest.mark.parametrize("checked", [False, True], ids=["default", "race-checking build"])
def test_a_local_array_past_the_fiber_stack_is_a_stack_overflow(kernels, race_kernels, checked):
    """200 KB of locals, past the 128 KB fiber stack: the frame touches each page as it grows
    (-fstack-clash-protection), so it faults on the guard page and is reported as a stack overflow.
    It had reached into the next fiber's stack: "OK" by default, a divergent barrier when checked."""
    run = (race_kernels if checked else kernels).run("big_local_array", torch.zeros(128, dtype=torch.int32))
    assert run.status == "detected", run
    assert run.report.startswith("stack overflow in task 5: thread 0 (warp 0, lane 0) at "), run.report
    assert "ran past its 128 KB stack (large local arrays, or deep recursion)" in run.report


def test_the_alignment_pads_around_a_tensor_copy(kernels):
    """A copy keeps its tensor's alignment modulo 16 and ends on a 16-byte boundary, so up to 15 bytes
    on each side lie inside the mapping, where no guard page faults: they hold a value no body uses
    unnoticed, and a write there is reported with the tensor."""
    from mpk_runtime.run.host_memory import PAD_BYTE, GuardedTensors

    base = torch.zeros(16, dtype=torch.int32)
    qo = base[1:6]  # 20 bytes from 4 past a 16-byte boundary: 4 bytes of pad before, 8 after
    memory = GuardedTensors(kernels.module, {}, {"qo_indptr_buffer": qo}, written=set())
    try:
        address = memory.pointers["meta.qo_indptr_buffer"]
        assert memory.pad_writes() is None
        assert C.string_at(address + 20, 8) == bytes([PAD_BYTE]) * 8
        assert C.string_at(address - 4, 4) == bytes([PAD_BYTE]) * 4
        C.memset(address + 24, 0, 4)  # qo[6]
        assert memory.pad_writes() == (
            "a write 4 bytes after the last byte of tensor meta.qo_indptr_buffer, inside the 16-byte alignment the "
            "emulator keeps around each tensor, where no page guard can fault (on the device, other data)"
        )
        C.memset(address + 24, PAD_BYTE, 4)
        C.memset(address - 2, 1, 1)
        assert str(memory.pad_writes()).startswith("a write 2 bytes before the first byte of tensor meta.qo_indptr_buffer,")
    finally:
        memory.free()
