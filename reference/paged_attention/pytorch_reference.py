"""Paged attention (Qwen3 style), written from the math.

``paged_attention`` is one request with its keys and values contiguous: the history it already has
(k_history, v_history: (s, H_kv, D)) and its n new tokens' rows of [q | k | v]. The new tokens sit
at positions s .. s + n - 1. q and k get a per-head RMSNorm in fp32 and the rotate-half rotary
embedding at their position; q and k are then held in the input's dtype, as a bf16 / fp16 model
holds them (k as the KV cache stores it). Attention is causal over the s + n keys, in fp32, with
q head h reading kv head h // (H / H_kv), scaled by 1 / sqrt(D); the output is rounded once.

``paged_attention_batch`` is the same over a batch laid out as the runtime lays it out (token rows
by qo_indptr, keys and values in pages by the page table): it gathers each request's history from
its pages, calls ``paged_attention`` and scatters the new keys and values back.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def rope_tables(max_seq_length: int, head_dim: int, base: float = 1e6, dtype=torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotate-half convention's cos / sin tables, (max_seq_length, head_dim): angle p * base^(-2i/D)
    at position p for i < D/2, the same angles repeated for the second half (Qwen3: base 1e6)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(max_seq_length, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rmsnorm_heads(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim (a head) of fp32 ``x``, times ``weight``."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] for x = [x1, x2] (halves of the last dim).
    x is (n, heads, D), cos / sin (n, D): one row per token position."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.float()[:, None, :] + rotated * sin.float()[:, None, :]


def paged_attention(
    input: torch.Tensor,
    k_history: torch.Tensor,
    v_history: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    cos_pos_embed: torch.Tensor,
    sin_pos_embed: torch.Tensor,
    num_kv_heads: int,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One request: returns (output (n, H * D), new keys (n, H_kv, D), new values (n, H_kv, D)), the
    output and the new keys / values in input's dtype."""
    n, d = input.shape[0], q_norm.shape[0]
    heads = input.shape[1] // d - 2 * num_kv_heads
    group = heads // num_kv_heads
    s = k_history.shape[0]
    x = input.float()
    q = x[:, : heads * d].reshape(n, heads, d)
    k = x[:, heads * d : (heads + num_kv_heads) * d].reshape(n, num_kv_heads, d)
    v = input[:, (heads + num_kv_heads) * d :].reshape(n, num_kv_heads, d)
    cos, sin = cos_pos_embed[s : s + n], sin_pos_embed[s : s + n]
    q = rotate_half(rmsnorm_heads(q, q_norm, eps), cos, sin).to(input.dtype)
    k = rotate_half(rmsnorm_heads(k, k_norm, eps), cos, sin).to(input.dtype)
    keys = torch.cat([k_history.to(input.dtype), k]).float()  # (s + n, H_kv, D)
    values = torch.cat([v_history.to(input.dtype), v]).float()
    keys = keys.repeat_interleave(group, dim=1)  # (s + n, H, D): q head h reads kv head h // group
    values = values.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), keys) / d**0.5
    allowed = torch.arange(s + n, device=x.device)[None, :] <= (s + torch.arange(n, device=x.device))[:, None]  # causal
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), values)
    return out.reshape(n, heads * d).to(input.dtype), k, v


class BatchResult(NamedTuple):
    output: torch.Tensor  # (max_num_batched_tokens, H * D): the batch's rows computed, others as given
    rows: torch.Tensor  # (max_num_batched_tokens,) bool: the rows of the batch's new tokens
    k_cache: torch.Tensor  # the caches with the new keys / values in their slots
    v_cache: torch.Tensor
    slots: torch.Tensor  # (max_num_pages, page_size) bool: the slots the new tokens went to


def paged_attention_batch(
    input: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    cos_pos_embed: torch.Tensor,
    sin_pos_embed: torch.Tensor,
    qo_indptr: torch.Tensor,
    paged_kv_indptr: torch.Tensor,
    paged_kv_indices: torch.Tensor,
    paged_kv_last_page_len: torch.Tensor,
    output: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> BatchResult:
    """Every request of a batch: slot r has new token rows qo_indptr[r] .. qo_indptr[r + 1] and KV
    pages paged_kv_indices[paged_kv_indptr[r] ..], the last holding paged_kv_last_page_len[r] tokens;
    its history is its first (KV length - new tokens) keys. ``output`` (default zeros) supplies the
    rows that are not the batch's."""
    pages_total, page_size, kv_heads, d = k_cache.shape
    heads = input.shape[1] // d - 2 * kv_heads
    dev = input.device
    out = torch.zeros(input.shape[0], heads * d, dtype=input.dtype, device=dev) if output is None else output.clone()
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    rows = torch.zeros(input.shape[0], dtype=torch.bool, device=dev)
    slots = torch.zeros(pages_total, page_size, dtype=torch.bool, device=dev)
    flat_k, flat_v = k_cache.view(-1, kv_heads, d), v_cache.view(-1, kv_heads, d)
    for r in range(qo_indptr.shape[0] - 1):
        q0, q1 = int(qo_indptr[r]), int(qo_indptr[r + 1])
        if q1 <= q0:
            continue
        pages = paged_kv_indices[int(paged_kv_indptr[r]) : int(paged_kv_indptr[r + 1])].long().to(dev)
        kv_len = (len(pages) - 1) * page_size + int(paged_kv_last_page_len[r])
        history = kv_len - (q1 - q0)
        where = (pages[:, None] * page_size + torch.arange(page_size, device=dev)[None, :]).reshape(-1)[:kv_len]
        o, k, v = paged_attention(
            input[q0:q1],
            flat_k[where[:history]],
            flat_v[where[:history]],
            q_norm,
            k_norm,
            cos_pos_embed,
            sin_pos_embed,
            kv_heads,
            eps,
        )
        out[q0:q1] = o
        rows[q0:q1] = True
        flat_k[where[history:]] = k
        flat_v[where[history:]] = v
        slots.view(-1)[where[history:]] = True
    return BatchResult(out, rows, k_cache, v_cache, slots)
