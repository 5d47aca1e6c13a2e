"""Scene tests of moe_sigmoid_group_routing (DeepSeek-V3's group-limited routing): E = 8 to 256,
groups of 2 to 32 experts, 1 to 8 groups kept, k = 1 to 8, with and without the normalization and
the scaling factor, the routing cases of moe_scenes, and a bias that decides the choices; 1 to 64
active tokens of a 64-token batch (columns of inactive tokens stay unwritten).

The bias is zero or on a coarse grid, so that no two choice scores of a token differ by a rounding
of the sigmoid (the kernel's expf and torch's may differ in the last bit, and an order decided by
that bit is not a bug of either)."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, SceneTestCase, scene_test

from .moe_scenes import BIASES, MAX_TOKENS, PATTERNS, kernel_params, logits, routing_golden, routing_outputs, score_bias

reference = find_reference("moe_sigmoid_group_routing")
NOT_FINITE = r"score_bias\[{}\] is NaN or infinite: the group routing ranks the experts by sigmoid score plus score_bias"


def case(
    name: str, experts: int, groups: int, kept: int, topk: int, active: int, pattern: str, raises: str | None = None, **kw
) -> Case:
    defaults = dict(bias="coarse", norm=True, scale=1.0, dtype="bf16")
    params = dict(experts=experts, groups=groups, kept=kept, topk=topk, active=active, pattern=pattern, **{**defaults, **kw})
    return Case(name, raises=raises, **params)


@scene_test(layer="moe_sigmoid_group_routing")
class TestMoeGroupRouting(SceneTestCase):
    CASES = [
        case("e256_g8_t4_k8_uniform_a64", 256, 8, 4, 8, 64, "uniform", scale=2.5),  # DeepSeek-V3's shape
        case("e256_g8_t4_k8_uniform_a1", 256, 8, 4, 8, 1, "uniform", scale=2.5),
        case("e256_g8_t4_k8_bias_decides_a17", 256, 8, 4, 8, 17, "uniform", bias="decides"),
        case("e64_g8_t3_k6_ties_a37", 64, 8, 3, 6, 37, "ties"),
        case("e64_g32_t8_k8_uniform_a64", 64, 32, 8, 8, 64, "uniform"),  # groups of two: every expert counts
        case("e8_g4_t1_k2_zeros_a9", 8, 4, 1, 2, 9, "zeros", bias="zero"),  # every group ties: group 0
        case("e16_g1_t1_k4_no_norm_a64", 16, 1, 1, 4, 64, "uniform", norm=False, scale=2.0),  # plain top-k
        case("e64_g4_t2_k1_one_expert_a5", 64, 4, 2, 1, 5, "one_expert", dtype="fp32"),
        case("e128_g8_t2_k8_all_same_a64", 128, 8, 2, 8, 64, "all_same"),
        case("e128_g8_t4_k8_signed_zeros_a64", 128, 8, 4, 8, 64, "signed_zeros", bias="zero"),
        case("e128_g8_t4_k8_few_experts_a20", 128, 8, 4, 8, 20, "few_experts", bias="zero"),
        case("e128_g8_t4_k8_nan_a20", 128, 8, 4, 8, 20, "nan", dtype="fp32"),
        case("e32_g2_t2_k32_every_expert_a13", 32, 2, 2, 32, 13, "uniform", bias="zero"),
        # A bias the choice scores cannot be ordered with stops the launch, naming the expert.
        case("e256_g8_t4_k8_nan_bias_a3", 256, 8, 4, 8, 3, "uniform", bias="nan_5", raises=NOT_FINITE.format(5)),
    ]
    # One build (DeepSeek-V3's E, groups and k, bf16) serves the sweep: the tokens, logits and bias are run-time data.
    SWEEP = {
        "experts": st.just(256),
        "groups": st.just(8),
        "kept": st.just(4),
        "topk": st.just(8),
        "active": st.integers(1, MAX_TOKENS),
        "pattern": st.sampled_from([p for p in PATTERNS if p != "nan"]),
        "bias": st.sampled_from(BIASES),
        "norm": st.just(True),
        "scale": st.just(2.5),
        "dtype": st.just("bf16"),
    }

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        e, k = params["experts"], params["topk"]
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[params["dtype"]]
        return {
            "input": logits(params["pattern"], e).to(dtype),
            "score_bias": score_bias(params["bias"], e, params["groups"]),
            **routing_outputs(e, k),
        }

    def build(self, pk, t, params):
        pk.moe_sigmoid_group_routing_layer(
            input=t.input,
            score_bias=t.score_bias,
            topk_weights=t.topk_weights,
            routing_indices=t.routing_indices,
            expert_mask=t.expert_mask,
            n_group=params["groups"],
            topk_group=params["kept"],
            norm_topk_prob=params["norm"],
            routed_scaling_factor=params["scale"],
            grid_dim=(1, 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        active, k = int(args.meta.num_new_tokens[0]), params["topk"]
        assert active == params["active"]
        w, r, m = reference(
            args.input[:active], args.score_bias, k, params["groups"], params["kept"], params["norm"], params["scale"]
        )
        return routing_golden(w, r, m, active)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
