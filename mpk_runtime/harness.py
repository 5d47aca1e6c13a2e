"""The entry points the pytest plugin (pytest_mpk) uses besides the public API. Everything else in
mpk_runtime is private to the runtime; keeping this list short keeps the plugin honest.

    ARCH_NAMES                 the build targets, from the one arch table
    PORTABLE_ARCHS             those whose code runs on every supported GPU (PTX, JIT-compiled)
    native_arch(index)         the arch whose code runs natively on GPU ``index`` ("sm90"...)
    find_reference(...)        a layer's canonical PyTorch reference (reference/<layer>/...)
    read_compile_output(d, r)  a compile output directory, checked (for replays)
    signature_arch(path)       the arch a signature file names (GraphError naming the file otherwise)
    check_memory(...)          MemoryBudgetError unless tensors of these shapes fit (mpk_runtime.memory)
    torch_dtype(short)         the torch dtype of a name in a signature ("bf16" -> torch.bfloat16)
    META_TENSOR_NAMES          the meta tensors' names (a scene output of that name is that meta tensor)
    META_LAUNCH_INPUTS         those a launch reads as given; META_PLANNED: those prepare_next_batch fills
    draw_swimlane(csv, png, t) the swimlane picture of a profile CSV
    mpi_job()                  (world size, rank, local rank) when started by mpirun, without starting MPI
    mpi_world()                the ranks' keyed message channel (MPI started), None outside an MPI job
    first_batch_meta(params)   the meta tensors of the first iteration, from init parameters (the model)
    model_batches(params)      ... and of every iteration of a launch
    CSRC                       the csrc directory the builds include (sanitizer findings name files in it)
    check_test_launch(pk, m)   after a test-mode launch on the GPU: the meta tensors against the batching model
    build_for(pk, on_gpu)      the nvcc build compile() makes of pk's graph on the GPU or off it (prebuilds)
    near_hint(name, known, l)  "did you mean 'x'?" or the known names, for a message (mpk_runtime.errors)
    shown(value)               a value for a message: its repr, cut short, and its type
    token_dim(task, arg)       the dim of a task argument that holds the iteration's token rows, or None
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .archs import ARCHS
from .archs import NAMES as ARCH_NAMES
from .contract import META_LAUNCH_INPUTS, META_PLANNED, WATCHDOG_MAX_S
from .contract import META_TENSORS as META_TENSOR_NAMES
from .errors import near_hint, shown
from .resources import CSRC

PORTABLE_ARCHS: tuple[str, ...] = tuple(a.name for a in ARCHS.values() if not a.native)


def native_arch(index: int) -> str:
    from .run.gpu import native_arch as arch

    return arch(index).name


def find_reference(function: str, search: list[Path] | None = None, layer: str | None = None) -> Any:
    from .tasks.references import find

    return find(function, search=search, layer=layer)


def find_reference_in(function: str, search: list[Path] | None = None, layer: str | None = None) -> tuple[Any, Path]:
    """``find_reference``, and the ``pytorch_reference.py`` it took the function from."""
    from .tasks.references import find_in

    return find_in(function, search=search, layer=layer)


def read_compile_output(directory: str | Path, rank: int) -> Any:
    from .build.artifacts import read

    return read(directory, rank)


def signature_arch(path: str | Path) -> str:
    from .build.artifacts import signature_arch as arch

    return arch(Path(path))


def check_memory(tensors: list[tuple[str, tuple[int, ...], str]], device: Any, where: str, copies: int = 1) -> None:
    """MemoryBudgetError, before anything is allocated, unless ``copies`` copies of each tensor
    (name, shape, dtype short name) fit the memory budget of ``device``."""
    from . import memory
    from .dtypes import from_short

    needs = []
    for name, shape, dtype in tensors:
        need = memory.tensor_need(f"tensor {name!r}", shape, from_short(dtype))
        needs.append(memory.Need(need.what if copies == 1 else f"{need.what} x {copies} copies", need.nbytes * copies))
    memory.check(needs, device, where, "the shapes are too large for this machine")


def torch_dtype(short: str) -> Any:
    from .dtypes import from_short

    return from_short(short).torch


def draw_swimlane(csv: str | Path, png: str | Path, title: str) -> None:
    from .profile.stats import read_csv
    from .profile.swimlane import draw

    draw(read_csv(csv), str(png), title)


def mpi_job() -> tuple[int, int, int] | None:
    from .run.bootstrap import launched

    return launched()


def mpi_world() -> Any:
    from .run.bootstrap import world

    return world()


def first_batch_meta(init_params: dict[str, Any]) -> dict[str, Any]:
    """The meta tensors as prepare_next_batch leaves them before the first iteration, for
    PersistentKernel init parameters ``init_params`` (their ``meta_tensors`` too), computed on the CPU
    by the Python model of prepare_next_batch, which the device matches: the page table a request
    gets (so that a test can fill the KV cache of its history before the run), qo_indptr, ..."""
    planner, m = _planner("first_batch_meta", init_params)
    planner.prepare_next_batch(0)
    return m


def model_batches(init_params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The meta tensors of every iteration one launch runs (a copy each), for init parameters
    ``init_params``, from the Python model of prepare_next_batch (test mode: one iteration; offline:
    until every request is done). The sampled tokens are whatever output_tokens holds (zeros)."""
    planner, m = _planner("model_batches", init_params)  # checked now, not at the first next()
    return _batches(planner, m)


def _batches(planner: Any, m: dict[str, Any]) -> Iterator[dict[str, Any]]:
    iteration = 0
    while planner.prepare_next_batch(iteration):
        yield {k: v.clone() for k, v in m.items()}
        iteration += 1


def _planner(what: str, init_params: Any) -> tuple[Any, dict[str, Any]]:
    """The batching model on CPU copies of the meta tensors of ``init_params``, checked as
    PersistentKernel checks them (ConfigError / MetaTensorError naming the value and the fix)."""
    import torch

    from .errors import ConfigError
    from .frontend import meta, params
    from .run.batching import BatchPlanner

    if not isinstance(init_params, dict):
        raise ConfigError(f"{what}: {shown(init_params)} is no dict of PersistentKernel init parameters")
    params.check_names(what, init_params, [*params.names(), "test_mode"])
    init = {k: v for k, v in init_params.items() if k in params.DEFAULTS or k == "test_mode"}
    given = init_params.get("meta_tensors", {})
    if isinstance(given, dict):  # copies; what cannot be copied (no tensor, no data) meta.build refuses
        given = {k: v.detach().cpu().clone() if isinstance(v, torch.Tensor) and not v.is_meta else v for k, v in given.items()}
    init["meta_tensors"] = given
    p = params.parse(init)
    m = meta.build(p, torch.device("cpu"))
    return BatchPlanner(meta.batch_config(p, m), m), m


def token_dim(task: str, arg: str) -> int | None:
    from .tasks import registry

    if task not in registry.names():  # a replayed graph's task this process never registered
        return None
    return registry.get(task).token_dims.get(arg)


def source_of(pk: Any) -> str:
    """The generated source that compile() of ``pk``'s graph builds."""
    from .frontend.lowering import lower

    return lower(pk._graph, pk.params, pk.arch)[0]


def build_cubins(sources: list[str], arch: str) -> list[str]:
    """The device-only builds of ``sources`` for ``arch`` that the cache lacks, several in one nvcc
    run (build/cubin_batch.py): the names of the entries built. What it leaves out, each case builds."""
    from .build.cubin_batch import build_cubins as batched

    return batched(sources, arch)


def build_for(pk: Any, on_gpu: bool) -> Any:
    """The nvcc build (a BuildResult) that compile() of ``pk``'s graph makes for a kernel on the GPU
    (``on_gpu``: the shared library) or off it (the cubin), without compiling ``pk``: a compile-only
    ``pk`` prebuilds a GPU case's module without a GPU, whose compile() then finds it in the cache."""
    from .frontend.compiling import build

    return build(source_of(pk), pk.arch, on_gpu)


__all__ = [
    "build_cubins",
    "build_for",
    "source_of",
    "first_batch_meta",
    "model_batches",
    "ARCH_NAMES",
    "CSRC",
    "META_LAUNCH_INPUTS",
    "META_PLANNED",
    "META_TENSOR_NAMES",
    "PORTABLE_ARCHS",
    "draw_swimlane",
    "find_reference",
    "mpi_job",
    "mpi_world",
    "check_memory",
    "native_arch",
    "near_hint",
    "read_compile_output",
    "shown",
    "signature_arch",
    "token_dim",
    "torch_dtype",
    "WATCHDOG_MAX_S",
]


def check_test_launch(pk: Any, before: dict[str, Any]) -> None:
    """After a test-mode launch of ``pk`` on the GPU, finished: KernelError unless its meta tensors are
    what the Python model of prepare_next_batch makes of ``before`` (them, on the CPU, before the
    launch). The emulator checks the same at every call of prepare_next_batch by itself."""
    from .run import meta_check

    after = {k: v.detach().cpu().clone() for k, v in pk.meta_tensors.items()}
    names = {t.name for t in pk.compiled_graph.tensors if t.direction != "IN"}
    data = [getattr(pk._graph.tensors.get(n), "data", None) for n in names]
    written = meta_check.meta_written(pk.meta_tensors, [d for d in data if d is not None])
    meta_check.check_test_launch(pk._batch, before, after, written)


def launch_state(pk: Any) -> list[str]:
    """What a launch of the compiled ``pk`` leaves for the next that the harness does not reset:
    its layers' workspaces and, running CUDA bodies on the emulator, its host module's ``__device__``
    variables (module_variables). A slice-reference run keeps none."""
    if pk.backend == "emulated-reference":
        return []
    return [t.name for t in pk.compiled_graph.tensors if t.kind == "workspace"] + module_variables(pk)


def module_variables(pk: Any) -> list[str]:
    """The ``__device__`` variables of the host module an emulated ``pk`` runs: they keep their values
    from launch to launch and from case to case (a process loads a module once). ["?"] when readelf
    cannot list them; [] for a GPU or compile-only kernel (a cubin's are not listed)."""
    if pk.host_build_result is None:
        return []
    from .run.device_variables import device_variables

    variables = device_variables(pk.host_build_result.path)
    return ["?"] if variables is None else list(variables)
