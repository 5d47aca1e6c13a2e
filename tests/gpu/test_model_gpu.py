"""A Qwen3-0.6B-shaped model (hidden 1024, intermediate 3072, 16 q / 8 kv heads of 128, vocab 151936,
bf16) with 2 layers, in one megakernel on the GPU: greedy decoding of 4 requests of different prompt
lengths (prefilled in chunks of 16 tokens), 32+ tokens each, token for token against the PyTorch
reference (reference/qwen3_model, run on the GPU), and the last step's logits compared. The weights
are random with a peaked lm head (random_state_dict(lm_head_peak=...)), so argmax margins stay far
above bf16 noise; the smallest margin is printed (run with -s). tests/scenes/qwen3_model runs the
same check at tiny shapes (there, emulated, every step's logits are compared)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mpk_runtime.models import PRESETS, Qwen3Config, random_state_dict

sys.path.insert(0, str(Path(__file__).parents[1] / "scenes" / "qwen3_model"))
from model_check import check_generation  # noqa: E402

QWEN3_06B_2L = Qwen3Config(**{**PRESETS["qwen3-0.6b"], "num_hidden_layers": 2, "tie_word_embeddings": False})
PROMPTS = [list(range(100, 107)), list(range(5000, 5019)), list(range(70000, 70033)), list(range(151000, 151012))]


@pytest.mark.parametrize("cc", [90, 80], ids=["sm90", "sm80"])
def test_qwen3_06b_shapes_two_layers_decode_like_the_reference(cc):
    if cc == 90 and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the sm90a build needs a Hopper GPU")
    weights = random_state_dict(QWEN3_06B_2L, seed=0, residual_scale=1.0, lm_head_peak=0.5)
    report = check_generation(QWEN3_06B_2L, weights, PROMPTS, 32, atol=0.1, target_cc=cc)
    print(
        f"\nQwen3-0.6B shapes, 2 layers, sm{cc}: {sum(map(len, report.tokens))} tokens equal; smallest argmax "
        f"margin {report.min_margin:.3f}, last-step logit error {report.max_logit_err:.3f}"
    )
