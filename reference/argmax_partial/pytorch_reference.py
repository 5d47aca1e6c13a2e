"""Canonical PyTorch reference of the argmax_partial layer."""

import torch


def argmax_partial(input: torch.Tensor, num_parts: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """For logits (batch, vocab) cut into num_parts equal chunks: (values float32, indices int64),
    each (batch, num_parts), the largest logit of every chunk and its global index (torch.argmax:
    lowest index on ties, NaN wins)."""
    b, v = input.shape
    chunks = input.float().reshape(b, num_parts, v // num_parts)
    idx = torch.argmax(chunks, dim=-1)
    values = torch.gather(chunks, -1, idx.unsqueeze(-1)).squeeze(-1)
    offsets = torch.arange(num_parts, device=input.device) * (v // num_parts)
    return values, idx + offsets
