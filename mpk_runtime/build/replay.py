"""Replaying a compile output directory: which kernel to rebuild, and which tensors bind to it.

``PersistentKernel.from_artifacts`` (the front end) calls ``plan``; the saved source is built as it
is now (an edited file is rebuilt, an unchanged one comes from the cache) and the saved graph is
uploaded as it was. ``plan`` also tells whether the source was edited (it differs from the one
the saved graph generates): the host emulator of the CUDA bodies (emulate=True) runs an edited source
as it runs any, but the slice-reference emulator (emulate="reference") runs the tasks' Python
references, not the source, so the front end refuses an edited one there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import dtypes, memory
from ..codegen import dispatcher
from ..errors import ConfigError, EmulationError, GraphError, GridError, MemoryBudgetError, MetaTensorError, ShapeError
from ..graph.shuffle import shuffle
from ..graph.tensor_maps import tensor_maps
from ..graph.variants import Variant
from ..tasks import registry
from ..tasks.spec import TaskSpec
from .artifacts import CompileOutput, read


@dataclass
class ReplayPlan:
    output: CompileOutput
    init_params: dict[str, Any]  # PersistentKernel parameters, before the caller's overrides
    target_cc: int


# Parameters of how a replay runs, not of the graph it runs: an override may change them (num_workers
# and target_cc are checked against the schedule and the arch afterwards).
RUN_SETTINGS = frozenset(
    {"target_cc", "num_workers", "compile_only", "emulate", "emulate_check", "warp_jitter", "watchdog_timeout", "comm_timeout"}
    | {"profiler_tensor", "trace_name", "meta_tensors"}
)


def init_params(plan: ReplayPlan, overrides: dict[str, Any]) -> dict[str, Any]:
    """The PersistentKernel parameters of a replay: the saved ones, the saved meta tensor overrides
    (moved to where the kernel will run), then the caller's ``overrides``, which may not contradict
    a saved parameter of the graph (its batch, its rank, its mode, ...): ConfigError."""
    for k, v in overrides.items():
        saved = plan.init_params.get(k)
        if k in plan.init_params and k not in RUN_SETTINGS and v != saved:
            raise ConfigError(
                f"{plan.output.directory}: {k}={v!r} contradicts the saved graph, built with {k}={saved!r}; replay it "
                f"with the saved value (leave {k} out), or compile the graph again with the new one"
            )
    init = {**plan.init_params, "target_cc": plan.target_cc, **overrides}
    if plan.output.meta and "meta_tensors" not in overrides:
        cpu = init.get("emulate") or init.get("compile_only") or not torch.cuda.is_available()
        device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
        init["meta_tensors"] = {k: v.to(device) for k, v in plan.output.meta.items()}
    return init


def check_kernel(out: CompileOutput, arch: str, num_workers: int) -> None:
    """ConfigError unless a kernel of ``arch`` with ``num_workers`` can run the saved graph."""
    if arch != out.signature.arch:
        raise ConfigError(f"{out.directory} was generated for {out.signature.arch}; replay it with that target_cc, not {arch}")
    if num_workers != out.graph.schedule.num_workers:
        raise ConfigError(
            f"{out.directory} was scheduled for num_workers={out.graph.schedule.num_workers}; "
            f"replay it with the same num_workers, not {num_workers}"
        )


def plan(output_dir: str | Path, rank: int) -> ReplayPlan:
    out = read(output_dir, rank)
    sig = out.signature
    for i, layer in enumerate(out.graph.layers):
        if layer.task not in registry.names():
            raise GraphError(
                f"{out.directory}: layers[{i}] ({layer.name}) is a {layer.task!r} task, which is not registered in this "
                f"process ({', '.join(registry.names())}); import the module that registers it before replaying"
            )
        _check_layer(out, i)
    _check_variants(out)
    out.edited = source_edit(out)
    return ReplayPlan(out, dict(sig.params), int(sig.arch[2:]))


def _check_layer(out: CompileOutput, i: int) -> None:
    """A layer's opcode and scalar values must be what its registered task reads: the descriptor
    carries the opcode, and the slice references compute with the values."""
    layer, spec = out.graph.layers[i], registry.get(out.graph.layers[i].task)
    where = f"{out.directory / f'task_graph_rank{out.signature.rank}.json'}: layers[{i}]"
    if layer.opcode != spec.opcode:
        raise GraphError(f"{where}.opcode: {layer.opcode}, but {spec.name} has opcode {spec.opcode}; recompile the directory")
    missing = [k for k in spec.scalars if k not in layer.values]
    bad = [k for k in spec.scalars if k not in missing and type(layer.values[k]) not in (int, float)]
    if missing or bad:
        raise GraphError(
            f"{where}.values: {spec.name} needs the numbers {', '.join(spec.scalars)}, "
            f"missing {missing or 'none'}, not numbers {bad or 'none'}; recompile the directory"
        )
    # The descriptor's first scalars are those values (TaskSpec.scalar_values, and every task of ours
    # that overrides it): the kernel reads the one, the slice references the other, so a file where
    # they differ would show as a wrong result. A task of one's own may order its scalars otherwise.
    ours = type(spec).scalar_values is TaskSpec.scalar_values or type(spec).__module__.startswith("mpk_runtime.")
    for j, (k, default) in enumerate(spec.scalars.items() if ours else ()):
        if j >= len(layer.scalars):
            raise GraphError(f"{where}.scalars: {len(layer.scalars)} of them, but {spec.name} passes {k} as scalar {j}")
        saved, want = layer.scalars[j], layer.values[k]
        if saved.is_int != isinstance(default, int) or _as_descriptor(saved.value, default) != _as_descriptor(want, default):
            raise GraphError(
                f"{where}.scalars[{j}]: {saved.value!r}, but values.{k} is {want!r}, which the descriptor carries as "
                f"{_as_descriptor(want, default)!r}; the file is damaged: recompile the directory"
            )


def _as_descriptor(value: int | float, default: int | float) -> int | float:
    """A layer value as its descriptor scalar holds it: an int, or a float32."""
    return int(value) if isinstance(default, int) else float(torch.tensor(float(value), dtype=torch.float32))


def _check_variants(out: CompileOutput) -> None:
    """A variant's call and shared memory expression must be what its task makes of its layers'
    template arguments: the generated source says them again, and the slice references run the
    graph as the layers describe it, so a call edited in the graph alone would not be what runs."""
    where = f"{out.directory / f'task_graph_rank{out.signature.rank}.json'}"
    layers = {layer.name: layer for layer in out.graph.layers}
    for v in out.graph.variants:
        targs = list(layers[v.layers[0]].template_args) if v.layers else []
        made = Variant(v.id, registry.get(v.task), targs)
        for field, saved, want in (("call", v.call, made.call), ("smem", v.smem, made.smem)):
            if saved != want:
                raise GraphError(
                    f"{where}: variants[{v.id}].{field}: {saved!r}, but {v.task} with its layers' template arguments "
                    f"gives {want!r}; recompile the directory (to try another instantiation, edit the source instead)"
                )


def source_edit(out: CompileOutput) -> str | None:
    """How the saved source differs from the one its task graph generates (None: it does not)."""
    variants = []
    layers = {layer.name: layer for layer in out.graph.layers}
    for v in out.graph.variants:
        first = layers.get(v.layers[0]) if v.layers else None
        targs = list(first.template_args) if first else []
        variants.append(Variant(v.id, registry.get(v.task), targs, list(v.layers)))
    # Warp jitter is a define of the build (the harness's builds have it), not a change of any task:
    # compare with the source generated as the saved one says it was.
    jitter = dispatcher.JITTER in out.source.splitlines()
    expected = dispatcher.generate(variants, out.graph.arch, warp_jitter=jitter)
    if expected == out.source:
        return None
    saved, made = out.source.splitlines(), expected.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(saved, made)) if a != b), min(len(saved), len(made)))
    return (
        f"{out.directory / f'test_rank{out.signature.rank}.cu'} is not the source its task graph generates "
        f"(edited by hand, or written by another version of mpk_runtime): they differ from line {line + 1} on"
    )


def bind(out: CompileOutput, tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of the signature by name but the communication tensors (open_kernel declares
    those): the caller's, derived ones recomputed as the original run did (shuffle_tensors, tensor_maps),
    intermediates allocated here (within the memory budget).
    ShapeError / GraphError otherwise."""
    if not isinstance(tensors, dict):
        raise GraphError(f"replay of {out.directory}: tensors must be a dict of name -> tensor, got {type(tensors).__name__}")
    wanted = {t.name: t for t in out.signature.tensors if t.kind != "comm"}  # open_kernel declares those
    unknown = sorted(set(tensors) - set(wanted))
    made = [
        t
        for t in out.signature.tensors
        if t.name in wanted and t.name not in tensors and (t.derived_from or t.kind in ("intermediate", "workspace"))
    ]
    missing = sorted(set(wanted) - set(tensors) - {t.name for t in made})
    if unknown or missing:
        comm = [n for n in unknown if any(t.name == n and t.kind == "comm" for t in out.signature.tensors)]
        note = f" ({comm}: communication memory, which the replay allocates; leave it out)" if comm else ""
        raise GraphError(
            f"replay of {out.directory}: tensors must match its signature; missing {missing or 'none'}, "
            f"unknown {unknown or 'none'}{note}"
        )
    for name, given in tensors.items():
        _check_bound(out, name, given)
    memory.check(
        [memory.tensor_need(f"tensor {t.name!r}", t.shape, dtypes.from_short(t.dtype)) for t in made],
        device,
        f"replay of {out.directory}",
        "the signature's shapes are too large for this machine",
    )
    bound = dict(tensors)
    for st in made:
        recipe = st.derived_from
        if recipe:
            try:
                bound[st.name] = _derive(recipe, [bound[i] for i in recipe["inputs"]])
            except KeyError as e:
                raise GraphError(
                    f"replay of {out.directory}: {st.name!r} is derived from {e.args[0]!r}, which is not bound"
                ) from None
            except (GridError, ShapeError) as e:
                raise GraphError(f"replay of {out.directory}: {st.name!r} cannot be derived as its signature says: {e}") from None
            _check_bound(out, st.name, bound[st.name])
        else:  # an intermediate, or a layer's workspace, which starts zeroed
            bound[st.name] = torch.zeros(st.shape, dtype=dtypes.from_short(st.dtype).torch, device=device)
    return {name: bound[name] for name in wanted}


def _derive(recipe: dict, inputs: list[torch.Tensor]) -> torch.Tensor:
    """A derived tensor made again from the bound ``inputs``, as its recipe says (signature_reader checks it)."""
    if recipe["op"] == "tensor_maps":  # the maps of the tensors the replay binds: their addresses
        return tensor_maps(inputs, recipe["box"], recipe["swizzle"])
    return shuffle(inputs, recipe["shuffled_dim"], recipe["num_groups"])


def _check_bound(out: CompileOutput, name: str, given: Any) -> None:
    want = next(t for t in out.signature.tensors if t.name == name)
    if not isinstance(given, torch.Tensor):
        raise ShapeError(f"replay of {out.directory}: tensor {name!r} must be a torch.Tensor, got {type(given).__name__}")
    short = dtypes.lookup(given.dtype).short
    if list(given.shape) != list(want.shape) or short != want.dtype:
        raise ShapeError(
            f"replay of {out.directory}: tensor {name!r} must be {want.dtype} {tuple(want.shape)}, "
            f"got {short} {tuple(given.shape)}"
        )


def check_runnable(out: CompileOutput, backend: str, reference: bool, arch: str) -> None:
    """EmulationError when ``backend`` would not run the replayed source as it is: an edited source
    under the slice-reference emulator (which runs the tasks' Python references, not CUDA code),
    unless the run is the reference for the edit (``reference``)."""
    if out.edited and backend == "emulated-reference" and not reference:
        raise EmulationError(
            f"{out.edited}. The slice-reference emulator runs the saved task graph with the tasks' Python "
            f"references, not this CUDA source, so it cannot run the edit: replay it with the CUDA bodies "
            f"(emulate=True, --mpk-backend emulate), on a GPU that runs {arch}, or with compile_only=True"
        )


def open_kernel(kernel_class: Any, plan: ReplayPlan, tensors: dict[str, torch.Tensor], overrides: dict[str, Any]) -> Any:
    """A ``kernel_class`` (PersistentKernel) for ``plan``, its tensors bound and attached; params
    errors name the signature file."""
    out = plan.output
    signature = out.directory / f"signature_rank{out.signature.rank}.json"
    try:
        pk = kernel_class(**init_params(plan, overrides))  # checks the saved init parameters too
    except (ConfigError, MemoryBudgetError) as e:
        raise type(e)(f"{signature}: params: {e}") from None
    except MetaTensorError as e:
        if "meta_tensors" in overrides:
            raise
        raise MetaTensorError(f"{out.directory / f'meta_rank{out.signature.rank}.pt'}: {e}; recompile the directory") from None
    check_kernel(out, pk.arch, pk.params.num_workers)
    for name, t in bind(out, tensors, pk.device).items():
        pk.attach_input(t, name)
    for st in out.signature.tensors:  # the ranks' communication memory, allocated again at compile()
        if st.kind == "comm":
            pk.new_comm_tensor(tuple(st.shape), dtypes.from_short(st.dtype).torch, st.name)
    return pk
