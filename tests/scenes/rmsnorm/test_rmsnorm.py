"""Scene tests of the rmsnorm layer (golden: reference/rmsnorm/pytorch_reference.py)."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, Expected, Out, SceneTestCase, active_tokens, scene_test


@scene_test(layer="rmsnorm")
class TestRMSNorm(SceneTestCase):
    CASES = [
        Case("b1", batch=1, hidden=4096),
        Case("b16", batch=16, hidden=4096, archs=("sm90", "sm100")),
        Case("b16_sm80", batch=16, hidden=4096, archs=("sm80",)),
        Case("b8_h1024", batch=8, hidden=1024),
        Case("b5_h1001", batch=5, hidden=1001),  # odd hidden size: the scalar path
        # The smallest scalar-path row: most threads own no column, and a wrong divisor is ~8% off.
        Case("b3_h7", batch=3, hidden=7),
        # Inputs so small that eps (1e-6) outweighs mean(x^2): a misplaced eps shows; the module of b8_h1024.
        Case("b8_h1024_tiny", batch=8, hidden=1024, scale=1e-4),
        Case("b5_h1001_tiny", batch=5, hidden=1001, scale=3e-4),
        Case("b64_h8192", batch=64, hidden=8192, manual=True),
    ]
    SWEEP = {"batch": st.integers(1, 64), "hidden": st.sampled_from([1024, 4096])}
    DTYPE = torch.bfloat16

    def generate_args(self, params):
        b, h = params["batch"], params["hidden"]
        return {
            "input": (torch.randn(b, h) * params.get("scale", 1.0)).to(self.DTYPE),
            "weight": torch.randn(h, dtype=self.DTYPE),
            "output": Out(torch.empty(b, h, dtype=self.DTYPE)),
        }

    def build(self, pk, t, params):  # "tasks" rows per task when given, else one row per task
        pk.rmsnorm_layer(
            input=t.input,
            weight=t.weight,
            output=t.output,
            grid_dim=(params.get("tasks", params["batch"]), 1, 1),
            block_dim=pk.block_dim,
        )


@scene_test(layer="rmsnorm")
class TestRMSNormFp16(TestRMSNorm):
    CASES = [Case("b4_rows2", batch=4, hidden=2048, tasks=2)]
    SWEEP = {}
    DTYPE = torch.float16


@scene_test(layer="rmsnorm")
class TestRMSNormActiveTokens(TestRMSNorm):
    """A batch of max_num_batched_tokens rows whose iteration has fewer active tokens (one request
    with a shorter prompt): only those rows are normalized, the rest stay unwritten. With two tasks
    of four rows, the first is partly active and the second has no active row at all."""

    CASES = [
        Case("b8_h1024_active3", batch=8, hidden=1024, active=3),
        Case("b8_h1024_active3_t2", batch=8, hidden=1024, active=3, tasks=2),
    ]
    SWEEP = {}

    def kernel_params(self, params):
        return active_tokens(params["batch"], params["active"])

    def compute_golden(self, args, params):
        value = find_reference("rmsnorm")(args.input, args.weight)
        return Expected(value, written=torch.arange(params["batch"]) < params["active"])


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
