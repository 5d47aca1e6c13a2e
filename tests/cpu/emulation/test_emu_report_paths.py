"""Source paths in the emulator's reports: a user's task header is included as tasks/<its path
relative to csrc/tasks>, so the build names it from the checkout (csrc/tasks/../../../tmp/x.cuh);
reports name it as a reader would write it."""

from __future__ import annotations

from mpk_runtime.build import host
from mpk_runtime.run.host_runner import tidy_paths


def test_a_path_out_of_the_checkout_is_absolute() -> None:
    climbs = "../" * (2 + len(host.REPO.parts))  # from csrc/tasks up to the filesystem's root (and past: it stays)
    report = f"hang in task 1: threads 0-255 spin at __nanosleep at csrc/tasks/{climbs}tmp/probe/x.cuh:32 and nothing"
    assert tidy_paths(report) == "hang in task 1: threads 0-255 spin at __nanosleep at /tmp/probe/x.cuh:32 and nothing"


def test_a_path_inside_it_stays_relative_and_others_are_left_alone() -> None:
    report = "at csrc/tasks/../../tests/cpu/emulation/faulty.cuh:12 (inlined at tests/cpu/emulation/faulty.cuh:40)"
    assert tidy_paths(report) == "at tests/cpu/emulation/faulty.cuh:12 (inlined at tests/cpu/emulation/faulty.cuh:40)"
