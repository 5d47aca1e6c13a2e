"""Scene tests of silu_mul over [gate | up] chunks (golden: reference/silu_mul/pytorch_reference.py)."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference as find
from pytest_mpk import Case, Expected, Out, SceneTestCase, active_tokens, scene_test


@scene_test(layer="silu_mul")
class TestSiluMul(SceneTestCase):
    CASES = [
        Case("b1_i12288_g96", batch=1, inter=12288, groups=96),
        Case("b8_i4096_g32", batch=8, inter=4096, groups=32),
        Case("b16_i1024_g1", batch=16, inter=1024, groups=1),
        Case("b3_i100_g4", batch=3, inter=100, groups=4),  # 25 columns a chunk: the scalar path
    ]
    SWEEP = {"batch": st.integers(1, 16), "inter": st.sampled_from([512, 2048]), "groups": st.sampled_from([1, 4, 16])}

    def generate_args(self, params):
        b, i = params["batch"], params["inter"]
        return {"input": torch.randn(b, 2 * i, dtype=torch.bfloat16) * 3, "output": Out(torch.empty(b, i, dtype=torch.bfloat16))}

    def build(self, pk, t, params):
        pk.silu_mul_layer(input=t.input, output=t.output, grid_dim=(params["groups"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return find("silu_mul")(args.input, num_groups=params["groups"])


@scene_test(layer="silu_mul")
class TestSiluMulActiveTokens(TestSiluMul):
    """A batch of max_num_batched_tokens rows whose iteration has fewer active tokens (one request
    with a shorter prompt): only those rows are computed, on both the 16-byte and the scalar path."""

    CASES = [
        Case("b8_i4096_g32_active3", batch=8, inter=4096, groups=32, active=3),
        Case("b3_i100_g4_active1", batch=3, inter=100, groups=4, active=1),
    ]
    SWEEP = {}

    def kernel_params(self, params):
        return active_tokens(params["batch"], params["active"])

    def compute_golden(self, args, params):
        value = find("silu_mul")(args.input, num_groups=params["groups"])
        return Expected(value, written=torch.arange(params["batch"]) < params["active"])


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
