"""Values of the wrong kind in a scene definition are refused with a message that names them and
says the fix: a string for ``archs``, a truthy string for a bool, tolerances for an output the scene
does not have, a ``kernel_params`` that returns no dict, a meta tensor given as a list, an argument
on the meta device. Those a scene file holds are collection errors (test_scene_errors.py, with a
SWEEP value that is not a strategy); those known only when a case runs fail it."""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from pytest_mpk import Case, InOut, Out

HEADER = """
import torch
from pytest_mpk import Case, Out, scene_test
from scenes import NormScene
"""


def scene(pytester: pytest.Pytester, body: str) -> None:
    pytester.makepyfile(test_scene=HEADER + textwrap.dedent(body))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"archs": "sm90"}, TypeError, "Case 'b2': archs='sm90' must be a tuple of arch names, e.g. archs=('sm90',)"),
        ({"archs": 90}, TypeError, "Case 'b2': archs=90 must be a tuple of arch names, e.g. archs=('sm90', 'sm100')"),
        ({"archs": ()}, ValueError, "Case 'b2': archs=() names no arch, so the case would never run; leave archs out"),
        ({"manual": "no"}, TypeError, "Case 'b2': manual='no' must be True or False"),
        ({"manual": 1}, TypeError, "Case 'b2': manual=1 must be True or False"),
        (
            {"params": {"batch": 2, "hidden": 256}},
            TypeError,
            "Case 'b2': params={'batch': 2, 'hidden': 256} would be one parameter named 'params'; give the parameters "
            "as keywords: Case('b2', batch=2, hidden=256)",
        ),
    ],
)
def test_case_fields_of_the_wrong_kind(kwargs: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as e:
        Case("b2", **kwargs)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("kind", [Out, InOut])
def test_meta_flag_of_an_output_is_a_bool(kind: type[Out]) -> None:
    with pytest.raises(TypeError, match=re.escape(f"{kind.__name__}(...): meta='yes' must be True or False")):
        kind(torch.empty(2), meta="yes")  # type: ignore[arg-type]


# What collection cannot know: generate_args and kernel_params that need real values (a shape, an
# element) do not finish on placeholder tensors, so their results are checked when the case runs.
AT_RUN_TIME = {
    "tolerances_of_no_output": (
        """
        CASES = [Case("b2", batch=2, hidden=256, tolerances={"outptu": (0, 0)})]

        def generate_args(self, params):
            x = torch.randn(params["batch"], params["hidden"])
            return {"input": x, "weight": torch.randn(x.shape[1]), "output": Out(torch.empty_like(x))}
        """,
        "SceneError: TestNorm: Case 'b2' has tolerances for 'outptu', which is not an output; the outputs are output",
    ),
    "kernel_params_without_return": (
        """
        CASES = [Case("b2", batch=2, hidden=256)]

        def kernel_params(self, params):
            if int(torch.tensor(params["batch"])) > 1:
                {"max_num_pages": 3}
        """,
        "SceneError: TestNorm.kernel_params returned None (is its return statement missing?); return a dict of "
        "PersistentKernel init parameters, {} for none",
    ),
    "meta_tensor_a_list": (
        """
        CASES = [Case("b2", batch=2, hidden=256)]

        def kernel_params(self, params):
            return {"max_num_batched_tokens": 2, "meta_tensors": {"prompt_lengths": [2]}}
        """,
        "MetaTensorError: meta tensor 'prompt_lengths' must be a torch.Tensor*",
    ),
    "argument_on_the_meta_device": (
        """
        CASES = [Case("b2", batch=2, hidden=256)]

        def generate_args(self, params):
            return {"input": torch.randn(2, 256, device="meta"), "weight": torch.randn(256),
                    "output": Out(torch.empty(2, 256))}
        """,
        "SceneError: TestNorm.generate_args: argument 'input' is a tensor on the meta device, which holds no data; "
        "generate real tensors, on the CPU (the harness copies them to the case's device)",
    ),
}


@pytest.mark.parametrize(("body", "line"), AT_RUN_TIME.values(), ids=AT_RUN_TIME.keys())
def test_a_value_known_only_when_the_case_runs_fails_it(pytester: pytest.Pytester, scenes, body: str, line: str) -> None:
    """``line``: an fnmatch pattern of the failure's first line; no traceback comes with it."""
    scene(pytester, '@scene_test(layer="rmsnorm")\nclass TestNorm(NormScene):\n' + textwrap.indent(textwrap.dedent(body), "    "))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([line])
    assert "Traceback" not in result.stdout.str() and "AttributeError" not in result.stdout.str()
