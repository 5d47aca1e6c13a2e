"""The task graph as the persistent kernel reads it: descriptors in queue order, queue offsets,
trigger lists, event counters and control words, all owned by torch tensors on the device, and
the ``MpkKernelParams`` that points at them.

Built from the task graph JSON (``artifacts.graph_json``) and the tensors bound by name, so a live
compile and a replay of a saved compile output directory upload through the same code.
"""

from __future__ import annotations

import ctypes

import torch

from . import abi
from .params import KernelParams

U32_ALL_ONES = -1  # 0xffffffff in an int32 tensor


class DeviceGraph:
    def __init__(self, graph: dict, tensors: dict[str, torch.Tensor], meta: dict[str, torch.Tensor],
                 p: KernelParams, device: torch.device, profiler: torch.Tensor | None = None):
        self.device = device
        schedule = graph["schedule"]
        queues, events = schedule["queues"], schedule["events"]
        self.order = [t for q in queues for t in q]  # descriptor slot -> task id
        self.slot_of = {t: i for i, t in enumerate(self.order)}
        offsets = [0]
        for q in queues:
            offsets.append(offsets[-1] + len(q))
        layers = {layer["id"]: layer for layer in graph["layers"]}
        extra: list[int] = []
        blob = bytearray()
        for tid in self.order:
            task = graph["tasks"][tid]
            blob += pack_task(task, layers[task["layer"]], tensors, events, extra)
        self.wait_counts = {t["id"]: events[t["wait_event"]]["trigger_count"]
                            for t in graph["tasks"] if t["wait_event"] is not None}

        def dev(values, dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        blob = blob or bytearray(abi.TASK_DESC.size)  # the kernel indexes it only through queues
        self.tasks = torch.frombuffer(blob, dtype=torch.uint8).to(device)
        self.queue_offsets = dev(offsets, torch.int32)
        self.triggers = dev([e - (1 << 32) if e >= 1 << 31 else e for e in extra] or [0], torch.int32)
        self.event_counters = torch.zeros(max(1, len(events)), dtype=torch.int64, device=device)
        self.worker_progress = torch.zeros(p.num_workers, dtype=torch.int64, device=device)
        self.worker_status = torch.full((p.num_workers, 2), U32_ALL_ONES, dtype=torch.int32, device=device)
        self.control = torch.zeros(ctypes.sizeof(abi.MpkControl) // 8, dtype=torch.int64, device=device)

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
        self.keep_alive = (tensors, meta, profiler)  # the kernel holds their pointers
        m = {k: v.data_ptr() for k, v in meta.items()}
        self.params = abi.MpkKernelParams(
            tasks=self.tasks.data_ptr(), queue_offsets=self.queue_offsets.data_ptr(),
            triggers=self.triggers.data_ptr(), event_counters=self.event_counters.data_ptr(),
            worker_progress=self.worker_progress.data_ptr(), worker_status=self.worker_status.data_ptr(),
            control=self.control.data_ptr(), status=None,
            profiler_buffer=None if profiler is None else profiler.data_ptr(),
            profiler_capacity=0 if profiler is None else profiler.numel(), launch_id=0,
            num_tasks=len(self.order), num_events=len(events), num_workers=p.num_workers,
            num_schedulers=p.num_local_schedulers, end_trigger_count=sum(1 for q in queues if q),
            watchdog_timeout_ns=int(p.watchdog_timeout * 1e9),
            meta=abi.MpkMeta(
                tokens=m["tokens"], step=m["step"], prompt_lengths=m["prompt_lengths"], input_tokens=m["input_tokens"],
                output_tokens=m["output_tokens"], num_new_tokens=m["num_new_tokens"], qo_indptr=m["qo_indptr_buffer"],
                paged_kv_indptr=m["paged_kv_indptr_buffer"], paged_kv_indices=m["paged_kv_indices_buffer"],
                paged_kv_last_page_len=m["paged_kv_last_page_len_buffer"]),
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


def pack_task(task: dict, layer: dict, tensors: dict[str, torch.Tensor], events: list[dict] | None = None,
              extra: list[int] | None = None) -> bytes:
    """One task's 128-byte descriptor from the task graph JSON, its slices bound to ``tensors``.
    ``events`` None: no wait and no triggers (a task body launched alone, task_bodies.py); else
    further triggers are appended to ``extra``, flagged when their event has a single producer."""
    triggers, wait = (task["triggers"], task["wait_event"]) if events is not None else ([], None)
    single = [events[e]["trigger_count"] == 1 for e in triggers] if events is not None else []
    begin = len(extra) if extra is not None else 0
    if triggers:
        extra.extend(e | (abi.TRIGGER_SINGLE if s else 0) for e, s in zip(triggers[1:], single[1:]))
    flags = abi.FLAG_FIRST_TRIGGER_SINGLE if single[:1] == [True] else 0
    scalars = ([abi.scalar_word(x) for x in layer["scalars"]] + [0, 0])[:2]
    ins = [tensors[s["tensor"]].data_ptr() + s["byte_offset"] for s in task["inputs"]]
    outs = [tensors[s["tensor"]].data_ptr() + s["byte_offset"] for s in task["outputs"]]
    return abi.TASK_DESC.pack(
        task["variant"], layer["opcode"], len(triggers), flags,
        abi.NO_EVENT if wait is None else wait, 0 if wait is None else events[wait]["trigger_count"],
        triggers[0] if triggers else 0, begin, task["id"], layer["id"], *task["grid_idx"], 0, *scalars,
        *ins, *[0] * (7 - len(ins)), *outs, *[0] * (3 - len(outs)),
    )
