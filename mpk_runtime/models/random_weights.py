"""Seeded random weights for a Qwen3Config, in Hugging Face naming: for tests, benches and the
example, where no checkpoint is at hand."""

from __future__ import annotations

import torch

from ..errors import ConfigError
from .config import Qwen3Config, expected_weights, is_finite_number, require_config


def random_state_dict(
    c: Qwen3Config, seed: int = 0, residual_scale: float = 0.5, lm_head_peak: float = 0.0
) -> dict[str, torch.Tensor]:
    """Random weights (seeded, on the CPU) in Hugging Face naming. Projections are scaled so that
    every layer adds about ``residual_scale`` times the norm of the embedding to the residual stream,
    and norm weights are near 1: activations stay of order 1 through any number of layers.

    ``lm_head_peak`` > 0 (untied heads): ``lm_head.weight`` = (peak * embed[perm] + noise) / sqrt(hidden)
    for a random permutation ``perm``, so the logit of token perm^-1(t) stands out where the residual
    stream still points along embed[t]: greedy decoding then has clear winners, far from bf16 ties,
    for tests that compare generated tokens (larger ``residual_scale`` lets the context decide more)."""
    require_config(c, "random_state_dict")
    if lm_head_peak and c.tie_word_embeddings:
        raise ConfigError(
            f"random_state_dict: lm_head_peak={lm_head_peak} shapes an lm head of its own, which a tied config "
            f"(tie_word_embeddings=True) does not have; leave it 0, or untie the config"
        )
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**64:
        raise ConfigError(f"random_state_dict: seed={seed!r} must be an integer in [-2**63, 2**64) (torch's seed range)")
    for name, v in (("residual_scale", residual_scale), ("lm_head_peak", lm_head_peak)):
        if not is_finite_number(v) or v < 0:
            raise ConfigError(f"random_state_dict: {name}={v!r} must be a finite number >= 0")
    g = torch.Generator().manual_seed(seed)
    layers = max(1, c.num_hidden_layers)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(c.dtype)

    sd = {}
    for name, shape in expected_weights(c).items():
        if len(shape) == 1:
            sd[name] = (1 + 0.1 * torch.randn(*shape, generator=g)).to(c.dtype)
        elif name.endswith(("o_proj.weight", "down_proj.weight", "down_proj")):
            sd[name] = randn(*shape, scale=residual_scale / (shape[-1] ** 0.5 * layers**0.5))
        else:
            sd[name] = randn(*shape, scale=1 / shape[-1] ** 0.5)
    embed = torch.randn(c.vocab_size, c.hidden_size, generator=g)
    sd["model.embed_tokens.weight"] = embed.to(c.dtype)
    if lm_head_peak and not c.tie_word_embeddings:
        perm = torch.randperm(c.vocab_size, generator=g)
        noise = torch.randn(c.vocab_size, c.hidden_size, generator=g)
        sd["lm_head.weight"] = ((lm_head_peak * embed[perm] + noise) / c.hidden_size**0.5).to(c.dtype)
    return sd
