"""Scene tests of the elementwise MoE layers: moe_silu_mul ((token, slot) rows of [gate | up]) and
moe_mul_sum_add (the weighted sum of each token's k expert rows plus the residual), for k = 1, 2, 8
and 1 to 64 active tokens of a 64-token batch (rows of inactive tokens stay unwritten)."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .moe_scenes import MAX_TOKENS, kernel_params, padded

moe_cases = [
    Case("k1_a64_t1", topk=1, active=64, cols=256, tasks=1),
    Case("k2_a5_t2", topk=2, active=5, cols=256, tasks=2),
    Case("k8_a1_t4", topk=8, active=1, cols=256, tasks=4),
    Case("k8_a64_t8", topk=8, active=64, cols=768, tasks=8),
    Case("k8_a30_t5_odd", topk=8, active=30, cols=60, tasks=5),  # 12-column slices: the scalar path
]
SWEEP = {"topk": st.just(8), "active": st.integers(1, MAX_TOKENS), "cols": st.just(256), "tasks": st.just(4)}


@scene_test(layer="moe_silu_mul")
class TestMoeSiluMul(SceneTestCase):
    CASES = moe_cases
    SWEEP = SWEEP

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        k, i = params["topk"], params["cols"]
        return {
            "input": torch.randn(MAX_TOKENS, k, 2 * i, dtype=torch.bfloat16),
            "output": Out(torch.empty(MAX_TOKENS, k, i, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.moe_silu_mul_layer(input=t.input, output=t.output, grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a = params["active"]
        return padded(find_reference("moe_silu_mul")(args.input[:a]), a)


@scene_test(layer="moe_mul_sum_add")
class TestMoeMulSumAdd(SceneTestCase):
    CASES = moe_cases
    SWEEP = SWEEP

    def kernel_params(self, params):
        return kernel_params(params["active"])

    def generate_args(self, params):
        k, h = params["topk"], params["cols"]
        return {
            "input": torch.randn(MAX_TOKENS, k, h, dtype=torch.bfloat16),
            "topk_weights": torch.softmax(torch.randn(MAX_TOKENS, k), dim=1),
            "residual": torch.randn(MAX_TOKENS, h, dtype=torch.bfloat16),
            "output": Out(torch.empty(MAX_TOKENS, h, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.moe_mul_sum_add_layer(
            input=t.input,
            topk_weights=t.topk_weights,
            residual=t.residual,
            output=t.output,
            grid_dim=(params["tasks"], 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        from mpk_runtime.harness import find_reference

        a = params["active"]
        return padded(find_reference("moe_mul_sum_add")(args.input[:a], args.topk_weights[:a], args.residual[:a]), a)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
