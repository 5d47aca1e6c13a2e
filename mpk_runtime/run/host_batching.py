"""The device's prepare_next_batch, run on the host next to its Python model, compared after every call.

``csrc/runtime/prepare_next_batch.cuh`` (``batching::Planner``) is built into every host module; here
a warp of fibers runs it as the controller warp does (the whole warp resets the state at the start of
a launch, lane 0 plans), on the launch's meta tensors and a batching state laid out as the device's
(``device_graph.batch_state``). ``batching.BatchPlanner``, the Python model, plans the same call on a
copy of the meta tensors taken just before it. Any difference in any meta tensor afterwards is an
EmulationError naming the field, the element and the iteration: the device code and its model
disagree, and the device's plan is what the task bodies would have read. Between two calls the
tasks may change only the meta tensors a layer writes (``written``: a sampling layer's output
tokens); a change to any other is the task's bug, found after each task (``task_writes``).
"""

from __future__ import annotations

import torch

from .. import contract
from ..codegen import abi
from ..errors import EmulationError
from .batching import BatchConfig, BatchPlanner, PagesExhausted
from .device_graph import batch_state
from .host_runner import HostModule
from .meta_check import DEVICE_CODE, FIELD_OF, MODEL, disagreement, first_difference


class HostPlanner:
    """prepare_next_batch for one launch: the device's code decides, the Python model checks."""

    def __init__(self, module: HostModule, cfg: BatchConfig, meta: dict[str, torch.Tensor], written: set[str]):
        self.module, self.cfg, self.meta, self.written = module, cfg, meta, written
        self.state = batch_state(cfg, torch.device("cpu"))
        self._structs = (
            abi.meta_struct(meta),
            abi.batch_struct(cfg),
            abi.MpkBatchState(**{k: v.data_ptr() for k, v in self.state.items()}),
        )
        self.shadow = {k: v.clone() for k, v in meta.items()}
        self.model: BatchPlanner | None = None

    def prepare_next_batch(self, iteration: int) -> bool:
        for name in self.written:  # what the last iteration's tasks wrote (output tokens, ...)
            self.shadow[name].copy_(self.meta[name])
        if self.model is None:
            self.model = BatchPlanner(self.cfg, self.shadow)
        model_error: PagesExhausted | None = None
        try:
            planned = self.model.prepare_next_batch(iteration)
        except PagesExhausted as e:
            model_error = e
        status = abi.MpkStatus()
        result, run = self.module.prepare_next_batch(*self._structs, status, iteration, init=iteration == 0)
        where = f"prepare_next_batch before iteration {iteration}"
        if not run.ok:
            raise EmulationError(f"{where} ({DEVICE_CODE}, run on the host): {run.report}", run.report)
        if result < 0:
            if model_error is not None and status.code == contract.STATUS_PAGES_EXHAUSTED:
                raise model_error
            raise EmulationError(
                f"{where}: the device code ({DEVICE_CODE}) stopped with status {status.code} (detail "
                f"{list(status.detail)}), but its Python model ({MODEL}) "
                + (f"raised: {model_error}" if model_error else "planned a batch")
            )
        if model_error is not None:
            raise EmulationError(
                f"{where}: the device code ({DEVICE_CODE}) planned a batch, but its Python model ({MODEL}) raised: {model_error}"
            )
        self._compare(where)
        if (result > 0) != planned:
            raise EmulationError(
                f"{where}: the device code ({DEVICE_CODE}) returned {result}, its Python model ({MODEL}) {planned}"
            )
        return result > 0

    def task_writes(self) -> str | None:
        """What a task changed in a meta tensor no layer writes, since prepare_next_batch filled it
        (None: nothing)."""
        read_only = {n: t for n, t in self.meta.items() if n not in self.written}
        found = first_difference(read_only, self.shadow)
        if found is None:
            return None
        at, name, now, left = found
        field = FIELD_OF.get(name, name)
        return (
            f"{at} holds {now} where prepare_next_batch left {left}, and no layer of the graph writes {field} "
            f"(prepare_next_batch fills it; the tasks only read it); --mpk-emulate-check names the thread and line"
        )

    def _compare(self, where: str) -> None:
        found = disagreement(self.meta, self.shadow)
        if found is not None:
            raise EmulationError(
                f"{where}: the device code ({DEVICE_CODE}, run on the host) and its Python model ({MODEL}) {found}"
            )
