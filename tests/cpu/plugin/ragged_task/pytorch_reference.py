"""The ragged_scale layer from the math: per request slot, its rows scaled by (position + 1) / count,
their mean and their sum of squares."""

import torch


def ragged_scale(input: torch.Tensor, qo_indptr: torch.Tensor, slots: int):
    """input (T, C); qo_indptr (slots + 1,). Returns (output, mean, sumsq, rows written, slots written)."""
    t, c = input.shape
    out = torch.zeros(t, c, dtype=input.dtype)
    mean = torch.zeros(slots, c)
    sumsq = torch.zeros(slots)
    rows = torch.zeros(t, dtype=torch.bool)
    used = torch.zeros(slots, dtype=torch.bool)
    for x in range(slots):
        q0, q1 = int(qo_indptr[x]), int(qo_indptr[x + 1])
        n = q1 - q0
        if n <= 0:
            continue
        r = input[q0:q1].float()
        out[q0:q1] = (r * torch.arange(1, n + 1, dtype=torch.float32)[:, None] / n).to(input.dtype)
        mean[x] = r.mean(0)
        sumsq[x] = (r * r).sum()
        rows[q0:q1] = True
        used[x] = True
    return out, mean, sumsq, rows, used
