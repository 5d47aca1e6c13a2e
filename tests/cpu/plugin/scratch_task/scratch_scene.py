import scratch_spec  # noqa: F401  registers rotate_rows
import torch
from pytorch_reference import rotate_rows

from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="rotate_rows")
class TestRotateRows(SceneTestCase):
    """One layer of rotate_rows: with one task, nothing shares the workspace."""

    CASES = [
        Case("r8_t4", rows=8, hidden=256, tasks=4),
        Case("r16_t2", rows=16, hidden=64, tasks=2),
        Case("r4_t1", rows=4, hidden=128, tasks=1),
    ]

    def generate_args(self, params):
        return {
            "input": torch.randn(params["rows"], params["hidden"], dtype=torch.bfloat16),
            "output": Out(torch.empty(params["rows"], params["hidden"], dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.rotate_rows_layer(input=t.input, output=t.output, grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return {"output": rotate_rows(args.input)}
