"""Whole models built from the registered layers: a Qwen3-style decoder (dense or MoE) in one task
graph, from a config and a Hugging Face-named state_dict, and greedy decoding with it.

    PRESETS               named model shapes (Qwen3Config keyword arguments): qwen3-0.6b, tiny
    Qwen3Config           the model's shape (``Qwen3Config.from_hf(hf_config)`` reads a HF config)
    build_qwen3           declare the whole model on a PersistentKernel
    Qwen3Generator        a kernel that decodes a batch of prompts greedily, in one launch
    random_state_dict     seeded random weights in Hugging Face naming
    expected_weights      every weight name the config needs, with its shape
"""

from __future__ import annotations

from .config import PRESETS, Qwen3Config, expected_weights
from .generate import Qwen3Generator, generation_params
from .grids import Qwen3Grids
from .qwen3 import Qwen3Graph, build_qwen3
from .random_weights import random_state_dict

__all__ = [
    "PRESETS",
    "Qwen3Config",
    "Qwen3Generator",
    "Qwen3Graph",
    "Qwen3Grids",
    "build_qwen3",
    "expected_weights",
    "generation_params",
    "random_state_dict",
]
