"""The reference of the row_softmax layer, from the math."""

import torch


def row_softmax(input: torch.Tensor) -> torch.Tensor:
    return torch.softmax(input.float(), dim=-1).to(input.dtype)
