"""The PersistentKernel parameters a scene case runs with: test mode, the arch, the emulator's
workers, the session's hang timeout, then the scene's ``kernel_params(params)``. The signature
kept with --mpk-keep-artifacts records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]

    def kernel_params(self, params):
        return {KERNEL_PARAMS}
"""


KEPT = Path(".mpk-artifacts", "test_scene.py_TestNorm_b2_sm90")


def signature_params(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / KEPT / "signature_rank0.json").read_text())["params"]


def jittered(pytester: pytest.Pytester) -> bool:
    """Whether the kept source was built with warp jitter (runtime/warp_jitter.cuh)."""
    return "#define MPK_WARP_JITTER 1" in (pytester.path / KEPT / "test_rank0.cu").read_text()


def test_default_parameters(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE.replace("{KERNEL_PARAMS}", "{}"))
    pytester.runpytest_inprocess("--mpk-keep-artifacts").assert_outcomes(passed=1)
    params = signature_params(pytester)
    assert params["test_mode"] is True
    assert params["num_workers"] == 8  # runner.EMULATED_WORKERS
    assert params["watchdog_timeout"] == 5.0
    assert jittered(pytester)  # the harness builds with warp jitter, so a missing barrier shows on the GPU


def test_kernel_params_and_hang_timeout(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene=SCENE.replace(
            "{KERNEL_PARAMS}", "{'max_num_pages': params['batch'] + 1, 'placement': 'round_robin', 'warp_jitter': False}"
        )
    )
    pytester.makeini("[pytest]\nmpk_hang_timeout = 9\n")
    pytester.runpytest_inprocess("--mpk-keep-artifacts").assert_outcomes(passed=1)
    params = signature_params(pytester)
    assert (params["max_num_pages"], params["placement"], params["watchdog_timeout"]) == (3, "round_robin", 9.0)
    assert not jittered(pytester)

    pytester.runpytest_inprocess("--mpk-keep-artifacts", "--mpk-hang-timeout", "2.5").assert_outcomes(passed=1)
    assert signature_params(pytester)["watchdog_timeout"] == 2.5  # the option wins over the ini key


def test_no_warp_jitter_option_builds_without_it(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE.replace("{KERNEL_PARAMS}", "{}"))
    pytester.runpytest_inprocess("--mpk-keep-artifacts", "--mpk-no-warp-jitter").assert_outcomes(passed=1)
    assert not jittered(pytester)


def test_a_wrong_kernel_param_names_the_right_one(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE.replace("{KERNEL_PARAMS}", "{'max_num_pagez': 3}"))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["ConfigError: unknown PersistentKernel parameter 'max_num_pagez'; did you mean 'max_num_pages'?"]
    )


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_bad_hang_timeout_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest_inprocess(f"--mpk-hang-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --mpk-hang-timeout: expected a positive number of seconds, got '{value}'"])


@pytest.mark.parametrize("value", ["inf", "3601", "1e9"])
def test_a_hang_timeout_past_the_watchdogs_limit_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    """The runtime takes (0, 3600]: every case had failed with its message about watchdog_timeout."""
    result = pytester.runpytest_inprocess(f"--mpk-hang-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*argument --mpk-hang-timeout: expected at most 3600 seconds (the watchdog's limit), got '{value}'"]
    )
