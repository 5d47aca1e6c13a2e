"""PersistentKernel: declare tensors and layers, compile them into one persistent kernel, run it.

    params = PersistentKernel.get_default_init_parameters()
    params["test_mode"] = True
    pk = PersistentKernel(**params)
    x = pk.attach_input(x_tensor, name="x")            # every tensor: inputs, weights, outputs
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.compile(output_dir="out")                        # generate, build (or load from cache)
    pk(); torch.cuda.synchronize()                      # launch; asynchronous like any kernel
    pk.finalize()

Every layer method (``pk.<task>_layer``) is generated from the task registry.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from . import abi, artifacts, build, codegen, diagnostics, dtypes, emulator, gpu, meta, params, shuffle
from .device_graph import DeviceGraph
from .errors import (
    BlockDimError,
    ConfigError,
    CoResidencyError,
    DeviceError,
    GraphError,
    KernelError,
    LayoutError,
    ShapeError,
    StateError,
)
from .graph import DTensor, TaskGraph, check_grid
from .launcher import Module
from .schedule import Schedule, build_schedule
from .tasks import registry
from .tasks.registry import Arg, TaskSpec

ALIGNMENT = 16  # bytes; task bodies use 16-byte vector accesses


class PersistentKernel:
    """One task graph, compiled into one persistent kernel for one GPU (or, with
    ``compile_only=True``, built for a given ``target_cc`` without a GPU)."""

    @classmethod
    def get_default_init_parameters(cls) -> dict[str, Any]:
        """Safe defaults for every init parameter (``test_mode`` is not among them: set it)."""
        return copy.deepcopy(params.DEFAULTS)

    def __init__(self, **init_params: Any):
        p = params.parse(init_params)
        self._p = p
        if p.compile_only or p.emulate:
            self.device = torch.device("cpu")
            self._target_cc = p.target_cc
        else:
            gpu.require_gpu("PersistentKernel")
            self.device = torch.device("cuda", torch.cuda.current_device())
            self._target_cc = p.target_cc or gpu.native_target_cc(self.device.index)
            gpu.check_target_runs(self._target_cc, self.device.index)
        self.meta_tensors: dict[str, torch.Tensor] = meta.build(p, self.device)
        self._profiler = _check_profiler_tensor(p, self.device)
        self._graph = TaskGraph()
        self._module: Module | None = None
        self._schedule: Schedule | None = None
        self._device_graph: DeviceGraph | None = None
        self._handle: int | None = None
        self._launches = 0
        self._graph_json: dict | None = None
        self._profile_pending = False  # a profiled launch whose trace synchronize() will write
        self._replay: tuple[str, dict] | None = None  # (source, graph) of from_artifacts
        self._finalized = False
        self.artifacts: dict[str, Path] = {}
        self.profile_paths: dict[str, Path] = {}  # trace and CSV of the last profiled launch
        self.build_result: build.BuildResult | None = None

    @classmethod
    def from_artifacts(cls, output_dir: str | Path, tensors: dict[str, torch.Tensor], rank: int = 0,
                       **overrides: Any) -> PersistentKernel:
        """A kernel for a directory written by ``compile(output_dir=...)``, for replaying it: its
        ``test_rank{r}.cu`` is built as it is now (an edited file is rebuilt, an unchanged one comes
        from the cache), its task graph is uploaded as saved, and ``tensors`` binds every tensor of
        its signature by name. ``overrides`` change init parameters (e.g. ``emulate=True``)."""
        source, graph, signature, saved_meta = artifacts.read(output_dir, rank)
        init = dict(signature["params"], target_cc=int(signature["arch"][2:]))
        init.update(overrides)
        pk = cls(**init)
        if saved_meta and "meta_tensors" not in overrides:  # the overrides the original run used
            pk._p = dataclasses.replace(pk._p, meta_tensors={k: v.to(pk.device) for k, v in saved_meta.items()})
            pk.meta_tensors = meta.build(pk._p, pk.device)
        if pk.arch != signature["arch"]:
            raise ConfigError(f"{output_dir} was generated for {signature['arch']}; replay it with that target_cc, "
                              f"not {pk.target_cc}")
        if pk.params.num_workers != graph["schedule"]["num_workers"]:
            raise ConfigError(f"{output_dir} was scheduled for num_workers={graph['schedule']['num_workers']}; "
                              f"replay it with the same num_workers, not {pk.params.num_workers}")
        wanted = {t["name"]: t for t in signature["tensors"]}
        tensors = dict(tensors)
        for t in signature["tensors"]:  # recompute what the original run derived (shuffle_tensors)
            recipe = t.get("derived_from")
            if recipe and t["name"] not in tensors and all(i in tensors for i in recipe["inputs"]):
                tensors[t["name"]] = shuffle.shuffle([tensors[i] for i in recipe["inputs"]], recipe["shuffled_dim"],
                                                     recipe["num_groups"])
        unknown = sorted(set(tensors) - set(wanted))
        missing = sorted(set(wanted) - set(tensors))
        if unknown or missing:
            raise GraphError(f"replay of {output_dir}: tensors must match its signature; missing {missing or 'none'}, "
                             f"unknown {unknown or 'none'}")
        for name, want in wanted.items():
            t = tensors[name]
            if list(t.shape) != want["shape"] or dtypes.lookup(t.dtype).short != want["dtype"]:
                raise ShapeError(f"replay of {output_dir}: tensor {name!r} must be {want['dtype']} {tuple(want['shape'])}, "
                                 f"got {dtypes.lookup(t.dtype).short} {tuple(t.shape)}")
            pk.attach_input(t, name)
        pk._replay = (source, graph)
        return pk

    # -- properties ------------------------------------------------------------------------------
    @property
    def test_mode(self) -> bool:
        return self._p.test_mode

    @property
    def target_cc(self) -> int:
        return self._target_cc

    @property
    def arch(self) -> str:
        return gpu.arch_name(self._target_cc)

    @property
    def block_dim(self) -> tuple[int, int, int]:
        """The block_dim every layer call must pass: (worker threads, 1, 1)."""
        return (gpu.worker_threads(self._target_cc), 1, 1)

    @property
    def params(self) -> params.KernelParams:
        return self._p

    @property
    def backend(self) -> str:
        """Where launches run: "gpu", "emulated" (the CPU emulator) or "compile-only" (nowhere)."""
        if self._p.emulate:
            return "emulated"
        return "compile-only" if self._p.compile_only else "gpu"

    def graph_json(self) -> dict:
        """The compiled task graph as written to task_graph_rank{r}.json (tasks, events, schedule)."""
        if self._graph_json is None:
            if self._schedule is None:
                raise StateError("graph_json(): call compile() first")
            self._graph_json = artifacts.graph_json(
                self._graph, self._schedule, self._variants[0], self._variants[1], self.arch, self._p)
        return self._graph_json

    # -- tensors ---------------------------------------------------------------------------------
    def attach_input(self, tensor: torch.Tensor, name: str) -> DTensor:
        """Register a tensor the kernel reads or writes (inputs, weights *and* outputs)."""
        self._check_open("attach_input")
        runs_on = None if self._p.compile_only else self.device  # compile-only takes any device, even "meta"
        if isinstance(tensor, torch.Tensor) and runs_on is not None and tensor.device != runs_on:
            where = "the CPU emulator computes on" if self._p.emulate else "the kernel runs on"
            raise DeviceError(
                f"tensor {name!r} is on {tensor.device}, but {where} {runs_on}; pass tensor.to('{runs_on}')"
            )
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda" and tensor.data_ptr() % ALIGNMENT:
            raise LayoutError(
                f"tensor {name!r} starts at an address that is not {ALIGNMENT}-byte aligned (a view with an offset?); "
                f"pass tensor.clone()"
            )
        return self._graph.add_tensor(tensor, name, "attached")

    def new_tensor(self, dims: tuple[int, ...], dtype: torch.dtype, name: str) -> DTensor:
        """An intermediate tensor owned by the runtime; its data is ``pk.tensor(name)``."""
        self._check_open("new_tensor")
        if not all(isinstance(d, int) and d > 0 for d in dims):
            raise GraphError(f"new_tensor {name!r}: dims={dims!r} must be positive integers")
        data = torch.empty(tuple(dims), dtype=dtype, device=self.device)
        return self._graph.add_tensor(data, name, "intermediate")

    def shuffle_tensors(self, inputs: list[DTensor], shuffled_dim: int, num_groups: int, name: str) -> DTensor:
        """A new tensor interleaving ``inputs`` in ``num_groups`` groups along ``shuffled_dim``:
        [in0_0, in1_0, ..., in0_1, in1_1, ...] (e.g. a gate / up weight for linear + silu_mul). It
        is computed now, from the inputs' current data, and recorded so that replays recompute it."""
        self._check_open("shuffle_tensors")
        owned = [self._graph.own(t, f"inputs[{i}]", "shuffle_tensors()") for i, t in enumerate(inputs)]
        data = shuffle.shuffle([t.data for t in owned], shuffled_dim, num_groups)
        t = self._graph.add_tensor(data, name, "derived")
        t.derived_from = {"op": "shuffle_tensors", "inputs": [x.name for x in owned], "shuffled_dim": shuffled_dim,
                          "num_groups": num_groups}
        return t

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {name: t.data for name, t in self._graph.tensors.items()}

    def tensor(self, name: str) -> torch.Tensor:
        """The torch tensor behind an attached or intermediate tensor."""
        try:
            return self._graph.tensors[name].data
        except KeyError:
            raise GraphError(f"no tensor named {name!r}; known: {', '.join(self._graph.tensors)}") from None

    # -- layers ----------------------------------------------------------------------------------
    def _add_layer(self, spec: TaskSpec, kwargs: dict[str, Any]) -> None:
        self._check_open(spec.layer_method)
        where = f"{spec.layer_method}()"
        if self._module is not None:
            raise StateError(f"{where}: the kernel is already compiled; build a new PersistentKernel for another graph")
        grid = check_grid(kwargs.pop("grid_dim"), where)
        block = kwargs.pop("block_dim")
        threads = self.block_dim[0]
        if (tuple(block) if isinstance(block, (tuple, list)) else block) != self.block_dim:
            raise BlockDimError(
                f"{where}: block_dim={block!r} does not match the {threads} worker threads of {self.arch}; "
                f"pass block_dim=pk.block_dim"
            )
        spec.header_for(self.arch)
        bound, values = spec.bind(kwargs)
        args = [Arg(a.name, self._graph.own(a.tensor, a.name, where), a.partition, a.writes) for a in bound]
        spec.check({a.name: a for a in args}, values, grid)
        self._graph.add_layer(spec, grid, args, values)

    # -- compile and run -------------------------------------------------------------------------
    def compile(self, output_dir: str | Path | None = None) -> None:
        """Generate the dispatcher, build it (or load it from the cache) and, unless compile-only,
        upload the task graph. With ``output_dir``: write test_rank{r}.cu, task_graph_rank{r}.json
        and signature_rank{r}.json there."""
        self._check_open("compile")
        if self._module is not None:
            raise StateError("compile() was already called on this kernel")
        p = self._p
        if self._replay is not None:
            source, self._graph_json = self._replay
            name = codegen.module_name_of(source)
        else:
            if not self._graph.layers:
                raise GraphError("nothing to compile: add layers (pk.<task>_layer(...)) before compile()")
            self._check_intermediates()
            schedule = build_schedule(self._graph, p.num_workers, p.placement)
            variants, variant_of_layer = codegen.collect_variants(self._graph)
            source = codegen.generate(variants, self.arch)
            name = codegen.module_name_of(source)
            self._schedule, self._variants = schedule, (variants, variant_of_layer)
        self.build_result = build.build_module(source, self.arch, name)
        module = Module(self.build_result.path)
        if output_dir is not None:
            self.artifacts = artifacts.write(
                output_dir, p.mpi_rank, source, self.graph_json(), artifacts.signature_json(self._graph, p, self.arch),
                {k: self.meta_tensors[k] for k in p.meta_tensors})
        if self.backend == "gpu":
            self._check_co_residency(module)
            self._device_graph = DeviceGraph(self.graph_json(), self._tensors(), self.meta_tensors, p, self.device,
                                             self._profiler)
            self._handle = module.create(self.device.index)
            torch.cuda.synchronize(self.device)  # uploads complete before any stream launches
        self._module = module  # compiled: only now, so a failed compile leaves nothing half-set

    @property
    def grid_size(self) -> int:
        """CTAs of one launch: the workers, then the CTAs holding the scheduler warps."""
        warps = self.block_dim[0] // 32
        return self._p.num_workers + -(-self._p.num_local_schedulers // warps)

    def _check_co_residency(self, module: Module) -> None:
        per_sm, sms = module.occupancy(self.device.index)
        if per_sm * sms < self.grid_size:
            workers, sched = self._p.num_workers, self.grid_size - self._p.num_workers
            raise CoResidencyError(
                f"num_workers={workers} worker CTAs + {sched} scheduler CTA(s) = {self.grid_size} CTAs must all be "
                f"resident, but only {per_sm} fit per SM x {sms} SMs = {per_sm * sms} (block {self.block_dim[0]} "
                f"threads, {module.dynamic_smem_bytes} B dynamic shared memory); use num_workers <= "
                f"{per_sm * sms - sched} (mpk_runtime.get_configurations_from_gpu gives a fitting pair)"
            )

    def _check_intermediates(self) -> None:
        for t in self._graph.tensors.values():
            if t.kind == "intermediate" and t.read and not t.written:
                raise GraphError(f"intermediate tensor {t.name!r} is read but no layer writes it")

    def __call__(self, default_stream: torch.cuda.Stream | None = None) -> None:
        """Launch the persistent kernel on ``default_stream`` (else the current stream). Returns at
        once; errors of earlier launches that have finished are raised here, or by synchronize(),
        which also writes the trace of a profiled launch."""
        self._check_open("__call__")
        if self._module is None:
            raise StateError("call compile() before running the kernel")
        if self.backend == "compile-only":
            raise StateError(
                f"this kernel was built with compile_only=True for {self.arch}; it cannot run. Build it without "
                f"compile_only on a GPU, or with emulate=True to run it on the CPU emulator"
            )
        if self.backend == "emulated":
            self._launches += 1
            emulator.run(self.graph_json(), self._tensors(), self.meta_tensors,
                         meta.batch_config(self._p, self.meta_tensors), seed=self._launches)
            return
        self._harvest(timeout_ms=0)
        stream = default_stream if default_stream is not None else torch.cuda.current_stream(self.device)
        self._module.launch(self._handle, self._device_graph.params, self.grid_size, stream.cuda_stream)
        self._launches += 1
        self._profile_pending = self._profiler is not None

    def compile_task_bodies(self):
        """The graph's task bodies as plain kernel launches (mpk_runtime.task_bodies.TaskBodies): one
        thread block per task slice, no scheduler, for testing and timing a body by itself."""
        from .task_bodies import TaskBodies

        if self._module is None:
            raise StateError("compile_task_bodies(): call compile() first")
        if self.backend != "gpu":
            raise StateError(f"compile_task_bodies(): task bodies run on the GPU; this kernel is {self.backend}")
        return TaskBodies(self.graph_json(), self._tensors(), self.meta_tensors,
                          meta.batch_config(self._p, self.meta_tensors), self.arch, self.device)

    def write_profile(self, trace_name: str | Path | None = None) -> dict[str, Path]:
        """Write ``<trace_name>.perfetto-trace`` and ``<trace_name>.csv`` from the last profiled launch
        (synchronize() does this itself after a launch with a profiler_tensor)."""
        from . import profiler

        if self._profiler is None:
            raise StateError("write_profile(): pass params['profiler_tensor'] (uint64, on the GPU) to record a profile")
        self._harvest(timeout_ms=-1)
        self._profile_pending = False
        profile = profiler.decode(self._profiler.cpu(), self._p.num_workers, self._p.num_local_schedulers)
        self.profile_paths = profiler.export(profile, self.graph_json(), trace_name or self._p.trace_name)
        return self.profile_paths

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every launch; raise the first error one of them ended with (WatchdogError for a
        hang the device watchdog stopped). With ``timeout`` (seconds), a KernelError if a launch is
        still running then."""
        if self._handle is None or self._module is None:
            return  # emulated launches run synchronously; compile-only ones never run
        self._harvest(timeout_ms=-1 if timeout is None else int(timeout * 1000))
        if self._profile_pending:
            self.write_profile()

    def _harvest(self, timeout_ms: int) -> None:
        # Poll in short slices from Python, so that Ctrl-C works while a kernel runs.
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        while True:
            slice_ms = 100 if deadline is None else max(0, min(100, int((deadline - time.monotonic()) * 1000)))
            running = self._module.poll(self._handle, slice_ms)
            if running is None or timeout_ms == 0:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise KernelError(
                    f"the persistent kernel is still running after {timeout_ms / 1000:.1f} s (status code "
                    f"{running.code}, iteration {running.iterations}); a task body may be stuck in a loop that "
                    f"the watchdog cannot stop"
                )
        err = self._module.take_error(self._handle)
        if err is None:
            return
        st, index = err
        # Everything before the failed launch has finished; later ones were skipped. Reset the
        # counters so the next launch starts clean, then report.
        self._module.poll(self._handle, -1)
        exc = diagnostics.status_error(st, index, lambda s: self._watchdog_message(s, index), self._task_error_message)
        self._module.take_error(self._handle)  # the skipped launches' status: reported by exc already
        self._device_graph.reset()
        torch.cuda.synchronize(self.device)
        raise exc

    def _task_error_message(self, st) -> str:
        raw = self._device_graph.control.cpu()
        control = abi.MpkControl.from_buffer_copy(ctypes.string_at(raw.data_ptr(), raw.numel() * raw.element_size()))
        return diagnostics.task_error_message(self.graph_json(), control.task_error_task, control.task_error_code,
                                              control.task_error_value)

    def _watchdog_message(self, st, launch_index: int) -> tuple[str, list[dict]]:
        dg = self._device_graph
        record = diagnostics.watchdog_record(
            diagnostics.ScheduleView.from_json(self.graph_json()), st.iterations,
            diagnostics.launch_id(launch_index), dg.worker_status, dg.worker_progress)
        return diagnostics.format_watchdog(record, st.iterations, st.idle_ns, self._p.watchdog_timeout), record

    def finalize(self) -> None:
        """Free the kernel's device resources (idempotent). Raises an error a launch ended with that
        was not reported yet, after freeing."""
        if self._finalized:
            return
        self._finalized = True
        pending: KernelError | None = None
        if self._handle is not None:
            try:
                self._harvest(timeout_ms=int((self._p.watchdog_timeout + 10) * 1000))
            except KernelError as e:
                pending = e
            if not self._module.destroy(self._handle, 0):
                pending = KernelError("finalize(): a launch is still running; its resources were left allocated")
            self._handle = None
        self._device_graph = None
        if pending is not None:
            raise pending

    def _check_open(self, what: str) -> None:
        if self._finalized:
            raise StateError(f"{what}: the kernel was finalized; build a new PersistentKernel")


def _check_profiler_tensor(p: params.KernelParams, device: torch.device) -> torch.Tensor | None:
    t = p.profiler_tensor
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.uint64, torch.int64) or t.dim() != 1:
        raise ConfigError(
            f"profiler_tensor must be a 1-D uint64 tensor, got {getattr(t, 'dtype', type(t).__name__)} "
            f"with shape {tuple(getattr(t, 'shape', ()))}; e.g. torch.zeros(3000 * 128, dtype=torch.uint64, device='cuda')"
        )
    if p.compile_only or p.emulate:
        raise ConfigError("profiler_tensor records on the GPU; it cannot be used with compile_only or emulate")
    if t.device != device or not t.is_contiguous():
        raise ConfigError(f"profiler_tensor must be contiguous and on {device}, got {t.device}")
    recorders = p.num_workers + p.num_local_schedulers
    if t.numel() < 3 * recorders:
        raise ConfigError(
            f"profiler_tensor has {t.numel()} entries; it needs at least 3 per recorder ({recorders} workers and "
            f"schedulers), and 2 per task event beyond that: e.g. {recorders * 2 * 64 + recorders} for 64 tasks a worker"
        )
    return t


def _bind_layer_method(spec: TaskSpec) -> None:
    sig = spec.signature()

    def layer(self: PersistentKernel, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{spec.layer_method}(): {e}") from None
        bound.apply_defaults()
        kw = dict(bound.arguments)
        kw.pop("self")
        self._add_layer(spec, kw)

    layer.__name__ = layer.__qualname__ = spec.layer_method
    layer.__signature__ = sig  # type: ignore[attr-defined]
    layer.__doc__ = spec.doc or f"The {spec.name} layer."
    setattr(PersistentKernel, spec.layer_method, layer)


registry.on_register(_bind_layer_method)
