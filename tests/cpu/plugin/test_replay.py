"""Replaying a compile output directory (a case's artifacts kept with --mpk-keep-artifacts): with no
scene at all (``pytest -p mpk DIR``), or with the scene's inputs and golden (``--mpk-replay DIR``);
an edited test_rank0.cu is rebuilt, and inputs that do not fit the saved signature are refused."""

from __future__ import annotations

import glob
import shutil
import uuid

import pytest
from replay_scene import FILES, SCENE, kept_case


def test_directory_replays_with_no_scene(pytester: pytest.Pytester, scenes) -> None:
    """Inputs from the signature, golden from a second emulated run: neither the scene file nor its
    folder is needed."""
    saved = shutil.copytree(kept_case(pytester), pytester.path / "saved")
    for scene_file in ("test_scene.py", "scenes.py"):
        (pytester.path / scene_file).unlink()
    result = pytester.runpytest_inprocess("-p", "mpk", "saved", "-v", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "saved/signature_rank0.json::replay[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "*_ replay of " + glob.escape(str(saved)) + " _*",
            "module from the cache: *",
            "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
        ]
    )

    result = pytester.runpytest_inprocess("-p", "mpk", "saved", "-v", "--mpk-backend", "compile-only")
    result.stdout.fnmatch_lines(["saved/signature_rank0.json::replay[[]sm90[]] PASSED [[]compiled[]]*"])


def test_mpk_replay_runs_the_scene_against_the_directory(pytester: pytest.Pytester, scenes) -> None:
    kept = kept_case(pytester)
    result = pytester.runpytest_inprocess("--mpk-replay", str(kept), "--mpk-case", "TestNorm::b2", "-v", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::b2[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            f"replayed {glob.escape(str(kept))}",
            "module from the cache: *",
        ]
    )
    assert sorted(p.name for p in kept.iterdir()) == FILES  # the replayed directory is left as it was


def test_an_unedited_harness_source_replays_on_the_slice_references(pytester: pytest.Pytester, scenes) -> None:
    """The harness builds with warp jitter, a define the source carries: an unedited kept source had
    been compared with one generated without it, and refused as edited by hand."""
    kept = kept_case(pytester)
    assert "#define MPK_WARP_JITTER 1" in (kept / "test_rank0.cu").read_text()
    args = ["--mpk-replay", str(kept), "--mpk-case", "TestNorm::b2", "--mpk-backend", "emulate-ref"]
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)


def test_edited_source_is_rebuilt_and_refused_by_the_slice_references(pytester: pytest.Pytester, scenes) -> None:
    """An edited test_rank0.cu is rebuilt and run (the CUDA bodies on the CPU here); the slice-reference
    backend, which runs no CUDA code, refuses it; compile-only builds it once."""
    kept = kept_case(pytester)
    source = kept / "test_rank0.cu"
    edit = f"// edited by {uuid.uuid4().hex}\n"  # a source no other test, nor an earlier run, builds
    source.write_text(source.read_text() + edit)
    edited = (
        f"{glob.escape(str(source))} is not the source its task graph generates (edited by hand, or written by another version"
    )

    result = pytester.runpytest_inprocess("--mpk-replay", str(kept), "--mpk-case", "TestNorm::b2", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["replayed *", "module built: *"])
    assert source.read_text().endswith(edit)

    args = ["--mpk-replay", str(kept), "--mpk-case", "TestNorm::b2", "--mpk-backend", "emulate-ref"]
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"{edited}*The slice-reference emulator runs*"])

    result = pytester.runpytest_inprocess("-p", "mpk", str(kept), "-rA", "--mpk-backend", "compile-only")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["module from the cache: *"])  # the edited source, built once


@pytest.mark.parametrize(
    "edit,failure",
    [
        # the task call deleted: nothing writes the output, which keeps its poison
        (("mpk::tasks::rmsnorm<float, 1, 256>(task, rt);", ""), "output 'output' (float32, shape (2, 256)) differs *512 of 512*"),
        # a constant changed: rows of 255 elements (another mean, and each row's last element unwritten)
        (("mpk::tasks::rmsnorm<float, 1, 256>", "mpk::tasks::rmsnorm<float, 1, 255>"), "output 'output' * differs *"),
    ],
    ids=["call_deleted", "constant_changed"],
)
def test_edited_source_runs_on_the_cpu(pytester: pytest.Pytester, scenes, edit, failure) -> None:
    """Without a GPU the edited test_rank0.cu is built for the host and its bodies run: the edit shows,
    against the scene's golden and, with no scene, against the slice references."""
    kept = kept_case(pytester)
    source = kept / "test_rank0.cu"
    old, new = edit
    assert source.read_text().count(old) == 1
    source.write_text(source.read_text().replace(old, new))

    result = pytester.runpytest_inprocess("--mpk-replay", str(kept), "--mpk-case", "TestNorm::b2", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([failure, "backend: emulated (CUDA bodies on the CPU) (sm90)"])

    result = pytester.runpytest_inprocess("-p", "mpk", str(kept), "-v")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*signature_rank0.json::replay[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
            # as a scene case's report ends (they had been missing with no scene)
            "backend: emulated (CUDA bodies on the CPU) (sm90)",
            "golden: the emulator running the same task graph with each task's slice reference, on the same inputs",
            f"repro: pytest -p mpk {kept} --arch sm90",
        ]
    )


def test_scene_that_does_not_fit_the_signature_is_refused(pytester: pytest.Pytester, scenes) -> None:
    kept = kept_case(pytester)
    result = pytester.runpytest_inprocess("--mpk-replay", str(kept), "--mpk-case", "TestNorm::wide")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"ShapeError: replay of {glob.escape(str(kept))}: tensor 'input' must be fp32 (2, 256), got fp32 (2, 512)"]
    )


def test_replay_of_a_directory_without_compile_output(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    empty = pytester.mkdir("empty")
    result = pytester.runpytest_inprocess("--mpk-replay", str(empty), "--mpk-case", "TestNorm::b2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"GraphError: {glob.escape(str(empty))} is not a compile output directory of rank 0: missing *test_rank0.cu*"]
    )


@pytest.mark.parametrize("where", ["no/such/dir", "a_file"])
def test_a_replay_path_that_is_no_directory_is_a_usage_error(pytester: pytest.Pytester, scenes, where) -> None:
    """It had failed every selected case with the same error, as a bad --mpk-artifacts-dir had not."""
    pytester.makepyfile(test_scene=SCENE)
    (pytester.path / "a_file").write_text("")
    result = pytester.runpytest_inprocess("--mpk-replay", where, "--mpk-case", "TestNorm::b2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    what = "does not exist" if "/" in where else "is not a directory"
    result.stderr.fnmatch_lines([f"ERROR: --mpk-replay {where}: * {what}; *"])


TWO_HOPS = """
import torch
from pytest_mpk import Case, scene_test
from scenes import ProbeScene

@scene_test(layer="probe")
class TestTwoHops(ProbeScene):
    '''x -> mid (an intermediate the runtime owns) -> y, one probe layer each.'''

    CASES = [Case("b2", batch=2)]

    def build(self, pk, t, params):
        grid = (params["batch"], 1, 1)
        mid = pk.new_tensor((params["batch"], 4), torch.int32, "mid")
        pk.noop_layer(inputs=[t.x], outputs=[mid], grid_dim=grid, block_dim=pk.block_dim, probe=True)
        pk.noop_layer(inputs=[mid], outputs=[t.y], grid_dim=grid, block_dim=pk.block_dim, probe=True)

    def compute_golden(self, args, params):
        return args.x.amax(dim=1, keepdim=True).expand_as(args.x) + 2
"""


def test_a_scene_with_intermediates_replays(pytester: pytest.Pytester, scenes) -> None:
    """The replay allocates the intermediates the signature lists (the scene attaches only x and y)."""
    pytester.makepyfile(test_scene=TWO_HOPS)
    pytester.runpytest_inprocess("--mpk-keep-artifacts").assert_outcomes(passed=1)
    kept = pytester.path / ".mpk-artifacts" / "test_scene.py_TestTwoHops_b2_sm90"
    signature = (kept / "signature_rank0.json").read_text()
    assert '"mid"' in signature and '"intermediate"' in signature

    result = pytester.runpytest_inprocess("--mpk-replay", str(kept), "--mpk-case", "TestTwoHops::b2", "-v", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_scene.py::TestTwoHops::b2[[]sm90[]] PASSED*", f"replayed {glob.escape(str(kept))}"])

    result = pytester.runpytest_inprocess("-p", "mpk", str(kept), "-v")  # with no scene: inputs from the signature
    result.assert_outcomes(passed=1)
