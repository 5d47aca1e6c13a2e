"""What ``register_task`` checks of a declaration (its fields, counts, headers, in-place pairs), and of
what its hooks return, so that a mistake in a task spec is an error naming the spec, the field and
the fix when it is registered or first used, not a traceback from deep in the graph builder, the
signature machinery or nvcc."""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import archs, contract, resources
from ..errors import ArityError, GraphError
from .partition import Partition

_CPP_NAME = re.compile(r"^(::)?[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")
_LAYER_KEYWORDS = ("self", "grid_dim", "block_dim")  # what every pk.<name>_layer takes besides the spec's


def check_declaration(spec: Any, where: str) -> None:
    """GraphError (ArityError for the counts) naming the first field of ``spec`` that the runtime
    could not use."""
    function = getattr(type(spec), "function", None)
    if not isinstance(function, str) or not _CPP_NAME.match(function):
        raise GraphError(
            f"{where}: function must name the C++ template the dispatcher calls, e.g. 'mpk::tasks::my_task', got {function!r}"
        )
    smem = spec.smem_function
    if smem is not None and (not isinstance(smem, str) or not _CPP_NAME.match(smem)):
        raise GraphError(f"{where}: smem_function must be None or the name of a constexpr C++ function, got {smem!r}")
    for field in ("inputs", "outputs"):
        args = getattr(spec, field)
        if not isinstance(args, Mapping):
            raise GraphError(f"{where}: {field} must be a dict of name -> partition, got {args!r}")
        for name, part in args.items():
            if not isinstance(part, Partition):
                raise GraphError(
                    f"{where}: {field}[{name!r}] is {part!r}, not a partition; use split(x=0), selected(...) or whole()"
                )
    for field in ("scalars", "options"):
        if not isinstance(getattr(spec, field), Mapping):
            raise GraphError(f"{where}: {field} must be a dict of name -> default, got {getattr(spec, field)!r}")
    if len(spec.inputs) > contract.MAX_INPUTS or len(spec.outputs) > contract.MAX_OUTPUTS:
        raise ArityError(
            f"{where}: {len(spec.inputs)} inputs / {len(spec.outputs)} outputs; a task carries "
            f"at most {contract.MAX_INPUTS} inputs and {contract.MAX_OUTPUTS} outputs"
        )
    if len(spec.scalars) > contract.MAX_SCALARS:
        raise ArityError(f"{where}: {len(spec.scalars)} scalars; a descriptor carries {contract.MAX_SCALARS}")
    if not spec.headers or set(spec.headers) - set(archs.NAMES):
        raise GraphError(f"{where}: headers must map some of {archs.NAMES} to a header, got {spec.headers}")
    for arch, header in spec.headers.items():
        if not isinstance(header, str) or Path(header).is_absolute():
            raise GraphError(
                f"{where}: header {header!r} for {arch} must be a path relative to {resources.CSRC_TASKS} (the source "
                f"includes it as tasks/<header>); for a header elsewhere, os.path.relpath(path, resources.CSRC_TASKS)"
            )
        if not (resources.CSRC_TASKS / header).is_file():
            raise GraphError(
                f"{where}: header {header!r} for {arch} not found under {resources.CSRC_TASKS} (headers are paths "
                f"relative to it; for a header elsewhere, os.path.relpath(path, resources.CSRC_TASKS))"
            )
    for out, inp in spec.in_place.items():
        if out not in spec.outputs or inp not in spec.inputs or spec.outputs[out] != spec.inputs[inp]:
            raise GraphError(
                f"{where}: in_place {out!r} -> {inp!r} must pair an output with an input of the same partition "
                f"(outputs: {', '.join(spec.outputs)}; inputs: {', '.join(spec.inputs)})"
            )
    names = [*spec.inputs, *spec.outputs, *spec.scalars, *spec.options]
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n)]
    if bad:
        raise GraphError(f"{where}: {bad} cannot name a keyword argument of pk.{spec.name}_layer; use identifiers")
    twice = sorted({n for n in names if names.count(n) > 1} | {n for n in names if n in _LAYER_KEYWORDS})
    if twice:
        raise GraphError(
            f"{where}: {twice} named twice among the inputs, outputs, scalars and options (or as one of "
            f"{', '.join(_LAYER_KEYWORDS)}); each is one keyword argument of pk.{spec.name}_layer"
        )
    args = [*spec.inputs, *spec.outputs]
    unknown = [n for n in spec.token_dims if n not in args]
    if unknown:
        raise GraphError(f"{where}: token_dims names {unknown}, which are not arguments ({', '.join(args)})")
    if not isinstance(spec.phases, (tuple, list)) or not all(isinstance(p, str) for p in spec.phases):
        raise GraphError(f"{where}: phases must be a tuple of names, one per Runtime::mark, got {spec.phases!r}")


def checked_template_args(spec: Any, slices: dict[str, Any], values: dict[str, Any], layer: str) -> list[Any]:
    """``spec.template_args(...)``, each checked to be a C++ template argument as the source will
    spell it: an int, or a string (a type such as '__nv_bfloat16', 'true', a constant's name)."""
    try:
        targs = spec.template_args(slices, values)
    except NotImplementedError:
        raise GraphError(
            f"{layer}: {spec.name} does not define template_args(self, slices, values): return the C++ template "
            f"arguments of its body, e.g. [slices['input'].dtype.cpp, rows, cols]"
        ) from None
    if not isinstance(targs, (list, tuple)):
        raise GraphError(f"{layer}: {spec.name}.template_args returned {targs!r}; return a list of C++ template arguments")
    for i, a in enumerate(targs):
        if isinstance(a, bool):
            hint = f"write '{str(a).lower()}'"
        elif isinstance(a, int) or (isinstance(a, str) and a.strip()):
            continue
        elif type(a).__module__.startswith("numpy") and isinstance(a.item(), int):
            continue
        else:
            hint = "give an int or the C++ spelling as a string (a dtype: its .cpp, e.g. '__nv_bfloat16')"
        raise GraphError(f"{layer}: {spec.name}.template_args gave {a!r} ({type(a).__name__}) as argument {i}; {hint}")
    return list(targs)


def checked_cost(spec: Any, slices: dict[str, Any], layer: str) -> float:
    """``spec.cost_ns(slices)``, checked to be a finite number of nanoseconds, zero or more: the
    schedule adds it up to balance the worker queues, where a NaN, a negative or a string would
    place the tasks on no measure at all (or fail deep inside the scheduler)."""
    cost = spec.cost_ns(slices)
    ok = isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0
    if not ok:
        raise GraphError(
            f"{layer}: {spec.name}.cost_ns gave {cost!r} ({type(cost).__name__}); return the estimated run time of one "
            f"task in ns, a finite float >= 0 (the default is 300 + the slices' bytes / 20)"
        )
    return float(cost)
