"""A whole Qwen3 model in one task graph: ``build_qwen3(pk, config, state_dict)``.

embedding of ``input_tokens`` -> num_layers x (RMSNorm -> qkv linear -> paged attention (q / k
norm, RoPE, KV cache append, causal GQA) -> o_proj + residual -> RMSNorm -> MLP + residual) ->
final RMSNorm -> lm head -> argmax into ``output_tokens``. The MLP is gate / up linear with
SiLU-mul fused -> down + residual, or with ``config.num_experts`` the Qwen3-MoE block (router linear -> top-k
routing -> expert gate / up with SiLU-mul fused -> expert down -> weighted sum + residual; at decode
batch sizes the gate / up layer routes the tokens itself, beside the routing task
(moe_topk_w13_linear), and the down projection sums each token's experts itself
(moe_w2_mul_sum_add)).
In a dense model an RMSNorm whose only reader is a linear (before qkv, gate / up and the lm head)
is folded into it (``rmsnorm_linear``; before gate / up ``rmsnorm_linear_silu_mul``, which also
applies the SiLU-mul): no task, tensor or dependency hop of its own. A MoE model
keeps every RMSNorm a task: the folded one rounds differently (the row's scale applied after the
sum), and a router logit that moves by a rounding can pick another expert, so the model would no
longer follow the reference's routing step for step.

Every layer is one of the registered tasks, so in offline mode one launch of the kernel runs the
whole greedy decode: prepare_next_batch feeds each iteration's sampled tokens back as the next
iteration's ``input_tokens``, until every request's row of ``tokens`` is full.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .. import memory
from ..errors import ConfigError
from ..tasks import moe_w2_mul_sum_add
from ..tasks.moe_topk_w13_linear import MAX_SLOTS as MAX_ROUTING_SLOTS
from . import grids as grid_plan
from .config import Qwen3Config
from .state_dict import check_state_dict

if TYPE_CHECKING:
    from ..frontend.kernel import PersistentKernel
    from ..graph.tensors import DTensor


@dataclass
class Qwen3Graph:
    """What ``build_qwen3`` declared: the grids it used, the runtime-owned intermediates by name
    (``pk.tensor(name)`` reads one: ``"logits"``, ``"layers.0.hidden"``, ...) and the KV caches."""

    config: Qwen3Config
    grids: grid_plan.Qwen3Grids
    k_caches: list[torch.Tensor] = field(default_factory=list)
    v_caches: list[torch.Tensor] = field(default_factory=list)
    intermediates: list[str] = field(default_factory=list)


def rope_tables(rows: int, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos / sin (rows, head_dim) of the rotate-half convention: angle p * theta^(-2i / D) at position p,
    the D/2 angles repeated for the second half; computed in fp64, stored in the model's dtype."""
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def build_qwen3(
    pk: PersistentKernel,
    config: Qwen3Config,
    state_dict: dict[str, torch.Tensor],
    grids: grid_plan.Qwen3Grids | None = None,
) -> Qwen3Graph:
    """Declare the whole model on ``pk`` (not compiled yet): weights from ``state_dict`` (Hugging Face
    Qwen3 names, checked against ``config``; moved to the kernel's device when elsewhere), a paged
    KV cache per layer sized by the kernel's max_num_pages and page_size, and the layers. The batch is
    the kernel's: max_num_batched_tokens rows, max_num_batched_requests slots. ``grids`` (default:
    ``grids.plan`` for pk's workers) sets how many tasks each layer gets."""
    weights = check_state_dict(config, state_dict)
    p = pk.params
    if p.max_num_batched_requests > p.max_num_batched_tokens:
        raise ConfigError(
            f"build_qwen3: max_num_batched_requests={p.max_num_batched_requests} exceeds max_num_batched_tokens="
            f"{p.max_num_batched_tokens}; each request in a batch needs at least one token row"
        )
    if grids is None:
        grids = grid_plan.plan(
            config, p.num_workers, p.max_num_batched_tokens, p.max_num_batched_requests, worker_threads=pk.block_dim[0]
        )
    if not isinstance(grids, grid_plan.Qwen3Grids):
        raise ConfigError(
            f"build_qwen3: grids must be a Qwen3Grids, got {type(grids).__name__} ({grids!r}); start from "
            f"mpk_runtime.models.grids.plan(config, ...) and change a layer with dataclasses.replace(g, qkv=...)"
        )
    grids.check(config)
    copied = sum(w.nbytes for w in weights.values() if not w.is_meta)
    memory.check(
        [*cache_needs(config, p.max_num_pages, p.page_size, p.max_seq_length), memory.Need("the weights' copy", copied)],
        pk.device,
        "build_qwen3",
        f"use a shorter max_seq_length (now {p.max_seq_length}) or fewer max_num_pages (now {p.max_num_pages})",
    )
    return _Builder(pk, config, weights, grids).build()


def cache_needs(config: Qwen3Config, max_num_pages: int, page_size: int, max_seq_length: int) -> list[memory.Need]:
    """What build_qwen3 allocates besides the weights: each layer's K and V cache of max_num_pages
    pages, and the RoPE tables of max_seq_length positions."""
    cache = (max_num_pages, page_size, config.num_key_value_heads, config.head_dim)
    layers = config.num_hidden_layers

    def times(what: str, count: int, shape: tuple[int, ...]) -> memory.Need:
        one = memory.tensor_need("", shape, config.dtype)  # " (bf16 [...])"
        return memory.Need(f"{what} ({count} x {one.what.strip()[1:]}", count * one.nbytes)

    return [
        times(f"the K and V caches of {layers} layer{'s' if layers != 1 else ''}", 2 * layers, cache),
        times("the RoPE cos and sin tables", 2, (max_seq_length, config.head_dim)),
    ]


class _Builder:
    def __init__(self, pk: PersistentKernel, c: Qwen3Config, weights: dict[str, torch.Tensor], g: grid_plan.Qwen3Grids):
        self.pk: Any = pk  # its layer methods are generated from the task registry (invisible to mypy)
        self.c, self.g = c, g
        self.w = weights
        self.tokens = pk.params.max_num_batched_tokens
        self.bd = pk.block_dim
        self.out = Qwen3Graph(c, g)

    def attach(self, name: str, t: torch.Tensor | None = None) -> DTensor:
        """``t``, or the state_dict's weight ``name``, attached. A weight of the caller's is copied
        where moving it to the device did not already copy it: the kernel holds a snapshot of every
        weight, as it must of those it fuses (q / k / v, gate / up, the experts), so that a state_dict
        changed afterwards changes none of them rather than some; and two names of one tensor (an lm
        head that is the embedding) become two tensors."""
        data = self.w[name] if t is None else t
        if not data.is_meta:  # compile_only needs only a meta weight's shape; attach_input refuses it where the kernel runs
            moved = data.to(self.pk.device).contiguous()
            if t is None and moved.untyped_storage().data_ptr() == data.untyped_storage().data_ptr():
                moved = moved.clone()
            data = moved
        return self.pk.attach_input(data, name)

    def new(self, name: str, *dims: int, dtype: torch.dtype | None = None) -> DTensor:
        self.out.intermediates.append(name)
        return self.pk.new_tensor(dims, dtype or self.c.dtype, name)

    def build(self) -> Qwen3Graph:
        pk, c, g, bd, n = self.pk, self.c, self.g, self.bd, self.tokens
        p = pk.params
        cos, sin = rope_tables(p.max_seq_length, c.head_dim, c.rope_theta, c.dtype)
        self.rope = (self.attach("rope.cos", cos), self.attach("rope.sin", sin))
        embed = self.attach("model.embed_tokens.weight")
        x = self.new("embed", n, c.hidden_size)
        tokens_in = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
        pk.embed_layer(input=tokens_in, weight=embed, output=x, grid_dim=(g.embed, 1, 1), block_dim=bd)
        for i in range(c.num_hidden_layers):
            x = self.layer(i, x)
        lm_head = embed if c.tie_word_embeddings else self.attach("lm_head.weight")
        logits = self.new("logits", n, c.vocab_size)
        self.norm_linear(x, self.attach("model.norm.weight"), lm_head, logits, g.lm_head, "final_norm")
        values = self.new("argmax.values", n, g.argmax_parts, dtype=torch.float32)
        indices = self.new("argmax.indices", n, g.argmax_parts, dtype=torch.int64)
        pk.argmax_partial_layer(input=logits, values=values, indices=indices, grid_dim=(g.argmax_parts, 1, 1), block_dim=bd)
        tokens_out = pk.attach_input(pk.meta_tensors["output_tokens"], "output_tokens")
        pk.argmax_reduce_layer(values=values, indices=indices, output=tokens_out, grid_dim=(1, 1, 1), block_dim=bd)
        return self.out

    def norm_linear(self, x: DTensor, norm_weight: DTensor, weight: DTensor, out: DTensor, tasks: int, name: str) -> None:
        """out = rmsnorm(x, norm_weight) @ weight.T: one rmsnorm_linear layer in a dense model (the
        normalized x is never stored); in a MoE model an RMSNorm into the intermediate ``name``, then
        the linear (see the module's docstring)."""
        if self.c.is_moe:
            xn = self.new(name, self.tokens, self.c.hidden_size)
            self.rmsnorm(x, norm_weight, xn)
            self.pk.linear_layer(input=xn, weight=weight, output=out, grid_dim=(tasks, 1, 1), block_dim=self.bd)
            return
        self.pk.rmsnorm_linear_layer(
            input=x,
            weight=weight,
            norm_weight=norm_weight,
            output=out,
            eps=self.c.rms_norm_eps,
            grid_dim=(tasks, 1, 1),
            block_dim=self.bd,
        )

    def rmsnorm(self, x: DTensor, weight: DTensor, out: DTensor) -> None:
        self.pk.rmsnorm_layer(
            input=x, weight=weight, output=out, eps=self.c.rms_norm_eps, grid_dim=(self.tokens, 1, 1), block_dim=self.bd
        )

    def layer(self, i: int, x: DTensor) -> DTensor:
        pk, c, g, bd, n = self.pk, self.c, self.g, self.bd, self.tokens
        p = pk.params
        pre, tag = f"model.layers.{i}.", f"layers.{i}."
        qkv_rows = torch.cat([self.w[pre + f"self_attn.{w}_proj.weight"] for w in "qkv"])  # rows [q | k | v]
        w_qkv = self.attach(pre + "self_attn.qkv_proj.weight", qkv_rows)
        qkv = self.new(tag + "qkv", n, c.q_size + 2 * c.kv_size)
        self.norm_linear(x, self.attach(pre + "input_layernorm.weight"), w_qkv, qkv, g.qkv, tag + "attn_norm")
        cache_shape = (p.max_num_pages, p.page_size, c.num_key_value_heads, c.head_dim)
        k_cache = torch.zeros(cache_shape, dtype=c.dtype, device=pk.device)
        v_cache = torch.zeros(cache_shape, dtype=c.dtype, device=pk.device)
        self.out.k_caches.append(k_cache)
        self.out.v_caches.append(v_cache)
        attn = self.new(tag + "attn", n, c.q_size)
        pk.paged_attention_layer(
            input=qkv,
            k_cache=self.attach(tag + "k_cache", k_cache),
            v_cache=self.attach(tag + "v_cache", v_cache),
            q_norm=self.attach(pre + "self_attn.q_norm.weight"),
            k_norm=self.attach(pre + "self_attn.k_norm.weight"),
            cos_pos_embed=self.rope[0],
            sin_pos_embed=self.rope[1],
            output=attn,
            eps=c.rms_norm_eps,
            grid_dim=(p.max_num_batched_requests, c.num_key_value_heads // g.attention_kv_heads_per_task, g.attention_splits),
            block_dim=bd,
        )
        h = self.new(tag + "attn_out", n, c.hidden_size)
        w_o = self.attach(pre + "self_attn.o_proj.weight")
        pk.linear_with_residual_layer(input=attn, weight=w_o, residual=x, output=h, grid_dim=(g.o_proj, 1, 1), block_dim=bd)
        norm = self.attach(pre + "post_attention_layernorm.weight")
        out = self.new(tag + "hidden", n, c.hidden_size)
        if c.is_moe:  # the router and the experts both read the normalized rows
            hn = self.new(tag + "mlp_norm", n, c.hidden_size)
            self.rmsnorm(h, norm, hn)
            self.moe(pre, tag, hn, h, out)
        else:
            self.mlp(pre, tag, h, norm, out)
        return out

    def mlp(self, pre: str, tag: str, h: DTensor, norm: DTensor, out: DTensor) -> None:
        """silu(gate) * up of rmsnorm(h) (one layer: rmsnorm_linear_silu_mul), down + the residual h."""
        pk, c, g, bd, n = self.pk, self.c, self.g, self.bd, self.tokens
        gate, up = self.attach(pre + "mlp.gate_proj.weight"), self.attach(pre + "mlp.up_proj.weight")
        w_gate_up = pk.shuffle_tensors([gate, up], shuffled_dim=0, num_groups=g.gate_up, name=pre + "mlp.gate_up_proj.weight")
        act = self.new(tag + "act", n, c.intermediate_size)
        pk.rmsnorm_linear_silu_mul_layer(
            input=h,
            weight=w_gate_up,
            norm_weight=norm,
            output=act,
            eps=c.rms_norm_eps,
            grid_dim=(g.gate_up, 1, 1),
            block_dim=bd,
        )
        w_down = self.attach(pre + "mlp.down_proj.weight")
        pk.linear_with_residual_layer(input=act, weight=w_down, residual=h, output=out, grid_dim=(g.down, 1, 1), block_dim=bd)

    def moe(self, pre: str, tag: str, hn: DTensor, residual: DTensor, out: DTensor) -> None:
        pk, c, g, bd, n = self.pk, self.c, self.g, self.bd, self.tokens
        e, k, inter = c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size
        logits = self.new(tag + "router_logits", n, e)
        router = self.attach(pre + "mlp.gate.weight")
        pk.linear_layer(input=hn, weight=router, output=logits, grid_dim=(g.router, 1, 1), block_dim=bd)
        route: dict[str, Any] = {
            "routing_indices": self.new(tag + "routing_indices", e, n, dtype=torch.int32),
            "expert_mask": self.new(tag + "expert_mask", e + 1, dtype=torch.int32),
        }
        weights = self.new(tag + "topk_weights", n, k, dtype=torch.float32)
        pk.moe_topk_softmax_routing_layer(input=logits, topk_weights=weights, **route, grid_dim=(1, 1, 1), block_dim=bd)
        act = self.new(tag + "expert_act", n, k, inter)
        w13_t = self.attach(pre + "mlp.experts.gate_up_proj")
        if e * (n | 1) <= MAX_ROUTING_SLOTS:  # gate / up routes the tokens itself, beside the routing task
            w13 = dict(router_logits=logits, output=act, grid_dim=(max(1, g.experts - 1), 1, 1), block_dim=bd)
            pk.moe_topk_w13_linear_layer(input=hn, weight=w13_t, **w13)
        else:
            pk.moe_w13_linear_layer(input=hn, weight=w13_t, **route, output=act, grid_dim=(g.experts, 1, 1), block_dim=bd)
        w2_t = self.attach(pre + "mlp.experts.down_proj")
        # The down projection with the weighted sum: the most 16-column slices of hidden the workers
        # hold, where their sums fit in shared memory (decode batches); else down, then the sum.
        slices = moe_w2_mul_sum_add.column_slices(c.hidden_size, g.experts)
        if slices and moe_w2_mul_sum_add.smem_bytes(n, e, c.hidden_size // slices) <= moe_w2_mul_sum_add.SMEM_LIMIT:
            pk.moe_w2_mul_sum_add_layer(
                input=act, weight=w2_t, **route, topk_weights=weights, residual=residual, output=out,
                grid_dim=(slices, 1, 1), block_dim=bd,
            )  # fmt: skip
            return
        y = self.new(tag + "expert_out", n, k, c.hidden_size)
        pk.moe_w2_linear_layer(input=act, weight=w2_t, **route, output=y, grid_dim=(g.experts, 1, 1), block_dim=bd)
        pk.moe_mul_sum_add_layer(
            input=y, topk_weights=weights, residual=residual, output=out, grid_dim=(g.embed, 1, 1), block_dim=bd
        )
