"""tensor_maps: the descriptors (CUtensorMap, 128 bytes each) through which a task body's TMA copies
(sm90 and later) read boxes of a tensor.

A map holds its tensor's address, so the maps of a layer are a derived tensor of the graph: made by
the driver (``cuTensorMapEncodeTiled``, loaded from libcuda.so.1 with ctypes, so nothing links to
it) when the layer is added, and made again by a replay from the tensors it binds. A CPU tensor's
map holds the geometry the driver would have encoded, without the address (``EMULATION_MAP``, the
emulator's ``EmuTensorMap``): the host emulator copies through the geometry the body gives it
(primitives/tma.cuh) and reports a copy whose geometry differs from its map's.
"""

from __future__ import annotations

import ctypes as C
import functools
import struct

import torch

from ..errors import ConfigError, ShapeError

MAP_BYTES = 128
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CUtensorMapSwizzle
_DATA_TYPES = {1: 0, 2: 1, 4: 2, 8: 4}  # element bytes -> CU_TENSOR_MAP_DATA_TYPE_UINT8/16/32/64 (a copy needs no more)
_L2_PROMOTION_256B = 3
_MAX_BOX = 256  # elements a box dimension (the driver's limit)
# emulation/shim_api.h's EmuTensorMap: magic, rank, element bytes, swizzle bytes, pad, dims[5],
# strides[4] (bytes), box[5]
EMULATION_MAP = struct.Struct("<8s4i5q4q5i")
EMULATION_MAGIC = b"MPKEMAP1"


def tensor_maps(tensors: list[torch.Tensor], box: list[int], swizzle: int) -> torch.Tensor:
    """uint8 (len(tensors), 128) on the tensors' device: a map per tensor, of its dims from the
    innermost, with boxes of ``box`` elements (innermost first) and ``swizzle`` bytes of shared-memory
    swizzle (0, 32, 64 or 128); for CPU tensors, the emulator's description of the same. ShapeError
    for a tensor or box the TMA unit cannot copy."""
    where = "tensor_maps"
    if not tensors:
        raise ShapeError(f"{where}: give at least one tensor")
    first = tensors[0]
    if swizzle not in SWIZZLES:
        raise ShapeError(f"{where}: swizzle={swizzle!r} must be one of {sorted(SWIZZLES)} (bytes)")
    for i, t in enumerate(tensors):
        if t.device != first.device:
            raise ShapeError(f"{where}: tensors[{i}] is on {t.device} but tensors[0] on {first.device}; use one device")
        _check_copyable(t, box, swizzle, f"{where}: tensors[{i}]")
    out = torch.zeros(len(tensors), MAP_BYTES, dtype=torch.uint8)
    for i, t in enumerate(tensors):
        made = _encode(t, box, swizzle) if t.device.type == "cuda" else _describe(t, box, swizzle)
        out[i, : len(made)] = torch.frombuffer(bytearray(made), dtype=torch.uint8)
    return out.to(first.device)


def _byte_strides(t: torch.Tensor) -> list[int]:
    """The strides of ``t``'s outer dims in bytes, from the innermost but one: the map's strides."""
    return [s * t.element_size() for s in reversed(t.stride()[:-1])]


def _describe(t: torch.Tensor, box: list[int], swizzle: int) -> bytes:
    """The emulator's map of ``t``: its geometry as the driver would encode it, without the address."""
    rank, pad = t.dim(), [0] * (5 - t.dim())
    dims = [*reversed(t.shape), *pad]
    strides = _byte_strides(t) + [0] * (5 - rank)
    return EMULATION_MAP.pack(EMULATION_MAGIC, rank, t.element_size(), swizzle, 0, *dims, *strides, *box, *pad)


def _check_copyable(t: torch.Tensor, box: list[int], swizzle: int, where: str) -> None:
    shape = list(reversed(t.shape))  # innermost first, as the map's dims
    if t.element_size() not in _DATA_TYPES:
        raise ShapeError(f"{where}: {t.dtype} elements of {t.element_size()} bytes; the TMA copies 1, 2, 4 or 8")
    if not 1 <= t.dim() <= 5 or not t.is_contiguous():
        raise ShapeError(
            f"{where}: a map needs a contiguous tensor of 1 to 5 dims; got shape {tuple(t.shape)}, strides {t.stride()}"
        )
    if len(box) != t.dim() or any(not 1 <= b <= min(n, _MAX_BOX) for b, n in zip(box, shape)):
        raise ShapeError(
            f"{where}: box {list(box)} (innermost first) must give each of the {t.dim()} dims {shape} 1 to "
            f"min(dim, {_MAX_BOX}) elements"
        )
    row = box[0] * t.element_size()
    if row % 16 or (swizzle and row > swizzle):
        limit = f" and at most the {swizzle}-byte swizzle" if swizzle else ""
        raise ShapeError(f"{where}: the box's innermost {box[0]} elements are {row} bytes; they must be a multiple of 16{limit}")
    strides = _byte_strides(t)
    if any(s % 16 for s in strides) or (t.data_ptr() % 16 and t.device.type == "cuda"):
        raise ShapeError(f"{where}: the address and the byte strides {strides} of the outer dims must be multiples of 16")


@functools.cache
def _driver() -> C.CDLL:
    try:
        return C.CDLL("libcuda.so.1")
    except OSError as e:
        raise ConfigError(f"tensor_maps: cannot load the CUDA driver (libcuda.so.1) to encode a tensor map: {e}") from None


def _encode(t: torch.Tensor, box: list[int], swizzle: int) -> bytes:
    rank = t.dim()
    u64, u32 = C.c_uint64, C.c_uint32
    dims = (u64 * rank)(*reversed(t.shape))
    strides = (u64 * max(rank - 1, 1))(*_byte_strides(t))
    boxes = (u32 * rank)(*box)
    unit = (u32 * rank)(*([1] * rank))  # every element of the box, no stride
    out = (u64 * (MAP_BYTES // 8))()
    with torch.cuda.device(t.device):  # the tensor's context current, as the driver call wants one
        rc = _driver().cuTensorMapEncodeTiled(
            C.byref(out), _DATA_TYPES[t.element_size()], rank, C.c_void_p(t.data_ptr()), dims, strides, boxes, unit,
            0, SWIZZLES[swizzle], _L2_PROMOTION_256B, 0,
        )  # fmt: skip
    if rc != 0:
        raise ConfigError(
            f"tensor_maps: cuTensorMapEncodeTiled returned CUresult {rc} for a tensor of shape {tuple(t.shape)} "
            f"({t.dtype}) at {t.data_ptr():#x} with box {list(box)} and a {swizzle}-byte swizzle"
        )
    return bytes(out)
