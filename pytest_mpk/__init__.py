"""pytest-mpk: scene tests for megakernel layers. See README.md."""

from __future__ import annotations

from .batches import active_tokens, batch_params, requests
from .scene import Case, Expected, InOut, Out, PerRank, SceneTestCase, first_batch_meta, model_batches, scene_test

__all__ = [
    "Case",
    "Expected",
    "InOut",
    "Out",
    "PerRank",
    "SceneTestCase",
    "active_tokens",
    "batch_params",
    "first_batch_meta",
    "model_batches",
    "requests",
    "scene_test",
]
