"""What the MoE scenes share: the batch they run in (MAX_TOKENS rows of tokens, of which `active`
are live, set through the meta tensors), router logits for each routing case, score biases for the
group routing, and routing data for the expert layers tested alone."""

from __future__ import annotations

import torch

from mpk_runtime.harness import find_reference
from pytest_mpk import Expected, Out, active_tokens

MAX_TOKENS = 64  # rows of every token dimension: max_num_batched_tokens; one build serves 1..64 active
PATTERNS = ("uniform", "one_expert", "all_same", "ties", "zeros", "signed_zeros", "few_experts", "nan")
routing_reference = find_reference("moe_topk_softmax_routing")


def kernel_params(active: int) -> dict:
    """A batch of MAX_TOKENS token rows with `active` live tokens (one request with an `active`-token prompt)."""
    return active_tokens(MAX_TOKENS, active)


def live(active: int, *lead: int) -> torch.Tensor:
    """The `written` mask of an output whose token dimension comes after `lead` dims."""
    rows = torch.arange(MAX_TOKENS) < active
    return rows.expand(*lead, MAX_TOKENS).clone() if lead else rows


def padded(value: torch.Tensor, active: int) -> Expected:
    """The golden of an output whose first `active` token rows are ``value``: the rows past them zero,
    and marked unwritten."""
    full = torch.zeros(MAX_TOKENS, *value.shape[1:], dtype=value.dtype)
    full[:active] = value
    return Expected(full, written=live(active))


def routing_outputs(experts: int, topk: int) -> dict[str, Out]:
    """A routing layer's outputs over the MAX_TOKENS rows."""
    return {
        "topk_weights": Out(torch.empty(MAX_TOKENS, topk)),
        "routing_indices": Out(torch.empty(experts, MAX_TOKENS, dtype=torch.int32)),
        "expert_mask": Out(torch.empty(experts + 1, dtype=torch.int32)),
    }


def routing_golden(weights: torch.Tensor, routing: torch.Tensor, mask: torch.Tensor, active: int) -> dict:
    """The golden of a routing layer from its reference's outputs for the `active` tokens: the columns
    of the other tokens zero and marked unwritten."""
    experts, k = routing.shape[0], weights.shape[1]
    return {
        "topk_weights": Expected(torch.cat([weights, torch.zeros(MAX_TOKENS - active, k)]), written=live(active)),
        "routing_indices": Expected(
            torch.cat([routing, torch.zeros(experts, MAX_TOKENS - active, dtype=torch.int32)], 1), written=live(active, experts)
        ),
        "expert_mask": mask,
    }


def logits(pattern: str, experts: int, tokens: int = MAX_TOKENS) -> torch.Tensor:
    """Router logits (tokens, experts), float32, for one routing case:
    uniform: random; one_expert: expert 3 first for every token (k = 1: every token to one expert);
    all_same: every token the same row (k experts with every token, the rest with none);
    ties: small integers, and experts 2i, 2i+1 equal (resolved to the lower index);
    zeros: all equal (experts 0..k-1); signed_zeros: zeros of random sign (-0 == +0: experts 0..k-1
    as for zeros); few_experts: experts from 5 on far below the rest (with k <= 5
    most experts get no token); nan: random with NaN and -inf entries (NaN counts as -inf)."""
    x = torch.randn(tokens, experts)
    if pattern == "one_expert":
        x[:, 3 % experts] += 100.0
    elif pattern == "all_same":
        x[:] = x[0]
    elif pattern == "ties":
        x = torch.randint(-2, 3, (tokens, experts)).float()
        x[:, 1::2] = x[:, 0::2][:, : x[:, 1::2].shape[1]]
    elif pattern == "zeros":
        x.zero_()
    elif pattern == "signed_zeros":
        x = torch.zeros_like(x).copysign(x)
    elif pattern == "few_experts":
        x[:, 5:] -= 100.0  # experts 0..4 take every first choice; with k > 5 the rest spill over
    elif pattern == "nan":
        x[torch.rand(tokens, experts) < 0.1] = float("nan")
        x[torch.rand(tokens, experts) < 0.1] = float("-inf")
    elif pattern != "uniform":
        raise ValueError(f"routing pattern {pattern!r}; use one of {PATTERNS}")
    return x


def routing(pattern: str, experts: int, topk: int, active: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(topk_weights, routing_indices, expert_mask) of the first `active` tokens, as routing inputs of
    MAX_TOKENS rows. The columns of inactive tokens hold junk slots, which a correct layer never reads."""
    w, r, m = routing_reference(logits(pattern, experts)[:active], topk)
    weights = torch.rand(MAX_TOKENS, topk)
    weights[:active] = w
    routing_indices = torch.randint(1, topk + 1, (experts, MAX_TOKENS), dtype=torch.int32)
    routing_indices[:, :active] = r
    return weights, routing_indices, m


BIASES = ("zero", "coarse", "decides")  # the valid ones; "nan_5" and "neg_inf_last" stop the launch


def score_bias(kind: str, experts: int, groups: int) -> torch.Tensor:
    """zero; coarse: -0.5, 0 or 0.5 at random; decides: +2 for the last group's experts, whose
    sigmoid scores alone could not make them win (they are at most 1 apart); nan_5, neg_inf_last: zero
    but for a NaN at expert 5, or -inf at the last expert."""
    if kind in ("nan_5", "neg_inf_last"):
        bias = torch.zeros(experts)
        bias[5 if kind == "nan_5" else -1] = float("nan") if kind == "nan_5" else float("-inf")
        return bias
    if kind == "zero":
        return torch.zeros(experts)
    if kind == "coarse":
        return torch.randint(-1, 2, (experts,)).float() / 2
    if kind == "decides":
        bias = torch.zeros(experts)
        bias[experts - experts // groups :] = 2.0
        return bias
    raise ValueError(f"bias {kind!r}; use one of {BIASES}")
