"""The Qwen3-style dense MLP as one megakernel: RMSNorm -> gate/up linear -> SiLU*mul -> down
linear + residual (golden: pytorch_reference.qwen3_mlp in this folder)."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .pytorch_reference import qwen3_mlp


@scene_test(layer="qwen3_mlp")
class TestQwen3MLP(SceneTestCase):
    CASES = [
        Case("b1_h1024_i3072", batch=1, hidden=1024, inter=3072, tasks=48),
        Case("b8_h2048_i4096", batch=8, hidden=2048, inter=4096, tasks=64),
        Case("b16_h1024_i2048", batch=16, hidden=1024, inter=2048, tasks=32),
        Case("b1_h4096_i12288", batch=1, hidden=4096, inter=12288, tasks=128, manual=True),
        Case("b8_h4096_i12288", batch=8, hidden=4096, inter=12288, tasks=128, manual=True),
    ]
    SWEEP = {
        "batch": st.integers(1, 16),
        "hidden": st.just(1024),
        "inter": st.just(2048),
        "tasks": st.sampled_from([8, 16, 32, 64]),
    }

    def kernel_params(self, params):
        b = params["batch"]  # the batch is the iteration's tokens: every row is active
        return {"max_num_batched_tokens": b, "max_seq_length": b, "max_num_pages": b}

    def generate_args(self, params):
        b, h, i = params["batch"], params["hidden"], params["inter"]
        bf = torch.bfloat16
        return {
            "input": torch.randn(b, h, dtype=bf),
            "norm_weight": torch.randn(h, dtype=bf),
            "w_gate": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_up": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_down": torch.randn(h, i, dtype=bf) / i**0.5,
            "residual": torch.randn(b, h, dtype=bf),
            "output": Out(torch.empty(b, h, dtype=bf)),
        }

    def build(self, pk, t, params):
        b, h, i, tasks = params["batch"], params["hidden"], params["inter"], params["tasks"]
        bf, bd = torch.bfloat16, pk.block_dim
        x = pk.new_tensor((b, h), bf, "x_norm")
        mid = pk.new_tensor((b, 2 * i), bf, "mlp_mid")
        act = pk.new_tensor((b, i), bf, "mlp_act")
        w_gatedup = pk.shuffle_tensors([t.w_gate, t.w_up], shuffled_dim=0, num_groups=tasks // 2, name="w_gatedup")
        pk.rmsnorm_layer(input=t.input, weight=t.norm_weight, output=x, grid_dim=(b, 1, 1), block_dim=bd)
        pk.linear_layer(input=x, weight=w_gatedup, output=mid, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.silu_mul_layer(input=mid, output=act, grid_dim=(tasks // 2, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=act, weight=t.w_down, residual=t.residual, output=t.output, grid_dim=(h // 32, 1, 1), block_dim=bd
        )

    def compute_golden(self, args, params):
        return qwen3_mlp(args.input, args.norm_weight, args.w_gate, args.w_up, args.w_down, args.residual, params["tasks"] // 2)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
