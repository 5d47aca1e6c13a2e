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


def test_a_host_module_names_its_cache_entry_not_the_directory_it_was_built_in() -> None:
    """Reports name the generated dispatcher ("inlined at <...>/source.cpp:37"): the module's debug
    lines point at source.cpp in its cache entry, which stays, not at the build directory, which goes."""
    from emu_helpers import ARCH, HERE, kernels_source

    # A source of its own: no entry built before the build named its entry has this key.
    result = host.build_host_module(kernels_source() + "\n// entry paths\n", ARCH, "emu_paths_probe", include_dirs=[HERE])
    image = result.path.read_bytes()
    assert str(result.entry / "source.cpp").encode() in image
    assert b"/.tmp-" not in image
    assert (result.entry / "source.cpp").is_file()
