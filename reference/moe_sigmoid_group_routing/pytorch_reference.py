"""Canonical PyTorch reference of the moe_sigmoid_group_routing layer (DeepSeek-V3 style routing)."""

import torch

from mpk_runtime.harness import find_reference

routing_data = find_reference("routing_data", layer="moe_topk_softmax_routing")  # the same routing rows and mask


def moe_sigmoid_group_routing(
    input: torch.Tensor,
    score_bias: torch.Tensor,
    topk: int,
    n_group: int = 1,
    topk_group: int = 1,
    norm_topk_prob: bool = True,
    routed_scaling_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-limited routing of router logits ``input`` (tokens, E), written from the math:

    - scores = sigmoid(logits) (fp32; NaN logits count as -inf, score 0), and the choice scores
      scores + score_bias (E,);
    - the E experts are n_group groups of E / n_group consecutive ones; a group's score is the sum of
      its two largest choice scores; the topk_group best groups are kept;
    - the topk largest choice scores among the kept groups' experts are the token's choices, largest
      first; topk_weights are their scores (without the bias), divided by their sum when
      norm_topk_prob, times routed_scaling_factor.

    Equal values are taken lower index first (experts, and groups). Returns topk_weights (tokens,
    topk) float32, routing_indices (E, tokens) int32 (j + 1 where expert e is token t's j-th choice,
    else 0) and expert_mask (E + 1,) int32 (expert_mask[e] = tokens routed to experts below e)."""
    logits = input.float()
    logits = torch.where(logits.isnan(), torch.full_like(logits, float("-inf")), logits)
    tokens, experts = logits.shape
    scores = torch.sigmoid(logits)
    choice = scores + score_bias.float()[None, :]
    per_group = choice.view(tokens, n_group, experts // n_group)
    group_scores = torch.sort(per_group, dim=2, descending=True, stable=True).values[:, :, :2].sum(dim=2)
    groups = torch.sort(group_scores, dim=1, descending=True, stable=True).indices[:, :topk_group]
    kept = torch.zeros(tokens, n_group, dtype=torch.bool)
    kept[torch.arange(tokens)[:, None], groups] = True
    kept = kept.repeat_interleave(experts // n_group, dim=1)
    order = torch.sort(choice.masked_fill(~kept, float("-inf")), dim=1, descending=True, stable=True).indices[:, :topk]
    topk_weights = scores.gather(1, order)
    if norm_topk_prob:
        topk_weights = topk_weights / (topk_weights.sum(dim=1, keepdim=True) + 1e-20)
    topk_weights = topk_weights * routed_scaling_factor
    return (topk_weights, *routing_data(order, experts))
