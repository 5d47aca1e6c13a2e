"""The shape of a Qwen3-style decoder (``Qwen3Config``, ConfigError when it is inconsistent) and
the weights it reads (``expected_weights``: every Hugging Face Qwen3 / Qwen3-MoE name with its
shape; state_dict.py checks a checkpoint against them)."""

from __future__ import annotations

import math
import operator
from dataclasses import MISSING, dataclass, fields
from typing import Any

import torch

from ..errors import ConfigError
from ..frontend.params import check_names

HEAD_DIMS = (64, 128)  # what the paged_attention layer supports
GROUP_SIZES = (1, 2, 4, 8, 16)
DTYPES = (torch.bfloat16, torch.float16)


def as_int(v: Any) -> int | None:
    """``v`` as a Python int where it is an integer (NumPy and 0-d torch integers too, as a config
    read from an array gives them; no bools, no floats), else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def is_finite_number(v: Any) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond any float
        return False


# Model shapes by name, as Qwen3Config keyword arguments: Qwen3Config(**PRESETS["tiny"], num_experts=8, ...).
PRESETS: dict[str, dict[str, Any]] = {
    # Qwen3-0.6B: 28 layers, hidden 1024, 16 q / 8 kv heads of 128, vocabulary 151936, tied embeddings
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        num_hidden_layers=28,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    # small enough for the CPU emulator in CI
    "tiny": dict(
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_hidden_layers=2,
        vocab_size=512,
    ),
}


@dataclass(frozen=True)
class Qwen3Config:
    """A Qwen3 decoder: ``num_layers`` x (RMSNorm, q / k / v projections, per-head q / k RMSNorm,
    rotary embedding, GQA attention, o projection + residual, RMSNorm, MLP + residual), a final
    RMSNorm and the lm head. ``num_experts > 0`` makes every MLP a Qwen3-MoE block (a router, top
    ``num_experts_per_tok`` experts of ``moe_intermediate_size``, weights renormalized over the k).
    ``tie_word_embeddings``: the lm head is the embedding table (no ``lm_head.weight``)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    vocab_size: int
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    dtype: torch.dtype = torch.bfloat16

    def __new__(cls, *args: Any, **kwargs: Any) -> Qwen3Config:
        # Before the dataclass's __init__, which would raise a plain TypeError without the near name.
        check_names("Qwen3Config", kwargs, [f.name for f in fields(cls)])
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "num_hidden_layers",
            "vocab_size",
        ):
            v = as_int(getattr(self, name))
            if v is None or v < 1:
                raise ConfigError(f"Qwen3Config: {name}={getattr(self, name)!r} must be a positive integer")
            object.__setattr__(self, name, v)  # a plain int, whatever integer type was given (frozen)
        for name in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
            v = as_int(getattr(self, name))
            if v is None or v < 0:
                raise ConfigError(f"Qwen3Config: {name}={getattr(self, name)!r} must be an integer >= 0 (0: a dense MLP)")
            object.__setattr__(self, name, v)
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"Qwen3Config: tie_word_embeddings={self.tie_word_embeddings!r} must be True or False")
        if self.head_dim not in HEAD_DIMS:
            raise ConfigError(
                f"Qwen3Config: head_dim={self.head_dim} is not supported by paged attention; use one of {HEAD_DIMS}"
            )
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if heads % kv or heads // kv not in GROUP_SIZES:
            raise ConfigError(
                f"Qwen3Config: num_attention_heads={heads} over num_key_value_heads={kv}: the q heads per kv head "
                f"must be one of {GROUP_SIZES}; choose num_key_value_heads dividing num_attention_heads"
            )
        if not is_finite_number(self.rope_theta) or not self.rope_theta > 1:
            raise ConfigError(f"Qwen3Config: rope_theta={self.rope_theta!r} must be a number > 1, finite (Qwen3: 1e6)")
        if not is_finite_number(self.rms_norm_eps) or not self.rms_norm_eps > 0:
            raise ConfigError(f"Qwen3Config: rms_norm_eps={self.rms_norm_eps!r} must be a positive number, finite (Qwen3: 1e-6)")
        if self.dtype not in DTYPES:
            raise ConfigError(f"Qwen3Config: dtype={self.dtype} is not supported; use torch.bfloat16 or torch.float16")
        if self.num_experts:
            k, e, mi = self.num_experts_per_tok, self.num_experts, self.moe_intermediate_size
            if not 1 <= k <= e or mi < 1:
                raise ConfigError(
                    f"Qwen3Config: a MoE model needs 1 <= num_experts_per_tok <= num_experts and moe_intermediate_size "
                    f">= 1; got num_experts={e}, num_experts_per_tok={k}, moe_intermediate_size={mi}"
                )
            for name, v in (("hidden_size", self.hidden_size), ("moe_intermediate_size", mi)):
                if v % 32:  # the expert linears' k-blocks of 32 (moe_linear.cuh) run over both
                    raise ConfigError(
                        f"Qwen3Config: {name}={v} must be a multiple of 32 in a MoE model (the expert linears read their "
                        f"inputs in blocks of 32); the dense MLP has no such rule"
                    )
        elif self.num_experts_per_tok or self.moe_intermediate_size:
            raise ConfigError(
                "Qwen3Config: num_experts_per_tok / moe_intermediate_size are set but num_experts=0 (a dense MLP); "
                "set num_experts for a MoE model or leave them 0"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @classmethod
    def from_hf(cls, hf: Any, **overrides: Any) -> Qwen3Config:
        """From a Hugging Face Qwen3 / Qwen3-MoE config (a ``PretrainedConfig`` or its ``to_dict()``):
        the dtype from ``torch_dtype`` where it is bf16 or fp16; keys that would change the model in a
        way the runtime does not compute (rope scaling, a sliding window, another activation,
        attention biases) are refused, other keys this model does not use are ignored; ``overrides`` win."""
        d = dict(hf if isinstance(hf, dict) else hf.to_dict())
        _refuse_unsupported(d)
        d.setdefault("head_dim", d.get("hidden_size", 0) // max(1, d.get("num_attention_heads", 1)))
        if "rope_theta" not in d and isinstance(d.get("rope_parameters"), dict):
            d["rope_theta"] = d["rope_parameters"].get("rope_theta", 1e6)
        if d.get("num_experts") is None and d.get("num_local_experts"):
            d["num_experts"] = d["num_local_experts"]  # transformers 5's name for it
        if d.get("num_experts"):
            if d.get("norm_topk_prob") is False:
                raise ConfigError(
                    "Qwen3Config.from_hf: norm_topk_prob=False; the runtime's MoE routing renormalizes the top-k weights "
                    "(norm_topk_prob=True, as Qwen3-MoE checkpoints set it)"
                )
            if d.get("mlp_only_layers") or d.get("decoder_sparse_step", 1) != 1:
                raise ConfigError(
                    "Qwen3Config.from_hf: dense layers among MoE layers (mlp_only_layers / decoder_sparse_step) are not "
                    "supported; every layer must be a MoE block"
                )
        known = {f.name for f in fields(cls)} - {"dtype"}
        args = {k: d[k] for k in known if d.get(k) is not None}
        hf_dtype = d.get("torch_dtype") or d.get("dtype")  # a name, or a torch.dtype
        for t in DTYPES:
            if hf_dtype in (t, str(t).removeprefix("torch.")):
                args["dtype"] = t  # float32 and others: the default, and check_state_dict says to convert
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in {**args, **overrides}]
        if missing:
            raise ConfigError(f"Qwen3Config.from_hf: the config has no {', '.join(missing)}; is it a Qwen3 model's config?")
        return cls(**{**args, **overrides})


def _refuse_unsupported(d: dict[str, Any]) -> None:
    """ConfigError for a Hugging Face config key that changes the model in a way this runtime does
    not compute: ignoring it would decode another model than the checkpoint's."""
    scaling, params = d.get("rope_scaling"), d.get("rope_parameters")
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
    if kind is None and isinstance(params, dict):
        kind = params.get("rope_type")
    if kind not in (None, "default"):
        raise ConfigError(f"Qwen3Config.from_hf: rope scaling {kind!r} is not supported (plain RoPE only); remove it")
    if d.get("use_sliding_window"):
        raise ConfigError("Qwen3Config.from_hf: use_sliding_window=True is not supported (full causal attention only)")
    if d.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"Qwen3Config.from_hf: hidden_act={d['hidden_act']!r} is not supported (the MLP is SiLU-gated)")
    if d.get("attention_bias"):
        raise ConfigError("Qwen3Config.from_hf: attention_bias=True is not supported (the projections have no bias)")


def expected_weights(c: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every weight the model reads, by its Hugging Face name, with its shape."""
    require_config(c, "expected_weights")
    h = c.hidden_size
    w: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, h)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (h,)
        w[p + "self_attn.q_proj.weight"] = (c.q_size, h)
        w[p + "self_attn.k_proj.weight"] = (c.kv_size, h)
        w[p + "self_attn.v_proj.weight"] = (c.kv_size, h)
        w[p + "self_attn.q_norm.weight"] = (c.head_dim,)
        w[p + "self_attn.k_norm.weight"] = (c.head_dim,)
        w[p + "self_attn.o_proj.weight"] = (h, c.q_size)
        w[p + "post_attention_layernorm.weight"] = (h,)
        if c.is_moe:  # the experts stacked, as transformers (5.x) holds them; see fuse_experts
            w[p + "mlp.gate.weight"] = (c.num_experts, h)
            w[p + "mlp.experts.gate_up_proj"] = (c.num_experts, 2 * c.moe_intermediate_size, h)
            w[p + "mlp.experts.down_proj"] = (c.num_experts, h, c.moe_intermediate_size)
        else:
            w[p + "mlp.gate_proj.weight"] = (c.intermediate_size, h)
            w[p + "mlp.up_proj.weight"] = (c.intermediate_size, h)
            w[p + "mlp.down_proj.weight"] = (h, c.intermediate_size)
    w["model.norm.weight"] = (h,)
    if not c.tie_word_embeddings:
        w["lm_head.weight"] = (c.vocab_size, h)
    return w


def require_config(c: Any, where: str) -> None:
    """ConfigError unless ``c`` is our Qwen3Config (transformers' class has the same name)."""
    if not isinstance(c, Qwen3Config):
        raise ConfigError(
            f"{where}: config must be an mpk_runtime.models.Qwen3Config, got {type(c).__module__}.{type(c).__qualname__}; "
            f"for a Hugging Face config use Qwen3Config.from_hf(hf_config)"
        )
