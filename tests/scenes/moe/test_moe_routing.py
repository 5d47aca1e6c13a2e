"""Scene tests of moe_topk_softmax_routing: every routing case, E = 8, 64, 128, k = 1 to 8, 1 to 64
active tokens of a 64-token batch (columns of inactive tokens stay unwritten)."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, SceneTestCase, scene_test

from .moe_scenes import MAX_TOKENS, PATTERNS, kernel_params, logits, routing_golden, routing_outputs, routing_reference


@scene_test(layer="moe_topk_softmax_routing")
class TestMoeRouting(SceneTestCase):
    CASES = [
        Case("e8_k2_uniform_a64", experts=8, topk=2, active=64, pattern="uniform", dtype="bf16"),
        Case("e8_k1_one_expert_a5", experts=8, topk=1, active=5, pattern="one_expert", dtype="fp32"),
        Case("e8_k8_every_expert_a13", experts=8, topk=8, active=13, pattern="uniform", dtype="bf16"),
        Case("e64_k8_uniform_a1", experts=64, topk=8, active=1, pattern="uniform", dtype="bf16"),
        Case("e64_k8_ties_a37", experts=64, topk=8, active=37, pattern="ties", dtype="bf16"),
        Case("e64_k1_zeros_a64", experts=64, topk=1, active=64, pattern="zeros", dtype="bf16"),
        Case("e64_k1_signed_zeros_a64", experts=64, topk=1, active=64, pattern="signed_zeros", dtype="bf16"),
        Case("e128_k8_signed_zeros_a64", experts=128, topk=8, active=64, pattern="signed_zeros", dtype="bf16"),
        Case("e64_k1_few_experts_a20", experts=64, topk=1, active=20, pattern="few_experts", dtype="bf16"),
        Case("e128_k8_uniform_a64", experts=128, topk=8, active=64, pattern="uniform", dtype="bf16"),
        Case("e128_k8_all_same_a64", experts=128, topk=8, active=64, pattern="all_same", dtype="bf16"),
        Case("e128_k8_nan_a20", experts=128, topk=8, active=20, pattern="nan", dtype="fp32"),
        Case("e128_k8_ties_a7", experts=128, topk=8, active=7, pattern="ties", dtype="fp32"),
    ]
    # One build (E = 128, k = 8, bf16) serves the sweep: the active tokens and the logits are run-time data.
    SWEEP = {
        "experts": st.just(128),
        "topk": st.just(8),
        "active": st.integers(1, MAX_TOKENS),
        "pattern": st.sampled_from([p for p in PATTERNS if p != "nan"]),
        "dtype": st.just("bf16"),
    }

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        e, k = params["experts"], params["topk"]
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[params["dtype"]]
        return {
            "input": logits(params["pattern"], e).to(dtype),
            **routing_outputs(e, k),
        }

    def build(self, pk, t, params):
        pk.moe_topk_softmax_routing_layer(
            input=t.input,
            topk_weights=t.topk_weights,
            routing_indices=t.routing_indices,
            expert_mask=t.expert_mask,
            grid_dim=(1, 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        active, k = int(args.meta.num_new_tokens[0]), params["topk"]
        assert active == params["active"]
        w, r, m = routing_reference(args.input[:active], k)
        return routing_golden(w, r, m, active)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
