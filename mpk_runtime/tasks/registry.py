"""The task registry: one ``@register_task`` declaration per task is the single source of truth.

From a ``TaskSpec`` the runtime derives the layer method (``pk.<name>_layer``), the opcode, the
dispatcher branch, the name tables, the cost model used for placement and the emulator's slice
reference. Nothing about a task is written twice.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .. import references
from ..errors import ArityError, ConfigError, GraphError

TASK_ERROR_INDEX = 1  # Runtime::fail codes, from csrc/runtime/abi.h
MAX_INPUTS = 7
MAX_OUTPUTS = 3
MAX_SCALARS = 2
GRID_AXES = ("x", "y", "z")
ARCHS = ("sm80", "sm90", "sm100")
CSRC_TASKS = Path(__file__).resolve().parents[2] / "csrc" / "tasks"


@dataclass(frozen=True)
class Partition:
    """How a tensor argument is cut into per-task slices.

    ``axes[d]`` names the grid axis ("x", "y" or "z") that splits tensor dimension ``d``; a dimension
    that no axis splits is passed whole to every task.
    """

    axes: tuple[tuple[int, str], ...] = ()

    def axis_of(self, dim: int) -> str | None:
        return dict(self.axes).get(dim)

    def describe(self) -> str:
        if not self.axes:
            return "whole"
        return ", ".join(f"dim {d} by grid {a}" for d, a in self.axes)


def split(**axes: int) -> Partition:
    """``split(x=0)``: grid axis x cuts tensor dim 0 into grid_dim[0] equal slices."""
    for axis in axes:
        if axis not in GRID_AXES:
            raise ValueError(f"split() takes grid axes x, y, z; got {axis!r}")
    return Partition(tuple(sorted((dim, axis) for axis, dim in axes.items())))


def whole() -> Partition:
    """Every task sees the whole tensor."""
    return Partition(())


@dataclass(frozen=True)
class Arg:
    """One tensor argument of a task as bound by a layer call."""

    name: str
    tensor: Any  # graph.DTensor
    partition: Partition
    writes: bool


@dataclass(frozen=True)
class SliceInfo:
    """What a task template may know about one argument: the shape of its slice and the layout of
    the whole tensor it is cut from (strides in elements)."""

    name: str
    dtype: Any  # dtypes.DType
    shape: tuple[int, ...]
    full_shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


class TaskFailure(Exception):
    """Raised by a slice reference (emulate) where the device body would call Runtime::fail."""

    def __init__(self, code: int, value: int):
        super().__init__(f"task error {code} ({value})")
        self.code, self.value = code, value


class TaskSpec:
    """Base class of a task declaration. Subclasses set the class attributes and may override the
    hooks; ``@register_task`` validates the declaration once, at import."""

    name: ClassVar[str]
    inputs: ClassVar[dict[str, Partition]] = {}
    outputs: ClassVar[dict[str, Partition]] = {}
    # Runtime scalars of the layer call carried in the task descriptor, with their defaults; with
    # extra_scalars, at most two (TaskDesc::scalar_f / scalar_i read them).
    scalars: ClassVar[dict[str, float]] = {}
    # Compile-time options that become template arguments, with their defaults.
    options: ClassVar[dict[str, Any]] = {}
    # Token dimensions: arg name -> dim. Where that dim has max_num_batched_tokens rows, only the
    # iteration's active rows are computed (the body uses Runtime::active_rows; the emulator too).
    token_dims: ClassVar[dict[str, int]] = {}
    # arch -> header under csrc/tasks; its keys are the archs the task supports.
    headers: ClassVar[dict[str, str]] = {}
    function: ClassVar[str]  # C++ template called by the dispatcher
    # constexpr C++ function, same template arguments as `function`, giving the dynamic shared
    # memory a variant needs (None: none); the build sizes the kernel's for the hungriest variant.
    smem_function: ClassVar[str | None] = None
    reference: ClassVar[str | None] = None  # function in reference/<name>/pytorch_reference.py
    doc: ClassVar[str] = ""

    opcode: int = 0  # assigned by the registry

    # -- hooks -------------------------------------------------------------------------------
    def bind(self, kwargs: dict[str, Any]) -> tuple[list[Arg], dict[str, Any]]:
        """Turn a layer call's keyword arguments into tensor arguments (inputs first) and the
        remaining scalars / options. Fixed-arity tasks use this default; variadic ones override."""
        args = [Arg(n, kwargs.pop(n), p, False) for n, p in self.inputs.items()]
        args += [Arg(n, kwargs.pop(n), p, True) for n, p in self.outputs.items()]
        return args, kwargs

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        """Raise ShapeError / DTypeError for arguments the task cannot handle."""

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        """The C++ template arguments of the variant a layer uses (its slices all share a shape)."""
        raise NotImplementedError

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        """Estimated run time of one task, used to balance worker queues. Default: memory bound
        at about 20 bytes/ns per SM plus a fixed cost."""
        return 300.0 + sum(i.nbytes for i in s.values()) / 20.0

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        """The descriptor's scalars (floats or ints): the layer's ``scalars``, then any the task
        derives from shapes (e.g. a total row count that should not force a rebuild per size)."""
        return [float(values[k]) for k in self.scalars]

    def error_message(self, code: int, value: int, layer: dict, tensors: dict[str, dict]) -> str:
        """Explain a Runtime::fail report of this task (``layer``, ``tensors``: task graph JSON)."""
        if code == TASK_ERROR_INDEX:
            return f"index {value} read from its input is out of range"
        return f"error code {code} (value {value})"

    def emulate(self, inputs: dict[str, Any], outputs: dict[str, Any], values: dict[str, Any]) -> None:
        """The slice reference: compute this task's output slices (CPU tensors, written in place)
        from its input slices. Default: the layer's canonical reference applied to the slices."""
        fn = references.find(self.reference or self.name, layer=self.name)
        result = fn(**inputs, **{k: values[k] for k in self.scalars})
        if isinstance(result, (tuple, list)):
            result = dict(zip(outputs, result))
        elif not isinstance(result, dict):
            result = {next(iter(outputs)): result}
        for name, out in outputs.items():
            out.copy_(result[name])

    # -- derived -----------------------------------------------------------------------------
    @property
    def layer_method(self) -> str:
        return f"{self.name}_layer"

    def header_for(self, arch: str) -> str:
        try:
            return self.headers[arch]
        except KeyError:
            have = ", ".join(self.headers)
            raise ConfigError(
                f"task {self.name!r} has no body for {arch}; it supports {have}. "
                f"Build for one of those (target_cc) or add csrc/tasks/{arch}/{self.name}.cuh"
            ) from None

    def signature(self) -> inspect.Signature:
        """The Python signature of ``pk.<name>_layer``, for help() and editors."""
        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        params += [P(n, P.POSITIONAL_OR_KEYWORD) for n in (*self.inputs, *self.outputs)]
        params += [P("grid_dim", P.KEYWORD_ONLY), P("block_dim", P.KEYWORD_ONLY)]
        params += [P(n, P.KEYWORD_ONLY, default=v) for n, v in {**self.scalars, **self.options}.items()]
        return inspect.Signature(params)


_REGISTRY: dict[str, TaskSpec] = {}
_ON_REGISTER: list = []


def on_register(callback) -> None:
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
    if spec.name in _REGISTRY:
        raise GraphError(f"{where}: a task named {spec.name!r} is already registered")
    if len(spec.inputs) > MAX_INPUTS or len(spec.outputs) > MAX_OUTPUTS:
        raise ArityError(
            f"{where}: {len(spec.inputs)} inputs / {len(spec.outputs)} outputs; a task carries "
            f"at most {MAX_INPUTS} inputs and {MAX_OUTPUTS} outputs"
        )
    if len(spec.scalars) > MAX_SCALARS:
        raise ArityError(f"{where}: {len(spec.scalars)} scalars; a descriptor carries {MAX_SCALARS}")
    if not spec.headers or set(spec.headers) - set(ARCHS):
        raise GraphError(f"{where}: headers must map some of {ARCHS} to a header, got {spec.headers}")
    for arch, header in spec.headers.items():
        if not (CSRC_TASKS / header).is_file():
            raise GraphError(f"{where}: header {header!r} for {arch} not found under {CSRC_TASKS}")
    _REGISTRY[spec.name] = spec
    _renumber()
    for callback in _ON_REGISTER:
        callback(spec)
    return cls


def _renumber() -> None:
    # Opcodes follow the sorted names so that they do not depend on import order.
    for i, name in enumerate(sorted(_REGISTRY), start=1):
        _REGISTRY[name].opcode = i


def get(name: str) -> TaskSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"no task named {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None


def all_specs() -> list[TaskSpec]:
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]

