"""The task graph as the persistent kernel reads it: descriptors in queue order, queue offsets,
trigger lists, event counters and control words, all owned by torch tensors on the device, and
the ``MpkKernelParams`` that points at them.

Built from the compiled graph and the tensors bound by name, so a live compile and a replay of a
saved compile output directory upload through the same code.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ..codegen import abi
from ..graph.compiled import CompiledGraph
from .batching import BatchConfig

U32_ALL_ONES = -1  # 0xffffffff in an int32 tensor


@dataclass(frozen=True)
class LaunchConfig:
    """What a launch needs besides the graph: the CTA counts and the watchdog."""

    num_workers: int
    num_schedulers: int
    watchdog_timeout: float  # seconds


def batch_state(batch: BatchConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """The scratch of prepare_next_batch (MpkBatchState's arrays), zeroed, by field name; the host
    emulator runs the device's planner on the same layout (run/host_batching.py)."""
    requests = batch.total_num_requests
    sizes = {
        "running": batch.max_num_batched_requests,
        "batch": batch.max_num_batched_requests,
        "request_pages": requests * batch.max_pages_per_request,
        "request_num_pages": requests,
        "page_queue": batch.max_num_pages,
        "counters": abi.BATCH_NUM_COUNTERS,
    }
    state = {name: torch.zeros(n, dtype=torch.int32, device=device) for name, n in sizes.items()}
    # The launch's starting point, read by the first prepare_next_batch: steps already cached, page order.
    state["initial_step"] = torch.tensor(batch.steps_at_launch, dtype=torch.int32).to(device)
    state["page_order"] = torch.tensor(batch.pages_at_launch, dtype=torch.int32).to(device)
    return state


class DeviceGraph:
    def __init__(
        self,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        launch: LaunchConfig,
        batch: BatchConfig,
        device: torch.device,
        profiler: torch.Tensor | None = None,
        comm: abi.MpkComm | None = None,
    ):
        self.device = device
        queues, events = graph.schedule.queues, graph.schedule.events
        self.order = [t for q in queues for t in q]  # descriptor slot -> task id
        self.slot_of = {t: i for i, t in enumerate(self.order)}
        offsets = [0]
        for q in queues:
            offsets.append(offsets[-1] + len(q))
        pointers = {name: t.data_ptr() for name, t in tensors.items()}
        extra: list[int] = []
        blob = bytearray()
        for tid in self.order:
            task = graph.tasks[tid]
            blob += abi.pack_task(task, graph.layers[task.layer], pointers, events, extra)
        self.wait_counts = {t.id: events[t.wait_event].trigger_count for t in graph.tasks if t.wait_event is not None}

        def dev(values, dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        blob = blob or bytearray(abi.TASK_DESC.size)  # the kernel indexes it only through queues
        self.tasks = torch.frombuffer(blob, dtype=torch.uint8).to(device)
        self.queue_offsets = dev(offsets, torch.int32)
        self.triggers = dev([e - (1 << 32) if e >= 1 << 31 else e for e in extra] or [0], torch.int32)
        self.event_counters = torch.zeros(max(1, len(events)), dtype=torch.int64, device=device)
        self.worker_progress = torch.zeros(launch.num_workers, dtype=torch.int64, device=device)
        self.worker_status = torch.full(
            (launch.num_workers, abi.WORKER_STATUS_WORDS), U32_ALL_ONES, dtype=torch.int32, device=device
        )
        self.control = torch.zeros(ctypes.sizeof(abi.MpkControl) // 8, dtype=torch.int64, device=device)

        self.state = batch_state(batch, device)
        self.keep_alive = (tensors, meta, profiler)  # the kernel holds their pointers
        self.params = abi.MpkKernelParams(
            tasks=self.tasks.data_ptr(),
            queue_offsets=self.queue_offsets.data_ptr(),
            triggers=self.triggers.data_ptr(),
            event_counters=self.event_counters.data_ptr(),
            worker_progress=self.worker_progress.data_ptr(),
            worker_status=self.worker_status.data_ptr(),
            control=self.control.data_ptr(),
            status=None,
            profiler_buffer=None if profiler is None else profiler.data_ptr(),
            profiler_capacity=0 if profiler is None else profiler.numel(),
            launch_id=0,
            num_tasks=len(self.order),
            num_events=len(events),
            num_workers=launch.num_workers,
            num_schedulers=launch.num_schedulers,
            end_trigger_count=graph.schedule.end_trigger_count,
            watchdog_timeout_ns=int(launch.watchdog_timeout * 1e9),
            meta=abi.meta_struct(meta),
            batch=abi.batch_struct(batch),
            state=abi.MpkBatchState(**{k: v.data_ptr() for k, v in self.state.items()}),
            comm=comm if comm is not None else abi.MpkComm(),
        )

    def reset(self) -> None:
        """Back to the state of a fresh graph, after a launch stopped half-way."""
        self.event_counters.zero_()
        self.worker_progress.zero_()
        self.control.zero_()
        self.worker_status.fill_(U32_ALL_ONES)

    def set_wait_count(self, task_id: int, count: int) -> None:
        """Test hook: make task ``task_id`` wait for ``count`` increments of its event per iteration,
        e.g. one more than its producers can give, to provoke the watchdog."""
        if task_id not in self.wait_counts:
            raise ValueError(f"task {task_id} waits on no event (its producers, if any, share its worker)")
        offset = self.slot_of[task_id] * abi.TASK_DESC.size + abi.TASK_DESC_OFFSETS["wait_count"]
        self.tasks[offset : offset + 4] = torch.tensor([count], dtype=torch.int32).view(torch.uint8).to(self.device)
