"""Paged attention, Qwen3 style: per-head RMSNorm and rotary embedding of the new tokens' q and k,
their k and v appended to a paged KV cache, causal GQA attention over each request's keys."""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import archs
from ..errors import ConfigError, DTypeError, GridError, ShapeError
from . import references
from .registry import Arg, EmulationContext, SliceInfo, TaskSpec, register_task, selected, split, whole

# Both numbers are the body's too (csrc/tasks/common/paged_attention.cuh): a request with at most
# KV_SPLIT_MAX_TOKENS new tokens splits its keys over grid z, a longer one its new tokens.
KV_SPLIT_MAX_TOKENS = 16
MAX_SPLITS = 128  # paged_attention.cuh static_asserts it
HEAD_DIMS = (64, 128)
GROUP_SIZES = (1, 2, 4, 8, 16)
WORKSPACE_PAD = 4  # floats after each partial row: its log-sum-exp, padded to 16 bytes
TMA_MAX_BOX_ROWS = 64  # cache rows a TMA copy takes at most: a tile of a pair's half (the body's kTileKeys)
TMA_TILE_KEYS = 128  # keys a tile of one kv head a task has on sm90 (8 warps); half that for a pair's half


def tma_box_rows(page_size: int) -> int:
    """Cache rows a TMA copy of the body takes (sm90): the most, up to 64, that divide a page and
    a tile, or 0 (cp.async only) when that is under 16 rows."""
    rows = math.gcd(page_size, TMA_MAX_BOX_ROWS)
    return rows if rows >= 16 else 0


def kv_map_geometry(rows: int) -> tuple[list[int], int]:
    """The box (from the caches' innermost dim) and swizzle bytes of the layer's kv_maps for boxes of
    ``rows`` rows: 64 of a row's D elements (128 bytes: the 128-byte swizzle the body's tiles are laid
    out in), of one kv head, of ``rows`` rows of one page. The caches are (pages, page_size, H_kv, D)."""
    return [64, 1, rows, 1], 128


def layer_tma_rows(page_size: int, max_seq_length: int, splits: int, heads_per_task: int) -> int:
    """tma_box_rows for a layer whose tasks can take a whole tile of history by TMA, else 0: with
    splits of the keys (decode) a split holds at most ceil(max_seq_length / splits) keys, and one of
    fewer than a tile never takes one. The variant then has no TMA code, whose registers cost the
    model's decode (splits of 64 keys) 4% while it ran none (PERFORMANCE.md, twenty-first session)."""
    if splits > 1 and -(-max_seq_length // splits) < TMA_TILE_KEYS // heads_per_task:
        return 0
    return tma_box_rows(page_size)


def splits(kv_len: int, qlen: int, num_splits: int, z: int) -> tuple[str, int, int]:
    """What task z of a request does: ("all", ...), ("keys", first key, end) or ("tokens", first
    new token, end). Keys are split in chunks of a multiple of 16; the body computes the same."""
    if num_splits == 1:
        return "all", 0, qlen
    if qlen <= KV_SPLIT_MAX_TOKENS:
        chunk = (-(-kv_len // num_splits) + 15) // 16 * 16
        return "keys", min(kv_len, z * chunk), min(kv_len, (z + 1) * chunk)
    block = -(-qlen // num_splits)
    return "tokens", min(qlen, z * block), min(qlen, (z + 1) * block)


def workspace_floats(tokens: int, requests: int, heads: int, kv_heads: int, head_dim: int, num_splits: int) -> int:
    """fp32 scratch of a split layer: a 64-bit counter per (request, kv head), then per (token row, q
    head, split) a partial output and its log-sum-exp (token rows: the batch's, or 16 per request)."""
    rows = min(tokens, requests * KV_SPLIT_MAX_TOKENS)
    counters = (2 * requests * kv_heads + 3) // 4 * 4  # two floats each, padded to 16 bytes
    return counters + rows * heads * num_splits * (head_dim + WORKSPACE_PAD)


@register_task
class PagedAttention(TaskSpec):
    name = "paged_attention"
    inputs = {
        "input": selected(x=0),
        "q_norm": whole(),
        "k_norm": whole(),
        "cos_pos_embed": whole(),
        "sin_pos_embed": whole(),
    }
    outputs = {
        "k_cache": split(y=2).selecting(x=0, z=0),
        "v_cache": split(y=2).selecting(x=0, z=0),
        "output": split(y=1).selecting(x=0, z=0),
    }
    scalars = {"eps": 1e-6}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: "common/paged_attention.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::paged_attention"
    smem_function = "mpk::tasks::paged_attention_smem_bytes"
    reference = "paged_attention"
    # Runtime::mark in the body (kPhase* in paged_attention.cuh); passes repeat the first four.
    phases = (
        "meta read, first tiles requested",
        "q rows, append",
        "keys streamed",
        "warps merged, rows or partials written",
        "split counted",
        "splits merged",
    )
    doc = """Attention of the iteration's new tokens over a paged KV cache, Qwen3 style.

    input (max_num_batched_tokens, (H + 2 H_kv) D): each row [q (H D) | k (H_kv D) | v (H_kv D)] of a
    new token, requests one after another as qo_indptr_buffer says. q and k get a per-head RMSNorm
    (q_norm, k_norm: (D,), eps) and the rotate-half rotary embedding at the token's position (its
    request's step + its index) from cos_pos_embed / sin_pos_embed (max_seq_length, D); the new k and
    v go into k_cache / v_cache (max_num_pages, page_size, H_kv, D) at the slots the page table gives
    (paged_kv_indptr / indices / last_page_len); output (max_num_batched_tokens, H D) gets the causal
    attention of each new q over all keys of its request (history and new, softmax in fp32; q head h
    reads kv head h // (H / H_kv)). Rows of inactive tokens and cache slots of other tokens are not
    written. bf16 or fp16, D = 64 or 128, any page size.

    grid_dim = (max_num_batched_requests, H_kv, Z): task (x, y, z) serves batch slot x (nothing when
    the slot has no new tokens) and kv head y. Grid y = H_kv / 2 (H_kv even) gives a task kv heads
    2y and 2y + 1, run at once on the two halves of the worker's warps: two independent streams per
    SM, which keeps more copies in flight when there are at least about two (request, kv head, z)
    streams per worker. Z = 1: one task per (request, kv head). Z > 1 splits
    each (request, kv head) in Z tasks, for parallelism when the batch is small: a request with at
    most 16 new tokens (decode) splits its keys (each task streams a chunk, writes a partial result
    to a workspace the layer allocates itself, and the last of the Z to finish merges them through
    an atomic counter); a longer one (prefill) splits its new tokens. Choose Z so that
    requests * H_kv * Z is about the number of workers, e.g. Z = 16 for one request and 8 kv heads.
    On sm90 and later, tiles of history keys are copied by the TMA through tensor maps of the caches
    that the layer makes ("<layer>.kv_maps"), for page sizes with a divisor of 16, 32 or 64 and
    splits that can hold a tile (128 keys, 64 for two kv heads a task); other tiles by cp.async."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, out = args["input"].tensor, args["output"].tensor
        kc, vc = args["k_cache"].tensor, args["v_cache"].tensor
        qn, kn, cos, sin = (args[n].tensor for n in ("q_norm", "k_norm", "cos_pos_embed", "sin_pos_embed"))
        where = "paged_attention"
        if x.dtype.torch not in (torch.bfloat16, torch.float16):
            raise DTypeError(f"{where}: input is {x.dtype.short}; the layer runs in bfloat16 or float16")
        for name, t in args.items():
            if t.tensor.dtype is not x.dtype:
                raise DTypeError(f"{where}: {name} is {t.tensor.dtype.short} but input is {x.dtype.short}; use one dtype")
        if kc.num_dims != 4 or vc.shape != kc.shape:
            raise ShapeError(
                f"{where}: k_cache and v_cache must both be (max_num_pages, page_size, num_kv_heads, head_dim); "
                f"got {kc.shape} and {vc.shape}"
            )
        _, _, kv_heads, d = kc.shape
        if d not in HEAD_DIMS:
            raise ShapeError(f"{where}: head_dim {d} (the caches' last dim) is not supported; use one of {HEAD_DIMS}")
        if qn.shape != (d,) or kn.shape != (d,):
            raise ShapeError(f"{where}: q_norm and k_norm must be ({d},) (head_dim); got {qn.shape} and {kn.shape}")
        if x.num_dims != 2 or x.shape[1] % d or x.shape[1] // d <= 2 * kv_heads:
            raise ShapeError(
                f"{where}: input must be (max_num_batched_tokens, (num_heads + 2 * {kv_heads}) * {d}) rows of "
                f"[q | k | v]; got {x.shape}"
            )
        heads = x.shape[1] // d - 2 * kv_heads
        if heads % kv_heads or heads // kv_heads not in GROUP_SIZES:
            raise ShapeError(
                f"{where}: input {x.shape} holds {heads} q heads for {kv_heads} kv heads; the q heads per kv head must "
                f"be one of {GROUP_SIZES}"
            )
        if out.shape != (x.shape[0], heads * d):
            want = (x.shape[0], heads * d)
            raise ShapeError(f"{where}: output must be (max_num_batched_tokens, num_heads * head_dim) = {want}, got {out.shape}")
        if cos.num_dims != 2 or cos.shape[1] != d or sin.shape != cos.shape:
            raise ShapeError(
                f"{where}: cos_pos_embed and sin_pos_embed must be (max_seq_length, {d}); got {cos.shape}, {sin.shape}"
            )
        pairs = f" or num_kv_heads / 2 = {kv_heads // 2} (two kv heads a task)" if kv_heads % 2 == 0 else ""
        if grid[1] != kv_heads and not (pairs and grid[1] == kv_heads // 2):
            raise GridError(f"{where}: grid_dim y={grid[1]} must be num_kv_heads={kv_heads} (one kv head a task){pairs}")
        if not 1 <= grid[2] <= MAX_SPLITS:
            raise GridError(f"{where}: grid_dim z={grid[2]} splits a request's work; use 1 to {MAX_SPLITS}")
        values["splits"] = grid[2]  # a template argument, and what the slice reference splits by

    def check_params(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int], params: Any) -> None:
        x, kc, cos = args["input"].tensor, args["k_cache"].tensor, args["cos_pos_embed"].tensor
        where = "paged_attention"
        want = {
            "grid_dim x": (grid[0], params.max_num_batched_requests, "max_num_batched_requests"),
            "input rows": (x.shape[0], params.max_num_batched_tokens, "max_num_batched_tokens"),
            "k_cache pages": (kc.shape[0], params.max_num_pages, "max_num_pages"),
            "k_cache page size": (kc.shape[1], params.page_size, "page_size"),
        }
        for what, (got, need, param) in want.items():
            if got != need:
                why = " (one task per batch slot)" if what == "grid_dim x" else ""
                raise ConfigError(f"{where}: {what} = {got} must equal the kernel's {param} = {need}{why}")
        heads_per_task = kc.shape[2] // grid[1]
        values["tma_rows"] = layer_tma_rows(params.page_size, params.max_seq_length, grid[2], heads_per_task)
        if cos.shape[0] < params.max_seq_length:
            raise ConfigError(
                f"{where}: cos_pos_embed / sin_pos_embed have {cos.shape[0]} rows; positions go up to "
                f"max_seq_length - 1 = {params.max_seq_length - 1}, so give at least {params.max_seq_length}"
            )

    def workspace(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> dict[str, Any]:
        if grid[2] == 1:
            return {}
        x, kc = args["input"].tensor, args["k_cache"].tensor
        _, _, kv_heads, d = kc.shape
        heads = x.shape[1] // d - 2 * kv_heads
        n = workspace_floats(x.shape[0], grid[0], heads, kv_heads, d, grid[2])
        return {"splits": ((n,), torch.float32)}

    def tensor_maps(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> dict[str, Any]:
        # The body's tiles of history keys, copied by the TMA on sm90.
        rows = values.get("tma_rows", 0)
        return {"kv_maps": (["k_cache", "v_cache"], *kv_map_geometry(rows))} if rows else {}

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        _, _, kv_heads, d = s["k_cache"].full_shape
        heads_per_task = s["k_cache"].shape[2]
        group = s["output"].shape[1] // d // heads_per_task
        return [s["input"].dtype.cpp, d, group, kv_heads, values["splits"], heads_per_task, values.get("tma_rows", 0)]

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        # Unknown at compile time (the lengths are the iteration's): a fair share of a page table's keys
        # per kv head (a task of two streams both at once, each at about the rate of one alone).
        _, ps, _, d = s["k_cache"].full_shape
        return 2000.0 + 4 * ps * d * s["k_cache"].dtype.itemsize / 20.0 * (1 + s["k_cache"].shape[2]) / 2

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        m = ctx.meta
        x, y, z = ctx.grid_idx
        qo, kv = m["qo_indptr_buffer"], m["paged_kv_indptr_buffer"]
        q0, qlen = int(qo[x]), int(qo[x + 1] - qo[x])
        if qlen <= 0:
            return
        ps = ctx.batch.page_size
        pages = m["paged_kv_indices_buffer"][int(kv[x]) : int(kv[x + 1])].long()
        kv_len = (len(pages) - 1) * ps + int(m["paged_kv_last_page_len_buffer"][x])
        step = kv_len - qlen
        kc, vc, out = outputs["k_cache"], outputs["v_cache"], outputs["output"]
        d, heads_per_task = kc.shape[-1], kc.shape[2]
        group = out.shape[1] // d // heads_per_task
        rows = inputs["input"][q0 : q0 + qlen]
        kv_heads = rows.shape[1] // d // (group + 2)
        page_of = pages.repeat_interleave(ps)[:kv_len]  # the caches are views: index them by (page, offset)
        offset = torch.arange(kv_len) % ps
        attn = references.find(self.reference or self.name, layer=self.name)
        mode, lo, hi = splits(kv_len, qlen, values["splits"], z)
        if mode == "all":
            tokens = range(qlen)
        else:  # the keys of new tokens in [lo, hi), or new tokens lo .. hi - 1
            tokens = range(max(lo - step, 0), max(hi - step, 0)) if mode == "keys" else range(lo, hi)
        out_rows = range(qlen) if mode == "all" or (mode == "keys" and z == 0) else range(lo, hi) if mode == "tokens" else ()
        for j in range(heads_per_task):  # the box's kv heads, from the task's first
            h = y * heads_per_task + j
            # The input columns of kv head h: its q heads, then its k and v.
            cols = torch.cat(
                [
                    torch.arange(h * group * d, (h + 1) * group * d),
                    torch.arange((kv_heads * group + h) * d, (kv_heads * group + h + 1) * d),
                    torch.arange((kv_heads * (group + 1) + h) * d, (kv_heads * (group + 1) + h + 1) * d),
                ]
            )
            o, k_new, v_new = attn(
                rows[:, cols],
                kc[page_of[:step], offset[:step], j : j + 1],
                vc[page_of[:step], offset[:step], j : j + 1],
                inputs["q_norm"],
                inputs["k_norm"],
                inputs["cos_pos_embed"],
                inputs["sin_pos_embed"],
                num_kv_heads=1,
                eps=values["eps"],
            )
            for i in tokens:
                kc[page_of[step + i], offset[step + i], j : j + 1] = k_new[i]
                vc[page_of[step + i], offset[step + i], j : j + 1] = v_new[i]
            for i in out_rows:
                out[q0 + i, j * group * d : (j + 1) * group * d] = o[i]
