import row_softmax_spec  # noqa: F401  registers row_softmax
import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="row_softmax")
class TestRowSoftmax(SceneTestCase):
    CASES = [
        Case("r8_c1024_t8", rows=8, cols=1024, tasks=8),
        Case("r8_c1000_t4", rows=8, cols=1000, tasks=4),
        Case("r6_c64_t3", rows=6, cols=64, tasks=3),
        Case("r4_c1024_t4", rows=4, cols=1024, tasks=4),
        Case("r2_c32768_t2", rows=2, cols=32768, tasks=2),  # a vocabulary-sized row: values near 3e-5
    ]

    def generate_args(self, params):
        x = torch.randn(params["rows"], params["cols"]).to(torch.bfloat16)
        return {"input": x, "output": Out(torch.empty_like(x))}

    def build(self, pk, t, params):
        pk.row_softmax_layer(input=t.input, output=t.output, grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)
