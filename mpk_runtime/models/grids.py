"""How many tasks each layer of a Qwen3 model gets (its grid), from the model's shapes, the batch
and the number of workers.

The weight-streaming layers (the projections and the lm head) are memory bound at decode batch
sizes: each wants at least one task per worker so that every SM streams its share, with slices of
whole 8-row groups (the linear body's fast path). Attention splits each request's keys over grid z
until requests x kv heads x z covers the workers; with at least 1.5 (request, kv head) streams per
worker (of 8 warps) it gives each task two kv heads instead (two streams per SM: 8-12% faster at B 32 x 4096 and
B 64 x 2048 on an H200, even on an H100; docs/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import ConfigError
from .config import Qwen3Config

ROW_GROUP = 8  # rows of a weight slice come in whole groups of 8 (the linear body's mma n)
MAX_ATTENTION_SPLITS = 128  # paged_attention's grid z limit
MOE_FIELDS = ("router", "experts")  # 0 in a dense model


@dataclass(frozen=True)
class Qwen3Grids:
    """Grid x of every layer (attention: grid z), for ``build_qwen3``."""

    embed: int  # splits hidden
    qkv: int  # splits the q | k | v rows
    attention_splits: int  # grid z of paged_attention
    attention_kv_heads_per_task: int  # 1, or 2: grid y = kv heads / 2
    o_proj: int  # splits hidden
    gate_up: int  # splits the intermediate size: each task one [gate rows | up rows] group, SiLU-mul fused
    down: int  # splits hidden
    lm_head: int  # splits the vocabulary
    argmax_parts: int  # argmax_partial's vocabulary chunks
    router: int  # MoE: splits the experts
    experts: int  # MoE: tasks sharing the routed expert work

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            least = 0 if f.name in MOE_FIELDS else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < least:
                zero = " (0 in a dense model)" if least == 0 else ""
                raise ConfigError(f"Qwen3Grids: {f.name}={v!r} must be an integer >= {least}{zero}")
        if self.attention_kv_heads_per_task not in (1, 2):
            raise ConfigError(
                f"Qwen3Grids: attention_kv_heads_per_task={self.attention_kv_heads_per_task} must be 1 or 2 "
                f"(paged attention gives a task one kv head or two)"
            )

    def check(self, c: Qwen3Config) -> None:
        """What these grids need of the model ``c``."""
        if c.num_key_value_heads % self.attention_kv_heads_per_task:
            raise ConfigError(
                f"Qwen3Grids: attention_kv_heads_per_task={self.attention_kv_heads_per_task} does not divide the model's "
                f"num_key_value_heads={c.num_key_value_heads}; use 1"
            )
        for name in MOE_FIELDS:
            v = getattr(self, name)
            if c.is_moe and v == 0:
                raise ConfigError(f"Qwen3Grids: {name}=0 in a MoE model (num_experts={c.num_experts}); give it >= 1 tasks")
            if not c.is_moe and v:
                raise ConfigError(f"Qwen3Grids: {name}={v} in a dense model (num_experts=0); set it to 0")


def tasks_for(rows: int, target: int, group: int = ROW_GROUP) -> int:
    """The number of tasks for ``rows`` output rows: a divisor of rows // group (slices of whole
    groups). One wave where it can: the largest divisor <= ``target`` when it keeps at least half of
    the target busy (a second, partial wave of small tasks costs a whole task's latency: on an H100
    the 0.6B model's qkv took 6.2 us in 256 tasks and 4.3 us in 128, gate / up 8.6 and 6.6 us);
    else the smallest one >= ``target``, else the largest there is. Rows not in whole groups: a
    divisor of rows, the same way."""
    units = rows // group if rows % group == 0 else rows
    divisors = [d for d in range(1, units + 1) if units % d == 0]
    below = [d for d in divisors if d <= target]
    if below and 2 * below[-1] >= target:
        return below[-1]
    above = [d for d in divisors if d >= target]
    return above[0] if above else divisors[-1]


def plan(c: Qwen3Config, num_workers: int, max_tokens: int, max_requests: int, worker_threads: int = 256) -> Qwen3Grids:
    """Grids for ``num_workers`` workers of ``worker_threads`` threads (``pk.block_dim[0]``) and a batch of
    ``max_tokens`` rows in ``max_requests`` slots."""
    if num_workers < 1:
        raise ConfigError(f"plan grids: num_workers={num_workers} must be >= 1")
    w = num_workers
    streams = max_requests * c.num_key_value_heads
    splits = max(1, min(MAX_ATTENTION_SPLITS, w // streams))
    # Halves of 4 warps are the measured shape; the 4-warp (sm80) build's halves of 2 were never timed.
    pairs = worker_threads >= 256 and c.num_key_value_heads % 2 == 0 and 2 * streams >= 3 * w
    return Qwen3Grids(
        embed=tasks_for(c.hidden_size, 8, group=ROW_GROUP),
        qkv=tasks_for(c.q_size + 2 * c.kv_size, w),
        attention_splits=splits,
        attention_kv_heads_per_task=2 if pairs else 1,
        o_proj=tasks_for(c.hidden_size, w),
        gate_up=tasks_for(c.intermediate_size, w),
        down=tasks_for(c.hidden_size, w),
        lm_head=tasks_for(c.vocab_size, w),
        argmax_parts=tasks_for(c.vocab_size, w, group=1),
        router=tasks_for(c.num_experts, max(1, c.num_experts // 8)) if c.is_moe else 0,
        experts=w if c.is_moe else 0,
    )
