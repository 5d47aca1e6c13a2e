"""A whole Qwen3 model in one megakernel, greedy decoding token for token against the PyTorch
reference (reference/qwen3_model): tiny shapes, 2 layers, requests of different prompt lengths,
at least 32 generated tokens each. Emulated (no GPU), the logits of every step and layer 0's output
are compared too (model_check.py). The smallest argmax margin is printed (`-s`) and recorded."""

from __future__ import annotations

import pytest

from mpk_runtime.models import PRESETS, Qwen3Config, random_state_dict

from .model_check import check_generation

TINY = PRESETS["tiny"]
PROMPTS = [
    [5, 17, 200, 3, 9],
    [400, 22, 31, 8, 77, 1, 64, 90, 11],
    [7, 300, 45],
    [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23],
]
# Passed through to the kernel from the plugin's parameters for this arch and backend.
RUNTIME_KEYS = ("target_cc", "watchdog_timeout", "num_workers", "num_local_schedulers", "emulate", "compile_only")


def runtime_params(mpk_params) -> dict:
    if mpk_params.get("compile_only"):
        pytest.skip("decoding needs the GPU or the emulator; this run only compiles")
    return {k: mpk_params[k] for k in RUNTIME_KEYS if k in mpk_params}


def test_dense_model_decodes_like_the_reference(mpk_params, record_property):
    config = Qwen3Config(**TINY)
    weights = random_state_dict(config, seed=0, residual_scale=1.0, lm_head_peak=1.0)
    # 8 token rows: the prompts prefill in chunks over the first iterations, then 4 decodes each.
    # atol 0.05: about three bf16 steps at the logits' size (the real bodies accumulate in another
    # order than the reference); the margin check below keeps the tokens' agreement meaningful.
    report = check_generation(config, weights, PROMPTS, 32, atol=5e-2, max_batch_tokens=8, **runtime_params(mpk_params))
    record_property("min_argmax_margin", report.min_margin)
    print(f"\ndense: smallest argmax margin {report.min_margin:.4f}, largest logit error {report.max_logit_err:.4f} "
          f"over {report.steps_compared} steps")  # fmt: skip
    assert all(len(t) == 32 for t in report.tokens)


def test_moe_model_with_tied_embeddings(mpk_params, record_property):
    config = Qwen3Config(**TINY, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, tie_word_embeddings=True)
    weights = random_state_dict(config, seed=1, residual_scale=1.0)
    report = check_generation(config, weights, PROMPTS[:2], 32, atol=5e-2, **runtime_params(mpk_params))
    record_property("min_argmax_margin", report.min_margin)
    print(f"\nmoe: smallest argmax margin {report.min_margin:.4f}, largest logit error {report.max_logit_err:.4f}")
