"""Scene mistakes and bad settings, each with a message that names what is wrong: tolerances that
are not finite numbers >= 0, goldens that are not a tensor of the output's shape and kind, arguments
that are not tensors, ini values checked as their options are, an artifacts directory that cannot
be written, and a build cache entry that was rebuilt (shown in the case's report)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from cpu_helpers import cache_without_modules

from pytest_mpk import Case
from pytest_mpk.compare import check

HEADER = """
import torch
from pytest_mpk import Case, Out, scene_test
from scenes import NormScene
"""


def scene(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_scene=HEADER + textwrap.dedent(body))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rtol": float("inf")}, "Case 'b2': rtol=inf must be a finite number >= 0 (or None for the dtype's default)"),
        ({"atol": -1e-3}, "Case 'b2': atol=-0.001 must be a finite number >= 0 (or None for the dtype's default)"),
        ({"rtol": float("nan")}, "Case 'b2': rtol=nan must be a finite number >= 0 (or None for the dtype's default)"),
        ({"atol": "0.1"}, "Case 'b2': atol='0.1' must be a finite number >= 0 (or None for the dtype's default)"),
        ({"tolerances": {"output": (1e-3, float("inf"))}}, "Case 'b2', output 'output': atol=inf must be a finite number >= 0"),
        ({"tolerances": {"output": 1e-3}}, "Case 'b2': tolerances['output']=0.001 must be a pair (rtol, atol)"),
    ],
)
def test_tolerances_are_finite_and_not_negative(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        Case("b2", batch=2, **kwargs)
    assert str(e.value).startswith(message)


def test_an_infinite_tolerance_is_refused_when_the_scene_is_collected(pytester: pytest.Pytester, scenes) -> None:
    scene(
        pytester,
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256, rtol=float("inf"))]

            def compute_golden(self, args, params):
                return 2 * args.input  # 2x wrong: an infinite rtol would pass it
        """,
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ValueError: Case 'b2': rtol=inf must be a finite number >= 0*"])


def test_compare_check_refuses_a_bad_tolerance() -> None:
    with pytest.raises(ValueError, match=r"^output 'out': rtol=inf must be a finite number >= 0"):
        check("out", torch.ones(2), 2 * torch.ones(2), rtol=float("inf"))


GOLDENS = {
    "a float": ("return 1.5", "TestNorm.compute_golden: the golden of output 'output' is 1.5 (float), not a torch.Tensor"),
    "None": ("return None", "TestNorm.compute_golden: the golden of output 'output' is None (NoneType), not a torch.Tensor"),
    "a list of the wrong length": (
        "return [args.input, args.input]",
        "TestNorm.compute_golden: returned 2 values for 1 outputs ['output']",
    ),
    "the wrong shape": (
        "return args.input[:1]",
        "TestNorm.compute_golden: the golden of output 'output' has shape (1, 256), but the output has (2, 256)",
    ),
    "a stray key": (
        'return {"output": args.input, "outptu": args.input}',
        "TestNorm.compute_golden: returned ['outptu'], which is not an output; return {name: tensor} for the outputs ['output']",
    ),
    "a key that is not the output": (
        'return {"out": args.input}',
        "TestNorm.compute_golden: returned ['out'], which is not an output (and no value for ['output']); return "
        "{name: tensor} for the outputs ['output']",
    ),
    "the wrong kind of dtype": (
        "return args.input.to(torch.int64)",
        "TestNorm.compute_golden: the golden of output 'output' is int64 (integer), but the output is float32 (floating point)",
    ),
}


@pytest.mark.parametrize("golden", GOLDENS, ids=list(GOLDENS))
def test_a_golden_of_the_wrong_type_names_the_scene_and_output(pytester: pytest.Pytester, scenes, golden: str) -> None:
    body, message = GOLDENS[golden]
    scene(
        pytester,
        f"""
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256, obj=object())]  # a param that is not JSON: the repro is the node id

            def compute_golden(self, args, params):
                {body}
        """,
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message, "params: {'batch': 2, 'hidden': 256, 'obj': <object object at *>}", "repro: pytest *"])
    assert "Traceback" not in result.stdout.str() and "AttributeError" not in result.stdout.str()


def test_an_argument_that_is_not_a_tensor(pytester: pytest.Pytester, scenes) -> None:
    scene(
        pytester,
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                return {"input": torch.randn(2, 256), "weight": 3, "output": Out(torch.empty(2, 256))}
        """,
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "SceneError: TestNorm.generate_args: argument 'weight' is 3 (int), not a torch.Tensor; every argument is a tensor, "
            "outputs wrapped in Out or InOut"
        ]
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "mpk_hang_timeout=abc",
            "ini option mpk_hang_timeout = 'abc': expected a positive number of seconds, got 'abc' (as --mpk-hang-timeout)",
        ),
        (
            "mpk_hang_timeout=0",
            "ini option mpk_hang_timeout = '0': expected a positive number of seconds, got '0' (as --mpk-hang-timeout)",
        ),
        ("mpk_arch=sm75", "ini option mpk_arch = 'sm75': expected one of sm80, sm90, sm100, auto, got 'sm75' (as --arch)"),
        (
            "mpk_backend=fast",
            "ini option mpk_backend = 'fast': expected one of auto, gpu, emulate, emulate-ref, compile-only, "
            "got 'fast' (as --mpk-backend)",
        ),
    ],
)
def test_ini_values_are_checked_as_their_options(pytester: pytest.Pytester, scenes, setting: str, message: str) -> None:
    scene(pytester, "")
    result = pytester.runpytest_inprocess("-o", setting)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_an_artifacts_directory_that_cannot_be_made(pytester: pytest.Pytester, scenes) -> None:
    scene(pytester, "")
    pytester.path.joinpath("taken").write_text("a file")
    result = pytester.runpytest_inprocess("--mpk-artifacts-dir", "taken/sub")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --mpk-artifacts-dir */taken/sub: */taken is a file, not a directory; choose another directory"]
    )


@pytest.mark.parametrize("damaged", ["module", "host module"])  # the host module's rebuild had gone to the log only
def test_a_rebuilt_cache_entry_is_noted_in_the_report(pytester: pytest.Pytester, scenes, monkeypatch, tmp_path, damaged) -> None:
    scene(
        pytester,
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
        """,
    )
    result = pytester.runpytest_inprocess("-rA")
    name = next(line.split(": ")[1] for line in result.stdout.lines if line.startswith("module from the cache: "))
    shared = Path(os.environ["MPK_CACHE_DIR"])
    # The damaged entry, beside sound copies of the other builds the case needs (the nvcc module, the
    # emulator's shared builds, the module's host build): only the damaged entry is rebuilt.
    private = cache_without_modules(tmp_path / "private", shared)
    stem = name.rsplit("-", 3)[0]  # <stem>-sm90-cubin-<key>: an emulated case builds the device code only
    for entry in [shared / "modules" / name, *(shared / "modules").glob(f"{glob.escape(stem)}-host-*")]:
        if entry.is_dir():
            shutil.copytree(entry, private / "modules" / entry.name)
    if damaged == "host module":
        name = next(line.split(": ")[1] for line in result.stdout.lines if line.startswith("host module "))
    (private / "modules" / name / "build.json").write_text(json.dumps(None))
    monkeypatch.setenv("MPK_CACHE_DIR", str(private))
    result = pytester.runpytest_inprocess("-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"{damaged} built: {name}", f"build cache: rebuilt {name}: build.json holds null, not an object"]
    )


def test_an_empty_artifacts_dir_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """--mpk-artifacts-dir= (a variable that was not set, say) had meant the default directory."""
    result = pytester.runpytest_inprocess("--mpk-artifacts-dir=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --mpk-artifacts-dir: expected a directory, got an empty value"])
