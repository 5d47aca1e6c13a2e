"""How the emulator computes a task and plans a batch: two ways, one interface.

``HostTasks`` runs the real CUDA bodies: the graph's dispatcher built for the host (``build/host.py``),
each task one block of fibers (``host_runner.py``) on guarded copies of the tensors
(``host_memory.py``), its descriptor packed as for the device (``abi.pack_task``), and the device's
prepare_next_batch checked against its model (``host_batching.py``). ``ReferenceTasks`` computes each
task with its spec's slice reference (``TaskSpec.emulate``) and plans with the Python model alone:
quick, and a check of the graph, the schedule and the batching model, but of no line of CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..codegen import abi
from ..errors import EmulationError, KernelError
from ..graph.compiled import CompiledGraph, SliceRef, TaskInfo
from ..tasks import registry
from ..tasks.spec import EmulationContext, TaskFailure
from . import batching, diagnostics
from .host_batching import HostPlanner
from .host_memory import GuardedTensors
from .host_runner import HostModule
from .layer_scratch import LayerScratch
from .meta_check import meta_written
from .task_writes import TaskWrites

MASK64 = (1 << 64) - 1


class Tasks(Protocol):
    """One launch's way of running tasks: ``begin``, then per iteration ``prepare_next_batch`` and
    ``run_task`` for each task, then ``end`` (also after an error)."""

    def begin(self) -> None: ...
    def prepare_next_batch(self, iteration: int) -> bool: ...
    def run_task(self, task: TaskInfo, iteration: int, seed: int) -> None: ...
    def observe(self) -> list[int]: ...  # after an iteration: the tensors made current; the batch's requests
    def end(self) -> None: ...


@dataclass
class ReferenceTasks:
    """Slice references (TaskSpec.emulate) on the tensors themselves; the Python batching model."""

    graph: CompiledGraph
    tensors: dict[str, torch.Tensor]
    meta: dict[str, torch.Tensor]
    cfg: batching.BatchConfig

    def begin(self) -> None:
        self.specs = [registry.get(layer.task) for layer in self.graph.layers]
        self.planner = batching.BatchPlanner(self.cfg, self.meta)
        self.active = (self.cfg.max_num_batched_tokens, 0)

    def observe(self) -> list[int]:
        return list(self.planner.batch)

    def prepare_next_batch(self, iteration: int) -> bool:
        ready = self.planner.prepare_next_batch(iteration)
        self.active = (self.cfg.max_num_batched_tokens, int(self.meta["num_new_tokens"][0]))
        return ready

    def run_task(self, t: TaskInfo, iteration: int, seed: int) -> None:
        layer, spec = self.graph.layers[t.layer], self.specs[t.layer]
        ins, outs = layer.input_names, layer.output_names
        views = {
            n: slice_view(self.tensors, s, spec.token_dims.get(n), self.active) for n, s in zip(ins + outs, t.inputs + t.outputs)
        }
        if any(views[n].numel() == 0 for n in spec.token_dims if n in views):
            return  # no live rows
        ctx = EmulationContext(t.grid_idx, layer.grid, self.meta, self.cfg, iteration)
        try:
            spec.emulate({n: views[n] for n in ins}, {n: views[n] for n in outs}, layer.values, ctx)
        except TaskFailure as f:
            raise KernelError(
                f"emulated iteration {iteration}: {diagnostics.task_error_message(self.graph, t.id, f.code, f.value)}"
            ) from None

    def end(self) -> None:
        pass


def slice_view(tensors: dict[str, torch.Tensor], s: SliceRef, token_dim: int | None, active: tuple[int, int]) -> torch.Tensor:
    """A task's slice of a tensor; along a token dimension of max_num_batched_tokens rows (``active``:
    that count and the iteration's active tokens), only the live rows (Runtime::active_rows)."""
    t = tensors[s.tensor]
    bounds = list(zip(s.lo, s.hi))
    max_tokens, num_active = active
    if token_dim is not None and t.shape[token_dim] == max_tokens:
        lo, hi = bounds[token_dim]
        bounds[token_dim] = (lo, max(lo, min(hi, num_active)))
    return t[tuple(slice(lo, hi) for lo, hi in bounds)]


class HostTasks:
    """The CUDA bodies compiled for the host, on guarded copies of the tensors (allocated once per
    kernel, copied in and out per launch). ``check``: a race-checking module (races, uninitialized
    shared memory, misalignment) that also bounds every global access by the task's slices.
    ``time_limit_s``: a task still running after that many seconds is stopped and reported as a hang."""

    def __init__(
        self,
        module: HostModule,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        cfg: batching.BatchConfig,
        check: bool = False,
        time_limit_s: int = 0,
    ):
        self.module, self.graph, self.meta, self.cfg, self.check = module, graph, meta, cfg, check
        self.time_limit_s = time_limit_s
        written = {t.name for t in graph.tensors if t.direction != "IN"}
        self.memory = GuardedTensors(module, tensors, meta, written)
        self.meta_written = meta_written(meta, [tensors[n] for n in written])
        self.descs = [abi.pack_task(t, graph.layers[t.layer], self.memory.pointers) for t in graph.tasks]
        self.task_memory = [self.memory.task_memory(graph, t) if check else self.memory.memory for t in graph.tasks]
        self.structs = (abi.meta_struct(self.memory.meta), abi.batch_struct(cfg))
        self.writes = TaskWrites(graph, self.memory.views)
        self.scratch = LayerScratch(graph, self.memory.views, self.memory.pointers, module.device_variables())
        # The Runtime's launch id and iterations, as the GPU's (runtime/host.cuh, worker.cuh): state a
        # task tags with them is seen at a relaunch as there.
        self.launches = self.iterations_before = self.iterations = 0

    def begin(self) -> None:
        self.launches += 1
        self.iterations_before += self.iterations
        self.iterations = 0
        self.memory.copy_in()
        self.planner = HostPlanner(self.module, self.cfg, self.memory.meta, self.meta_written)

    def prepare_next_batch(self, iteration: int) -> bool:
        self.writes.new_iteration()
        self.scratch.new_iteration()
        self.iterations = iteration
        return self.planner.prepare_next_batch(iteration)

    def run_task(self, t: TaskInfo, iteration: int, seed: int) -> None:
        # The threads' order between synchronization points: shuffled, from the launch, task and iteration.
        order_seed = (seed * 0x9E3779B97F4A7C15 + t.id * 0xBF58476D1CE4E5B9 + iteration) & MASK64
        before, scratch_before = self.writes.before(t), self.scratch.before(t)
        run = self.module.run_task(
            t.variant,
            self.descs[t.id],
            *self.structs,
            order="shuffled",
            seed=order_seed,
            memory=self.task_memory[t.id],
            check_slices=self.check,
            time_limit_s=self.time_limit_s,
            runtime=((self.launches - 1) % 0xFFFFFFFE + 1, iteration, self.iterations_before + iteration),
        )
        report = run.report
        if run.ok:
            if (pad := self.memory.pad_writes()) is not None:
                report = f"out-of-bounds access in task {t.id}: {pad}"
            elif (meta := self.planner.task_writes()) is not None:
                report = f"write into a meta tensor in task {t.id}: {meta}"
            elif (wrote := self.writes.after(t, before)) is not None:
                report = f"write outside the task's part of an output in task {t.id}: {wrote}"
            elif scratch_before and (shared := self.scratch.after(t, scratch_before, self.module.atomic_words())):
                report = f"scratch shared by plain stores in task {t.id}: {shared}"
            else:
                return
        elif run.task_error is not None:
            code, value = run.task_error
            raise KernelError(f"emulated iteration {iteration}: {diagnostics.task_error_message(self.graph, t.id, code, value)}")
        layer = self.graph.layers[t.layer]
        where = f"emulated iteration {iteration}, task {t.id} {t.label} (layer {layer.name}, {layer.task})"
        raise EmulationError(f"{where}: {report}", report)

    def observe(self) -> list[int]:
        self.memory.copy_out()  # the tensors the tasks wrote, from the emulator's guarded copies
        model = self.planner.model
        return list(model.batch) if model is not None else []

    def end(self) -> None:
        self.memory.copy_out()
        self.module.release_stacks()  # after each launch: see HostModule.release_stacks

    def free(self) -> None:
        self.memory.free()
