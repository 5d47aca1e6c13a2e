"""A scene's golden: the expected outputs, from ``compute_golden`` or the layer's reference, in the
one form the comparison takes (a dict of output name -> value), or a GoldenError naming the scene."""

from __future__ import annotations

import functools
import inspect
import types
from pathlib import Path
from typing import Any

import torch

from mpk_runtime import harness

from . import compare, guards, token_rows
from .param_reads import copy_of
from .scene import Case, Expected, InOut, Out, SceneTestCase


def golden(
    scene: SceneTestCase,
    layer: str,
    args: dict[str, Any],
    params: dict[str, Any],
    search: list[Path],
    outputs: list[str],
    meta: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """The expected outputs: ``compute_golden(args, params)`` if the scene defines it, else the
    layer's reference (nearest pytorch_reference.py) called with the inputs by name. ``args.meta``
    holds the meta tensors as prepare_next_batch left them (CPU copies), for layers that read them."""
    plain = {n: (v.tensor if isinstance(v, Out) else v) for n, v in args.items()}
    compute = getattr(scene, "compute_golden", None)
    if compute is not None:
        namespace = types.SimpleNamespace(**plain)
        if "meta" not in plain:  # an argument named meta keeps its name; the meta tensors are then in pk only
            namespace.meta = types.SimpleNamespace(**(meta or {}))
        result = compute(namespace, copy_of(params))
    else:
        fn, module = harness.find_reference_in(layer, search=search)
        ins = {n: v for n, v in plain.items() if not isinstance(args[n], Out) or isinstance(args[n], InOut)}
        try:
            bound = inspect.signature(fn).bind(**ins)
        except TypeError as e:  # the call itself would fail: say what it is called with, not where it broke
            raise compare.GoldenError(
                f"{_reference_text(fn, layer, module)}: takes {inspect.signature(fn)}, but the golden calls it with "
                f"the scene's inputs by name ({', '.join(ins) or 'none'}): {e}; name its parameters after the "
                f"generate_args names, or define compute_golden(self, args, params)"
            ) from None
        except ValueError:  # no signature to read (a builtin): call it and let it say
            bound = None
        result = fn(*bound.args, **bound.kwargs) if bound is not None else fn(**ins)
    return as_outputs(result, outputs, golden_of(scene, layer, search))


def as_outputs(result: Any, outputs: list[str], where: str = "the golden") -> dict[str, Any]:
    """A golden in any of its forms (a dict by output name, a tuple in output order, one value) as a
    dict by output name; GoldenError naming ``where`` when it cannot be. A dict's keys are exactly the
    outputs: a misspelt key would leave its value uncompared."""
    if isinstance(result, dict):
        unknown = [k for k in result if k not in outputs]
        missing = [o for o in outputs if o not in result]
        if unknown:
            lacks = f" (and no value for {missing})" if missing else ""
            raise compare.GoldenError(
                f"{where}: returned {unknown}, which {'is not an output' if len(unknown) == 1 else 'are not outputs'}"
                f"{lacks}; return {{name: tensor}} for the outputs {outputs}"
            )
        if missing:
            raise compare.GoldenError(f"{where}: no value for output(s) {missing}; return {{name: tensor}} for {outputs}")
        return result
    if isinstance(result, (tuple, list)):
        if len(result) != len(outputs):
            raise compare.GoldenError(f"{where}: returned {len(result)} values for {len(outputs)} outputs {outputs}")
        return dict(zip(outputs, result))
    if len(outputs) != 1:
        raise compare.GoldenError(
            f"{where}: returned one {type(result).__name__}, but the scene has outputs {outputs}; return a dict"
        )
    return {outputs[0]: result}


def compare_outputs(
    scene: SceneTestCase,
    golden_from: str,
    case: Case | None,
    outs: list[str],
    actual: dict,
    expected: dict,
    before: dict,
    graph: Any = None,
    meta: dict | None = None,
) -> None:
    """The scene's ``compare``, else every output against its golden (checked to be comparable
    first; ``golden_from``, from golden_of, names it); MismatchError with every output's report. With
    the compiled ``graph``, the first element off (or written against the golden's
    Expected(written=...)) is reported with the task whose slice holds it and, with the run's
    ``meta`` tensors, the request and position of its token row."""
    if case is not None:  # where collection could not learn the outputs (a scene that reads real shapes)
        case.check_outputs(type(scene).__name__, outs)
    scene_compare = getattr(scene, "compare", None)
    if scene_compare is not None:
        scene_compare(actual, expected, case)
        return
    errors = []
    for name in outs:
        rtol, atol = case.tolerance_for(name, actual[name].dtype.is_floating_point) if case else (None, None)
        want = expected[name]
        try:
            compare.check_golden(golden_from, name, want.value if isinstance(want, Expected) else want, actual[name])
            owner = None
            if graph is not None:
                dim = token_rows.token_dim_of(graph, name)
                owner = token_rows.with_rows(guards.owner_of(graph, name), dim, meta, tuple(actual[name].shape))
            if isinstance(want, Expected):
                compare.check_expected(name, actual[name], want, before[name], rtol, atol, owner)
            else:
                compare.check(name, actual[name], want, rtol, atol, owner)
        except compare.MismatchError as e:
            errors.append(str(e))
    if errors:
        raise compare.MismatchError("\n".join(errors))


def golden_of(scene: SceneTestCase, layer: str, search: list[Path]) -> str:
    """Where a scene's golden comes from, for messages and the failure report: its compute_golden, or
    the reference function that golden() calls and the file that defines it."""
    if getattr(scene, "compute_golden", None) is not None:
        return f"{type(scene).__name__}.compute_golden"
    fn, module = harness.find_reference_in(layer, search=search)
    return f"{_reference_text(fn, layer, module)} ({type(scene).__name__} defines no compute_golden)"


def _reference_text(fn: Any, layer: str, module: Path) -> str:
    """``layer() of <file>``, as the golden line names the reference ``fn`` found in ``module``."""
    return f"{layer}() of {_source_file(fn) or module}"


def _source_file(fn: Any) -> str | None:
    """The file that defines ``fn`` (through functools.partial and decorators that keep __wrapped__),
    which may be a module the reference file imported it from; None for a callable object or a
    builtin, whose reference file is then named instead."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        return inspect.getsourcefile(inspect.unwrap(fn))
    except TypeError:
        return None
