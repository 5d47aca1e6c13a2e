"""Variants: the distinct template instantiations (task, template arguments) a graph uses. Layers
with the same variant share one dispatcher case, and graphs with the same variants share a module."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..tasks.spec import TaskSpec
from .task_graph import TaskGraph


@dataclass
class Variant:
    id: int
    spec: TaskSpec
    template_args: list
    layers: list[str] = field(default_factory=list)

    @property
    def targs(self) -> str:
        return ", ".join(str(a) for a in self.template_args)

    @property
    def call(self) -> str:
        """The C++ call of this variant's body, as the dispatcher and the task-body module make it."""
        return f"{self.spec.function}<{self.targs}>(task, rt);"

    @property
    def smem(self) -> str | None:
        return f"{self.spec.smem_function}<{self.targs}>()" if self.spec.smem_function else None


def collect_variants(graph: TaskGraph) -> tuple[list[Variant], dict[int, int]]:
    """Distinct (task, template arguments) pairs in first-use order, and layer id -> variant id."""
    variants: list[Variant] = []
    by_key: dict[tuple, Variant] = {}
    of_layer: dict[int, int] = {}
    for layer in graph.layers:
        key = (layer.spec.name, tuple(str(a) for a in layer.template_args))
        v = by_key.get(key)
        if v is None:
            v = Variant(len(variants), layer.spec, list(layer.template_args))
            variants.append(v)
            by_key[key] = v
        v.layers.append(layer.name)
        of_layer[layer.id] = v.id
    return variants, of_layer
