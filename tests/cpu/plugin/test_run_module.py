"""``SceneTestCase.run_module(__name__)``: a scene file run as a script (``python test_x.py``) is
run by pytest with the mpk plugin and the script's arguments, and exits with pytest's status.

The scripts run in children of the fork server (forked_pytest), as ``__main__``;
test_plugin_usage.py runs one in a fresh interpreter."""

from __future__ import annotations

import pytest
from forked_pytest import run_script_forked

SCENE = """
from pytest_mpk import Case, SceneTestCase, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("good", batch=2, hidden=256, off=0.0), Case("bad", batch=2, hidden=256, off=1.0)]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight) + params["off"]

if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
"""


@pytest.mark.parametrize(
    ("case", "status", "lines"),
    [
        (
            "good",
            0,
            [
                "test_scene.py::TestNorm::good[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
                "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
                "*1 passed, 1 deselected*",
            ],
        ),
        (
            "bad",
            1,
            [
                "test_scene.py::TestNorm::bad[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
                "output 'output' (float32, shape (2, 256)) differs from the golden*",
                "repro: pytest 'test_scene.py::TestNorm::bad[[]sm90[]]' -p mpk --arch sm90 --mpk-backend auto",
                "*1 failed, 1 deselected*",
            ],
        ),
    ],
)
def test_script_runs_the_selected_case(pytester: pytest.Pytester, scenes, case: str, status: int, lines: list[str]) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = run_script_forked(pytester, "test_scene.py", "--arch", "sm90", "--mpk-case", f"TestNorm::{case}", "-v", timeout=300)
    assert result.ret == status
    result.stdout.fnmatch_lines(lines)


def test_script_arguments_are_validated_like_pytest_s(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = run_script_forked(pytester, "test_scene.py", "--mpk-case", "TestNorm::god", timeout=300)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --mpk-case TestNorm::god: no such scene case; did you mean TestNorm::good*"])
