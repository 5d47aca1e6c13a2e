"""The injected-bug campaign's list (bench/mutations.py) stays in step with csrc and the scenes: every
`old` text occurs exactly once in its header, ids are unique, selected scene files and classes exist.
Fast: reads files only (the campaign itself is bench/bug_campaign.py)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # bug_campaign imports `mutations` by name
    spec.loader.exec_module(module)
    return module


mutations = _load("mutations")
campaign = _load("bug_campaign")


def test_the_list_fits_the_current_tree():
    assert campaign.problems(mutations.MUTATIONS, ROOT) == []


def test_the_list_is_large_and_spread_over_the_code():
    ms = mutations.MUTATIONS
    assert len(ms) >= 30
    files = {m.file for m in ms}
    assert {"runtime/scheduler.cuh", "runtime/worker.cuh", "runtime/prepare_next_batch.cuh"} <= files
    assert {p.relative_to(ROOT / "csrc").as_posix() for p in (ROOT / "csrc/tasks/common").glob("*.cuh")} - files <= {
        "tasks/common/noop.cuh",
        "tasks/common/allreduce.cuh",  # multi-rank: not in a single-rank campaign
        "tasks/common/allgather.cuh",
    }
    # the emulator runs everything but the persistent kernel's schedulers and workers
    assert {m.file for m in ms if m.gpu_only} <= {"runtime/scheduler.cuh", "runtime/worker.cuh"}
    assert all(m.gpu_only for m in ms if m.file in ("runtime/scheduler.cuh", "runtime/worker.cuh"))


def test_problems_names_a_stale_or_ambiguous_mutation():
    good = mutations.MUTATIONS[0]
    stale = mutations.Mutation("x-gone", "k", "d", good.file, "no such text", "y", good.selection)
    twice = mutations.Mutation("x-twice", "k", "d", "primitives/warp.cuh", "SumOp", "S", ("tests/scenes/nope.py",))
    found = campaign.problems([good, good, stale, twice], ROOT)
    assert f"duplicate id {good.id}" in found
    assert any("x-gone: its `old` text occurs 0 times" in p for p in found)
    assert any("x-twice: its `old` text occurs" in p and "not exactly once" in p for p in found)
    assert any("x-twice: selected scene file tests/scenes/nope.py does not exist" in p for p in found)


def test_apply_patches_a_copy_and_refuses_an_ambiguous_text(tmp_path):
    m = mutations.MUTATIONS[0]
    csrc = tmp_path / "csrc"
    (csrc / m.file).parent.mkdir(parents=True)
    shutil.copy(ROOT / "csrc" / m.file, csrc / m.file)
    campaign.apply(m, csrc)
    text = (csrc / m.file).read_text()
    assert m.new in text and text.count(m.old) == 0
    with pytest.raises(campaign.MutationError, match=f"mutation {m.id}: csrc/{m.file} holds its `old` text 0 times"):
        campaign.apply(m, csrc)


def test_outcomes_from_pytest_output():
    failed = "FAILED [emulated (CUDA bodies on the CPU)] tests/scenes/a/test_a.py::TestA::b1[sm90]\n"
    report = "=== FAILURES ===\n___ TestA::b1[sm90] ___\n[gw0] linux -- Python\n"
    report += "output 'y' differs from the golden\n--- Captured ---\n"
    assert campaign.classify(1, report + failed) == ("caught", "test_a.py::TestA::b1[sm90]: output 'y' differs from the golden")
    xdist = report + failed + "!!! stopping after 1 failures !!!\n"
    assert campaign.classify(2, xdist)[0] == "caught"
    assert campaign.classify(0, "3 passed")[0] == "missed"
    assert campaign.classify(1, report + failed + "mpk_runtime.errors.BuildError: nvcc failed")[0] == "invalid"
    assert campaign.classify(2, "ERROR collecting")[0] == "invalid"
    assert campaign.classify(4, "usage")[0] == "invalid"
