"""The memory host-emulated task bodies work on: a guarded copy of every tensor, and each task's slices
as byte ranges.

Each tensor of the graph (and each meta tensor) is copied, for the length of a launch, into memory
that ends against an inaccessible page and starts after one (``HostModule.guarded_alloc``): a body
that reads or writes past the end of a tensor faults, and the fault is reported with the tensor, the
thread and the source line, at no cost per access. Tensors that share storage (views of one buffer, a
graph tensor that is a meta tensor) share one copy, so that what one writes the other reads; each
copy keeps its tensor's alignment modulo 16, so up to 15 bytes before it and after it lie inside the
mapping: they hold ``PAD_BYTE`` (a value no body can use unnoticed: 3.4e38 as a float, an index
that faults), and a task that writes there is reported as one that wrote past the tensor (``pad_writes``,
checked after every task). After the launch the copies of the tensors some layer
writes (and the meta tensors) go back; those only read (weights) are compared with their originals
and go back only if a body wrote into them, as such a write would stand on the GPU. So the harness's
check of the inputs bit for bit sees it, and unchanged tensors (read-only memory among them) are
never written. Slice checking catches such a write in the act.

For slice checking (race-checking builds), ``task_memory`` gives a task the byte ranges it may read
(its input and output slices and the meta tensors) and write (its output slices).
"""

from __future__ import annotations

import ctypes as C
import itertools
import math
import weakref
from collections.abc import Iterable

import torch

from ..graph.compiled import CompiledGraph, SliceRef, TaskInfo
from .emu_options import Memory, Range, Tensor
from .host_runner import HostModule

_memcmp = C.CDLL(None).memcmp  # libc's, through the process's own symbols
_memcmp.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
_memcmp.restype = C.c_int


PAD_BYTE = 0x7F
_PAD_REFERENCE = (C.c_uint8 * 16)(*([PAD_BYTE] * 16))


class GuardedTensors:
    """Guarded copies of ``tensors`` and ``meta`` (name -> contiguous CPU tensor). ``pointers`` and
    ``meta`` are the copies' addresses and views; ``copy_in`` / ``copy_out`` move the data (out: the
    tensors named in ``written`` and the meta tensors, and any other whose copy a body changed)."""

    def __init__(self, module: HostModule, tensors: dict[str, torch.Tensor], meta: dict[str, torch.Tensor], written: set[str]):
        self.module = module
        everything = [(n, t) for n, t in tensors.items()] + [(f"meta.{n}", t) for n, t in meta.items()]
        self._written = written | {n for n, _ in everything if n.startswith("meta.")}
        self._groups: list[tuple[int, int, int, int, bool]] = []  # (original lo, bytes, copy, allocated, copied out)
        self._pads: list[tuple[int, int, str, bool]] = []  # (address, bytes, tensor, after its end)
        self.pointers: dict[str, int] = {}
        self.views: dict[str, torch.Tensor] = {}
        spans = sorted(((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), n, t) for n, t in everything if t.numel()))
        group: list = []
        for span in [*spans, None]:
            if group and (span is None or span[0] >= max(s[1] for s in group)):
                self._place(group)
                group = []
            if span is not None:
                group.append(span)
        for n, t in everything:
            if n not in self.pointers:  # empty: any address will do, nothing reads it
                self.pointers[n] = 0
                self.views[n] = torch.empty_like(t)
        self.meta = {n: self.views[f"meta.{n}"] for n in meta}
        # The mappings go when this object does, even if nobody calls free() (a kernel never finalized).
        self._release = weakref.finalize(self, _release, module, self._groups)
        self.table = _tensor_table([(n, self.views[n], self.pointers[n]) for n, _ in everything])
        self.memory = Memory(tensors=self.table)

    def _place(self, group: list) -> None:
        lo, hi = group[0][0], max(s[1] for s in group)
        shift = lo % 16  # the copy keeps the original's alignment modulo 16
        size = shift + hi - lo
        copy = self.module.guarded_alloc(size) + shift
        self._groups.append((lo, hi - lo, copy, size, any(name in self._written for _, _, name, _ in group)))
        raw = torch.frombuffer((C.c_uint8 * (hi - lo)).from_address(copy), dtype=torch.uint8)
        for start, end, name, t in group:
            self.pointers[name] = copy + start - lo
            self.views[name] = raw[start - lo : end - lo].view(t.dtype).view(t.shape)
        after = -size % 16  # guarded_alloc rounds the end up to 16 bytes
        pads = ((copy - shift, shift, group[0][2], False), (copy + hi - lo, after, group[-1][2], True))
        for address, nbytes, name, past in pads:
            if nbytes:
                C.memset(address, PAD_BYTE, nbytes)
                self._pads.append((address, nbytes, name, past))

    def pad_writes(self) -> str | None:
        """What a body wrote into the bytes just before or after a tensor that its page guards do not
        cover (None: nothing): on the device that is another allocation's data."""
        for address, nbytes, name, past in self._pads:
            if _memcmp(address, _PAD_REFERENCE, nbytes) == 0:
                continue
            changed = [i for i, b in enumerate(C.string_at(address, nbytes)) if b != PAD_BYTE]
            if past:  # the changed byte nearest the tensor
                where = f"{changed[0]} bytes after the last byte of tensor {name}"
            else:
                where = f"{nbytes - changed[-1]} bytes before the first byte of tensor {name}"
            return (
                f"a write {where}, inside the 16-byte alignment the emulator keeps around each tensor, where no "
                f"page guard can fault (on the device, other data)"
            )
        return None

    def copy_in(self) -> None:
        for lo, nbytes, copy, _, _ in self._groups:
            C.memmove(copy, lo, nbytes)

    def copy_out(self) -> None:
        for lo, nbytes, copy, _, written in self._groups:
            if written or _memcmp(lo, copy, nbytes) != 0:
                C.memmove(lo, copy, nbytes)

    def free(self) -> None:
        self._release()

    def task_memory(self, graph: CompiledGraph, task: TaskInfo) -> Memory:
        """The tensors, and the ranges ``task`` may read and write, for slice checking."""
        shapes = {t.name: t.shape for t in graph.tensors}
        scratch = {t.name for t in graph.tensors if t.kind == "workspace"}  # the layer's own, passed as inputs
        layer = graph.layers[task.layer]
        writable = [r for s in task.outputs for r in self._runs(s, shapes[s.tensor])]
        writable += [r for s in task.inputs if s.tensor in scratch for r in self._runs(s, shapes[s.tensor])]
        readable = writable + [r for s in task.inputs for r in self._runs(s, shapes[s.tensor])]
        readable += [
            (self.pointers[n], self.pointers[n] + v.numel() * v.element_size())
            for n, v in self.views.items()
            if n.startswith("meta.")
        ]
        ins = ", ".join(_slice_text(s) for s in task.inputs) or "nothing"
        outs = ", ".join(_slice_text(s) for s in task.outputs) or "nothing"
        if any(s.tensor in scratch for s in task.inputs):
            outs += " (and its layer's workspace)"
        text = f"{task.label} of layer {layer.name} reads {ins} (and the meta tensors) and writes {outs}"
        return Memory(tensors=self.table, readable=_ranges(readable), writable=_ranges(writable), slices=text.encode())

    def _runs(self, s: SliceRef, shape: tuple[int, ...]) -> list[tuple[int, int]]:
        view = self.views[s.tensor]
        return list(byte_runs(self.pointers[s.tensor], shape, view.element_size(), s.lo, s.hi))


def _release(module: HostModule, groups: list[tuple[int, int, int, int, bool]]) -> None:
    for lo, _, copy, size, _ in groups:
        module.guarded_free(copy - lo % 16, size)
    groups.clear()


def byte_runs(
    base: int, shape: tuple[int, ...], elem: int, lo: tuple[int, ...], hi: tuple[int, ...]
) -> Iterable[tuple[int, int]]:
    """The contiguous byte ranges of the slice [lo, hi) of a row-major tensor at ``base``."""
    n = len(shape)
    if n == 0:
        yield base, base + elem
        return
    if any(h <= low for low, h in zip(lo, hi)):
        return
    k = n - 1  # dims after k are whole: one run per index of the dims before it
    while k > 0 and lo[k] == 0 and hi[k] == shape[k]:
        k -= 1
    strides = [math.prod(shape[d + 1 :]) for d in range(n)]
    run = (hi[k] - lo[k]) * strides[k] * elem
    for index in itertools.product(*(range(lo[d], hi[d]) for d in range(k))):
        start = base + (sum(i * strides[d] for d, i in enumerate(index)) + lo[k] * strides[k]) * elem
        yield start, start + run


def _ranges(spans: list[tuple[int, int]]) -> C.Array:
    """Sorted, disjoint ranges covering ``spans`` (touching ones merged), as MpkEmuRange[]."""
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return (Range * len(merged))(*(Range(lo, hi) for lo, hi in merged))


def _tensor_table(entries: list[tuple[str, torch.Tensor, int]]) -> C.Array:
    table = (Tensor * len(entries))()
    for row, (name, view, address) in zip(table, entries):
        row.lo, row.hi = address, address + view.numel() * view.element_size()
        row.name = name.encode()
        row.elem_size, row.ndim = view.element_size(), min(view.dim(), 6)
        for d, size in enumerate(view.shape[:6]):
            row.shape[d] = size
    return table


def _slice_text(s: SliceRef) -> str:
    return f"{s.tensor}[{', '.join(f'{lo}:{hi}' for lo, hi in zip(s.lo, s.hi))}]"
