"""A decoder-MLP block between an embedding and greedy sampling: embed the iteration's tokens ->
MLP -> LM head linear -> argmax over the vocabulary (two layers) -> the sampled tokens;
the sampled tokens must be the argmax of the kernel's own logits."""

import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .pytorch_reference import embed, linear, qwen3_mlp


def prompt(params):
    g = torch.Generator().manual_seed(params["batch"] * 31 + params["vocab"])
    return torch.randint(0, params["vocab"], (1, params["batch"] + 1), generator=g, dtype=torch.int64)


@scene_test(layer="decoder_mlp_block")
class TestDecoderMLPBlock(SceneTestCase):
    CASES = [
        Case("b1_v2048_h1024", batch=1, vocab=2048, hidden=1024, inter=2048, tasks=32),
        Case("b8_v4096_h512", batch=8, vocab=4096, hidden=512, inter=1024, tasks=16),
    ]

    def kernel_params(self, params):
        b = params["batch"]  # one request: a prompt of `batch` tokens, then room for the sampled one
        return {
            "max_num_batched_tokens": b,
            "max_seq_length": b + 1,
            "max_num_pages": b + 1,
            "meta_tensors": {"tokens": prompt(params), "prompt_lengths": torch.tensor([b], dtype=torch.int32)},
        }

    def generate_args(self, params):
        b, v, h, i = params["batch"], params["vocab"], params["hidden"], params["inter"]
        bf = torch.bfloat16
        return {
            "embedding": torch.randn(v, h, dtype=bf),
            "norm_weight": torch.randn(h, dtype=bf),
            "w_gate": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_up": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_down": torch.randn(h, i, dtype=bf) / i**0.5,
            "lm_head": torch.randn(v, h, dtype=bf) / h**0.5,
            "hidden_out": Out(torch.empty(b, h, dtype=bf)),
            "logits": Out(torch.empty(b, v, dtype=bf)),
            "tokens": Out(torch.empty(b, dtype=torch.int64)),
        }

    def build(self, pk, t, params):
        b, h, i, tasks = params["batch"], params["hidden"], params["inter"], params["tasks"]
        bd, bf = pk.block_dim, torch.bfloat16
        ids = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
        emb = pk.new_tensor((b, h), bf, "emb")
        x = pk.new_tensor((b, h), bf, "x_norm")
        mid = pk.new_tensor((b, 2 * i), bf, "mlp_mid")
        act = pk.new_tensor((b, i), bf, "mlp_act")
        values = pk.new_tensor((b, tasks), torch.float32, "max_values")
        indices = pk.new_tensor((b, tasks), torch.int64, "max_indices")
        pk.embed_layer(input=ids, weight=t.embedding, output=emb, grid_dim=(8, 1, 1), block_dim=bd)
        pk.rmsnorm_layer(input=emb, weight=t.norm_weight, output=x, grid_dim=(b, 1, 1), block_dim=bd)
        w_gatedup = pk.shuffle_tensors([t.w_gate, t.w_up], shuffled_dim=0, num_groups=tasks // 2, name="w_gatedup")
        pk.linear_layer(input=x, weight=w_gatedup, output=mid, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.silu_mul_layer(input=mid, output=act, grid_dim=(tasks // 2, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=act, weight=t.w_down, residual=emb, output=t.hidden_out, grid_dim=(tasks // 2, 1, 1), block_dim=bd
        )
        pk.linear_layer(input=t.hidden_out, weight=t.lm_head, output=t.logits, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.argmax_partial_layer(input=t.logits, values=values, indices=indices, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.argmax_reduce_layer(values=values, indices=indices, output=t.tokens, grid_dim=(1, 1, 1), block_dim=bd)

    def compute_golden(self, args, params):
        emb = embed(prompt(params)[0, : params["batch"]], args.embedding)
        hidden = qwen3_mlp(emb, args.norm_weight, args.w_gate, args.w_up, args.w_down, emb, params["tasks"] // 2)
        logits = linear(hidden, args.lm_head)
        return {"hidden_out": hidden, "logits": logits, "tokens": torch.argmax(logits.float(), dim=-1)}

    def compare(self, actual, expected, case):
        from pytest_mpk.compare import check

        check("hidden_out", actual["hidden_out"], expected["hidden_out"])
        check("logits", actual["logits"], expected["logits"], rtol=2e-2, atol=2e-2)
        # Sampling is exact on the logits the kernel computed (bf16 rounding may tie logits that the
        # golden's differ on, so the token is checked against the device's own logits).
        check("tokens", actual["tokens"], torch.argmax(actual["logits"].float(), dim=-1))


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
