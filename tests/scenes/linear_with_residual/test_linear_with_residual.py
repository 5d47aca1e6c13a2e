"""Scene tests of linear_with_residual (golden: reference/linear_with_residual/pytorch_reference.py)."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="linear_with_residual")
class TestLinearWithResidual(SceneTestCase):
    CASES = [
        Case("b1", batch=1, k=2048, n=1024, tasks=16),
        Case("b8", batch=8, k=2048, n=1024, tasks=32),
        Case("b16_down", batch=16, k=4096, n=1024, tasks=32),
        Case("b3_plain_path", batch=3, k=100, n=40, tasks=5),
    ]
    SWEEP = {"batch": st.integers(1, 16), "k": st.just(1024), "n": st.just(512), "tasks": st.sampled_from([4, 8, 16])}

    def generate_args(self, params):
        b, k, n = params["batch"], params["k"], params["n"]
        return {
            "input": torch.randn(b, k, dtype=torch.bfloat16),
            "weight": torch.randn(n, k, dtype=torch.bfloat16) / k**0.5,
            "residual": torch.randn(b, n, dtype=torch.bfloat16),
            "output": Out(torch.empty(b, n, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.linear_with_residual_layer(
            input=t.input,
            weight=t.weight,
            residual=t.residual,
            output=t.output,
            grid_dim=(params["tasks"], 1, 1),
            block_dim=pk.block_dim,
        )


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
