"""``pk.<task>_layer(...)``: one method per registered task, generated from its spec, and the
checks every layer call gets before anything is added to the graph."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import BlockDimError, StateError, near_hint
from ..graph.task_graph import TaskGraph, check_grid
from ..tasks import registry
from ..tasks.partition import Arg, whole
from ..tasks.spec import TaskSpec


def add_layer(
    graph: TaskGraph,
    spec: TaskSpec,
    kwargs: dict[str, Any],
    block_dim: tuple[int, int, int],
    arch: str,
    compiled: bool,
    params: Any = None,
    device: Any = None,
) -> None:
    """Validate one layer call (grid, block, tensors, the spec's own checks) and add it to ``graph``."""
    where = f"{spec.layer_method}()"
    if compiled:
        raise StateError(f"{where}: the kernel is already compiled; build a new PersistentKernel for another graph")
    grid = check_grid(kwargs.pop("grid_dim"), where)
    block = kwargs.pop("block_dim")
    if (tuple(block) if isinstance(block, (tuple, list)) else block) != block_dim:
        raise BlockDimError(
            f"{where}: block_dim={block!r} does not match the {block_dim[0]} worker threads of {arch}; "
            f"pass block_dim=pk.block_dim"
        )
    spec.header_for(arch)
    bound, values = spec.bind(kwargs)
    args = [Arg(a.name, graph.own(a.tensor, a.name, where), a.partition, a.writes) for a in bound]
    named = {a.name: a for a in args}
    spec.check(named, values, grid)
    if params is not None:
        spec.check_params(named, values, grid, params)
    for name, (shape, dtype) in spec.workspace(named, values, grid).items():
        scratch = graph.add_workspace(tuple(shape), dtype, f"{graph.next_layer_name(spec)}.{name}", device)
        args.append(Arg(name, scratch, whole(), False))
    for name, (mapped, box, swizzle) in spec.tensor_maps(named, values, grid).items():
        maps = graph.add_tensor_maps([named[a].tensor for a in mapped], box, swizzle, f"{graph.next_layer_name(spec)}.{name}")
        args.append(Arg(name, maps, whole(), False))
    graph.add_layer(spec, grid, args, values)


def _nearest(kwargs: dict[str, Any], sig: inspect.Signature) -> str:
    """A hint for the first keyword the signature does not have ("; did you mean 'x'?"), else ""."""
    known = [n for n in sig.parameters if n != "self"]
    for key in kwargs:
        if key not in sig.parameters:
            return f"; {near_hint(key, known, 'the parameters are')}"
    return ""


def bind_layer_methods(cls: type) -> None:
    """Give ``cls`` (PersistentKernel) a ``<task>_layer`` method per registered task, now and for
    tasks registered later; each has the spec's signature and docstring, for help() and editors."""

    def bind(spec: TaskSpec) -> None:
        sig = spec.signature()

        def layer(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{spec.layer_method}(): {e}{_nearest(kwargs, sig)}") from None
            bound.apply_defaults()
            kw = dict(bound.arguments)
            kw.pop("self")
            self._add_layer(spec, kw)

        layer.__name__ = layer.__qualname__ = spec.layer_method
        layer.__signature__ = sig  # type: ignore[attr-defined]
        layer.__doc__ = spec.doc or f"The {spec.name} layer."
        setattr(cls, spec.layer_method, layer)

    registry.on_register(bind)
