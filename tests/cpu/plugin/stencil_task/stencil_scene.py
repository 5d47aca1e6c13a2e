import stencil_spec  # noqa: F401  registers row_stencil
import torch
from pytorch_reference import rmsnorm, row_stencil

from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="stencil_pipeline")
class TestStencil(SceneTestCase):
    """rmsnorm (a task a row) -> row_stencil -> rmsnorm in place on the stencil's rows: a task of the
    last layer overwrites rows a stencil task may still have to read (a halo row, with the input
    declared split), and the first layer's tasks write them."""

    CASES = [
        Case("r8_t4", rows=8, hidden=256, tasks=4),
        Case("r16_t8", rows=16, hidden=128, tasks=8),
        Case("r16_t16", rows=16, hidden=256, tasks=16),
        Case("r32_t8", rows=32, hidden=64, tasks=8),
        Case("r12_t3", rows=12, hidden=512, tasks=3),
        Case("r64_t32", rows=64, hidden=64, tasks=32),
        Case("r128_h1024_t8", rows=128, hidden=1024, tasks=8),
    ]

    def generate_args(self, params):
        r, h = params["rows"], params["hidden"]
        return {
            "input": torch.randn(r, h, dtype=torch.bfloat16),
            "weight": torch.randn(h, dtype=torch.bfloat16),
            "weight2": torch.randn(h, dtype=torch.bfloat16),
            "x_norm": Out(torch.empty(r, h, dtype=torch.bfloat16)),
            "smoothed": Out(torch.empty(r, h, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        bd = pk.block_dim
        pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.x_norm, grid_dim=(params["rows"], 1, 1), block_dim=bd)
        pk.row_stencil_layer(input=t.x_norm, output=t.smoothed, grid_dim=(params["tasks"], 1, 1), block_dim=bd)
        pk.rmsnorm_layer(input=t.smoothed, weight=t.weight2, output=t.smoothed, grid_dim=(params["rows"], 1, 1), block_dim=bd)

    def compute_golden(self, args, params):
        x = rmsnorm(args.input, args.weight)
        return {"x_norm": x, "smoothed": rmsnorm(row_stencil(x), args.weight2)}
