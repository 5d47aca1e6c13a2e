"""What the paged attention scenes share: a scene built from a list of requests (prompt length,
tokens already in the KV cache), the kernel parameters that make prepare_next_batch batch them, a
KV cache whose history is filled at the pages the runtime will assign, and the golden.

A request (prompt, history) with history < prompt prefills the rest of its prompt (as much as the
token budget allows); with history >= prompt it decodes one token. ``tokens`` (0: just enough) is
max_num_batched_tokens, ``slots`` (0: one per request) max_num_batched_requests, ``splits`` grid z,
``pairs`` grid y = kv_heads / 2 (two kv heads a task), ``qk_scale`` the magnitude of the new tokens'
q and k heads (v stays at 1).
"""

from __future__ import annotations

import torch

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, Expected, InOut, Out, SceneTestCase, batch_params, first_batch_meta

paged_attention = find_reference("paged_attention")
paged_attention_batch = find_reference("paged_attention_batch", layer="paged_attention")
rope_tables = find_reference("rope_tables", layer="paged_attention")

DEFAULTS = {
    "requests": ((16, 0),),
    "heads": 8,
    "kv_heads": 2,
    "head_dim": 128,
    "page_size": 16,
    "splits": 1,
    "pairs": False,
    "shuffle_pages": False,
    "dtype": "bf16",
    "tokens": 0,
    "slots": 0,
    "qk_scale": 1.0,
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def case(name: str, archs=None, manual: bool = False, **params) -> Case:
    """A Case with every parameter: DEFAULTS, then ``params``."""
    unknown = set(params) - set(DEFAULTS)
    assert not unknown, f"unknown scene parameters {unknown}"
    return Case(name, archs=archs, manual=manual, **{**DEFAULTS, **params})


def scene_batch(params) -> dict:
    """PersistentKernel init parameters that batch the scene's requests in one test-mode iteration."""
    return batch_params(
        params["requests"],
        tokens=params["tokens"],
        slots=params["slots"],
        page_size=params["page_size"],
        shuffle_pages=params["shuffle_pages"],
    )


def fill_history(k_cache, v_cache, kernel_params, params, q_norm, k_norm, cos, sin) -> None:
    """Write each request's history into the pages prepare_next_batch will give it: keys and values
    of random token rows, computed as the layer computes new ones (so the cache looks lived in)."""
    m = first_batch_meta(kernel_params)
    ps, kv_heads, d = k_cache.shape[1:]
    width = (params["heads"] + 2 * kv_heads) * d
    qo, kv = m.qo_indptr_buffer, m.paged_kv_indptr_buffer
    for slot in range(len(qo) - 1):
        if qo[slot + 1] <= qo[slot]:
            continue
        pages = m.paged_kv_indices_buffer[int(kv[slot]) : int(kv[slot + 1])].long()
        kv_len = (len(pages) - 1) * ps + int(m.paged_kv_last_page_len_buffer[slot])
        history = kv_len - int(qo[slot + 1] - qo[slot])
        if history == 0:
            continue
        rows = torch.randn(history, width, dtype=k_cache.dtype)
        empty = torch.empty(0, kv_heads, d, dtype=k_cache.dtype)
        _, k, v = paged_attention(rows, empty, empty, q_norm, k_norm, cos, sin, kv_heads)
        where = (pages[:, None] * ps + torch.arange(ps)[None, :]).reshape(-1)[:history]
        k_cache.view(-1, kv_heads, d)[where] = k
        v_cache.view(-1, kv_heads, d)[where] = v


class AttentionScene(SceneTestCase):
    """One paged_attention layer over the scene's batch of requests."""

    PARAMS = tuple(DEFAULTS)

    def kernel_params(self, params):
        return scene_batch(params)

    def generate_args(self, params):
        kp = self.kernel_params(params)
        dtype = DTYPES[params["dtype"]]
        h, kv_heads, d = params["heads"], params["kv_heads"], params["head_dim"]
        tokens, pages, ps, seq = kp["max_num_batched_tokens"], kp["max_num_pages"], kp["page_size"], kp["max_seq_length"]
        q_norm = (1 + 0.1 * torch.randn(d)).to(dtype)
        k_norm = (1 + 0.1 * torch.randn(d)).to(dtype)
        cos, sin = rope_tables(seq, d, dtype=dtype)
        k_cache = torch.randn(pages, ps, kv_heads, d, dtype=dtype)  # slots nobody writes keep these
        v_cache = torch.randn(pages, ps, kv_heads, d, dtype=dtype)
        fill_history(k_cache, v_cache, kp, params, q_norm, k_norm, cos, sin)
        x = torch.randn(tokens, (h + 2 * kv_heads) * d)
        x[:, : (h + kv_heads) * d] *= params["qk_scale"]
        return {
            "input": x.to(dtype),
            "k_cache": InOut(k_cache),
            "v_cache": InOut(v_cache),
            "q_norm": q_norm,
            "k_norm": k_norm,
            "cos_pos_embed": cos,
            "sin_pos_embed": sin,
            "output": Out(torch.empty(tokens, h * d, dtype=dtype)),
        }

    def build(self, pk, t, params):
        pk.paged_attention_layer(
            input=t.input,
            k_cache=t.k_cache,
            v_cache=t.v_cache,
            q_norm=t.q_norm,
            k_norm=t.k_norm,
            cos_pos_embed=t.cos_pos_embed,
            sin_pos_embed=t.sin_pos_embed,
            output=t.output,
            grid_dim=(
                pk.params.max_num_batched_requests,
                params["kv_heads"] // 2 if params["pairs"] else params["kv_heads"],
                params["splits"],
            ),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        self.check_batch(args.meta, params)
        return golden(args, [args.meta])

    def check_batch(self, meta, params) -> None:
        """What the scene meant to run is what ran: override to assert on the batch (args.meta)."""


def golden(args, batches) -> dict:
    """The layer's outputs after running over ``batches`` (the meta tensors of each iteration, in
    order): a row's last value, the caches with every new key and value."""
    k_cache, v_cache, out = args.k_cache, args.v_cache, None
    rows = slots = None
    for m in batches:
        r = paged_attention_batch(
            args.input,
            k_cache,
            v_cache,
            args.q_norm,
            args.k_norm,
            args.cos_pos_embed,
            args.sin_pos_embed,
            m.qo_indptr_buffer,
            m.paged_kv_indptr_buffer,
            m.paged_kv_indices_buffer,
            m.paged_kv_last_page_len_buffer,
            output=out,
        )
        k_cache, v_cache, out = r.k_cache, r.v_cache, r.output
        rows = r.rows if rows is None else rows | r.rows
        slots = r.slots if slots is None else slots | r.slots
    return {
        "output": Expected(out, written=rows),  # rows of no token stay poisoned
        "k_cache": Expected(k_cache, written=slots),  # every other slot keeps its value
        "v_cache": Expected(v_cache, written=slots),
    }
