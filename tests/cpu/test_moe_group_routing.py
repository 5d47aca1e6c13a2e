"""moe_sigmoid_group_routing without a GPU: its reference against the same math written another
way, every argument check, and compile-only builds for sm80, sm90 and sm100 (the scenes in
tests/scenes/moe/test_moe_group_routing.py run its body)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime import contract
from mpk_runtime.errors import ConfigError, DTypeError, GridError, KernelError, ShapeError
from mpk_runtime.harness import find_reference
from mpk_runtime.tasks import get as get_task

reference = find_reference("moe_sigmoid_group_routing")
softmax_reference = find_reference("moe_topk_softmax_routing")
BATCH = dict(test_mode=True, max_num_batched_tokens=16, max_seq_length=16, max_num_pages=16)


def per_token(logits, bias, k, groups, kept, norm, scale):
    """One token at a time, in plain Python: what the reference must give."""
    out = []
    for row in logits.float():
        row = torch.where(row.isnan(), torch.tensor(float("-inf")), row)
        score = torch.sigmoid(row)
        choice = score + bias
        size = len(row) // groups
        group_score = [sorted(choice[g * size : (g + 1) * size].tolist(), reverse=True)[:2] for g in range(groups)]
        ranked = sorted(range(groups), key=lambda g: (-sum(group_score[g]), g))[:kept]
        eligible = [e for e in range(len(row)) if e // size in ranked]
        chosen = sorted(eligible, key=lambda e: (-choice[e].item(), e))[:k]
        w = score[chosen]
        w = w / (w.sum() + 1e-20) if norm else w
        out.append((chosen, (w * scale).tolist()))
    return out


@pytest.mark.parametrize(
    ("experts", "groups", "kept", "k", "norm", "scale"),
    [(256, 8, 4, 8, True, 2.5), (64, 32, 3, 5, False, 1.0), (12, 3, 2, 8, True, 1.0), (16, 1, 1, 16, True, 0.5)],
)
def test_the_reference_is_the_group_limited_math(experts, groups, kept, k, norm, scale):
    torch.manual_seed(experts + k)
    logits = torch.randn(9, experts)
    logits[0] = 0.0  # every group ties: the lowest groups and experts
    logits[1, ::3] = float("nan")
    bias = torch.randint(-2, 3, (experts,)).float() / 4
    w, r, m = reference(logits, bias, k, groups, kept, norm, scale)
    for t, (chosen, weights) in enumerate(per_token(logits, bias, k, groups, kept, norm, scale)):
        assert [int(r[e, t]) for e in chosen] == list(range(1, k + 1))
        assert int((r[:, t] > 0).sum()) == k
        torch.testing.assert_close(w[t], torch.tensor(weights))
    assert m.tolist() == [0, *(r > 0).sum(dim=1).cumsum(0).tolist()]


def test_one_group_and_no_bias_is_top_k_of_the_logits():
    """sigmoid keeps the order, so the choices are the softmax routing's."""
    logits = torch.randn(7, 64)
    _, r, m = reference(logits, torch.zeros(64), 6)
    _, r_softmax, m_softmax = softmax_reference(logits, 6)
    assert torch.equal(r, r_softmax) and torch.equal(m, m_softmax)


def layer(pk, experts=64, k=8, tokens=16, bias=None, **kw):
    x = pk.attach_input(torch.empty(tokens, experts, dtype=torch.bfloat16), "x")
    b = pk.attach_input(torch.empty(experts) if bias is None else bias, "b")
    w = pk.attach_input(torch.empty(tokens, k), "w")
    r = pk.attach_input(torch.empty(experts, tokens, dtype=torch.int32), "r")
    m = pk.attach_input(torch.empty(experts + 1, dtype=torch.int32), "m")
    kw.setdefault("grid_dim", (1, 1, 1))
    pk.moe_sigmoid_group_routing_layer(
        input=x, score_bias=b, topk_weights=w, routing_indices=r, expert_mask=m, block_dim=pk.block_dim, **kw
    )


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (dict(n_group=3), ShapeError, "n_group=3 groups of E=64 experts; the task takes E <= 1024 and n_group <= 32 dividing E"),
        (dict(n_group=64), ShapeError, "n_group=64 groups of E=64 experts"),  # groups of one: no best two
        (dict(experts=2048, n_group=8), ShapeError, "E <= 1024"),
        (dict(n_group=4, topk_group=5), ShapeError, "topk_group=5 groups kept of n_group=4; keep at most n_group"),
        (dict(n_group=8, topk_group=1, k=9), ShapeError, "k=9 experts per token; the task takes 1 <= k <= 32, and the kept"),
        (dict(experts=128, k=33), ShapeError, "1 <= k <= 32"),
        (dict(n_group=0), ConfigError, "n_group=0 must be a positive integer, e.g. n_group=8"),
        (dict(topk_group=2.0), ConfigError, "topk_group=2.0 must be a positive integer"),
        (dict(norm_topk_prob=1), ConfigError, "norm_topk_prob=1 must be True or False"),
        (dict(routed_scaling_factor=0.0), ConfigError, "routed_scaling_factor=0.0 must be a positive number, e.g. 2.5"),
        (dict(routed_scaling_factor=float("inf")), ConfigError, "routed_scaling_factor=inf must be a positive number"),
        (dict(bias=torch.empty(32)), ShapeError, "score_bias must have shape (64,), one per expert, got (32,)"),
        (dict(bias=torch.empty(64, dtype=torch.bfloat16)), DTypeError, "score_bias (DTensor('b'"),
        (dict(grid_dim=(2, 1, 1)), GridError, ""),
    ],
)
def test_arguments_are_checked(make_pk, change, error, words):
    pk = make_pk(90, **BATCH)
    with pytest.raises(error) as e:
        layer(pk, **change)
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("arg", "tensor", "words"),
    [
        ("x", torch.empty(16, 64, 2), "input must be router logits (tokens, experts), got (16, 64, 2)"),
        ("x", torch.empty(16, 64, dtype=torch.int32), "input (DTensor('x'"),
        ("w", torch.empty(8, 8), "topk_weights must be (tokens, k) = (16, k), got (8, 8)"),
        ("w", torch.empty(16, 8, dtype=torch.bfloat16), "topk_weights (DTensor('w'"),
        ("r", torch.empty(16, 64, dtype=torch.int32), "routing_indices must be (experts, tokens) = (64, 16), got (16, 64)"),
        ("r", torch.empty(64, 16), "routing_indices (DTensor('r'"),
        ("m", torch.empty(64, dtype=torch.int32), "expert_mask must be (experts + 1,) = (65,), got (64,)"),
        ("m", torch.empty(65), "expert_mask (DTensor('m'"),
    ],
)
def test_tensors_are_checked(make_pk, arg, tensor, words):
    pk = make_pk(90, **BATCH)
    good = {
        "x": torch.empty(16, 64, dtype=torch.bfloat16),
        "b": torch.empty(64),
        "w": torch.empty(16, 8),
        "r": torch.empty(64, 16, dtype=torch.int32),
        "m": torch.empty(65, dtype=torch.int32),
    }
    t = {n: pk.attach_input(tensor if n == arg else v, n) for n, v in good.items()}
    with pytest.raises((ShapeError, DTypeError)) as e:
        pk.moe_sigmoid_group_routing_layer(
            input=t["x"], score_bias=t["b"], topk_weights=t["w"], routing_indices=t["r"], expert_mask=t["m"],
            n_group=8, topk_group=4, grid_dim=(1, 1, 1), block_dim=pk.block_dim,
        )  # fmt: skip
    assert words in str(e.value)


@pytest.mark.parametrize("cc", [80, 90, 100], ids=lambda cc: f"sm{cc}")
def test_group_routing_compiles(make_pk, cc):
    pk = make_pk(cc, num_workers=8, **BATCH)
    layer(pk, experts=256, k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5)
    pk.compile()
    assert pk.build_result.path.exists()


@pytest.mark.parametrize("emulate", [True, "reference"], ids=["cuda_bodies", "reference"])
def test_a_bias_that_is_not_finite_is_reported(make_pk, emulate):
    """NaN (or an infinity) in score_bias stops the launch, naming the expert and the fix."""
    pk = make_pk(90, compile_only=False, emulate=emulate, **BATCH)
    bias = torch.zeros(64)
    bias[17] = float("inf")
    layer(pk, bias=bias, n_group=8, topk_group=4)
    pk.compile()
    with pytest.raises(KernelError, match=r"^emulated iteration 0: task \d moe_sigmoid_group_routing_0\[0\] failed: ") as e:
        pk()
    pk.finalize()
    assert str(e.value).endswith(
        "score_bias[17] is NaN or infinite: the group routing ranks the experts by sigmoid score plus score_bias, "
        "which cannot order a non-finite value; pass a finite float32 score_bias"
    )


def test_an_unnamed_task_error_value_is_explained_by_every_spec():
    """A body's Runtime::fail(MPK_TASK_ERROR_VALUE, i) in a task whose spec gives no words of its own."""
    spec = get_task("linear")
    assert spec.error_message(contract.TASK_ERROR_VALUE, 7, None, {}) == "the value at index 7 of its input is one it cannot use"
    assert spec.error_message(contract.TASK_ERROR_INDEX, 9, None, {}) == "index 9 read from its input is out of range"
