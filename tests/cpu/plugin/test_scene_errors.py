"""Mistakes in a scene class are collection errors that say what is wrong and how to fix it,
found before anything is built or run."""

from __future__ import annotations

import glob
import textwrap

import pytest
from forked_pytest import runpytest_forked

HEADER = """
import torch
from hypothesis import strategies as st
from pytest_mpk import Case, InOut, Out, SceneTestCase, scene_test
from scenes import NormScene
"""

MISTAKES = {
    "unknown_key_near": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("typo", batch=2, hiden=256)]
        """,
        "TestNorm: Case 'typo' has an unknown key 'hiden'; did you mean 'hidden'?",
    ),
    "unknown_key_of_params": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            PARAMS = ("batch", "hidden")
            CASES = [Case("b2", batch=2, hidden=256), Case("odd", batch=2, hidden=256, zzz=1)]
        """,
        "TestNorm: Case 'odd' has an unknown key 'zzz'; the parameters are batch, hidden",
    ),
    "missing_key": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("short", batch=2)]
        """,
        "TestNorm: Case 'short' lacks 'hidden', which generate_args reads as params['hidden']; give it, read it with "
        "params.get('hidden', default), or declare DEFAULTS = {'hidden': ...}",
    ),
    "defaults_not_a_dict": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
            DEFAULTS = [("eps", 1e-6)]
        """,
        "TestNorm: DEFAULTS must be a dict of parameter name -> value, got [('eps', 1e-06)]",
    ),
    "missing_key_of_params": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            PARAMS = ("batch", "hidden", "eps")
            CASES = [Case("b2", batch=2, hidden=256)]
        """,
        "TestNorm: Case 'b2' lacks 'eps', which PARAMS names: every case gives its keys, less those of DEFAULTS; give "
        "it, or a default (DEFAULTS = {'eps': ...})",
    ),
    "no_build": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(SceneTestCase):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                return {"output": Out(torch.empty(2))}
        """,
        "TestNorm: define build(self, pk, t, params)",
    ),
    "no_generate_args": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(SceneTestCase):
            CASES = [Case("b2", batch=2, hidden=256)]

            def build(self, pk, t, params):
                pass
        """,
        "TestNorm: define generate_args(self, params)",
    ),
    "no_outputs": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                return {"input": torch.randn(2, 256), "weight": torch.randn(256), "output": torch.empty(2, 256)}
        """,
        "TestNorm: generate_args returns no Out or InOut tensor, so nothing would be compared; wrap each "
        "output, e.g. 'output': Out(torch.empty(...))",
    ),
    "no_outputs_made_with_arithmetic": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                x = torch.cat([torch.randn(1, 256), torch.rand(1, 256)]) / 256 ** 0.5
                return {"input": x.to(torch.float32) @ torch.eye(256), "weight": torch.ones(256).abs(),
                        "output": torch.empty_like(x)}
        """,
        "TestNorm: generate_args returns no Out or InOut tensor, so nothing would be compared; wrap each "
        "output, e.g. 'output': Out(torch.empty(...))",
    ),
    "no_golden": (
        """
        @scene_test(layer="nosuchlayer")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
        """,
        (
            "TestNorm: no golden: no reference function 'nosuchlayer' found (looked in ",
            "/pytorch_reference.py, ",
            "/reference/nosuchlayer/pytorch_reference.py); define def nosuchlayer(...) in "
            "reference/nosuchlayer/pytorch_reference.py (a task declared outside the repository: in a "
            "pytorch_reference.py beside the module that declares it); or define compute_golden(self, args, params)",
        ),
    ),
    "duplicate_names": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("w", batch=2, hidden=512), Case("b2", batch=2, hidden=512),
                     Case("w", batch=2, hidden=256)]
        """,
        "TestNorm: case names must be unique; repeated: b2, w",
    ),
    "not_cases": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [{"name": "b2", "batch": 2, "hidden": 256}]
        """,
        "TestNorm: CASES must be a list of Case(...), got [{'name': 'b2', 'batch': 2, 'hidden': 256}]",
    ),
    "one_case_not_a_list": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = Case("b2", batch=2, hidden=256)
        """,
        ("TestNorm: CASES must be a list of Case(...), got Case(name='b2'", ""),
    ),
    "nothing_to_test": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            pass
        """,
        "TestNorm: no CASES and no SWEEP: nothing to test",
    ),
    "sweep_not_a_dict": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            SWEEP = [st.integers(1, 4)]
        """,
        "TestNorm: SWEEP must be a dict of parameter name -> Hypothesis strategy",
    ),
    "sweep_lacks_a_parameter": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            PARAMS = ("batch", "hidden")
            SWEEP = {"batch": st.just(2)}
        """,
        "TestNorm: SWEEP lacks strategies for ['hidden'] (the scene's parameters are ['batch', 'hidden'])",
    ),
    "bad_case_arch": (
        """
        CASE = Case("b2", batch=2, hidden=256, archs=("sm90", "sm70"))
        """,
        "E   ValueError: Case 'b2': archs ['sm70'] are not targets; use some of sm80, sm90, sm100",
    ),
    "bad_case_name": (
        """
        CASE = Case("b 2", batch=2, hidden=256)
        """,
        "E   ValueError: Case name 'b 2' must be a non-empty string without spaces, '[', ']', ':' or '/'",
    ),
    "bad_layer": (
        """
        @scene_test(layer="rms-norm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
        """,
        "E   ValueError: scene_test(layer='rms-norm'): layer must name a layer, e.g. 'rmsnorm'",
    ),
    "not_a_scene_class": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm:
            CASES = [Case("b2", batch=2, hidden=256)]
        """,
        "E   TypeError: @scene_test decorates SceneTestCase subclasses, not <class 'test_scene.TestNorm'>",
    ),
    "archs_a_string": (
        """
        CASE = Case("b2", batch=2, hidden=256, archs="sm90")
        """,
        "E   TypeError: Case 'b2': archs='sm90' must be a tuple of arch names, e.g. archs=('sm90',)",
    ),
    "tolerances_of_no_output": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("loose", batch=2, hidden=256, tolerances={"outptu": (0, 0)})]
        """,
        "TestNorm: Case 'loose' has tolerances for 'outptu', which is not an output; the outputs are output",
    ),
    "sweep_of_values": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            SWEEP = {"batch": [1, 2, 4], "hidden": st.just(256)}
        """,
        "TestNorm: SWEEP['batch'] is [1, 2, 4], not a Hypothesis strategy; use st.sampled_from([1, 2, 4])",
    ),
    "sweep_of_one_value": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            SWEEP = {"batch": st.integers(1, 4), "hidden": 256}
        """,
        "TestNorm: SWEEP['hidden'] is 256, not a Hypothesis strategy; use st.just(256) for one value",
    ),
    "sweep_of_an_uncalled_strategy": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            SWEEP = {"batch": st.integers, "hidden": st.just(256)}
        """,
        ("TestNorm: SWEEP['batch'] is <function integers at ", ">, not a Hypothesis strategy; call it: st.integers(...)"),
    ),
    "kernel_params_without_return": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def kernel_params(self, params):
                {"max_num_pages": 3}
        """,
        "TestNorm.kernel_params returned None (is its return statement missing?); return a dict of PersistentKernel "
        "init parameters, {} for none",
    ),
    "kernel_params_of_pairs": (
        """
        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def kernel_params(self, params):
                return [("max_num_pages", 3)]
        """,
        "TestNorm.kernel_params returned [('max_num_pages', 3)] (list); return a dict of PersistentKernel init "
        "parameters, {} for none",
    ),
}


@pytest.mark.parametrize(("source", "message"), MISTAKES.values(), ids=MISTAKES.keys())
def test_scene_mistake_is_a_collection_error(
    pytester: pytest.Pytester, scenes, source: str, message: str | tuple[str, ...]
) -> None:
    """``message``: the line expected, literally; a tuple: its literal parts, anything between them."""
    parts = (message,) if isinstance(message, str) else message
    pytester.makepyfile(test_scene=HEADER + textwrap.dedent(source))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting test_scene.py*", "*".join(glob.escape(part) for part in parts)])


def test_a_mistake_fails_only_its_own_class(pytester: pytest.Pytester, scenes) -> None:
    """With --continue-on-collection-errors the other scenes of the file still run."""
    pytester.makepyfile(
        test_scene=HEADER
        + textwrap.dedent("""
        @scene_test(layer="rmsnorm")
        class TestGood(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

        @scene_test(layer="rmsnorm")
        class TestBad(NormScene):
            CASES = [Case("b2", batch=2, hidden=256), Case("b4", batch=4, hiden=256)]
    """)
    )
    result = pytester.runpytest_inprocess("--continue-on-collection-errors", "-rE")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["ERROR test_scene.py::TestBad"])


def test_a_scene_needing_real_shapes_is_checked_when_it_runs(pytester: pytest.Pytester, scenes) -> None:
    """The collection check sees placeholder tensors; generate_args that reads a shape cannot finish
    on them, so the check is left to the run, where the real tensors exist."""
    pytester.makepyfile(
        test_scene=HEADER
        + textwrap.dedent("""
        @scene_test(layer="rmsnorm")
        class TestGood(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                x = torch.randn(params["batch"], params["hidden"])
                return {"input": x, "weight": torch.randn(x.shape[1]), "output": Out(torch.empty(x.shape[0], 256))}

        @scene_test(layer="rmsnorm")
        class TestBad(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                x = torch.randn(params["batch"], params["hidden"])
                return {"input": x, "weight": torch.randn(x.shape[1]), "output": torch.empty(x.shape[0], 256)}
    """)
    )
    result = pytester.runpytest_inprocess("-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["SceneError: TestBad.generate_args returned no Out or InOut tensor; wrap each output*"])


def test_collection_computes_no_tensor(pytester: pytest.Pytester, scenes) -> None:
    """Checking scenes at collection allocates nothing and leaves torch._dynamo unimported: on the
    "meta" device, arithmetic would import it, seconds in every fresh process and xdist worker."""
    pytester.makeconftest("""
        import sys

        def pytest_collection_finish(session):
            print("torch._dynamo imported:", "torch._dynamo" in sys.modules)
    """)
    pytester.makepyfile(
        test_scene=HEADER
        + textwrap.dedent("""
        @scene_test(layer="rmsnorm")
        class TestHuge(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):  # 64 GiB each, were they real
                w = torch.randn(2 ** 17, 2 ** 17) / 2 ** 8.5
                return {"input": torch.cat([w, w]) * 2, "weight": w.abs() + 1, "output": Out(torch.empty_like(w))}
    """)
    )
    result = runpytest_forked(pytester, "--collect-only", "-s")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["torch._dynamo imported: False", "*1 test collected*"])
