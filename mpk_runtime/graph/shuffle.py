"""shuffle_tensors: interleave tensors in groups along one dimension (on the host, once).

With inputs [A, B], shuffled_dim=0 and num_groups=G, each input is cut into G equal blocks of rows
and the result is [A_0, B_0, A_1, B_1, ..., A_{G-1}, B_{G-1}]: a gate / up weight laid out so that
a linear with 2G tasks writes [gate_g | up_g] chunks, which a silu_mul with G tasks reads one each.
"""

from __future__ import annotations

import torch

from ..errors import GridError, ShapeError


def shuffle(tensors: list[torch.Tensor], shuffled_dim: int, num_groups: int) -> torch.Tensor:
    if len(tensors) < 1:
        raise ShapeError("shuffle_tensors: give at least one input tensor")
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
            raise ShapeError(
                f"shuffle_tensors: inputs must share shape, dtype and device; got "
                f"{[(tuple(x.shape), str(x.dtype), str(x.device)) for x in tensors]}"
            )
    if not 0 <= shuffled_dim < first.dim():
        raise ShapeError(f"shuffle_tensors: shuffled_dim={shuffled_dim} is not a dimension of shape {tuple(first.shape)}")
    size = first.shape[shuffled_dim]
    if not isinstance(num_groups, int) or num_groups < 1 or size % num_groups:
        raise GridError(f"shuffle_tensors: num_groups={num_groups!r} must divide dim {shuffled_dim} (size {size})")
    moved = [t.movedim(shuffled_dim, 0) for t in tensors]
    block = size // num_groups
    grouped = torch.stack([m.reshape(num_groups, block, *m.shape[1:]) for m in moved], dim=1)
    out = grouped.reshape(size * len(tensors), *moved[0].shape[1:]).movedim(0, shuffled_dim)
    return out.contiguous()
