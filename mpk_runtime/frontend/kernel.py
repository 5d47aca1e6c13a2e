"""PersistentKernel: declare tensors and layers, compile them into one persistent kernel, run it
(README's Quick start shows its use). A facade over the pipeline: graph/ (tasks, dependencies,
schedule), codegen/ (the source), build/ (nvcc, the cache, compile outputs), run/ (the GPU or the
emulator). Every layer method (``pk.<task>_layer``) is generated from the task registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..build import artifacts, replay
from ..build.cache import BuildResult
from ..errors import ConfigError, StateError
from ..graph import CompiledGraph, TaskGraph
from ..run import gpu
from ..run.emulator import EmulatedKernel
from ..run.start import Runner
from ..tasks.spec import TaskSpec
from . import meta, params
from .compiling import KernelState, compile_kernel
from .declarations import TensorDeclarations
from .layers import add_layer, bind_layer_methods


class PersistentKernel(TensorDeclarations):
    """One task graph, compiled into one persistent kernel for one GPU (or, with
    ``compile_only=True``, built for a given ``target_cc`` without a GPU)."""

    @classmethod
    def get_default_init_parameters(cls) -> dict[str, Any]:
        """Safe defaults for every init parameter (``test_mode`` is not among them: set it). Under
        mpirun (with mpi4py), world_size and mpi_rank are MPI.COMM_WORLD's size and rank."""
        return params.defaults()

    def __init__(self, **init_params: Any):
        p = params.parse(init_params)
        self._p = p
        if p.world_size > 1 and not (p.compile_only or p.emulate):
            gpu.select_rank_device(p.mpi_rank)
        self.device, self._arch = gpu.device_and_arch(p.target_cc, on_cpu=p.compile_only or bool(p.emulate))
        self.meta_tensors: dict[str, torch.Tensor] = meta.build(p, self.device)
        # The launch state (initial steps, page order) as given now: launches change the tensors.
        self._batch = meta.batch_config(p, self.meta_tensors)
        self._profiler = params.check_profiler_tensor(p, self.device)
        self._graph = TaskGraph()
        self._compiled: CompiledGraph | None = None
        self._runner: Runner | None = None  # where launches run
        self._profile_pending = False  # a profiled launch whose trace synchronize() will write
        self._replay: artifacts.CompileOutput | None = None  # what from_artifacts read
        self._replay_reference = False  # from_artifacts(reference=True)
        self._finalized = False
        self.artifacts: dict[str, Path] = {}
        self.profile_paths: dict[str, Path] = {}  # trace and CSV of the last profiled launch
        self.build_result: BuildResult | None = None  # the nvcc build: a cubin unless the kernel runs on the GPU
        self.host_build_result: BuildResult | None = None  # the host build (emulate=True)

    @classmethod
    def from_artifacts(
        cls,
        output_dir: str | Path,
        tensors: dict[str, torch.Tensor],
        rank: int = 0,
        *,
        reference: bool = False,
        **overrides: Any,
    ) -> PersistentKernel:
        """A kernel replaying a ``compile(output_dir=...)`` directory: its ``test_rank{r}.cu`` built as
        it is now (edited or not), its task graph as saved, ``tensors`` bound by signature name
        (intermediates may be left out), ``overrides`` changing init parameters. The slice-reference
        emulator refuses an edited source (EmulationError) unless ``reference=True`` (a replay's golden)."""
        plan = replay.plan(output_dir, rank)
        pk = replay.open_kernel(cls, plan, tensors, overrides)
        pk._replay = plan.output
        pk._replay_reference = reference
        return pk

    @property
    def test_mode(self) -> bool:
        return self._p.test_mode

    @property
    def target_cc(self) -> int:
        return self._arch.cc

    @property
    def arch(self) -> str:
        return self._arch.name

    @property
    def world_size(self) -> int:
        """The ranks (one process and GPU each) that run this graph together."""
        return self._p.world_size

    @property
    def rank(self) -> int:
        """This kernel's rank (``mpi_rank``)."""
        return self._p.mpi_rank

    @property
    def block_dim(self) -> tuple[int, int, int]:
        """The block_dim every layer call must pass: (worker threads, 1, 1)."""
        return (self._arch.worker_threads, 1, 1)

    @property
    def params(self) -> params.KernelParams:
        return self._p

    @property
    def backend(self) -> str:
        """Where launches run: "gpu", "emulated" (the CUDA task bodies on the CPU emulator),
        "emulated-reference" (the emulator with each task's PyTorch slice reference) or
        "compile-only" (nowhere)."""
        if self._p.emulate:
            return "emulated" if self._p.emulate is True else "emulated-reference"
        return "compile-only" if self._p.compile_only else "gpu"

    @property
    def compiled_graph(self) -> CompiledGraph:
        """The compiled task graph (tasks, slices, dependencies, schedule), after compile()."""
        if self._compiled is None:
            raise StateError("compiled_graph: call compile() first")
        return self._compiled

    def _add_layer(self, spec: TaskSpec, kwargs: dict[str, Any]) -> None:
        self._check_open(spec.layer_method)
        add_layer(self._graph, spec, kwargs, self.block_dim, self.arch, self._compiled is not None, self._p, self.device)

    def compile(self, output_dir: str | Path | None = None) -> None:
        """Generate the dispatcher, build it (or load it from the cache) and, unless compile-only,
        upload the task graph. With ``output_dir``: write test_rank{r}.cu, task_graph_rank{r}.json
        and signature_rank{r}.json there."""
        self._check_open("compile")
        if self._compiled is not None:
            raise StateError("compile() was already called on this kernel")
        state = KernelState(
            self._graph, self._p, self.arch, self.backend, self.device, self.meta_tensors, self._batch,
            self.block_dim[0], self._profiler, self._replay, self._replay_reference,
        )  # fmt: skip
        done = compile_kernel(state, output_dir)
        self.build_result, self.host_build_result, self._runner = done.build_result, done.host_build_result, done.runner
        self.artifacts = done.artifacts or self.artifacts
        self._compiled = done.graph  # compiled: only now, so a failed compile leaves nothing half-set

    def __call__(self, default_stream: torch.cuda.Stream | None = None) -> None:
        """Launch the persistent kernel on ``default_stream`` (else the current stream). Returns at
        once; errors of earlier launches that have finished are raised here, or by synchronize(),
        which also writes the trace of a profiled launch."""
        self._check_open("__call__")
        if self._compiled is None:
            raise StateError("call compile() before running the kernel")
        if self._runner is None:
            raise StateError(
                f"this kernel was built with compile_only=True for {self.arch}; it cannot run. Build it "
                f"without compile_only on a GPU, or with emulate=True to run it on the CPU emulator"
            )
        self._graph.check_unchanged("launch")
        self._runner.launch(default_stream)
        self._profile_pending = self._profiler is not None

    def observe_iterations(self, callback) -> None:
        """Emulated: ``callback(iteration, requests of the batch slots)`` after every iteration of a launch."""
        if self._compiled is None:
            raise StateError("observe_iterations(): call compile() first")
        if not isinstance(self._runner, EmulatedKernel):
            raise StateError(f"observe_iterations(): needs an emulated kernel (emulate=True); this one is {self.backend}")
        if not callable(callback):  # else a TypeError inside the emulator, at the first iteration
            raise ConfigError(f"observe_iterations(): callback={callback!r} must be callable as callback(iteration, requests)")
        self._runner.observer = callback

    def compile_task_bodies(self):
        """The graph's task bodies as plain kernel launches (mpk_runtime.run.task_bodies.TaskBodies): one
        thread block per task slice, no scheduler, for testing and timing a body by itself."""
        from ..run.task_bodies import TaskBodies

        if self._compiled is None:
            raise StateError("compile_task_bodies(): call compile() first")
        if self.backend != "gpu":
            raise StateError(f"compile_task_bodies(): task bodies run on the GPU; this kernel is {self.backend}")
        tensors = {name: t.data for name, t in self._graph.tensors.items()}
        return TaskBodies(self._compiled, tensors, self.meta_tensors, self._batch, self.arch, self.device)

    def write_profile(self, trace_name: str | Path | None = None) -> dict[str, Path]:
        """Write ``<trace_name>.perfetto-trace`` and ``<trace_name>.csv`` from the last profiled launch
        (synchronize() does this itself after a launch with a profiler_tensor)."""
        from ..profile.trace import write_profile

        if self._profiler is None or self._runner is None:
            raise StateError("write_profile(): pass params['profiler_tensor'] (uint64, on the GPU) to record a profile")
        self._runner.harvest(timeout_ms=-1)
        self._profile_pending = False
        p = self._p
        name = trace_name or p.trace_name
        self.profile_paths = write_profile(self._profiler, self.compiled_graph, p.num_workers, p.num_local_schedulers, name)
        return self.profile_paths

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every launch; raise the first error one of them ended with (WatchdogError for a
        hang the device watchdog stopped). With ``timeout`` (seconds), a KernelError if a launch is
        still running then. Before compile(), after finalize() and for a compile-only kernel nothing
        can be running: it returns at once."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf")
        ):
            raise ConfigError(f"synchronize(): timeout={timeout!r} must be a number of seconds >= 0, or None to wait for ever")
        if self._runner is None or self._finalized:
            return
        self._runner.harvest(timeout_ms=-1 if timeout is None else int(timeout * 1000))
        if self._profile_pending:
            self.write_profile()

    def finalize(self) -> None:
        """Free the kernel's device resources (idempotent). Raises an error a launch ended with that
        was not reported yet, after freeing."""
        if self._finalized:
            return
        self._finalized = True
        if self._runner is not None:
            self._runner.free()  # a GpuKernel also releases the communication heap

    def _check_open(self, what: str) -> None:
        if self._finalized:
            raise StateError(f"{what}: the kernel was finalized; build a new PersistentKernel")


bind_layer_methods(PersistentKernel)
