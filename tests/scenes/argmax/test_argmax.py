"""Scene tests of greedy sampling: argmax_partial over vocabulary chunks, then argmax_reduce
(goldens: reference/argmax_partial and reference/argmax_reduce)."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference as find
from pytest_mpk import Case, Expected, Out, SceneTestCase, active_tokens, scene_test


def logits(params):
    b, v = params["batch"], params["vocab"]
    x = torch.randn(b, v, dtype=torch.bfloat16)
    if params.get("ties"):
        # the same maximum in several chunks of every row: the lowest index must win
        for row in range(b):
            for col in (v - 1, v // 2 + row, row % (v // params["parts"])):
                x[row, col] = 9.0
    if params.get("nan"):
        # a NaN in every other row, in another chunk than the row's largest number: the NaN must win
        chunk = v // params["parts"]
        for row in range(0, b, 2):
            top = int(x[row].float().argmax()) // chunk
            x[row, ((top + 1 + row) % params["parts"]) * chunk + row % chunk] = float("nan")
    return x


@scene_test(layer="argmax_partial")
class TestArgmaxPartial(SceneTestCase):
    CASES = [
        Case("b4_v32000_p32", batch=4, vocab=32000, parts=32, ties=False),
        Case("b2_ties", batch=2, vocab=1024, parts=8, ties=True),
    ]

    def generate_args(self, params):
        b, p = params["batch"], params["parts"]
        return {"input": logits(params), "values": Out(torch.empty(b, p)), "indices": Out(torch.empty(b, p, dtype=torch.int64))}

    def build(self, pk, t, params):
        pk.argmax_partial_layer(
            input=t.input, values=t.values, indices=t.indices, grid_dim=(params["parts"], 1, 1), block_dim=pk.block_dim
        )

    def compute_golden(self, args, params):
        values, indices = find("argmax_partial")(args.input, num_parts=params["parts"])
        return {"values": values, "indices": indices}


@scene_test(layer="argmax_reduce")
class TestSampling(SceneTestCase):
    """Partial then reduce, writing output_tokens: equal to torch.argmax over the whole vocabulary."""

    CASES = [
        Case("b1_v32000", batch=1, vocab=32000, parts=64, ties=False),
        Case("b16_v4096", batch=16, vocab=4096, parts=16, ties=False),
        Case("b4_ties", batch=4, vocab=2048, parts=8, ties=True),
        Case("b4_nan", batch=4, vocab=2048, parts=8, ties=False, nan=True),
    ]
    SWEEP = {"batch": st.integers(1, 16), "vocab": st.just(4096), "parts": st.sampled_from([1, 8, 32]), "ties": st.booleans()}

    def generate_args(self, params):
        return {"logits": logits(params), "tokens": Out(torch.empty(params["batch"], dtype=torch.int64))}

    def build(self, pk, t, params):
        b, p = params["batch"], params["parts"]
        values = pk.new_tensor((b, p), torch.float32, "values")
        indices = pk.new_tensor((b, p), torch.int64, "indices")
        pk.argmax_partial_layer(input=t.logits, values=values, indices=indices, grid_dim=(p, 1, 1), block_dim=pk.block_dim)
        pk.argmax_reduce_layer(values=values, indices=indices, output=t.tokens, grid_dim=(1, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return torch.argmax(args.logits.float(), dim=-1)


@scene_test(layer="argmax_reduce")
class TestSamplingIntoOutputTokens(SceneTestCase):
    """Sampling as a model does it, into the meta tensor output_tokens: Out(..., meta=True) is the
    kernel's own meta tensor of that name (its rows are max_num_batched_tokens, here the batch)."""

    CASES = [Case("b8_v4096", batch=8, vocab=4096, parts=8)]

    def kernel_params(self, params):
        return {"max_num_batched_tokens": params["batch"]}

    def generate_args(self, params):
        return {"logits": logits(params), "output_tokens": Out(torch.empty(params["batch"], dtype=torch.int64), meta=True)}

    def build(self, pk, t, params):
        b, p = params["batch"], params["parts"]
        values = pk.new_tensor((b, p), torch.float32, "values")
        indices = pk.new_tensor((b, p), torch.int64, "indices")
        pk.argmax_partial_layer(input=t.logits, values=values, indices=indices, grid_dim=(p, 1, 1), block_dim=pk.block_dim)
        pk.argmax_reduce_layer(values=values, indices=indices, output=t.output_tokens, grid_dim=(1, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return torch.argmax(args.logits.float(), dim=-1)


@scene_test(layer="argmax_reduce")
class TestSamplingActiveTokens(TestSampling):
    """A batch of max_num_batched_tokens rows whose iteration has fewer active tokens (one request
    with a shorter prompt): only their tokens are sampled, the other rows of tokens stay unwritten."""

    CASES = [Case("b16_v4096_active5", batch=16, vocab=4096, parts=16, ties=False, active=5)]
    SWEEP = {}

    def kernel_params(self, params):
        return active_tokens(params["batch"], params["active"])

    def compute_golden(self, args, params):
        return Expected(torch.argmax(args.logits.float(), dim=-1), written=torch.arange(params["batch"]) < params["active"])


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
