"""TaskSpec: the base class of a task declaration (its arguments, partitions, template parameters,
supported archs, cost, slice reference and error messages). See registry.py for how one is registered."""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .. import contract
from ..errors import ConfigError
from . import references
from .partition import Arg, Partition, SliceInfo

FLOAT32_MAX = 3.4028234663852886e38


def fits_descriptor(v: Any) -> bool:
    """Whether ``v`` can be a descriptor scalar: an int in int32 range (TaskDesc::scalar_i) or a
    finite float within float32 range (scalar_f); not a bool."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return -(2**31) <= v < 2**31
    return isinstance(v, float) and abs(v) <= FLOAT32_MAX


@dataclass(frozen=True)
class EmulationContext:
    """What a slice reference may know besides its slices, as a device body would: its grid index,
    the layer's grid, the iteration's meta tensors (CPU tensors, as prepare_next_batch left them)
    and the batch configuration (run.batching.BatchConfig)."""

    grid_idx: tuple[int, int, int]
    grid: tuple[int, int, int]
    meta: dict[str, Any]
    batch: Any
    iteration: int
    # Cross-rank tasks (TaskSpec.cross_rank), emulated with their peers (run/multirank.py): this rank,
    # the number of ranks and, per rank, the same task's argument views there (whole tensors for
    # arguments a task picks its part of, such as a communication buffer).
    rank: int = 0
    world_size: int = 1
    peers: list[dict[str, Any]] | None = None


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
    # extra_scalars, at most two. The default's type is the scalar's: a float (1.0, 1e-6) travels as
    # a float32 that TaskDesc::scalar_f reads, an int (3) as an int32 that scalar_i reads.
    scalars: ClassVar[dict[str, float | int]] = {}
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
    # A task that exchanges data with the same task on the other ranks (e.g. the all-reduce): the
    # multi-rank emulator runs it as emulate_send, a wait for every rank's send, then emulate.
    cross_rank: ClassVar[bool] = False
    # Names of the phases the body marks with Runtime::mark(k) (phase k ends at mark k), and one more
    # for the time after its last mark; a profiled launch shows them inside each task's slice.
    phases: ClassVar[tuple[str, ...]] = ()
    # Outputs that may be the same tensor as an input (output name -> input name), because each task
    # reads those elements of the input before it writes them and no other task reads them (e.g. a
    # residual added in place). Every other input an output overlaps is refused when the layer is added.
    in_place: ClassVar[dict[str, str]] = {}

    opcode: int = 0  # assigned by the registry

    # -- hooks -------------------------------------------------------------------------------
    def bind(self, kwargs: dict[str, Any]) -> tuple[list[Arg], dict[str, Any]]:
        """Turn a layer call's keyword arguments into tensor arguments (inputs first) and the
        remaining scalars / options. Fixed-arity tasks use this default; variadic ones override."""
        args = [Arg(n, kwargs.pop(n), p, False) for n, p in self.inputs.items()]
        args += [Arg(n, kwargs.pop(n), p, True) for n, p in self.outputs.items()]
        return args, kwargs

    def allows_in_place(self, output: str, input: str) -> bool:
        """Whether argument ``output`` may be the same tensor as argument ``input`` (see in_place;
        variadic tasks, whose argument names are made per call, override this)."""
        return self.in_place.get(output) == input

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        """Raise ShapeError / DTypeError for arguments the task cannot handle."""

    def check_params(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int], params: Any) -> None:
        """Raise ConfigError for arguments that do not fit the kernel's init parameters ``params``
        (frontend.params.KernelParams), e.g. a KV cache of another page size. Most tasks need none."""

    def workspace(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> dict[str, Any]:
        """Scratch the layer's tasks share among themselves (e.g. partial results of a split): name ->
        (shape, torch dtype). The runtime makes each one per layer, zeroed, named "<layer>.<name>",
        and passes it to every task whole, after the declared inputs. It is zeroed once, when the
        kernel is built: each launch and iteration finds what the last one left (a count must be reset
        by the tasks, or tagged with Runtime::launch_id and iteration, as paged_attention.cuh's split
        count is; a scene's second launch finds one that is not). The layer's tasks run at once: each
        task's scratch is its own part (indexed by its grid index), and a word they share is changed
        only with atomics (the emulator reports a plain store two of them make to one word).
        Default: none."""
        return {}

    def tensor_maps(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> dict[str, Any]:
        """TMA descriptors (sm90 and later) the layer's tasks copy boxes through: name -> (the names of
        the arguments mapped, the box in elements from the innermost dim, the swizzle in bytes). The
        runtime makes one uint8 (len(arguments), 128) tensor of maps per name, "<layer>.<name>",
        passed to every task whole after the workspaces, and makes it again for a replay's tensors
        (graph/tensor_maps.py). A CPU graph's maps hold the geometry without an address: the emulator
        copies through the geometry the body passes (primitives/tma.cuh) and reports a copy whose
        geometry is not its map's. Default: none."""
        return {}

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        """The C++ template arguments of the variant a layer uses (its slices all share a shape)."""
        raise NotImplementedError

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        """Estimated run time of one task in nanoseconds, a finite float >= 0 (GraphError naming the
        layer otherwise), used to balance worker queues. Default: memory bound at about 20 bytes/ns
        per SM plus a fixed cost."""
        return 300.0 + sum(i.nbytes for i in s.values()) / 20.0

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        """The descriptor's scalars (floats or ints): the layer's ``scalars``, each of its default's
        type (ConfigError naming it for a value that is not), then any the task derives from shapes
        (e.g. a total row count that should not force a rebuild per size)."""
        out: list[float | int] = []
        for k, default in self.scalars.items():
            v = values[k]
            if isinstance(default, numbers.Integral) and not isinstance(default, bool):
                if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not fits_descriptor(int(v)):
                    raise ConfigError(
                        f"{self.name}: {k}={v!r} must be an integer in [-2**31, 2**31): the descriptor carries it as "
                        f"an int32 (TaskDesc::scalar_i), as its default {default!r} says"
                    )
                out.append(int(v))
            else:
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not fits_descriptor(float(v)):
                    raise ConfigError(
                        f"{self.name}: {k}={v!r} must be a finite number within float32 range: the descriptor "
                        f"carries it as a float32 (TaskDesc::scalar_f)"
                    )
                out.append(float(v))
        return out

    def error_message(self, code: int, value: int, layer: Any, tensors: dict[str, Any]) -> str:
        """Explain a Runtime::fail report of this task (``layer``: the compiled graph's LayerInfo,
        ``tensors``: its TensorInfo by name)."""
        if code == contract.TASK_ERROR_INDEX:
            return f"index {value} read from its input is out of range"
        if code == contract.TASK_ERROR_VALUE:
            return f"the value at index {value} of its input is one it cannot use"
        return f"error code {code} (value {value})"

    def emulate(self, inputs: dict[str, Any], outputs: dict[str, Any], values: dict[str, Any], ctx: EmulationContext) -> None:
        """The slice reference: compute this task's output slices (CPU tensors, written in place)
        from its input slices (and, for tasks that read the meta tensors, ``ctx``). Default: the
        layer's canonical reference applied to the slices."""
        fn = references.find(self.reference or self.name, search=[self.declared_in()], layer=self.name)
        given = {**inputs, **{k: values[k] for k in self.scalars}}
        try:
            inspect.signature(fn).bind(**given)
        except TypeError as e:
            picked = [n for n, part in {**self.inputs, **self.outputs}.items() if part.runtime_disjoint]
            verb = "is" if len(picked) == 1 else "are"
            why = f"{', '.join(picked)} {verb} chosen at run time (selected), so " if picked else ""
            raise ConfigError(
                f"{self.name}: the emulate-ref backend computes a task by calling {fn.__name__}() of its reference on "
                f"the task's slices ({', '.join(given) or 'no arguments'}), which does not fit its signature: {e}. {why}"
                "override TaskSpec.emulate(inputs, outputs, values, ctx) in the spec: ctx.meta holds the iteration's "
                "meta tensors and ctx.grid_idx the task (mpk_runtime/tasks/paged_attention.py does)"
            ) from None
        result = fn(**given)
        if isinstance(result, (tuple, list)):
            result = dict(zip(outputs, result))
        elif not isinstance(result, dict):
            result = {next(iter(outputs)): result}
        for name, out in outputs.items():
            out.copy_(result[name])

    def emulate_send(
        self, inputs: dict[str, Any], outputs: dict[str, Any], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        """A cross-rank task's first half: deliver this rank's part to its peers (``ctx.peers``), as
        the device body does before it signals them. Only cross-rank tasks have one."""

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

    def declared_file(self) -> Path | None:
        """The file of the module that declares this spec; None where no file is (an interactive session)."""
        try:
            return Path(inspect.getfile(type(self)))
        except (TypeError, OSError):
            return None

    def declared_in(self) -> Path:
        """The directory of the module that declares this spec: a task declared outside the repository
        keeps its pytorch_reference.py there (the slice reference looks there before reference/<name>/)."""
        file = self.declared_file()
        return file.parent if file is not None else Path.cwd()

    def signature(self) -> inspect.Signature:
        """The Python signature of ``pk.<name>_layer``, for help() and editors."""
        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        params += [P(n, P.POSITIONAL_OR_KEYWORD) for n in (*self.inputs, *self.outputs)]
        params += [P("grid_dim", P.KEYWORD_ONLY), P("block_dim", P.KEYWORD_ONLY)]
        params += [P(n, P.KEYWORD_ONLY, default=v) for n, v in {**self.scalars, **self.options}.items()]
        return inspect.Signature(params)
