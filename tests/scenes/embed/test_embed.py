"""Scene tests of embed: rows of the table for the iteration's tokens (from the meta tensors)."""

import torch

from pytest_mpk import Case, Expected, Out, SceneTestCase, active_tokens, scene_test

OUTSIDE = r"token id {} is outside the vocabulary \[0, {}\)"


def prompt(params):
    g = torch.Generator().manual_seed(params["batch"] * 7919 + params["vocab"])
    tokens = torch.randint(0, params["vocab"], (1, params["batch"]), generator=g, dtype=torch.int64)
    if params.get("bad_token") is not None:  # an id at the vocabulary's edge (or past it) must fail the task
        tokens[0, params["batch"] // 2] = params["bad_token"]
    return tokens


@scene_test(layer="embed")
class TestEmbed(SceneTestCase):
    CASES = [
        Case("b1_v32000_h4096", batch=1, vocab=32000, hidden=4096, tasks=16),
        Case("b16_v1000_h1024", batch=16, vocab=1000, hidden=1024, tasks=8),
        Case("b5_v50_h100", batch=5, vocab=50, hidden=100, tasks=4),  # 25 columns a task: the scalar path
        Case("b5_v50_h100_id_vocab", batch=5, vocab=50, hidden=100, tasks=4, bad_token=50, raises=OUTSIDE.format(50, 50)),
        Case("b5_v50_h100_id_last", batch=5, vocab=50, hidden=100, tasks=4, bad_token=49),  # the last row is valid
        Case("b5_v50_h100_id_negative", batch=5, vocab=50, hidden=100, tasks=4, bad_token=-1, raises=OUTSIDE.format(-1, 50)),
        # A prompt shorter than the batch: the rows of the 2 inactive tokens stay unwritten.
        Case("b5_v50_h100_active3", batch=5, vocab=50, hidden=100, tasks=4, active=3),
        Case("b16_v1000_h1024_active5", batch=16, vocab=1000, hidden=1024, tasks=8, active=5),
    ]

    def kernel_params(self, params):
        b = params["batch"]  # one request whose prompt is the batch, or its first `active` tokens
        kp = active_tokens(b, params.get("active", b))
        kp["meta_tensors"]["tokens"] = prompt(params)  # input_tokens = the prompt
        return kp

    def generate_args(self, params):
        return {
            "weight": torch.randn(params["vocab"], params["hidden"], dtype=torch.bfloat16),
            "output": Out(torch.empty(params["batch"], params["hidden"], dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        tokens = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
        pk.embed_layer(input=tokens, weight=t.weight, output=t.output, grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        b = params["batch"]
        return Expected(args.weight[prompt(params)[0]], written=torch.arange(b) < params.get("active", b))


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
