"""Where a case's expected outputs come from: ``compute_golden``, else the function named after the
layer in the nearest pytorch_reference.py (the test's folder, then reference/<layer>/), called
with the inputs (and InOut tensors, as they were before the run) by name; and ``compare``."""

from __future__ import annotations

import glob
import types

import pytest
import torch

from pytest_mpk import InOut, Out
from pytest_mpk.compare import GoldenError
from pytest_mpk.goldens import golden, golden_of

NORM = """
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="{layer}")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]
"""


def test_default_golden_is_the_layer_reference_and_a_local_one_wins(pytester: pytest.Pytester, scenes) -> None:
    """No compute_golden, no local file: reference/rmsnorm/ is the golden, and the case passes. A
    pytorch_reference.py next to the test that defines rmsnorm (wrongly, here) takes its place."""
    pytester.makepyfile(test_scene=NORM.format(layer="rmsnorm"))
    pytester.runpytest_inprocess().assert_outcomes(passed=1)

    local = pytester.makepyfile(
        pytorch_reference="""
        def rmsnorm(input, weight):
            return input * 0
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "output 'output' (float32, shape (2, 256)) differs from the golden*",
            f"golden: rmsnorm() of {glob.escape(str(local))} (TestNorm defines no compute_golden)",
        ]
    )


def test_local_reference_without_the_function_falls_back_to_the_layer_reference(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=NORM.format(layer="rmsnorm"), pytorch_reference="def other(input):\n    return input\n")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_reference_of_a_new_layer_in_the_test_folder(pytester: pytest.Pytester, scenes) -> None:
    """A layer with no reference/<layer>/ yet: the function in the test's own folder, called with the
    inputs by keyword (outputs are not passed)."""
    sub = pytester.mkpydir("norms")
    (sub / "test_scene.py").write_text(NORM.format(layer="my_norm"))
    (sub / "pytorch_reference.py").write_text(
        "from scenes import rmsnorm\n\ndef my_norm(*, input, weight):\n    return rmsnorm(input, weight)\n"
    )
    # A parent folder's reference is not searched: only the test's own folder, then reference/<layer>/.
    pytester.makepyfile(pytorch_reference="def my_norm(*, input, weight):\n    return input * 0\n")
    result = pytester.runpytest_inprocess("-v")
    result.stdout.fnmatch_lines(["norms/test_scene.py::TestNorm::b2[[]sm90[]] PASSED*"])
    result.assert_outcomes(passed=1)


INOUT = """
import torch
from pytest_mpk import Case, InOut, scene_test
from scenes import ProbeScene

class InPlace(ProbeScene):
    \"\"\"noop(probe=True) reading and overwriting one tensor: acc[i, :] = 1 + max(acc[i, :]).\"\"\"

    def generate_args(self, params):
        return {"acc": InOut(torch.randint(1, 1000, (params["batch"], 4), dtype=torch.int32))}

    def build(self, pk, t, params):
        pk.noop_layer(inputs=[t.acc], outputs=[t.acc], grid_dim=(params["batch"], 1, 1), block_dim=pk.block_dim,
                      probe=True)

@scene_test(layer="bump")
class TestGolden(InPlace):
    CASES = [Case("b2", batch=2)]

    def compute_golden(self, args, params):
        return args.acc.amax(dim=1, keepdim=True).expand_as(args.acc) + 1

@scene_test(layer="bump")
class TestReference(InPlace):
    CASES = [Case("b2", batch=2)]
    compute_golden = None
"""


def test_inout_keeps_its_value_for_the_run_and_the_golden(pytester: pytest.Pytester, scenes) -> None:
    """An InOut tensor is not poisoned (the kernel reads it), and the golden, compute_golden's or the
    reference's (called with it by name), sees its value from before the run."""
    pytester.makepyfile(
        test_scene=INOUT,
        pytorch_reference="""
        def bump(acc):
            return acc.amax(dim=1, keepdim=True).expand_as(acc) + 1
    """,
    )
    result = pytester.runpytest_inprocess("-v")
    result.stdout.fnmatch_lines(
        ["test_scene.py::TestGolden::b2[[]sm90[]] PASSED*", "test_scene.py::TestReference::b2[[]sm90[]] PASSED*"]
    )
    result.assert_outcomes(passed=2)


def test_compare_override_decides(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("lenient", batch=2, hidden=256), Case("strict", batch=2, hidden=256)]

            def compute_golden(self, args, params):
                return args.input * 0  # wrong: only compare() can let it pass

            def compare(self, actual, expected, case):
                assert sorted(actual) == sorted(expected) == ["output"]
                assert case.name == "lenient", f"compare refuses case {case.name}"
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestNorm::strict[[]sm90[]] _*",
            "compare refuses case strict",
            "params: {'batch': 2, 'hidden': 256}",
            "repro: pytest *::TestNorm::strict*",
        ]
    )


# -- the shapes a golden may return (goldens.golden, no build needed) ---------------------------------
class _Scene:
    def __init__(self, result):
        self.result = result

    def compute_golden(self, args, params):
        return self.result


ARGS = {"x": torch.ones(2), "acc": InOut(torch.ones(2)), "y": Out(torch.empty(2)), "z": Out(torch.empty(2))}


@pytest.mark.parametrize(
    ("result", "outputs", "expected"),
    [
        ({"y": 1, "z": 2}, ["y", "z"], {"y": 1, "z": 2}),
        ((1, 2), ["y", "z"], {"y": 1, "z": 2}),
        ([1, 2], ["y", "z"], {"y": 1, "z": 2}),
        (7, ["y"], {"y": 7}),
    ],
)
def test_golden_forms(result, outputs: list[str], expected: dict) -> None:
    assert golden(_Scene(result), "any", ARGS, {}, [], outputs) == expected


@pytest.mark.parametrize(
    ("result", "outputs", "message"),
    [
        ({"y": 1}, ["y", "z"], "_Scene.compute_golden: no value for output(s) ['z']; return {name: tensor} for ['y', 'z']"),
        (
            {"y": 1, "z": 2, "extra": 3},
            ["y", "z"],
            "_Scene.compute_golden: returned ['extra'], which is not an output; return {name: tensor} for the outputs ['y', 'z']",
        ),
        (
            {"why": 1, "zed": 2},
            ["y", "z"],
            "_Scene.compute_golden: returned ['why', 'zed'], which are not outputs (and no value for ['y', 'z']); "
            "return {name: tensor} for the outputs ['y', 'z']",
        ),
        ((1, 2, 3), ["y", "z"], "_Scene.compute_golden: returned 3 values for 2 outputs ['y', 'z']"),
        (7, ["y", "z"], "_Scene.compute_golden: returned one int, but the scene has outputs ['y', 'z']; return a dict"),
    ],
)
def test_golden_of_the_wrong_shape(result, outputs: list[str], message: str) -> None:
    with pytest.raises(GoldenError) as e:
        golden(_Scene(result), "any", ARGS, {}, [], outputs)
    assert str(e.value) == message


def test_compute_golden_gets_plain_tensors_and_params(tmp_path) -> None:
    seen = {}

    class Scene:
        def compute_golden(self, args, params):
            seen.update(vars(args), params=params)
            return args.x

    assert golden(Scene(), "any", ARGS, {"batch": 2}, [tmp_path], ["y"])["y"] is ARGS["x"]
    assert seen["params"] == {"batch": 2}
    assert all(isinstance(seen[n], torch.Tensor) for n in ARGS)


def test_reference_gets_inputs_and_inouts_by_name(tmp_path) -> None:
    (tmp_path / "pytorch_reference.py").write_text("def layer(**kwargs):\n    return {'y': sorted(kwargs)}\n")
    result = golden(types.SimpleNamespace(), "layer", ARGS, {}, [tmp_path], ["y"])
    assert result == {"y": ["acc", "x"]}


def test_golden_of_names_the_function_and_its_file(tmp_path) -> None:
    """What a failure's ``golden:`` line says: the scene's compute_golden, else the reference function
    golden() calls and the file that defines it: through a functools.partial or a decorator, the
    wrapped function's file (here a module the reference imports it from); for a callable object,
    the reference file that provides it."""
    assert golden_of(_Scene(1), "rmsnorm", [tmp_path]) == "_Scene.compute_golden"
    norm = golden_of(types.SimpleNamespace(), "rmsnorm", [tmp_path])
    assert norm.startswith("rmsnorm() of ") and norm.endswith(
        "reference/rmsnorm/pytorch_reference.py (SimpleNamespace defines no compute_golden)"
    )
    ref = tmp_path / "pytorch_reference.py"
    helpers = tmp_path / "golden_helpers_for_this_test.py"
    helpers.write_text(
        "import functools\n\ndef scaled(x, s):\n    return x * s\n\n"
        "def logged(fn):\n    @functools.wraps(fn)\n    def call(*a, **k):\n        return fn(*a, **k)\n    return call\n"
    )
    ref.write_text(
        "import functools, importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('golden_helpers_for_this_test', {str(helpers)!r})\n"
        "h = importlib.util.module_from_spec(spec); spec.loader.exec_module(h)\n"
        "partial_layer = functools.partial(h.scaled, s=2)\n"
        "wrapped_layer = h.logged(h.scaled)\n"
        "class _Twice:\n    def __call__(self, x):\n        return 2 * x\n"
        "object_layer = _Twice()\n"
        "builtin_layer = abs\n"
    )  # fmt: skip
    tail = " (SimpleNamespace defines no compute_golden)"
    assert golden_of(types.SimpleNamespace(), "partial_layer", [tmp_path]) == f"partial_layer() of {helpers}{tail}"
    assert golden_of(types.SimpleNamespace(), "wrapped_layer", [tmp_path]) == f"wrapped_layer() of {helpers}{tail}"
    assert golden_of(types.SimpleNamespace(), "object_layer", [tmp_path]) == f"object_layer() of {ref}{tail}"
    assert golden_of(types.SimpleNamespace(), "builtin_layer", [tmp_path]) == f"builtin_layer() of {ref}{tail}"


def test_a_reference_whose_parameters_are_not_the_inputs_names_both(tmp_path) -> None:
    """The reference is called with the scene's inputs by name; one whose parameters are named
    otherwise gets a GoldenError with its signature and the names it was called with (it had been a
    TypeError from deep in the plugin)."""
    (tmp_path / "pytorch_reference.py").write_text("def layer(x, scale=1.0):\n    return x * scale\n")
    with pytest.raises(GoldenError) as e:
        golden(types.SimpleNamespace(), "layer", {"input": torch.ones(2), "y": Out(torch.empty(2))}, {}, [tmp_path], ["y"])
    assert str(e.value) == (
        f"layer() of {tmp_path / 'pytorch_reference.py'}: takes (x, scale=1.0), but the golden calls it with the scene's "
        "inputs by name (input): missing a required argument: 'x'; name its parameters after the generate_args names, "
        "or define compute_golden(self, args, params)"
    )
