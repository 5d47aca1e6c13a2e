"""Warp jitter (KernelParams warp_jitter=True, which the test harness sets for every scene case):
after each barrier a warp now and then sleeps, so a body that lacks a barrier gives wrong results on
the GPU in most runs instead of now and then, and a correct body still gives the right ones."""

from __future__ import annotations

import pytest
import sanitize_demo_scenes  # registers the demo tasks of sanitize_demos.cuh (racy, copy, ...)
import torch

TASKS = 128  # one 64-word row each


def run_demo(make_pk, body: str, target_cc: int, jitter: bool) -> int:
    """Rows whose copy came out wrong, of a graph of TASKS tasks of the demo ``body``."""
    pk = make_pk(target_cc=target_cc, warp_jitter=jitter)
    x = torch.randint(1, 1000, (TASKS, sanitize_demo_scenes.COLS), dtype=torch.int32, device="cuda")
    y = torch.zeros_like(x)
    layer = getattr(pk, f"sanitize_demo_{body}_layer")
    layer(x=pk.attach_input(x, "x"), y=pk.attach_input(y, "y"), grid_dim=(TASKS, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    pk()
    pk.synchronize()
    return int((y != x).any(dim=1).sum())


@pytest.mark.parametrize("target_cc", [80, 90])
def test_a_missing_barrier_gives_wrong_rows_under_jitter(make_pk, target_cc):
    """The racy demo reads a word another warp writes with no barrier between: jittered, a warp
    that sleeps after the previous barrier writes late, and its neighbour reads the old word."""
    plain = run_demo(make_pk, "racy", target_cc, jitter=False)
    jittered = run_demo(make_pk, "racy", target_cc, jitter=True)
    print(f"sm{target_cc}: rows wrong without jitter {plain} of {TASKS}, with jitter {jittered} of {TASKS}")
    assert jittered > 0


@pytest.mark.parametrize("target_cc", [80, 90])
def test_a_correct_body_is_right_under_jitter(make_pk, target_cc):
    assert run_demo(make_pk, "copy", target_cc, jitter=True) == 0
