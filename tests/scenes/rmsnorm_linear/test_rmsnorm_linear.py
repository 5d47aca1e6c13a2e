"""Scene tests of rmsnorm_linear (golden: reference/rmsnorm_linear/pytorch_reference.py): the tensor-core
path (batch in one and two m16 tiles, slices of one and several 8-row chunks) and the plain path."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="rmsnorm_linear")
class TestRMSNormLinear(SceneTestCase):
    CASES = [
        Case("b1_qkv", batch=1, k=1024, n=1024, tasks=16),
        Case("b8", batch=8, k=2048, n=512, tasks=16),
        Case("b24_two_tiles", batch=24, k=1024, n=256, tasks=4),
        Case("b3_plain_path", batch=3, k=100, n=40, tasks=5),
    ]
    SWEEP = {"batch": st.integers(1, 16), "k": st.just(1024), "n": st.just(512), "tasks": st.sampled_from([4, 8, 16])}

    def generate_args(self, params):
        b, k, n = params["batch"], params["k"], params["n"]
        return {
            "input": 3 * torch.randn(b, k, dtype=torch.bfloat16),  # far from unit scale: the norm matters
            "weight": torch.randn(n, k, dtype=torch.bfloat16) / k**0.5,
            "norm_weight": (1 + 0.2 * torch.randn(k)).to(torch.bfloat16),
            "output": Out(torch.empty(b, n, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.rmsnorm_linear_layer(
            input=t.input,
            weight=t.weight,
            norm_weight=t.norm_weight,
            output=t.output,
            grid_dim=(params["tasks"], 1, 1),
            block_dim=pk.block_dim,
        )


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
