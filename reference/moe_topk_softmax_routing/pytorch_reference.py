"""Canonical PyTorch reference of the moe_topk_softmax_routing layer."""

import torch


def moe_topk_softmax_routing(input: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k routing of router logits ``input`` (tokens, E). Returns

    - topk_weights (tokens, topk) float32: softmax over each token's topk largest logits, largest first
      (the same as softmax over all E, kept top k, renormalized);
    - routing_indices (E, tokens) int32: j + 1 where expert e is token t's j-th choice, else 0;
    - expert_mask (E + 1,) int32: expert_mask[e] = tokens routed to experts below e (so
      expert_mask[E] = tokens * topk).

    Equal logits are taken lower expert index first; NaN counts as -inf."""
    logits = input.float()
    logits = torch.where(logits.isnan(), torch.full_like(logits, float("-inf")), logits)
    tokens, experts = logits.shape
    order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :topk]  # stable: lower index first
    topk_weights = torch.softmax(logits.gather(1, order), dim=1)
    return (topk_weights, *routing_data(order, experts))


def routing_data(order: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The routing data of each token's choices ``order`` (tokens, k), best first: routing_indices
    (E, tokens) int32, j + 1 where expert e is token t's j-th choice, else 0; expert_mask (E + 1,)
    int32, the tokens routed to the experts below e."""
    tokens, topk = order.shape
    routing_indices = torch.zeros(experts, tokens, dtype=torch.int32)
    slots = torch.arange(1, topk + 1, dtype=torch.int32).expand(tokens, topk)
    routing_indices[order, torch.arange(tokens)[:, None].expand(tokens, topk)] = slots
    counts = (routing_indices > 0).sum(dim=1)
    expert_mask = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
    return routing_indices, expert_mask
