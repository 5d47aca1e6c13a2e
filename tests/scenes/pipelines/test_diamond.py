"""A diamond: one RMSNorm forks into two linears whose results join in a third linear with the
first as residual. Tasks of the two branches run concurrently; the join waits for both."""

import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .pytorch_reference import linear, linear_with_residual, rmsnorm


@scene_test(layer="diamond")
class TestDiamond(SceneTestCase):
    CASES = [Case("b4_h1024", batch=4, hidden=1024, tasks=16), Case("b16_h512", batch=16, hidden=512, tasks=8)]

    def generate_args(self, params):
        b, h = params["batch"], params["hidden"]
        bf = torch.bfloat16
        return {
            "input": torch.randn(b, h, dtype=bf),
            "norm_weight": torch.randn(h, dtype=bf),
            "w_left": torch.randn(h, h, dtype=bf) / h**0.5,
            "w_right": torch.randn(h, h, dtype=bf) / h**0.5,
            "w_join": torch.randn(h, 2 * h, dtype=bf) / (2 * h) ** 0.5,
            "left": Out(torch.empty(b, h, dtype=bf)),
            "output": Out(torch.empty(b, h, dtype=bf)),
        }

    def build(self, pk, t, params):
        b, h, tasks, bd = params["batch"], params["hidden"], params["tasks"], pk.block_dim
        x = pk.new_tensor((b, h), torch.bfloat16, "x_norm")
        both = pk.new_tensor((b, 2 * h), torch.bfloat16, "both")
        pk.rmsnorm_layer(input=t.input, weight=t.norm_weight, output=x, grid_dim=(b, 1, 1), block_dim=bd)
        pk.linear_layer(input=x, weight=t.w_left, output=t.left, grid_dim=(tasks, 1, 1), block_dim=bd)
        w_both = pk.shuffle_tensors([t.w_left, t.w_right], shuffled_dim=0, num_groups=1, name="w_both")
        pk.linear_layer(input=x, weight=w_both, output=both, grid_dim=(2 * tasks, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=both, weight=t.w_join, residual=t.left, output=t.output, grid_dim=(tasks, 1, 1), block_dim=bd
        )

    def compute_golden(self, args, params):
        x = rmsnorm(args.input, args.norm_weight)
        left = linear(x, args.w_left)
        both = torch.cat([left, linear(x, args.w_right)], dim=-1)
        return {"left": left, "output": linear_with_residual(both, args.w_join, left)}


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
