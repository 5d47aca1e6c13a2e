"""The life of a compiled kernel on the GPU: upload, launch, harvest results, report errors, free.

``GpuKernel`` owns the loaded module, its device graph and its handle. Launches are asynchronous;
results are harvested in order and the first error of a launch becomes an exception that says
what went wrong, where (a task error in the words of its spec, or the watchdog's record).
"""

from __future__ import annotations

import ctypes
import time

import torch

from .. import contract
from ..codegen import abi
from ..errors import CoResidencyError, KernelError
from ..graph.compiled import CompiledGraph
from . import diagnostics
from .batching import BatchConfig
from .device_graph import DeviceGraph, LaunchConfig
from .launcher import Module
from .transport import PeerHeap


def grid_size(num_workers: int, num_schedulers: int, worker_threads: int) -> int:
    """CTAs of one launch: the workers, then the CTAs holding the scheduler warps."""
    return num_workers + -(-num_schedulers // (worker_threads // 32))


def check_co_residency(module: Module, device: int, launch: LaunchConfig, worker_threads: int) -> None:
    per_sm, sms = module.occupancy(device)
    total = grid_size(launch.num_workers, launch.num_schedulers, worker_threads)
    if per_sm * sms < total:
        sched = total - launch.num_workers
        raise CoResidencyError(
            f"num_workers={launch.num_workers} worker CTAs + {sched} scheduler CTA(s) = {total} CTAs must all be "
            f"resident, but only {per_sm} fit per SM x {sms} SMs = {per_sm * sms} (block {worker_threads} "
            f"threads, {module.dynamic_smem_bytes} B dynamic shared memory); use num_workers <= "
            f"{per_sm * sms - sched} (mpk_runtime.get_configurations_from_gpu gives a fitting pair)"
        )


class GpuKernel:
    def __init__(
        self,
        module: Module,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        launch: LaunchConfig,
        batch: BatchConfig,
        device: torch.device,
        worker_threads: int,
        profiler: torch.Tensor | None = None,
        heap: PeerHeap | None = None,
    ):
        check_co_residency(module, device.index, launch, worker_threads)
        self.module, self.graph, self.launch_config, self.device = module, graph, launch, device
        self.heap = heap  # released by free(), after the last launch
        self.grid = grid_size(launch.num_workers, launch.num_schedulers, worker_threads)
        comm = heap.struct() if heap is not None else None
        self.device_graph = DeviceGraph(graph, tensors, meta, launch, batch, device, profiler, comm)
        self.stopped: str | None = None  # with several ranks: why no launch can run any more
        self.handle: int | None = module.create(device.index)  # None once freed
        self.launches = 0
        self.checked_launches = 0  # launches whose END_OF_TASK_GRAPH bookkeeping was checked
        torch.cuda.synchronize(device)  # uploads complete before any stream launches

    def _live(self) -> int:
        if self.handle is None:
            raise KernelError("the kernel's device resources were freed (finalize()); build a new PersistentKernel")
        return self.handle

    def launch(self, stream: torch.cuda.Stream | None) -> None:
        if self.stopped is not None:
            raise KernelError(self.stopped)
        # The current stream's raw handle, which is all the launch needs: torch.cuda.current_stream() builds
        # a Stream object a call, 3.7 us of a 15.6 us pk() (a 2 x H200 host, 2026-11-30).
        raw = stream.cuda_stream if stream is not None else torch._C._cuda_getCurrentRawStream(self.device.index)
        # One C call harvests the launches that finished and launches (a pk() costs the host about as long
        # as a short launch runs on the GPU). Where one of them failed it launches nothing: raise that error.
        if not self.module.launch(self._live(), self.device_graph.params, self.grid, raw):
            self.harvest(timeout_ms=0)
            raise KernelError("internal: the module refused a launch for an earlier launch's error, but reported none")
        self.launches += 1

    def harvest(self, timeout_ms: int) -> None:
        """Collect finished launches; raise the first error one of them ended with. timeout_ms < 0:
        wait for all; 0: only look; > 0: a KernelError if one still runs then."""
        # Poll in short slices from Python, so that Ctrl-C works while a kernel runs.
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        while True:
            slice_ms = 100 if deadline is None else max(0, min(100, int((deadline - time.monotonic()) * 1000)))
            running = self.module.poll(self._live(), slice_ms)
            if running is None or timeout_ms == 0:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise KernelError(
                    f"the persistent kernel is still running after {timeout_ms / 1000:.1f} s (status code "
                    f"{running.code}, iteration {running.iterations}); a task body may be stuck in a loop that "
                    f"the watchdog cannot stop"
                )
        err = self.module.take_error(self._live())
        if err is None:
            if timeout_ms != 0:  # a synchronize: every launch has finished
                self._check_end_of_task_graph()
            return
        st, index = err
        # Everything before the failed launch has finished; later ones were skipped. Reset the
        # counters so the next launch starts clean, then report.
        self.module.poll(self._live(), -1)
        exc = diagnostics.status_error(st, index, lambda s: self._watchdog_message(s, index), self._task_error_message)
        self.module.take_error(self._live())  # the skipped launches' status: reported by exc already
        self.device_graph.reset()
        torch.cuda.synchronize(self.device)
        if self.heap is not None and self.heap.world_size > 1:
            # The other ranks' signals count launches this rank no longer agrees with: no launch can meet them.
            self.stopped = (
                f"rank {self.heap.rank}: an earlier launch stopped half-way ({type(exc).__name__}); the ranks' "
                f"all-reduce signals are out of step now: build new kernels on every rank"
            )
        raise exc

    def _check_end_of_task_graph(self) -> None:
        """KernelError when the last launch passed END_OF_TASK_GRAPH before every worker signalled
        (see diagnostics.end_of_task_graph_error). Once per launch: a D2H copy of the control block."""
        last = self.module.last_status(self._live())
        if last is None or last.code != contract.STATUS_OK or self.checked_launches == self.launches:
            return
        self.checked_launches = self.launches
        control = self._control()
        message = diagnostics.end_of_task_graph_error(
            self.graph.schedule.end_trigger_count, control.end_count, control.iterations_total, last.end_seen, last.iterations
        )
        if message is not None:
            raise KernelError(message)

    def _control(self) -> abi.MpkControl:
        raw = self.device_graph.control.cpu()
        return abi.MpkControl.from_buffer_copy(ctypes.string_at(raw.data_ptr(), raw.numel() * raw.element_size()))

    def _task_error_message(self, st) -> str:
        control = self._control()
        return diagnostics.task_error_message(
            self.graph, control.task_error_task, control.task_error_code, control.task_error_value
        )

    def _watchdog_message(self, st, launch_index: int) -> tuple[str, list[dict]]:
        dg = self.device_graph
        record = diagnostics.watchdog_record(
            diagnostics.ScheduleView.of(self.graph),
            st.iterations,
            diagnostics.launch_id(launch_index),
            dg.worker_status,
            dg.worker_progress,
            self.heap.last_signal if self.heap is not None else None,
        )
        message = diagnostics.format_watchdog(record, st.iterations, st.idle_ns, self.launch_config.watchdog_timeout)
        if self.heap is not None and self.heap.world_size > 1:
            message = f"rank {self.heap.rank} of {self.heap.world_size}: {message}"
        return message, record

    def free(self) -> None:
        """Free the device resources, once every launch has finished (waiting up to the watchdog's
        timeout plus 10 s). Raises an unreported launch error after freeing."""
        if self.handle is None:
            return
        pending: KernelError | None = None
        try:
            self.harvest(timeout_ms=int((self.launch_config.watchdog_timeout + 10) * 1000))
        except KernelError as e:
            pending = e
        if not self.module.destroy(self.handle, 0):
            pending = KernelError("finalize(): a launch is still running; its resources were left allocated")
        elif self.heap is not None:
            self.heap.close()
        self.handle = None
        self.device_graph = None  # type: ignore[assignment]
        if pending is not None:
            raise pending
