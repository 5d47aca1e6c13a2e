"""What the two expert linears of an MoE block share (moe_w13_linear, moe_w2_linear): their
arguments and checks, and the run-time split of the routed work over the layer's tasks; and what
every layer reading routing_indices shares with them (moe_w2_mul_sum_add too): its cost and its
check and report of a bad routing slot."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .. import archs, contract
from ..errors import DTypeError, ShapeError
from .registry import Arg, EmulationContext, SliceInfo, TaskFailure, TaskSpec, selected, whole

UNIT_ROWS = 16  # weight rows of a unit of work (csrc/tasks/common/moe_linear.cuh, kUnitRows)
MAX_TOKENS = 8192  # token lists live in shared memory: 2 x tokens x 4 bytes
TENSOR_CORE = (torch.bfloat16, torch.float16)


def assigned_units(expert_mask: torch.Tensor, tasks: int, task: int, units_per_expert: int) -> list[tuple[int, int, int]]:
    """The work of task ``task`` of ``tasks``, as moe_linear.cuh splits it: (expert, first unit, end
    unit) per expert, units counted within the expert. The experts with tokens (expert_mask rises)
    contribute units_per_expert units each, in expert order; task j takes units
    [j * n / tasks, (j + 1) * n / tasks) of the n in all."""
    counts = expert_mask[1:].long() - expert_mask[:-1].long()
    active = (counts > 0).nonzero().flatten().tolist()
    total = len(active) * units_per_expert
    lo, hi = total * task // tasks, total * (task + 1) // tasks
    out = []
    u = lo
    while u < hi:
        a = u // units_per_expert
        end = min(hi, (a + 1) * units_per_expert)
        out.append((active[a], u - a * units_per_expert, end - a * units_per_expert))
        u = end
    return out


def check_slots(slots: torch.Tensor, topk: int) -> None:
    """The device bodies' check of routing slots read from routing_indices: TaskFailure (INDEX) with
    the first slot outside 0..topk."""
    bad = (slots < 0) | (slots > topk)
    if bool(bad.any()):
        raise TaskFailure(contract.TASK_ERROR_INDEX, int(slots[bad][0]))


class ReadsRouting(TaskSpec):
    """Base of the layers whose tasks split the routed work at run time from routing_indices (not
    registered itself): their cost and their report of a bad routing slot."""

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        # A task's share is known only at run time; a cost well above a dependency hop spreads the
        # layer's tasks over all workers (graph/schedule.py).
        return 10_000.0

    def error_message(self, code: int, value: int, layer: Any, tensors: dict[str, Any]) -> str:
        if code == contract.TASK_ERROR_INDEX:
            return f"routing_indices holds slot {value}; slots are 0 (not routed) or 1..k"
        return super().error_message(code, value, layer, tensors)


class ExpertLinear(ReadsRouting):
    """Base of the expert linears (not registered itself). Subclasses set name, w13, doc."""

    w13: bool
    inputs = {"input": whole(), "weight": whole(), "routing_indices": whole(), "expert_mask": whole()}
    outputs = {"output": selected(x=0)}
    token_dims = {"input": 0, "routing_indices": 1, "output": 0}
    headers = {arch: "common/moe_linear.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_linear"
    smem_function = "mpk::tasks::moe_linear_smem_bytes"
    # Runtime::mark in moe_linear.cuh's expert_work (rounds of several experts repeat the second).
    phases: ClassVar[tuple[str, ...]] = (
        "experts with tokens listed",
        "token lists built",
        "expert units: weights streamed, rows written",
    )

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        tokens, experts = self.check_streams(args, values, grid)
        r, m = args["routing_indices"].tensor, args["expert_mask"].tensor
        if r.shape != (experts, tokens) or m.shape != (experts + 1,):
            raise ShapeError(
                f"{self.name}: routing_indices must be (experts, tokens) = {(experts, tokens)} and expert_mask "
                f"(experts + 1,) = ({experts + 1},) (from moe_topk_softmax_routing); got {r.shape}, {m.shape}"
            )
        for arg, t in (("routing_indices", r), ("expert_mask", m)):
            if t.dtype.torch != torch.int32:
                raise DTypeError(f"{self.name}: {arg} ({t!r}) must be int32")

    def check_streams(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> tuple[int, int]:
        """Check input, weight and output (what every expert linear streams); return (tokens, experts)."""
        x, w, y = args["input"].tensor, args["weight"].tensor, args["output"].tensor
        what = "(tokens, hidden)" if self.w13 else "(tokens, k, inter)"
        if x.num_dims != (2 if self.w13 else 3) or w.num_dims != 3:
            raise ShapeError(
                f"{self.name}: input must be {what} and weight (experts, out_features, in_features); got {x.shape}, {w.shape}"
            )
        tokens, experts, n, k_in = x.shape[0], w.shape[0], w.shape[1], w.shape[2]
        if x.shape[-1] != k_in:
            raise ShapeError(f"{self.name}: weight {w.shape} must have in_features={x.shape[-1]} to match input {x.shape}")
        if y.num_dims != 3 or y.shape[0] != tokens or (not self.w13 and y.shape[1] != x.shape[1]):
            same = "tokens" if self.w13 else "tokens and k"
            raise ShapeError(f"{self.name}: output must be (tokens, k, columns) with the input's {same}; got {y.shape}")
        cols = (n, n // 2) if self.w13 else (n,)
        if y.shape[2] not in cols:
            want = f"{n} ([gate | up]) or {n // 2} (silu(gate) * up)" if self.w13 else f"{n}"
            raise ShapeError(f"{self.name}: output's last dim must be {want}, got {y.shape}")
        if k_in % 32 or n % UNIT_ROWS or (self.w13 and n % (2 * 8)):
            raise ShapeError(
                f"{self.name}: weight {w.shape}: in_features must be a multiple of 32 and out_features of 16 (tensor-core tiles)"
            )
        if tokens > MAX_TOKENS:
            raise ShapeError(f"{self.name}: {tokens} token rows; the task holds token lists of at most {MAX_TOKENS}")
        for arg, t in (("input", x), ("weight", w), ("output", y)):
            if t.dtype.torch not in TENSOR_CORE or t.dtype is not x.dtype:
                raise DTypeError(f"{self.name}: {arg} ({t!r}) must be bfloat16 or float16, like input")
        # The body splits the routed work over the layer's tasks itself, so it needs their number;
        # template arguments and scalars see only slices, so the grid is kept with the values here.
        values["num_tasks"] = grid[0]
        return tokens, experts

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        x, w, y = s["input"], s["weight"], s["output"]
        experts, n, k_in = w.full_shape
        return [x.dtype.cpp, x.full_shape[0], experts, y.full_shape[1], k_in, n, y.full_shape[2], "true" if self.w13 else "false"]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [int(values["num_tasks"])]

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        emulate_units(self.w13, inputs["input"], inputs["weight"], inputs["routing_indices"], inputs["expert_mask"],
                      outputs["output"], ctx)  # fmt: skip


def emulate_units(
    w13: bool, x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor, mask: torch.Tensor, y: torch.Tensor, ctx: EmulationContext
) -> None:
    """The slice reference of an expert linear's task (ctx.grid_idx), on its routing data: the units
    assigned_units gives it, each for its expert's routed tokens."""
    topk, n = y.shape[1], w.shape[1]
    fuse = w13 and y.shape[2] * 2 == n
    for expert, first, end in assigned_units(mask, ctx.grid[0], ctx.grid_idx[0], n // UNIT_ROWS):
        slots = routing[expert]
        check_slots(slots, topk)
        t = (slots > 0).nonzero().flatten()
        if not t.numel():
            continue
        j = slots[t].long() - 1
        rows = x[t] if w13 else x[t, j]
        if w13:  # unit u: gate rows 8u..8u+8 and up rows n/2 + 8u..
            gate = torch.arange(8 * first, 8 * end)
            h = rows.float() @ w[expert, torch.cat([gate, n // 2 + gate])].float().T
            g, u = h[:, : gate.numel()], h[:, gate.numel() :]
            if fuse:
                y[t[:, None], j[:, None], gate] = (torch.nn.functional.silu(g) * u).to(y.dtype)
            else:
                y[t[:, None], j[:, None], gate] = g.to(y.dtype)
                y[t[:, None], j[:, None], n // 2 + gate] = u.to(y.dtype)
        else:
            cols = torch.arange(UNIT_ROWS * first, UNIT_ROWS * end)
            y[t[:, None], j[:, None], cols] = (rows.float() @ w[expert, cols].float().T).to(y.dtype)
