"""The fixtures for plain test functions: ``pk`` (a test-mode PersistentKernel for this worker's arch
and backend), ``mpk_params``, ``mpk_device``, ``mpk_arch``; and the markers ``mpk_params``,
``mpk_arch`` and ``mpk_gpus``. The inner tests assert on what they receive, so a pass is the proof.

A noop layer with probe=True on int32 tensors is the cheapest real graph: each task writes
1 + the largest element of its input slice."""

from __future__ import annotations

import textwrap

import pytest

PROBE = """
import pytest
import torch

def probe(pk, device):
    x = pk.attach_input(torch.tensor([[1, 7, 3, 2], [9, 4, 4, 4]], dtype=torch.int32, device=device), "x")
    y = pk.attach_input(torch.zeros(2, 4, dtype=torch.int32, device=device), "y")
    pk.noop_layer(inputs=[x], outputs=[y], grid_dim=(2, 1, 1), block_dim=pk.block_dim, probe=True)
    pk.compile()
    pk()
    pk.synchronize()
    return pk.tensor("y")
"""


def test_pk_runs_a_graph_on_this_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pk=PROBE
        + textwrap.dedent("""
        def test_probe(pk, mpk_params, mpk_device, mpk_arch):
            assert (mpk_arch, mpk_device, pk.target_cc, pk.backend) == ("sm90", torch.device("cpu"), 90, "emulated")
            assert pk.test_mode and mpk_params["test_mode"] and mpk_params["emulate"]
            assert pk.block_dim == (256, 1, 1)
            assert probe(pk, mpk_device).tolist() == [[8] * 4, [10] * 4]
    """)
    )
    result = pytester.runpytest_inprocess("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_pk.py::test_probe[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
        ]
    )


def test_fixtures_follow_the_session_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pk=PROBE
        + textwrap.dedent("""
        def test_params(pk, mpk_params, mpk_arch, mpk_device):
            assert pk.backend == "compile-only" and mpk_params["compile_only"] and not mpk_params["emulate"]
            assert mpk_device == torch.device("cpu")
            assert pk.target_cc == {"sm80": 80, "sm100": 100}[mpk_arch]
            assert pk.block_dim == ({"sm80": 128, "sm100": 256}[mpk_arch], 1, 1)
            assert mpk_params["watchdog_timeout"] == 7.5
    """)
    )
    result = pytester.runpytest_inprocess(
        "-v", "--mpk-backend", "compile-only", "--arch", "sm80", "--arch", "sm100", "--mpk-hang-timeout", "7.5"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["test_pk.py::test_params[[]sm80[]] PASSED [[]compiled[]]*", "test_pk.py::test_params[[]sm100[]] PASSED [[]compiled[]]*"]
    )


def test_mpk_params_marker_and_sealed_params(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pk=PROBE
        + textwrap.dedent("""
        from mpk_runtime import StateError

        pytestmark = pytest.mark.mpk_params(max_num_pages=2, placement="round_robin")

        @pytest.mark.mpk_params(max_num_pages=3)
        def test_marker(pk, mpk_params):
            assert pk.params.max_num_pages == 3  # the closest marker wins
            assert pk.params.placement == "round_robin"
            assert mpk_params["max_num_pages"] == 3

        def test_before_pk(mpk_params, request):
            mpk_params["max_num_pages"] = 5  # free to change: no kernel was built from them yet
            assert request.getfixturevalue("pk").params.max_num_pages == 5

        def test_sealed(pk, mpk_params):
            with pytest.raises(StateError, match="mpk_params changed after the pk fixture was built from it"):
                mpk_params["num_workers"] = 2
            with pytest.raises(StateError):
                mpk_params.update(num_workers=2)
            assert mpk_params["num_workers"] == pk.params.num_workers == 8
    """)
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=3)


def test_mpk_arch_marker_limits_the_archs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_pk=PROBE
        + textwrap.dedent("""
        @pytest.mark.mpk_arch("sm80")
        def test_arch(mpk_arch):
            assert mpk_arch == "sm80"

        @pytest.mark.mpk_arch("sm80")
        def test_pk(pk):
            assert pk.target_cc == 80
    """)
    )
    result = pytester.runpytest_inprocess("-v", "-rs", "--arch", "sm90")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_pk.py:*: marked mpk_arch('sm80'); this run targets sm90"] * 2)

    result = pytester.runpytest_inprocess("-v", "--arch", "sm80", "--arch", "sm90", "--mpk-backend", "compile-only")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["test_pk.py::test_arch[[]sm80[]] PASSED*", "test_pk.py::test_pk[[]sm80[]] PASSED*"])
    result.stdout.no_fnmatch_line("*sm90*PASSED*")


def test_mpk_gpus_marker_counts_the_visible_gpus(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_gpus="""
        import pytest

        @pytest.mark.mpk_gpus(2)
        def test_two():
            pass

        @pytest.mark.mpk_gpus(n=1)
        def test_one():
            pass
    """
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] test_gpus.py:*: needs 2 GPUs, 0 visible", "SKIPPED [[]1[]] test_gpus.py:*: needs 1 GPUs, 0 visible"]
    )

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # the count comes from what is visible, not from torch
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_gpus.py:*: needs 2 GPUs, 1 visible"])


def test_mpk_gpus_on_a_scene_class(pytester: pytest.Pytester, scenes, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(
        test_scene="""
        import pytest
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @pytest.mark.mpk_gpus(2)
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("b4", batch=4, hidden=256)]
    """
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] test_scene.py*: needs 2 GPUs, 0 visible"])
