import ragged_spec  # noqa: F401  registers ragged_scale
import torch
from pytorch_reference import ragged_scale

from pytest_mpk import Case, Expected, Out, SceneTestCase, batch_params, first_batch_meta, scene_test


@scene_test(layer="ragged_scale")
class TestRagged(SceneTestCase):
    DEFAULTS = {"tokens": 0, "slots": 0, "cols": 200}
    CASES = [
        Case("prefill", requests=((5, 0), (3, 0), (8, 0), (1, 0))),
        Case("decode_history", requests=((10, 10), (4, 4), (30, 30))),
        Case("unused_slots", requests=((1, 20), (6, 0)), slots=5, tokens=16, cols=32),  # 3 empty slots, 9 idle rows
        Case("chunked_mixed", requests=((8, 0), (40, 0), (3, 3)), tokens=20),  # request 1 cut by the budget
    ]

    def kernel_params(self, params):
        return batch_params(params["requests"], tokens=params["tokens"], slots=params["slots"])

    def generate_args(self, params):
        kp = self.kernel_params(params)
        t, r, c = kp["max_num_batched_tokens"], kp["max_num_batched_requests"], params["cols"]
        return {
            "input": torch.randn(t, c).to(torch.bfloat16),
            "output": Out(torch.empty(t, c, dtype=torch.bfloat16)),
            "mean": Out(torch.empty(r, c, dtype=torch.float32)),
            "sumsq": Out(torch.empty(r, dtype=torch.float32)),
        }

    def build(self, pk, t, params):
        pk.ragged_scale_layer(
            input=t.input,
            output=t.output,
            mean=t.mean,
            sumsq=t.sumsq,
            grid_dim=(pk.params.max_num_batched_requests, 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        qo = first_batch_meta(self.kernel_params(params)).qo_indptr_buffer  # the batch, as no task can change it
        out, mean, sumsq, rows, used = ragged_scale(args.input, qo, args.mean.shape[0])
        return {
            "output": Expected(out, written=rows),
            "mean": Expected(mean, written=used),
            "sumsq": Expected(sumsq, written=used),
        }
