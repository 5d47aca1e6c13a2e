"""The task graph as the persistent kernel reads it: descriptors in queue order, queue offsets,
trigger lists, event counters and control words, all owned by torch tensors on the device, and
the ``MpkKernelParams`` that points at them."""

from __future__ import annotations

import ctypes

import torch

from . import abi
from .graph import TaskGraph
from .params import KernelParams
from .schedule import Schedule

U32_ALL_ONES = -1  # 0xffffffff in an int32 tensor


class DeviceGraph:
    def __init__(self, graph: TaskGraph, schedule: Schedule, variant_of_layer: dict[int, int],
                 meta: dict[str, torch.Tensor], p: KernelParams, device: torch.device):
        self.device = device
        self.order = [t for q in schedule.queues for t in q]  # descriptor slot -> task id
        self.slot_of = {t: i for i, t in enumerate(self.order)}
        offsets = [0]
        for q in schedule.queues:
            offsets.append(offsets[-1] + len(q))
        extra: list[int] = []
        blob = bytearray()
        for tid in self.order:
            blob += _pack(graph, schedule, variant_of_layer, tid, extra)
        self.wait_counts = {tid: schedule.events[e].trigger_count
                            for tid, e in enumerate(schedule.wait_event) if e is not None}

        def dev(values, dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        blob = blob or bytearray(abi.TASK_DESC.size)  # the kernel indexes it only through queues
        self.tasks = torch.frombuffer(blob, dtype=torch.uint8).to(device)
        self.queue_offsets = dev(offsets, torch.int32)
        self.triggers = dev([e - (1 << 32) if e >= 1 << 31 else e for e in extra] or [0], torch.int32)
        self.event_counters = torch.zeros(max(1, len(schedule.events)), dtype=torch.int64, device=device)
        self.worker_progress = torch.zeros(p.num_workers, dtype=torch.int64, device=device)
        self.worker_status = torch.full((p.num_workers, 2), U32_ALL_ONES, dtype=torch.int32, device=device)
        self.control = torch.zeros(_words(abi.MpkControl), dtype=torch.int64, device=device)

        requests = int(meta["tokens"].shape[0])
        pages_per_request = -(-p.max_seq_length // p.page_size)
        self.state = {
            "running": torch.zeros(p.max_num_batched_requests, dtype=torch.int32, device=device),
            "batch": torch.zeros(p.max_num_batched_requests, dtype=torch.int32, device=device),
            "request_pages": torch.zeros(requests * pages_per_request, dtype=torch.int32, device=device),
            "request_num_pages": torch.zeros(requests, dtype=torch.int32, device=device),
            "page_queue": torch.zeros(p.max_num_pages, dtype=torch.int32, device=device),
            "counters": torch.zeros(abi.BATCH_NUM_COUNTERS, dtype=torch.int32, device=device),
        }
        self.meta = meta  # kept alive: the kernel holds their pointers
        self.params = abi.MpkKernelParams(
            tasks=self.tasks.data_ptr(), queue_offsets=self.queue_offsets.data_ptr(),
            triggers=self.triggers.data_ptr(), event_counters=self.event_counters.data_ptr(),
            worker_progress=self.worker_progress.data_ptr(), worker_status=self.worker_status.data_ptr(),
            control=self.control.data_ptr(), status=None, profiler_buffer=None, profiler_capacity=0, launch_id=0,
            num_tasks=len(self.order), num_events=len(schedule.events), num_workers=p.num_workers,
            num_schedulers=p.num_local_schedulers, end_trigger_count=sum(1 for q in schedule.queues if q),
            watchdog_timeout_ns=int(p.watchdog_timeout * 1e9),
            meta=abi.MpkMeta(
                tokens=meta["tokens"].data_ptr(), step=meta["step"].data_ptr(),
                prompt_lengths=meta["prompt_lengths"].data_ptr(), input_tokens=meta["input_tokens"].data_ptr(),
                output_tokens=meta["output_tokens"].data_ptr(), num_new_tokens=meta["num_new_tokens"].data_ptr(),
                qo_indptr=meta["qo_indptr_buffer"].data_ptr(), paged_kv_indptr=meta["paged_kv_indptr_buffer"].data_ptr(),
                paged_kv_indices=meta["paged_kv_indices_buffer"].data_ptr(),
                paged_kv_last_page_len=meta["paged_kv_last_page_len_buffer"].data_ptr()),
            batch=abi.MpkBatchConfig(
                max_num_batched_tokens=p.max_num_batched_tokens, max_num_batched_requests=p.max_num_batched_requests,
                max_num_pages=p.max_num_pages, page_size=p.page_size, max_seq_length=p.max_seq_length,
                total_num_requests=requests, max_pages_per_request=pages_per_request, test_mode=int(p.test_mode),
                eos_token_id=p.eos_token_id),
            state=abi.MpkBatchState(**{k: v.data_ptr() for k, v in self.state.items()}),
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
        self.tasks[offset:offset + 4] = torch.tensor([count], dtype=torch.int32).view(torch.uint8).to(self.device)


def _words(cls) -> int:
    return ctypes.sizeof(cls) // 8


def _pack(graph: TaskGraph, schedule: Schedule, variant_of_layer: dict[int, int], tid: int, extra: list[int]) -> bytes:
    t = graph.tasks[tid]
    layer = t.layer
    triggers = schedule.triggers[tid]
    wait = schedule.wait_event[tid]
    scalars = (layer.spec.scalar_values(layer.values) + [0.0, 0.0])[:2]
    ins = [s.tensor.data.data_ptr() + s.byte_offset for s in t.reads] + [0] * (7 - len(t.reads))
    outs = [s.tensor.data.data_ptr() + s.byte_offset for s in t.writes] + [0] * (3 - len(t.writes))
    single = [schedule.events[e].trigger_count == 1 for e in triggers]
    begin = len(extra)
    extra.extend(e | (abi.TRIGGER_SINGLE if s else 0) for e, s in zip(triggers[1:], single[1:]))
    flags = abi.FLAG_FIRST_TRIGGER_SINGLE if single[:1] == [True] else 0
    return abi.TASK_DESC.pack(
        variant_of_layer[layer.id], layer.spec.opcode, len(triggers), flags,
        abi.NO_EVENT if wait is None else wait, 0 if wait is None else schedule.events[wait].trigger_count,
        triggers[0] if triggers else 0, begin, tid, layer.id, *t.grid_idx, 0, *scalars, *ins, *outs,
    )
