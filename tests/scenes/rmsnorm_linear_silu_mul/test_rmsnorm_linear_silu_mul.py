"""Scene tests of rmsnorm_linear_silu_mul (golden: reference/rmsnorm_linear_silu_mul/pytorch_reference.py,
from the unshuffled gate and up weights): the tensor-core path (one and two m16 batch tiles, slices of
one and several 8-row chunks) and the plain path."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, Expected, Out, SceneTestCase, active_tokens, scene_test

rmsnorm_linear_silu_mul = find_reference("rmsnorm_linear_silu_mul")


@scene_test(layer="rmsnorm_linear_silu_mul")
class TestRMSNormLinearSiluMul(SceneTestCase):
    CASES = [
        Case("b1_h1024_i3072", batch=1, k=1024, inter=3072, tasks=128),  # the 0.6B model's MLP
        Case("b8_h2048_i1024", batch=8, k=2048, inter=1024, tasks=16),
        Case("b24_two_tiles", batch=24, k=1024, inter=256, tasks=4),
        Case("b4_t64", batch=4, k=1024, inter=512, tasks=64),  # 16 rows a task: 8 gate, 8 up
        Case("b2_k4096_t2", batch=2, k=4096, inter=256, tasks=2),  # 256 rows a task
        Case("b3_plain_path", batch=3, k=100, inter=40, tasks=5),
    ]
    SWEEP = {
        "batch": st.integers(1, 16),
        "k": st.just(1024),
        "inter": st.just(512),
        "tasks": st.sampled_from([4, 8, 16, 32]),
    }

    def generate_args(self, params):
        b, k, i = params["batch"], params["k"], params["inter"]
        bf = torch.bfloat16
        return {
            "input": 3 * torch.randn(b, k, dtype=bf),
            "w_gate": torch.randn(i, k, dtype=bf) / k**0.5,
            "w_up": torch.randn(i, k, dtype=bf) / k**0.5,
            "norm_weight": (1 + 0.2 * torch.randn(k)).to(bf),
            "output": Out(torch.empty(b, i, dtype=bf)),
        }

    def build(self, pk, t, params):
        tasks = params["tasks"]
        w = pk.shuffle_tensors([t.w_gate, t.w_up], shuffled_dim=0, num_groups=tasks, name="w_gate_up")
        pk.rmsnorm_linear_silu_mul_layer(
            input=t.input,
            weight=w,
            norm_weight=t.norm_weight,
            output=t.output,
            grid_dim=(tasks, 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        weight = torch.cat([args.w_gate, args.w_up])  # one group: [gate | up]
        return {"output": rmsnorm_linear_silu_mul(args.input, weight, args.norm_weight)}


@scene_test(layer="rmsnorm_linear_silu_mul")
class TestRMSNormLinearSiluMulActiveTokens(TestRMSNormLinearSiluMul):
    """A batch of max_num_batched_tokens rows with fewer active tokens: only those rows are
    computed and written, on the tensor-core and the plain path."""

    CASES = [
        Case("b16_active5", batch=16, k=1024, inter=512, tasks=16, active=5),
        Case("b3_active1_plain_path", batch=3, k=100, inter=40, tasks=5, active=1),
    ]
    SWEEP = {}

    def kernel_params(self, params):
        return active_tokens(params["batch"], params["active"])

    def compute_golden(self, args, params):
        value = super().compute_golden(args, params)["output"]
        return Expected(value, written=torch.arange(params["batch"]) < params["active"])


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
