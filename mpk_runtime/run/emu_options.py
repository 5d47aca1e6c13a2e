"""The C structures of one emulated task run (``csrc/emulation/entry.h``, ``block_runner.h``): how it
runs (``Options``: thread order, race and slice checking, the Runtime's launch and iteration) and
what it may address (``Memory``: the tensors, named in reports, and the slices' byte ranges)."""

from __future__ import annotations

import ctypes as C
from dataclasses import dataclass


class Tensor(C.Structure):  # MpkEmuTensor (csrc/emulation/block_runner.h)
    _fields_ = [
        ("lo", C.c_uint64),
        ("hi", C.c_uint64),
        ("name", C.c_char_p),
        ("elem_size", C.c_int32),
        ("ndim", C.c_int32),
        ("shape", C.c_int64 * 6),
    ]


class Range(C.Structure):  # MpkEmuRange
    _fields_ = [("lo", C.c_uint64), ("hi", C.c_uint64)]


class Options(C.Structure):  # MpkEmuOptions (csrc/emulation/entry.h)
    _fields_ = [
        ("order", C.c_int32),
        ("race_check", C.c_int32),
        ("seed", C.c_uint64),
        ("num_threads", C.c_int32),
        ("check_slices", C.c_int32),
        ("tensors", C.POINTER(Tensor)),
        ("num_tensors", C.c_int32),
        ("num_readable", C.c_int32),
        ("readable", C.POINTER(Range)),
        ("writable", C.POINTER(Range)),
        ("num_writable", C.c_int32),
        ("time_limit_s", C.c_int32),
        ("slices", C.c_char_p),
        ("launch_id", C.c_uint32),
        ("iteration", C.c_uint32),
        ("absolute_iteration", C.c_uint64),
    ]


@dataclass(frozen=True)
class Memory:
    """What a run may address besides shared memory (see ``Memory`` in block_runner.h): the tensors,
    named in reports, and, for slice checking, the byte ranges the task may read and write (sorted,
    disjoint) with ``slices`` saying the same in words. The ctypes arrays are kept here."""

    tensors: C.Array | None = None
    readable: C.Array | None = None
    writable: C.Array | None = None
    slices: bytes = b""

    def fill(self, opts: Options, check_slices: bool) -> None:
        if self.tensors is not None:
            opts.tensors, opts.num_tensors = self.tensors, len(self.tensors)
        if check_slices and self.readable is not None and self.writable is not None:
            opts.check_slices = 1
            opts.readable, opts.num_readable = self.readable, len(self.readable)
            opts.writable, opts.num_writable = self.writable, len(self.writable)
            opts.slices = self.slices
