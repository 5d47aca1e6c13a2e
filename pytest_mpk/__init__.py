"""pytest-mpk: scene tests for megakernel layers. See README.md."""

from __future__ import annotations

from .scene import Case, Expected, InOut, Out, PerRank, SceneTestCase, active_tokens, first_batch_meta, model_batches, scene_test

__all__ = [
    "Case",
    "Expected",
    "InOut",
    "Out",
    "PerRank",
    "SceneTestCase",
    "active_tokens",
    "first_batch_meta",
    "model_batches",
    "scene_test",
]
