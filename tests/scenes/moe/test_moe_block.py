"""The MoE block of a Qwen3-MoE decoder layer as one megakernel, every intermediate compared:
router linear -> moe_topk_softmax_routing -> moe_w13_linear -> moe_silu_mul (or fused into w13) ->
moe_w2_linear -> moe_mul_sum_add (+ residual); golden: pytorch_reference.moe_block in this folder.
The `topk_w13` cases route in the gate / up layer instead (moe_topk_w13_linear, from the router
logits, beside moe_topk_softmax_routing), the `w2_sum` cases run the down projection and the
weighted sum as one layer (moe_w2_mul_sum_add), as the decode benchmark and the model do, and the
`groups` cases route as DeepSeek-V3 does (moe_sigmoid_group_routing, and with `topk_w13`
moe_group_w13_linear; their bias is zero, or 2 for the last group's experts, so that no choice turns
on a rounding of the sigmoid).

The input and the router weight are multiples of 1/4 and 1/8, so every router logit is computed
exactly in fp32 by any summation order and rounds to the same bf16 on the GPU as in the golden: the
routing (ties included) cannot flip between the two, and later layers are compared like for like."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Expected, Out, SceneTestCase, scene_test

from .moe_scenes import MAX_TOKENS, kernel_params, live
from .pytorch_reference import moe_block

HIDDEN, INTER = 256, 128
ROUTER_PATTERNS = ("uniform", "one_expert", "ties", "few_experts")


def router(pattern: str, experts: int) -> torch.Tensor:
    """Router weight (E, H), multiples of 1/8 in [-1, 1]; column 0 meets the input's constant column.
    one_expert: expert 3 far ahead for every token; ties: experts 2i and 2i+1 identical (equal
    logits, the lower index wins); few_experts: experts from 5 on far behind (most get no token)."""
    w = torch.randint(-8, 9, (experts, HIDDEN)) / 8
    w[:, 0] = 0
    if pattern == "one_expert":
        w[3, 0] = 64
    elif pattern == "ties":
        w[1::2] = w[0::2]
    elif pattern == "few_experts":
        w[5:, 0] = -64
    return w.to(torch.bfloat16)


@scene_test(layer="moe_block")
class TestMoeBlock(SceneTestCase):
    CASES = [
        Case("e8_k2_uniform_a64", experts=8, topk=2, active=64, pattern="uniform", tasks=8, fused=False),
        Case("e64_k8_uniform_a1", experts=64, topk=8, active=1, pattern="uniform", tasks=8, fused=False),
        Case("e64_k8_ties_a37", experts=64, topk=8, active=37, pattern="ties", tasks=5, fused=False),
        Case("e64_k1_one_expert_a64", experts=64, topk=1, active=64, pattern="one_expert", tasks=8, fused=False),
        Case("e64_k8_few_experts_a12_fused", experts=64, topk=8, active=12, pattern="few_experts", tasks=8, fused=True),
        Case("e128_k8_uniform_a64_fused", experts=128, topk=8, active=64, pattern="uniform", tasks=13, fused=True),
        Case("e128_k8_uniform_a3", experts=128, topk=8, active=3, pattern="uniform", tasks=8, fused=False),
        Case("e64_k8_uniform_a1_topk_w13", experts=64, topk=8, active=1, pattern="uniform", tasks=7, fused=True, topk_w13=True),
        Case("e128_k8_ties_a9_topk_w13", experts=128, topk=8, active=9, pattern="ties", tasks=13, fused=True, topk_w13=True),
        Case(
            "e64_k8_uniform_a1_w2_sum",
            experts=64,
            topk=8,
            active=1,
            pattern="uniform",
            tasks=16,
            fused=True,
            topk_w13=True,
            w2_sum=True,
        ),
        Case("e128_k8_ties_a37_w2_sum", experts=128, topk=8, active=37, pattern="ties", tasks=8, fused=False, w2_sum=True),
        Case(
            "e64_k8_groups8_kept4_uniform_a64_w2_sum",
            experts=64,
            topk=8,
            active=64,
            pattern="uniform",
            tasks=8,
            fused=True,
            w2_sum=True,
            groups=8,
            kept=4,
            scale=2.5,
            last_group_bias=True,
        ),
        Case(
            "e64_k6_groups4_kept2_ties_a9",
            experts=64,
            topk=6,
            active=9,
            pattern="ties",
            tasks=5,
            fused=False,
            groups=4,
            kept=2,
            scale=1.0,
        ),
        Case(
            "e64_k8_groups8_kept4_uniform_a1_group_w13_w2_sum",
            experts=64,
            topk=8,
            active=1,
            pattern="uniform",
            tasks=16,
            fused=True,
            topk_w13=True,
            w2_sum=True,
            groups=8,
            kept=4,
            scale=2.5,
            last_group_bias=True,
        ),
        Case(
            "e128_k8_groups8_kept2_ties_a9_group_w13",
            experts=128,
            topk=8,
            active=9,
            pattern="ties",
            tasks=13,
            fused=True,
            topk_w13=True,
            groups=8,
            kept=2,
            scale=1.0,
        ),
        Case(
            "e64_k1_one_expert_a64_topk_w13",
            experts=64,
            topk=1,
            active=64,
            pattern="one_expert",
            tasks=3,
            fused=True,
            topk_w13=True,
        ),
    ]
    SWEEP = {  # one build (E = 64, k = 8): active tokens, routing and grid sizes of the expert linears are run-time data
        "experts": st.just(64),
        "topk": st.just(8),
        "active": st.integers(1, MAX_TOKENS),
        "pattern": st.sampled_from(ROUTER_PATTERNS),
        "tasks": st.sampled_from([1, 3, 8, 13]),
        "fused": st.just(False),
    }

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        e, k, b = params["experts"], params["topk"], MAX_TOKENS
        bf = torch.bfloat16
        x = torch.randint(-4, 5, (b, HIDDEN)) / 4
        x[:, 0] = 1  # the constant column the router patterns steer with
        args = {
            "input": x.to(bf),
            "router_weight": router(params["pattern"], e),
            "w13": torch.randn(e, 2 * INTER, HIDDEN, dtype=bf) / HIDDEN**0.5,
            "w2": torch.randn(e, HIDDEN, INTER, dtype=bf) / INTER**0.5,
            "residual": torch.randn(b, HIDDEN, dtype=bf),
            "logits": Out(torch.empty(b, e, dtype=bf)),
            "topk_weights": Out(torch.empty(b, k)),
            "routing_indices": Out(torch.empty(e, b, dtype=torch.int32)),
            "expert_mask": Out(torch.empty(e + 1, dtype=torch.int32)),
            "act": Out(torch.empty(b, k, INTER, dtype=bf)),
            "y": Out(torch.empty(b, k, HIDDEN, dtype=bf)),
            "output": Out(torch.empty(b, HIDDEN, dtype=bf)),
        }
        if params.get("groups"):
            args["score_bias"] = torch.zeros(e)
            if params.get("last_group_bias"):
                args["score_bias"][e - e // params["groups"] :] = 2.0
        if not params["fused"]:
            args["mid"] = Out(torch.empty(b, k, 2 * INTER, dtype=bf))
        if params.get("w2_sum"):
            del args["y"]
        return args

    def build(self, pk, t, params):
        e, tasks, bd = params["experts"], params["tasks"], pk.block_dim
        route = dict(routing_indices=t.routing_indices, expert_mask=t.expert_mask)
        pk.linear_layer(input=t.input, weight=t.router_weight, output=t.logits, grid_dim=(e // 8, 1, 1), block_dim=bd)
        if params.get("groups"):
            pk.moe_sigmoid_group_routing_layer(
                input=t.logits, score_bias=t.score_bias, topk_weights=t.topk_weights, **route, n_group=params["groups"],
                topk_group=params["kept"], routed_scaling_factor=params["scale"], grid_dim=(1, 1, 1), block_dim=bd,
            )  # fmt: skip
        else:
            pk.moe_topk_softmax_routing_layer(
                input=t.logits, topk_weights=t.topk_weights, **route, grid_dim=(1, 1, 1), block_dim=bd
            )
        if params.get("topk_w13"):
            w13 = dict(router_logits=t.logits, output=t.act, grid_dim=(tasks, 1, 1), block_dim=bd)
            if params.get("groups"):  # gate / up routes as the group routing layer does
                groups = dict(score_bias=t.score_bias, n_group=params["groups"], topk_group=params["kept"])
                pk.moe_group_w13_linear_layer(input=t.input, weight=t.w13, **groups, **w13)
            else:
                pk.moe_topk_w13_linear_layer(input=t.input, weight=t.w13, **w13)
        elif params["fused"]:
            pk.moe_w13_linear_layer(input=t.input, weight=t.w13, **route, output=t.act, grid_dim=(tasks, 1, 1), block_dim=bd)
        else:
            pk.moe_w13_linear_layer(input=t.input, weight=t.w13, **route, output=t.mid, grid_dim=(tasks, 1, 1), block_dim=bd)
            pk.moe_silu_mul_layer(input=t.mid, output=t.act, grid_dim=(2, 1, 1), block_dim=bd)
        if params.get("w2_sum"):  # tasks: column slices of H
            pk.moe_w2_mul_sum_add_layer(
                input=t.act, weight=t.w2, **route, topk_weights=t.topk_weights, residual=t.residual, output=t.output,
                grid_dim=(tasks, 1, 1), block_dim=bd,
            )  # fmt: skip
            return
        pk.moe_w2_linear_layer(input=t.act, weight=t.w2, **route, output=t.y, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.moe_mul_sum_add_layer(
            input=t.y, topk_weights=t.topk_weights, residual=t.residual, output=t.output, grid_dim=(4, 1, 1), block_dim=bd
        )

    def compute_golden(self, args, params):
        a, e = int(args.meta.num_new_tokens[0]), params["experts"]
        group = (args.score_bias, params["groups"], params["kept"], params["scale"]) if params.get("groups") else None
        want = moe_block(
            args.input[:a], args.router_weight, args.w13, args.w2, args.residual[:a], params["topk"], params["fused"],
            params.get("w2_sum", False), group,
        )  # fmt: skip
        golden = {"expert_mask": want.pop("expert_mask")}
        r = want.pop("routing_indices")
        golden["routing_indices"] = Expected(torch.cat([r, torch.zeros(e, MAX_TOKENS - a, dtype=r.dtype)], 1), written=live(a, e))
        for name, value in want.items():
            full = torch.zeros(MAX_TOKENS, *value.shape[1:], dtype=value.dtype)
            full[:a] = value
            golden[name] = Expected(full, written=live(a))
        return golden


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
