"""Scene tests of the linear layer (golden: reference/linear/pytorch_reference.py)."""

import torch
from hypothesis import strategies as st

from pytest_mpk import Case, Out, SceneTestCase, active_tokens, scene_test


@scene_test(layer="linear")
class TestLinear(SceneTestCase):
    CASES = [
        Case("b1_k1024_n2048", batch=1, k=1024, n=2048, tasks=16),
        Case("b4_k1024_n2048", batch=4, k=1024, n=2048, tasks=32),
        Case("b16_k2048_n1024", batch=16, k=2048, n=1024, tasks=16),
        Case("b7_k512_n512_t4", batch=7, k=512, n=512, tasks=4),  # odd batch, 128 rows a task
        Case("b24_k1024_n256", batch=24, k=1024, n=256, tasks=8),  # two 16-row batch tiles
        Case("b2_k200_n96", batch=2, k=200, n=96, tasks=3),  # shapes off the tensor-core path
        Case("b1_k2048_n1024_t128", batch=1, k=2048, n=1024, tasks=128),  # a decoder's o_proj: 8 rows a task
        Case("b1_k4096_n12288", batch=1, k=4096, n=12288, tasks=96),
        Case("b16_k4096_n12288", batch=16, k=4096, n=12288, tasks=128, manual=True),
    ]
    SWEEP = {
        "batch": st.integers(1, 16),
        "k": st.sampled_from([512, 1024]),
        "n": st.just(1024),
        "tasks": st.sampled_from([8, 16, 32]),
    }
    DTYPE = torch.bfloat16

    def generate_args(self, params):
        b, k, n = params["batch"], params["k"], params["n"]
        return {
            "input": torch.randn(b, k, dtype=self.DTYPE),
            "weight": torch.randn(n, k, dtype=self.DTYPE) / k**0.5,
            "output": Out(torch.empty(b, n, dtype=self.DTYPE)),
        }

    def build(self, pk, t, params):
        pk.linear_layer(
            input=t.input,
            weight=t.weight,
            output=t.output,
            grid_dim=(params["tasks"], 1, 1),
            block_dim=pk.block_dim,
        )


@scene_test(layer="linear")
class TestLinearFp16(TestLinear):
    CASES = [Case("b8", batch=8, k=1024, n=1024, tasks=16)]
    SWEEP = {}
    DTYPE = torch.float16


@scene_test(layer="linear")
class TestLinearActiveTokens(SceneTestCase):
    """A batch of max_num_batched_tokens rows with fewer active tokens computes only those rows."""

    CASES = [Case("16_rows_5_active", batch=16, active=5)]

    def kernel_params(self, params):
        return active_tokens(params["batch"], params["active"])

    def generate_args(self, params):
        return {
            "input": torch.randn(params["batch"], 512, dtype=torch.bfloat16),
            "weight": torch.randn(256, 512, dtype=torch.bfloat16) / 512**0.5,
            "output": Out(torch.zeros(params["batch"], 256, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.linear_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(4, 1, 1), block_dim=pk.block_dim)

    def compare(self, actual, expected, case):
        from pytest_mpk.compare import check

        live = case.params["active"]
        check("output[:active]", actual["output"][:live], expected["output"][:live])
        rest = actual["output"][live:].float()
        assert torch.isnan(rest).all(), "rows past the active tokens must stay untouched (poisoned)"


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
