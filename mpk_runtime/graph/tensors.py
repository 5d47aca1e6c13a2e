"""The tensors a task graph knows, and the boxes of them that tasks read and write."""

from __future__ import annotations

import bisect
from typing import NamedTuple

import torch

from .. import dtypes
from ..errors import GraphError, LayoutError, NameConflictError


class DTensor:
    """A tensor known to one PersistentKernel: an attached user tensor or a runtime intermediate."""

    def __init__(self, name: str, data: torch.Tensor, kind: str, graph_id: int, index: int):
        self.name = name
        self.data = data
        # "attached", "intermediate", "workspace" (one layer's zeroed scratch), "derived" (computed from attached
        # tensors, e.g. shuffled) or "comm" (in the communication heap the other ranks map; its memory exists from
        # compile() on)
        self.kind = kind
        self.derived_from: dict | None = None
        self.comm_world_size: int | None = None  # a comm tensor: the ranks that share its heap
        self.shape = tuple(data.shape)
        self.dtype = dtypes.lookup(data.dtype)
        self.strides = tuple(data.stride())
        self._layout = _layout(data)  # as attached: see check_unchanged
        self._fingerprint = _fingerprint(data)
        self._graph_id = graph_id
        self.index = index
        self.read = False
        self.written = False

    @property
    def num_dims(self) -> int:
        return len(self.shape)

    @property
    def direction(self) -> str:
        """IN, OUT or INOUT, from how the graph's tasks use the tensor."""
        if self.written:
            return "INOUT" if self.read else "OUT"
        return "IN"

    def __repr__(self) -> str:
        return f"DTensor({self.name!r}, shape={self.shape}, dtype={self.dtype.short})"

    def bind(self, data: torch.Tensor) -> None:
        """Give a placeholder its memory (a communication tensor's, when compile() maps the heap)."""
        self.data = data
        self._layout = _layout(data)
        self._fingerprint = _fingerprint(data)

    def check_unchanged(self, when: str) -> None:
        """LayoutError if the tensor was changed in place since it was attached (``resize_``,
        ``set_``, ``as_strided_``, ...): the graph was cut, and the kernel holds pointers, for the
        tensor as it was, so it would leave elements unwritten or write outside the tensor."""
        if _fingerprint(self.data) == self._fingerprint:
            return
        was, now = self._layout, _layout(self.data)  # the fingerprint's fields and the device, for the message
        raise LayoutError(
            f"{when}: tensor {self.name!r} changed after attach_input: it was {list(was[0])} with strides "
            f"{list(was[1])} at {was[2]:#x} (storage {was[3]} bytes, {was[4]}), now {list(now[0])} with strides "
            f"{list(now[1])} at {now[2]:#x} (storage {now[3]} bytes, {now[4]}); the kernel was built for the tensor as "
            f"attached: attach tensors in their final shape and do not resize_ / set_ them afterwards"
        )


def _fingerprint(data: torch.Tensor) -> tuple:
    """What every launch checks of every tensor of the graph, so it must be cheap: any in-place change
    of the layout moves the address, the shape, the strides or the dtype. The storage's size is not
    asked (about a third of the cost): resizing a storage reallocates it, so the address moves too
    (test_changed_tensors' storage_shrunk). No strings and no device object: 0.39 against 0.60 us a
    tensor with the storage's size (timeit on the 2-core CPU machine); 0.54 us on a 2 x H200 host's CPU."""
    return (0 if data.is_meta else data.data_ptr(), data.shape, data.stride(), data.dtype)


def _layout(data: torch.Tensor) -> tuple:
    """What the kernel relies on of an attached tensor: shape, strides, address, storage size, dtype and device."""
    ptr = 0 if data.device.type == "meta" else data.data_ptr()
    nbytes = data.untyped_storage().nbytes()
    return (tuple(data.shape), tuple(data.stride()), ptr, nbytes, f"{data.dtype} on {data.device}")


class Region(NamedTuple):
    """A half-open box ``[lo, hi)`` of a tensor's index space (a named tuple: a graph has one per
    task and argument, so they are cheap to make)."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    def overlaps(self, other: Region) -> bool:
        return all(a < d and c < b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.lo, self.hi))


class TensorSlice(NamedTuple):
    tensor: DTensor
    region: Region
    byte_offset: int  # of the region's first element, from the tensor's start


def check_new_tensor(data: object, name: object, known: dict[str, DTensor]) -> None:
    """GraphError / LayoutError / NameConflictError for a tensor that cannot join a graph."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"tensor name must be a non-empty string, got {name!r}")
    if name in known:
        raise NameConflictError(f"a tensor named {name!r} is already attached ({known[name]!r}); give each tensor a unique name")
    if not isinstance(data, torch.Tensor):
        raise GraphError(f"tensor {name!r} must be a torch.Tensor, got {type(data).__name__}")
    if not data.is_contiguous():
        raise LayoutError(
            f"tensor {name!r} with shape {tuple(data.shape)} and strides {data.stride()} is not contiguous; "
            f"pass tensor.contiguous()"
        )
    if data.dim() == 0:
        raise GraphError(f"tensor {name!r} is a 0-d scalar; attach it as shape (1,) with tensor.reshape(1)")
    if data.numel() == 0:
        raise GraphError(
            f"tensor {name!r} has shape {tuple(data.shape)}, no elements: a layer splits its tensors into "
            f"tasks of at least one element; give every dim a size of at least 1"
        )


class MemoryIndex:
    """Dependencies are tracked per tensor, so two attached tensors must not share memory: a write
    through one would not order a read through the other. Attached ranges never overlap, so a
    sorted index per device answers with the two neighbours of a new range."""

    def __init__(self) -> None:
        self._by_device: dict[str, tuple[list[int], list[tuple[int, int, str]]]] = {}

    def add(self, data: torch.Tensor, name: str) -> None:
        if data.device.type == "meta" or data.numel() == 0:
            return
        lo = data.data_ptr()
        hi = lo + data.numel() * data.element_size()
        starts, spans = self._by_device.setdefault(str(data.device), ([], []))
        i = bisect.bisect_left(starts, lo)
        for j in (i - 1, i):
            if 0 <= j < len(starts) and spans[j][0] < hi and lo < spans[j][1]:
                raise GraphError(
                    f"tensor {name!r} shares memory with {spans[j][2]!r} (the same tensor, or views of one storage); "
                    f"attach each buffer once and pass the same handle to every layer that uses it"
                )
        starts.insert(i, lo)
        spans.insert(i, (lo, hi, name))
