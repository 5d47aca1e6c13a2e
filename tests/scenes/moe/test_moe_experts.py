"""Scene tests of the expert linears, moe_w13_linear (gate / up, optionally with SiLU-mul fused) and
moe_w2_linear (down), each alone on routing data from the reference, moe_topk_w13_linear and
moe_group_w13_linear (the routing computed in the task from router logits, the softmax top-k or
DeepSeek-V3's group routing, then gate / up) and moe_w2_mul_sum_add (down and
the weighted sum plus the residual, each task owning columns): routing cases with experts of no
tokens, one expert with every token (64 tokens: four m16 tiles), ties, NaN logits, k = 1 to 8,
E = 8, 64, 128, 1 to 64 active tokens of a 64-token batch, and grids of 1 to 13 tasks sharing the
routed work."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .moe_scenes import BIASES, MAX_TOKENS, PATTERNS, kernel_params, logits, padded, routing, score_bias

HIDDEN, INTER = 256, 128


def expert_cases(fused_too: bool) -> list[Case]:
    cases = [
        Case("e8_k2_uniform_a64_t8", experts=8, topk=2, active=64, pattern="uniform", tasks=8),
        Case("e64_k8_uniform_a1_t8", experts=64, topk=8, active=1, pattern="uniform", tasks=8),
        Case("e64_k8_ties_a23_t3", experts=64, topk=8, active=23, pattern="ties", tasks=3),
        Case("e64_k8_all_same_a40_t5", experts=64, topk=8, active=40, pattern="all_same", tasks=5),
        Case("e64_k1_one_expert_a64_t8", experts=64, topk=1, active=64, pattern="one_expert", tasks=8),
        Case("e64_k1_few_experts_a9_t1", experts=64, topk=1, active=9, pattern="few_experts", tasks=1),
        Case("e128_k8_uniform_a64_t13", experts=128, topk=8, active=64, pattern="uniform", tasks=13),
    ]
    if fused_too:  # every case names `fused`, the output [gate | up] or silu(gate) * up
        cases = [Case(c.name, **c.params, fused=False) for c in cases]
        cases.append(Case("e64_k8_uniform_a17_t8_fused", experts=64, topk=8, active=17, pattern="uniform", tasks=8, fused=True))
    return cases


def w13_tensors(params) -> dict:
    """The input, weight and output of a gate / up layer for a case (output [gate | up], or silu(gate) * up
    when `fused`)."""
    cols = INTER if params["fused"] else 2 * INTER
    return {
        "input": torch.randn(MAX_TOKENS, HIDDEN, dtype=torch.bfloat16),
        "weight": torch.randn(params["experts"], 2 * INTER, HIDDEN, dtype=torch.bfloat16) / HIDDEN**0.5,
        "output": Out(torch.empty(MAX_TOKENS, params["topk"], cols, dtype=torch.bfloat16)),
    }


def grid(pk, params) -> dict:
    return dict(grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)


SWEEP = {  # one build (E = 64, k = 8): active tokens, routing and the grid are run-time data
    "experts": st.just(64),
    "topk": st.just(8),
    "active": st.integers(1, MAX_TOKENS),
    "pattern": st.sampled_from([p for p in PATTERNS if p != "nan"]),
    "tasks": st.sampled_from([1, 3, 8, 13]),
}


@scene_test(layer="moe_w13_linear")
class TestMoeW13(SceneTestCase):
    CASES = expert_cases(fused_too=True)
    SWEEP = {**SWEEP, "fused": st.just(False)}

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        _, r, m = routing(params["pattern"], params["experts"], params["topk"], params["active"])
        return {**w13_tensors(params), "routing_indices": r, "expert_mask": m}

    def build(self, pk, t, params):
        route = dict(routing_indices=t.routing_indices, expert_mask=t.expert_mask)
        pk.moe_w13_linear_layer(input=t.input, weight=t.weight, output=t.output, **route, **grid(pk, params))

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a, k = params["active"], params["topk"]
        w13 = find_reference("moe_w13_linear")
        return padded(w13(args.input[:a], args.weight, args.routing_indices[:, :a], k, params["fused"]), a)


def w2_args(params, topk_weights: bool = False) -> dict:
    """A down projection's input and weight, and the routing data of the case (with its routing
    weights when `topk_weights`)."""
    e, k = params["experts"], params["topk"]
    w, r, m = routing(params["pattern"], e, k, params["active"])
    args = {
        "input": torch.randn(MAX_TOKENS, k, INTER, dtype=torch.bfloat16),
        "weight": torch.randn(e, HIDDEN, INTER, dtype=torch.bfloat16) / INTER**0.5,
        "routing_indices": r,
        "expert_mask": m,
    }
    return {**args, "topk_weights": w} if topk_weights else args


@scene_test(layer="moe_w2_linear")
class TestMoeW2(SceneTestCase):
    CASES = expert_cases(fused_too=False)
    SWEEP = SWEEP

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        return {**w2_args(params), "output": Out(torch.empty(MAX_TOKENS, params["topk"], HIDDEN, dtype=torch.bfloat16))}

    def build(self, pk, t, params):
        pk.moe_w2_linear_layer(
            input=t.input,
            weight=t.weight,
            routing_indices=t.routing_indices,
            expert_mask=t.expert_mask,
            output=t.output,
            grid_dim=(params["tasks"], 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a = params["active"]
        return padded(find_reference("moe_w2_linear")(args.input[:a], args.weight, args.routing_indices[:, :a]), a)


@scene_test(layer="moe_topk_w13_linear")
class TestMoeTopkW13(SceneTestCase):
    CASES = [
        *expert_cases(fused_too=True),
        Case("e64_k8_nan_a20_t8_fused", experts=64, topk=8, active=20, pattern="nan", tasks=8, fused=True),
        Case("e128_k8_signed_zeros_a5_t7_fused", experts=128, topk=8, active=5, pattern="signed_zeros", tasks=7, fused=True),
        # float32 logits (the router's output dtype is the caller's choice), with NaN and -inf in them
        Case("e64_k8_nan_a33_t5_fused_fp32", experts=64, topk=8, active=33, pattern="nan", tasks=5, fused=True, fp32=True),
    ]
    SWEEP = {**SWEEP, "pattern": st.sampled_from(PATTERNS), "fused": st.just(True)}

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        dtype = torch.float32 if params.get("fp32") else torch.bfloat16
        return {**w13_tensors(params), "router_logits": logits(params["pattern"], params["experts"]).to(dtype)}

    def build(self, pk, t, params):
        pk.moe_topk_w13_linear_layer(
            input=t.input, weight=t.weight, output=t.output, router_logits=t.router_logits, **grid(pk, params)
        )

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a, k = params["active"], params["topk"]
        w13 = find_reference("moe_topk_w13_linear")
        return padded(w13(args.input[:a], args.weight, args.router_logits[:a], k, params["fused"]), a)


@scene_test(layer="moe_group_w13_linear")
class TestMoeGroupW13(SceneTestCase):
    CASES = [
        Case("e128_g8_t4_k8_uniform_a1_t7_fused", experts=128, groups=8, kept=4, topk=8, active=1, pattern="uniform",
             tasks=7, fused=True, bias="coarse"),
        Case("e64_g8_t3_k6_ties_a23_t3", experts=64, groups=8, kept=3, topk=6, active=23, pattern="ties", tasks=3,
             fused=False, bias="coarse"),
        Case("e64_g4_t1_k8_bias_decides_a64_t8_fused", experts=64, groups=4, kept=1, topk=8, active=64, pattern="uniform",
             tasks=8, fused=True, bias="decides"),
        Case("e64_g32_t8_k8_all_same_a40_t5_fused", experts=64, groups=32, kept=8, topk=8, active=40, pattern="all_same",
             tasks=5, fused=True, bias="zero"),
        Case("e128_g8_t4_k8_nan_a20_t13_fused_fp32", experts=128, groups=8, kept=4, topk=8, active=20, pattern="nan",
             tasks=13, fused=True, bias="zero", fp32=True),
        Case("e8_g4_t1_k1_zeros_a9_t1", experts=8, groups=4, kept=1, topk=1, active=9, pattern="zeros", tasks=1,
             fused=False, bias="zero"),
        # Every task checks the bias: -inf at the last expert stops the launch, naming it.
        Case("e64_g8_t4_k8_inf_bias_a2_t3", experts=64, groups=8, kept=4, topk=8, active=2, pattern="uniform", tasks=3,
             fused=True, bias="neg_inf_last", raises=r"score_bias\[63\] is NaN or infinite"),
    ]  # fmt: skip
    SWEEP = {
        **SWEEP,
        "groups": st.just(8),
        "kept": st.just(4),
        "bias": st.sampled_from(BIASES),
        "fused": st.just(True),
    }

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        dtype = torch.float32 if params.get("fp32") else torch.bfloat16
        e = params["experts"]
        return {
            **w13_tensors(params),
            "router_logits": logits(params["pattern"], e).to(dtype),
            "score_bias": score_bias(params["bias"], e, params["groups"]),
        }

    def build(self, pk, t, params):
        pk.moe_group_w13_linear_layer(
            input=t.input, weight=t.weight, output=t.output, router_logits=t.router_logits, score_bias=t.score_bias,
            n_group=params["groups"], topk_group=params["kept"], **grid(pk, params),
        )  # fmt: skip

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a, k = params["active"], params["topk"]
        w13 = find_reference("moe_group_w13_linear")
        out = w13(
            args.input[:a], args.weight, args.router_logits[:a], args.score_bias, k, params["groups"], params["kept"],
            params["fused"],
        )  # fmt: skip
        return padded(out, a)


@scene_test(layer="moe_w2_mul_sum_add")
class TestMoeW2MulSumAdd(SceneTestCase):
    # tasks: slices of the 256 columns. 16: one unit (16 rows) of each expert a task; 8: two, so a
    # warp's units span experts and an expert's units span warps. (Fewer tasks would need more than
    # the shared memory the layer allows for 64 token rows: an error, tested in tests/cpu.)
    CASES = [
        Case("e8_k2_uniform_a64_t16", experts=8, topk=2, active=64, pattern="uniform", tasks=16),
        Case("e64_k8_uniform_a1_t16", experts=64, topk=8, active=1, pattern="uniform", tasks=16),
        Case("e64_k8_ties_a23_t8", experts=64, topk=8, active=23, pattern="ties", tasks=8),
        Case("e64_k8_all_same_a40_t8", experts=64, topk=8, active=40, pattern="all_same", tasks=8),
        Case("e64_k1_one_expert_a64_t8", experts=64, topk=1, active=64, pattern="one_expert", tasks=8),
        Case("e64_k1_few_experts_a9_t16", experts=64, topk=1, active=9, pattern="few_experts", tasks=16),
        Case("e128_k8_uniform_a64_t16", experts=128, topk=8, active=64, pattern="uniform", tasks=16),
        Case("e128_k8_nan_a3_t8", experts=128, topk=8, active=3, pattern="nan", tasks=8),
    ]
    SWEEP = {**SWEEP, "pattern": st.sampled_from(PATTERNS), "tasks": st.sampled_from([8, 16])}

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        return {
            **w2_args(params, topk_weights=True),
            "residual": torch.randn(MAX_TOKENS, HIDDEN, dtype=torch.bfloat16),
            "output": Out(torch.empty(MAX_TOKENS, HIDDEN, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.moe_w2_mul_sum_add_layer(
            input=t.input,
            weight=t.weight,
            routing_indices=t.routing_indices,
            expert_mask=t.expert_mask,
            topk_weights=t.topk_weights,
            residual=t.residual,
            output=t.output,
            **grid(pk, params),
        )

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a = params["active"]
        route = (args.routing_indices[:, :a], args.expert_mask, args.topk_weights[:a])
        return padded(find_reference("moe_w2_mul_sum_add")(args.input[:a], args.weight, *route, args.residual[:a]), a)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
