"""The tensor dtypes the runtime understands, and their C++ spelling in task templates."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import DTypeError


@dataclass(frozen=True)
class DType:
    torch: torch.dtype
    cpp: str  # the type task templates are instantiated with
    short: str  # used in readable cache entry names, e.g. "bf16"
    itemsize: int


_DTYPES = [
    DType(torch.bfloat16, "__nv_bfloat16", "bf16", 2),
    DType(torch.float16, "__half", "fp16", 2),
    DType(torch.float32, "float", "fp32", 4),
    DType(torch.int32, "int32_t", "i32", 4),
    DType(torch.int64, "int64_t", "i64", 8),
    DType(torch.uint8, "uint8_t", "u8", 1),
]
_BY_TORCH = {d.torch: d for d in _DTYPES}
_BY_SHORT = {d.short: d for d in _DTYPES}
SHORT_NAMES: tuple[str, ...] = tuple(_BY_SHORT)


def lookup(dtype: torch.dtype) -> DType:
    """The runtime's description of a torch dtype; DTypeError for one it cannot carry."""
    if not isinstance(dtype, torch.dtype):
        raise DTypeError(f"dtype={dtype!r} is not a torch.dtype; pass one such as torch.bfloat16")
    try:
        return _BY_TORCH[dtype]
    except KeyError:
        names = ", ".join(str(d.torch) for d in _DTYPES)
        raise DTypeError(f"dtype {dtype} is not supported by the runtime; use one of {names}") from None


def from_short(short: str) -> DType:
    """Inverse of ``DType.short`` (used when a graph JSON or signature file is read back)."""
    try:
        return _BY_SHORT[short]
    except KeyError:
        raise DTypeError(f"unknown dtype name {short!r}; expected one of {sorted(_BY_SHORT)}") from None


FLOATING = (torch.bfloat16, torch.float16, torch.float32)
