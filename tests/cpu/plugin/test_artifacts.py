"""A case's artifact directory: what a failure keeps there (inputs, actual and expected outputs,
the generated sources, the repro line), that a pass leaves nothing unless --mpk-keep-artifacts,
where it lives, and that the repro line reruns the failing item alone."""

from __future__ import annotations

import glob
import json
import shlex

import pytest
import torch

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("good", batch=2, hidden=256, off=0.0), Case("bad", batch=2, hidden=256, off=1.0),
             Case("worse", batch=2, hidden=256, off=2.0)]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight) + params["off"]
"""
SOURCES = {"test_rank0.cu", "task_graph_rank0.json", "signature_rank0.json"}


def case_dir(pytester: pytest.Pytester, case: str, root: str = ".mpk-artifacts"):
    return pytester.path / root / f"test_scene.py_TestNorm_{case}_sm90"


def test_failure_keeps_what_reproduces_it(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-k", "good or bad")
    result.assert_outcomes(passed=1, failed=1)

    assert not case_dir(pytester, "good").exists()
    kept = case_dir(pytester, "bad")
    assert {p.name for p in kept.iterdir()} == SOURCES | {"inputs.pt", "actual.pt", "expected.pt", "repro.txt"}
    inputs, actual, expected = (torch.load(kept / f) for f in ("inputs.pt", "actual.pt", "expected.pt"))
    assert sorted(inputs) == ["input", "output", "weight"] and sorted(actual) == sorted(expected) == ["output"]
    # The kernel computed rmsnorm of the saved inputs; the (wrong) golden is 1 more.
    torch.testing.assert_close(actual["output"] + 1.0, expected["output"])
    signature = json.loads((kept / "signature_rank0.json").read_text())
    assert [(t["name"], t["shape"], t["direction"]) for t in signature["tensors"]] == [
        ("input", [2, 256], "IN"),
        ("weight", [256], "IN"),
        ("output", [2, 256], "OUT"),
    ]
    repro = (kept / "repro.txt").read_text().strip()
    result.stdout.fnmatch_lines([f"artifacts: {glob.escape(str(kept))} (*", f"repro: {glob.escape(repro)}"])


def test_keep_artifacts_keeps_the_sources_of_passing_cases(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess("-k", "good", "--mpk-keep-artifacts").assert_outcomes(passed=1)
    assert {p.name for p in case_dir(pytester, "good").iterdir()} == SOURCES


def test_a_rerun_starts_from_an_empty_directory(pytester: pytest.Pytester, scenes) -> None:
    """What a failure left is removed when the case passes the next time."""
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess("-k", "bad").assert_outcomes(failed=1)
    assert case_dir(pytester, "bad").is_dir()
    pytester.makepyfile(test_scene=SCENE.replace("off=1.0", "off=0.0"))
    pytester.runpytest_inprocess("-k", "bad").assert_outcomes(passed=1)
    assert not case_dir(pytester, "bad").exists()


@pytest.mark.parametrize("how", ["option", "ini", "absolute"])
def test_where_artifacts_go(pytester: pytest.Pytester, scenes, how: str) -> None:
    pytester.makepyfile(test_scene=SCENE)
    args = ["-k", "bad"]
    root = "out/mpk"
    if how == "option":
        args += ["--mpk-artifacts-dir", root]
    elif how == "ini":
        pytester.makeini(f"[pytest]\nmpk_artifacts_dir = {root}\n")
    else:
        root = str(pytester.path / "abs")
        args += ["--mpk-artifacts-dir", root]
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(failed=1)
    assert (case_dir(pytester, "bad", root) / "repro.txt").is_file()
    assert not (pytester.path / ".mpk-artifacts").exists()


def test_repro_line_reruns_the_failing_item_alone(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess("--arch", "sm90", "--mpk-backend", "emulate").assert_outcomes(passed=1, failed=2)
    repro = (case_dir(pytester, "worse") / "repro.txt").read_text().strip()
    assert repro == "pytest 'test_scene.py::TestNorm::worse[sm90]' -p mpk --arch sm90 --mpk-backend emulate"

    command, *args = shlex.split(repro)
    assert command == "pytest"
    result = pytester.runpytest_inprocess(*args, "-v")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*collected 1 item", "test_scene.py::TestNorm::worse[[]sm90[]] FAILED*", f"repro: {glob.escape(repro)}"]
    )


def test_repro_line_keeps_no_warp_jitter(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--arch", "sm90", "--mpk-backend", "emulate", "--mpk-no-warp-jitter")
    result.assert_outcomes(passed=1, failed=2)
    repro = (case_dir(pytester, "worse") / "repro.txt").read_text().strip()
    assert repro.endswith("--mpk-backend emulate --mpk-no-warp-jitter")


def test_repro_line_of_a_manual_case_selects_it(pytester: pytest.Pytester, scenes) -> None:
    """A manual case runs only when picked with --mpk-case, so its repro line picks it."""
    pytester.makepyfile(test_scene=SCENE.replace("off=2.0)", "off=2.0, manual=True)"))
    pytester.runpytest_inprocess("--mpk-case", "TestNorm::worse").assert_outcomes(failed=1)
    repro = (case_dir(pytester, "worse") / "repro.txt").read_text().strip()
    pytester.runpytest_inprocess(*shlex.split(repro)[1:]).assert_outcomes(failed=1)


def test_a_fault_that_took_the_outputs_leaves_the_rest(tmp_path) -> None:
    """After a kernel fault the outputs cannot be copied from the GPU: the failure keeps the inputs
    and the sources, and its message lists only the files that exist."""
    from pytest_mpk.runner import Setup, _failure_text, _save_failure

    class LostOnTheGpu:
        def detach(self):
            return self

        def cpu(self):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    (tmp_path / "test_rank0.cu").write_text("// generated")
    setup = Setup(
        arch="sm90", backend="gpu", artifacts=tmp_path, keep_artifacts=False, hang_timeout=5.0, repro="pytest 'x.py::T::c[sm90]'"
    )
    saved = _save_failure(setup, {"input": torch.ones(2)}, {"output": LostOnTheGpu()}, ["output"], None)
    assert saved == ["inputs.pt", "test_rank0.cu"]
    assert _failure_text(RuntimeError("kernel fault"), setup, {"batch": 2}, saved).splitlines()[3] == (
        f"artifacts: {tmp_path} (inputs.pt, test_rank0.cu)"
    )


def test_two_items_never_share_an_artifacts_directory() -> None:
    """A path's / had become _ (so a/test_x.py and a_test_x.py shared one), and a long id was cut at
    150 characters (so its cases and archs shared one): each run deleted the other's files."""
    from pytest_mpk.items import _safe

    assert _safe("test_scene.py::TestNorm::b2[sm90]") == "test_scene.py_TestNorm_b2_sm90"  # readable as before
    assert _safe("a/test_x.py::T::b2[sm90]") != _safe("a_test_x.py::T::b2[sm90]")
    long = "tests/" + "d" * 140 + "/test_x.py::TestLong::b2"
    named = {_safe(f"{long}[{arch}]") for arch in ("sm80", "sm90")}
    assert len(named) == 2 and all(len(n) <= 150 for n in named)
    assert _safe("x.py::T::sweep[sm90] x=1") != _safe("x.py::T::sweep[sm90] x_1")


def test_repro_line_names_the_file_from_where_pytest_ran(pytester: pytest.Pytester, scenes, monkeypatch) -> None:
    """``--mpk-artifacts-dir DIR`` as two arguments, DIR existing: pytest takes DIR for a path, and the
    rootdir moves up to hold both. The repro had named the file from that rootdir
    ('sub/test_scene.py'), which does not exist from where pytest ran."""
    pytester.syspathinsert()  # scenes.py, from sub/
    sub = pytester.mkdir("sub")
    (sub / "test_scene.py").write_text(SCENE)
    art = pytester.mkdir("art")
    monkeypatch.chdir(sub)
    result = pytester.runpytest_inprocess("-k", "worse", "--arch", "sm90", "--mpk-artifacts-dir", str(art))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"rootdir: {glob.escape(str(pytester.path))}"])
    (kept,) = art.glob("*worse*")
    repro = (kept / "repro.txt").read_text().strip()
    assert repro.startswith("pytest 'test_scene.py::TestNorm::worse[sm90]' -p mpk --arch sm90")
    pytester.runpytest_inprocess(*shlex.split(repro)[1:]).assert_outcomes(failed=1)
