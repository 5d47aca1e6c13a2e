"""Canonical PyTorch reference of the argmax_reduce layer."""

import torch


def argmax_reduce(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Per row, the index of the best partial: the largest value, the lowest index on ties."""
    v = values.float()
    best = v.max(dim=-1, keepdim=True).values
    is_best = (v == best) | (torch.isnan(v) & torch.isnan(best))
    candidates = torch.where(is_best, indices, torch.full_like(indices, torch.iinfo(torch.int64).max))
    return candidates.min(dim=-1).values
