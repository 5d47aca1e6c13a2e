"""A Qwen3 decoder layer as one megakernel over a mixed batch (decodes with history, a prompt):
RMSNorm -> qkv linear -> paged attention -> o_proj + residual -> RMSNorm -> gate/up linear ->
SiLU*mul -> down + residual. Every intermediate is an output of the scene, so each is compared
(rows of idle tokens must stay unwritten), and so are the KV cache slots the attention appends."""

import torch

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, Expected, InOut, Out, SceneTestCase, first_batch_meta, scene_test

from .pytorch_reference import linear, linear_with_residual, rmsnorm, silu_mul

paged_attention = find_reference("paged_attention", layer="paged_attention")
paged_attention_batch = find_reference("paged_attention_batch", layer="paged_attention")
rope_tables = find_reference("rope_tables", layer="paged_attention")

STAGES = ("x_norm", "qkv", "attn", "hidden", "h_norm", "mlp_mid", "mlp_act", "output")
TOL = {s: (3e-2, 3e-2) for s in STAGES[2:]}  # bf16 roundings accumulate along the layer


@scene_test(layer="qwen3_decoder_layer")
class TestQwen3DecoderLayer(SceneTestCase):
    MIXED = ((1, 40), (10, 0), (1, 17))  # two decodes after a history, a prompt of 10: 12 of 16 rows
    CASES = [
        Case("mixed_h1024", requests=MIXED, tokens=16, heads=8, kv_heads=2, inter=2048, splits=1, tolerances=TOL),
        Case("mixed_h1024_split4", requests=MIXED, tokens=16, heads=8, kv_heads=2, inter=2048, splits=4, tolerances=TOL),
        Case(
            "decode_b4",
            requests=((1, 70), (1, 33), (1, 5), (1, 128)),
            tokens=4,
            heads=8,
            kv_heads=2,
            inter=4096,
            splits=4,
            tolerances=TOL,
        ),
    ]
    D, PAGE, TASKS = 128, 16, 32

    def kernel_params(self, params):
        reqs = params["requests"]
        first = [p - h if p > h else 1 for p, h in reqs]
        return {
            "max_num_batched_tokens": params["tokens"],
            "max_num_batched_requests": len(reqs),
            "max_num_pages": sum(-(-(h + f) // self.PAGE) for (_, h), f in zip(reqs, first)) + 2,
            "page_size": self.PAGE,
            "max_seq_length": max(max(p, h + 1) for p, h in reqs) + 1,
            "meta_tensors": {
                "prompt_lengths": torch.tensor([p for p, _ in reqs], dtype=torch.int32),
                "step": torch.tensor([h for _, h in reqs], dtype=torch.int32),
            },
        }

    def generate_args(self, params):
        kp = self.kernel_params(params)
        t, h, kvh, i, d = params["tokens"], params["heads"], params["kv_heads"], params["inter"], self.D
        hidden, qkv = h * d, (h + 2 * kvh) * d
        bf = torch.bfloat16
        pages, seq = kp["max_num_pages"], kp["max_seq_length"]
        q_norm, k_norm = (1 + 0.1 * torch.randn(d)).to(bf), (1 + 0.1 * torch.randn(d)).to(bf)
        cos, sin = rope_tables(seq, d)
        k_cache, v_cache = torch.randn(pages, self.PAGE, kvh, d, dtype=bf), torch.randn(pages, self.PAGE, kvh, d, dtype=bf)
        self.fill_history(kp, k_cache, v_cache, q_norm, k_norm, cos, sin, qkv)
        return {
            "input": torch.randn(t, hidden, dtype=bf),
            "w_in": (1 + 0.1 * torch.randn(hidden)).to(bf),
            "w_qkv": torch.randn(qkv, hidden, dtype=bf) / hidden**0.5,
            "q_norm": q_norm,
            "k_norm": k_norm,
            "cos_pos_embed": cos,
            "sin_pos_embed": sin,
            "w_o": torch.randn(hidden, hidden, dtype=bf) / hidden**0.5,
            "w_post": (1 + 0.1 * torch.randn(hidden)).to(bf),
            "w_gate": torch.randn(i, hidden, dtype=bf) / hidden**0.5,
            "w_up": torch.randn(i, hidden, dtype=bf) / hidden**0.5,
            "w_down": torch.randn(hidden, i, dtype=bf) / i**0.5,
            "k_cache": InOut(k_cache),
            "v_cache": InOut(v_cache),
            **{s: Out(torch.empty(t, self.width(s, params), dtype=bf)) for s in STAGES},
        }

    def width(self, stage, params):
        hidden, qkv = params["heads"] * self.D, (params["heads"] + 2 * params["kv_heads"]) * self.D
        return {"qkv": qkv, "mlp_mid": 2 * params["inter"], "mlp_act": params["inter"]}.get(stage, hidden)

    def fill_history(self, kp, k_cache, v_cache, q_norm, k_norm, cos, sin, width):
        """Each request's history at the pages the runtime will give it (keys as the layer makes them)."""
        m = first_batch_meta(kp)
        kvh, d = k_cache.shape[2:]
        for slot in range(len(m.qo_indptr_buffer) - 1):
            if m.qo_indptr_buffer[slot + 1] <= m.qo_indptr_buffer[slot]:
                continue
            pages = m.paged_kv_indices_buffer[int(m.paged_kv_indptr_buffer[slot]) : int(m.paged_kv_indptr_buffer[slot + 1])]
            kv_len = (len(pages) - 1) * self.PAGE + int(m.paged_kv_last_page_len_buffer[slot])
            history = kv_len - int(m.qo_indptr_buffer[slot + 1] - m.qo_indptr_buffer[slot])
            if history:
                empty = torch.empty(0, kvh, d, dtype=k_cache.dtype)
                _, k, v = paged_attention(
                    torch.randn(history, width).to(k_cache.dtype), empty, empty, q_norm, k_norm, cos, sin, kvh
                )
                where = (pages.long()[:, None] * self.PAGE + torch.arange(self.PAGE)).reshape(-1)[:history]
                k_cache.view(-1, kvh, d)[where], v_cache.view(-1, kvh, d)[where] = k, v

    def build(self, pk, t, params):
        bd, n, groups = pk.block_dim, params["tokens"], self.TASKS // 2
        qkv_rows, hidden = t.w_qkv.shape
        w_gatedup = pk.shuffle_tensors([t.w_gate, t.w_up], shuffled_dim=0, num_groups=groups, name="w_gatedup")
        pk.rmsnorm_layer(input=t.input, weight=t.w_in, output=t.x_norm, grid_dim=(n, 1, 1), block_dim=bd)
        pk.linear_layer(input=t.x_norm, weight=t.w_qkv, output=t.qkv, grid_dim=(qkv_rows // 32, 1, 1), block_dim=bd)
        pk.paged_attention_layer(
            input=t.qkv,
            k_cache=t.k_cache,
            v_cache=t.v_cache,
            q_norm=t.q_norm,
            k_norm=t.k_norm,
            cos_pos_embed=t.cos_pos_embed,
            sin_pos_embed=t.sin_pos_embed,
            output=t.attn,
            grid_dim=(len(params["requests"]), params["kv_heads"], params["splits"]),
            block_dim=bd,
        )
        pk.linear_with_residual_layer(
            input=t.attn, weight=t.w_o, residual=t.input, output=t.hidden, grid_dim=(hidden // 32, 1, 1), block_dim=bd
        )
        pk.rmsnorm_layer(input=t.hidden, weight=t.w_post, output=t.h_norm, grid_dim=(n, 1, 1), block_dim=bd)
        pk.linear_layer(input=t.h_norm, weight=w_gatedup, output=t.mlp_mid, grid_dim=(self.TASKS, 1, 1), block_dim=bd)
        pk.silu_mul_layer(input=t.mlp_mid, output=t.mlp_act, grid_dim=(groups, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=t.mlp_act, weight=t.w_down, residual=t.hidden, output=t.output, grid_dim=(hidden // 32, 1, 1), block_dim=bd
        )

    def compute_golden(self, args, params):
        m, groups = args.meta, self.TASKS // 2
        x = rmsnorm(args.input, args.w_in)
        qkv = linear(x, args.w_qkv)
        a = paged_attention_batch(
            qkv, args.k_cache, args.v_cache, args.q_norm, args.k_norm, args.cos_pos_embed, args.sin_pos_embed,
            m.qo_indptr_buffer, m.paged_kv_indptr_buffer, m.paged_kv_indices_buffer, m.paged_kv_last_page_len_buffer,
        )  # fmt: skip
        hidden = linear_with_residual(a.output, args.w_o, args.input)
        h_norm = rmsnorm(hidden, args.w_post)
        w_gatedup = torch.stack([args.w_gate.view(groups, -1, hidden.shape[1]), args.w_up.view(groups, -1, hidden.shape[1])], 1)
        mid = linear(h_norm, w_gatedup.reshape(-1, hidden.shape[1]))
        act = silu_mul(mid, groups)
        out = linear_with_residual(act, args.w_down, hidden)
        rows = a.rows  # the iteration's tokens; the rest of every intermediate stays unwritten
        values = dict(zip(STAGES, (x, qkv, a.output, hidden, h_norm, mid, act, out)))
        return {
            **{s: Expected(v, written=rows) for s, v in values.items()},
            "k_cache": Expected(a.k_cache, written=a.slots),
            "v_cache": Expected(a.v_cache, written=a.slots),
        }


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
