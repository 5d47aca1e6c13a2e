"""The task registry: one ``@register_task`` declaration per task is the single source of truth.

From a ``TaskSpec`` the runtime derives the layer method (``pk.<name>_layer``), the opcode, the
dispatcher branch, the name tables, the cost model used for placement and the emulator's slice
reference. Nothing about a task is written twice.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import GraphError
from .partition import Arg, SliceInfo, selected, split, whole
from .spec import EmulationContext, TaskFailure, TaskSpec
from .spec_checks import check_declaration

# What a task module needs to declare its task, importable from here in one line.
__all__ = [
    "Arg",
    "EmulationContext",
    "SliceInfo",
    "TaskFailure",
    "TaskSpec",
    "all_specs",
    "get",
    "names",
    "on_register",
    "register_task",
    "selected",
    "split",
    "whole",
]

_REGISTRY: dict[str, TaskSpec] = {}
_ON_REGISTER: list[Callable[[TaskSpec], None]] = []


def on_register(callback: Callable[[TaskSpec], None]) -> None:
    """Call ``callback(spec)`` for every registered task, now and whenever one is registered later
    (PersistentKernel uses it to grow a ``<name>_layer`` method per task)."""
    _ON_REGISTER.append(callback)
    for spec in _REGISTRY.values():
        callback(spec)


def register_task(cls: type[TaskSpec]) -> type[TaskSpec]:
    """Class decorator: validate a task declaration and add it to the registry."""
    spec = cls()
    where = f"task spec {cls.__qualname__}"
    if not getattr(cls, "name", "").isidentifier():
        raise GraphError(f"{where}: name must be an identifier, got {getattr(cls, 'name', None)!r}")
    if spec.name in _REGISTRY and not _same_declaration(_REGISTRY[spec.name], spec):
        raise GraphError(f"{where}: a task named {spec.name!r} is already registered")
    check_declaration(spec, where)
    previous = _REGISTRY.get(spec.name)  # the same declaration, imported again
    _REGISTRY[spec.name] = spec
    _renumber()
    try:
        for callback in _ON_REGISTER:
            callback(spec)
    except Exception as e:  # not left half registered: fixed, the spec can be registered again
        if previous is None:
            del _REGISTRY[spec.name]
        else:
            _REGISTRY[spec.name] = previous
        _renumber()
        raise GraphError(f"{where}: {type(e).__name__}: {e}") from e
    return cls


def _same_declaration(old: TaskSpec, new: TaskSpec) -> bool:
    """Whether ``new`` is ``old``'s class declared again by the same file (a scene file that registers
    its task, run as ``python test_x.py``: imported once as __main__ and once as the test module)."""
    return type(old).__qualname__ == type(new).__qualname__ and old.declared_file() == new.declared_file()


def _renumber() -> None:
    # Opcodes follow the sorted names so that they do not depend on import order.
    for i, name in enumerate(sorted(_REGISTRY), start=1):
        _REGISTRY[name].opcode = i


def get(name: str) -> TaskSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"no task named {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None


def names() -> list[str]:
    return sorted(_REGISTRY)


def all_specs() -> list[TaskSpec]:
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]
