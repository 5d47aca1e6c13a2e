"""moe_group_w13_linear without a GPU: its reference against the group routing's choices and plain
matmuls, every argument check of its own (the rest are moe_topk_w13_linear's, tested in
test_moe_layers.py), its dependencies in a block, and compile-only builds for sm80, sm90 and sm100
(the scenes in tests/scenes/moe/test_moe_experts.py and test_moe_block.py run its body)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mpk_runtime.errors import ConfigError, DTypeError, ShapeError
from mpk_runtime.harness import find_reference

reference = find_reference("moe_group_w13_linear")
group_routing = find_reference("moe_sigmoid_group_routing")
BATCH = dict(test_mode=True, max_num_batched_tokens=16, max_seq_length=16, max_num_pages=16)
bf = torch.bfloat16


@pytest.mark.parametrize("fuse", [False, True], ids=["gate_up", "silu_mul"])
def test_the_reference_is_each_tokens_group_choices_times_their_weights(fuse):
    torch.manual_seed(1)
    tokens, experts, hidden, inter, k = 5, 32, 64, 16, 4
    x = torch.randn(tokens, hidden).to(bf)
    w = (torch.randn(experts, 2 * inter, hidden) / 8).to(bf)
    logits = torch.randn(tokens, experts).to(bf)
    bias = torch.randint(-2, 3, (experts,)).float() / 4
    got = reference(x, w, logits, bias, k, 4, 2, fuse)
    _, routing, _ = group_routing(logits, bias, k, 4, 2)
    for t in range(tokens):
        for e in (routing[:, t] > 0).nonzero().flatten().tolist():
            h = x[t].float() @ w[e].float().T
            want = F.silu(h[:inter]) * h[inter:] if fuse else h
            torch.testing.assert_close(got[t, int(routing[e, t]) - 1], want.to(bf))


def layer(pk, experts=64, k=8, tokens=16, bias=None, **kw):
    x = pk.attach_input(torch.empty(tokens, 256, dtype=bf), "x")
    w = pk.attach_input(torch.empty(experts, 256, 256, dtype=bf), "w")
    logits = pk.attach_input(torch.empty(tokens, experts, dtype=bf), "logits")
    b = pk.attach_input(torch.empty(experts) if bias is None else bias, "b")
    y = pk.attach_input(torch.empty(tokens, k, 128, dtype=bf), "y")
    kw.setdefault("grid_dim", (3, 1, 1))
    pk.moe_group_w13_linear_layer(input=x, weight=w, router_logits=logits, score_bias=b, output=y, block_dim=pk.block_dim, **kw)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (dict(n_group=3), ShapeError, "moe_group_w13_linear: n_group=3 groups of E=64 experts"),
        (dict(n_group=4, topk_group=5), ShapeError, "topk_group=5 groups kept of n_group=4; keep at most n_group"),
        (dict(n_group=8, topk_group=1, k=9), ShapeError, "k=9 experts per token; the task takes 1 <= k <= 32, and the kept"),
        (dict(n_group=0), ConfigError, "n_group=0 must be a positive integer, e.g. n_group=8"),
        (dict(topk_group=True), ConfigError, "topk_group=True must be a positive integer"),
        (dict(bias=torch.empty(32)), ShapeError, "score_bias must have shape (64,), one per expert, got (32,)"),
        (dict(bias=torch.empty(64, dtype=bf)), DTypeError, "score_bias (DTensor('b'"),
        (
            dict(experts=1024, n_group=8),
            ShapeError,
            "17408 routing slots in shared memory, more than 16384; use moe_sigmoid_group_routing and moe_w13_linear",
        ),
    ],
)
def test_arguments_are_checked(make_pk, change, error, words):
    pk = make_pk(90, **BATCH)
    with pytest.raises(error) as e:
        layer(pk, **{"n_group": 8, "topk_group": 4, **change})
    assert words in str(e.value)


def test_it_waits_for_the_router_logits_only(make_pk):
    """Beside the group routing task: gate / up waits for the router linear, not for the routing."""
    pk = make_pk(90, num_workers=4, **BATCH)
    rows, experts, k = 16, 64, 8

    def t(name, *shape, dtype=bf):
        return pk.attach_input(torch.empty(*shape, dtype=dtype), name)

    x, wr, logits, bias = (
        t("x", rows, 256),
        t("wr", experts, 256),
        t("logits", rows, experts),
        t("b", experts, dtype=torch.float32),
    )
    route = dict(routing_indices=t("ri", experts, rows, dtype=torch.int32), expert_mask=t("em", experts + 1, dtype=torch.int32))
    bd = pk.block_dim
    pk.linear_layer(input=x, weight=wr, output=logits, grid_dim=(experts // 8, 1, 1), block_dim=bd)
    pk.moe_sigmoid_group_routing_layer(
        input=logits, score_bias=bias, topk_weights=t("tw", rows, k, dtype=torch.float32), **route, n_group=8,
        topk_group=4, grid_dim=(1, 1, 1), block_dim=bd,
    )  # fmt: skip
    pk.moe_group_w13_linear_layer(
        input=x, weight=t("w13", experts, 256, 256), router_logits=logits, score_bias=bias, output=t("act", rows, k, 128),
        n_group=8, topk_group=4, grid_dim=(3, 1, 1), block_dim=bd,
    )  # fmt: skip
    g = pk._graph
    by_layer = {layer.name: set(range(layer.first_task, layer.first_task + layer.num_tasks)) for layer in g.layers}
    for tid in by_layer["moe_group_w13_linear_0"]:
        assert set(g.tasks[tid].deps) == by_layer["linear_0"]


@pytest.mark.parametrize("cc", [80, 90, 100], ids=lambda cc: f"sm{cc}")
def test_group_w13_compiles(make_pk, cc):
    pk = make_pk(cc, num_workers=8, **BATCH)
    layer(pk, experts=128, k=8, n_group=8, topk_group=4)
    pk.compile()
    assert pk.build_result.path.exists()
