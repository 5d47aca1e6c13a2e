"""MoE routing, DeepSeek-V3 style: sigmoid scores with a bias, the best groups of experts, top-k in them."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from .. import archs, contract
from ..errors import ConfigError, DTypeError, ShapeError
from .moe_routing import MAX_EXPERTS, MAX_TOPK, check_routing_outputs
from .registry import Arg, EmulationContext, SliceInfo, TaskFailure, TaskSpec, register_task, whole

MAX_GROUPS = 32  # the body keeps the kept groups as the bits of one 32-bit word


class RoutesByGroups(TaskSpec):
    """Base of the layers that route DeepSeek-V3's way (not registered itself): the checks of
    score_bias, n_group, topk_group and k, the report of a non-finite score_bias that their bodies
    make at run time (Runtime::fail, MPK_TASK_ERROR_VALUE), and the same check and routing for their
    slice references."""

    def check_groups(self, bias: Any, experts: int, k: int, values: dict[str, Any]) -> None:
        """score_bias (a TensorSpec), the options n_group and topk_group, and k choices of E experts."""
        where = self.name
        if bias.shape != (experts,):
            raise ShapeError(f"{where}: score_bias must have shape ({experts},), one per expert, got {bias.shape}")
        if bias.dtype.torch != torch.float32:
            raise DTypeError(f"{where}: score_bias ({bias!r}) must be float32")
        groups, kept = values["n_group"], values["topk_group"]
        for name, v in (("n_group", groups), ("topk_group", kept)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ConfigError(f"{where}: {name}={v!r} must be a positive integer, e.g. {name}=8")
        if experts > MAX_EXPERTS or groups > MAX_GROUPS or experts % groups or experts // groups < 2:
            raise ShapeError(
                f"{where}: n_group={groups} groups of E={experts} experts; the task takes E <= {MAX_EXPERTS} and "
                f"n_group <= {MAX_GROUPS} dividing E into groups of 2 experts or more (a group scores its best two)"
            )
        if kept > groups:
            raise ShapeError(f"{where}: topk_group={kept} groups kept of n_group={groups}; keep at most n_group")
        eligible = kept * (experts // groups)
        if not 1 <= k <= min(eligible, MAX_TOPK):
            raise ShapeError(
                f"{where}: k={k} experts per token; the task takes 1 <= k <= {MAX_TOPK}, and the kept groups hold "
                f"{eligible} experts (topk_group={kept} of {experts // groups} experts each)"
            )

    def error_message(self, code: int, value: int, layer: Any, tensors: dict[str, Any]) -> str:
        if code == contract.TASK_ERROR_VALUE:
            return (
                f"score_bias[{value}] is NaN or infinite: the group routing ranks the experts by sigmoid score plus "
                f"score_bias, which cannot order a non-finite value; pass a finite float32 score_bias"
            )
        return super().error_message(code, value, layer, tensors)

    def route_by_reference(
        self, logits: torch.Tensor, bias: torch.Tensor, k: int, values: dict[str, Any], norm: bool = True, scale: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For the slice references: the bodies' check of the bias (TaskFailure VALUE with the first
        expert whose bias is not finite), then the reference routing (weights, routing rows, mask)."""
        from . import references

        bad = ~torch.isfinite(bias)
        if bool(bad.any()):
            raise TaskFailure(contract.TASK_ERROR_VALUE, int(bad.nonzero()[0, 0]))
        routing = references.find("moe_sigmoid_group_routing")
        return routing(logits, bias, k, values["n_group"], values["topk_group"], norm, scale)


@register_task
class MoeSigmoidGroupRouting(RoutesByGroups):
    name = "moe_sigmoid_group_routing"
    inputs = {"input": whole(), "score_bias": whole()}
    outputs = {"topk_weights": whole(), "routing_indices": whole(), "expert_mask": whole()}
    scalars = {"routed_scaling_factor": 1.0}
    options = {"n_group": 1, "topk_group": 1, "norm_topk_prob": True}
    token_dims = {"input": 0, "topk_weights": 0, "routing_indices": 1}
    headers = {arch: "common/moe_group_routing.cuh" for arch in archs.NAMES}
    function = "mpk::tasks::moe_sigmoid_group_routing"
    smem_function = "mpk::tasks::moe_group_routing_smem_bytes"
    reference = "moe_sigmoid_group_routing"
    doc = """Group-limited routing of a mixture-of-experts block (DeepSeek-V3's). input: router
    logits (tokens, E), float32, bfloat16 or float16; score_bias (E,) float32, finite (a NaN or an
    infinity stops the launch with a KernelError naming the expert). For every
    active token: scores = sigmoid(logits) in fp32, choice scores = scores + score_bias; the E experts
    are n_group groups of E / n_group consecutive experts (at least 2 a group), a group's score is
    the sum of its two largest choice scores, and the topk_group best groups are kept; the token's k
    choices (k = topk_weights' second dim) are the k largest choice scores of the kept groups'
    experts, largest first. topk_weights (tokens, k) float32 gets their scores without the bias,
    divided by their sum when norm_topk_prob, times routed_scaling_factor; routing_indices (E, tokens)
    and expert_mask (E + 1,) int32 as moe_topk_softmax_routing gives them, so the expert layers take
    either. n_group=1, topk_group=1 is plain top-k of the biased sigmoid scores.

    Ties: equal values are taken lower index first (experts, and groups); NaN logits count as -inf.
    Columns of inactive tokens are not written. One task: grid_dim=(1, 1, 1)."""

    def check(self, args: dict[str, Arg], values: dict[str, Any], grid: tuple[int, int, int]) -> None:
        x, b, w = args["input"].tensor, args["score_bias"].tensor, args["topk_weights"].tensor
        where = self.name
        if x.num_dims != 2:
            raise ShapeError(f"{where}: input must be router logits (tokens, experts), got {x.shape}")
        tokens, experts = x.shape
        if w.num_dims != 2 or w.shape[0] != tokens:
            raise ShapeError(f"{where}: topk_weights must be (tokens, k) = ({tokens}, k), got {w.shape}")
        self.check_groups(b, experts, w.shape[1], values)
        if not isinstance(values["norm_topk_prob"], bool):
            raise ConfigError(f"{where}: norm_topk_prob={values['norm_topk_prob']!r} must be True or False")
        scale = values["routed_scaling_factor"]
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < float(scale) < math.inf:
            raise ConfigError(f"{where}: routed_scaling_factor={scale!r} must be a positive number, e.g. 2.5")
        check_routing_outputs(where, args, tokens, experts)

    def template_args(self, s: dict[str, SliceInfo], values: dict[str, Any]) -> list[Any]:
        x = s["input"]
        k = s["topk_weights"].shape[1]
        norm = "true" if values["norm_topk_prob"] else "false"
        return [x.dtype.cpp, x.shape[1], k, int(values["n_group"]), int(values["topk_group"]), norm]

    def scalar_values(self, values: dict[str, Any], s: dict[str, SliceInfo]) -> list[float | int]:
        return [*super().scalar_values(values, s), s["input"].full_shape[0]]  # the token rows, as moe_routing's

    def cost_ns(self, s: dict[str, SliceInfo]) -> float:
        tokens, experts = s["input"].shape
        return 2500.0 + tokens * s["topk_weights"].shape[1] * 25.0 + tokens * experts / 4.0

    def emulate(
        self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], values: dict[str, Any], ctx: EmulationContext
    ) -> None:
        weights, routing, mask = self.route_by_reference(
            inputs["input"],
            inputs["score_bias"],
            outputs["topk_weights"].shape[1],
            values,
            values["norm_topk_prob"],
            values["routed_scaling_factor"],
        )
        outputs["topk_weights"].copy_(weights)
        outputs["routing_indices"].copy_(routing)
        outputs["expert_mask"].copy_(mask)
