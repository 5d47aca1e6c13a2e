"""Greedy decoding of a batch of prompts with one persistent kernel: ``Qwen3Generator``.

The kernel runs in offline mode: one launch prefills every prompt (in chunks of at most
max_num_batched_tokens tokens per iteration), then decodes one token per request and iteration,
feeding each sampled token back, until every request's row of max_seq_length tokens is full (or it
sampled ``eos_token_id``). All requests run at once: each gets the KV pages of a full row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import ConfigError
from . import grids as grid_plan
from .config import Qwen3Config
from .qwen3 import Qwen3Graph, build_qwen3

DEFAULT_PAGE_SIZE = 16
DEFAULT_MAX_BATCH_TOKENS = 16  # one 16-row mma tile: decode steps stream the weights at full speed


def generation_params(
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    device: torch.device | str = "cpu",
    page_size: int = DEFAULT_PAGE_SIZE,
    max_batch_tokens: int | None = None,
) -> dict[str, Any]:
    """PersistentKernel init parameters (offline mode) that decode ``prompts`` together, each until
    its row of max(prompt lengths) + max_new_tokens tokens is full, with the meta tensors on ``device``."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ConfigError("generate: give at least one prompt, each of at least one token id")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"generate: max_new_tokens={max_new_tokens!r} must be a positive integer")
    seq = max(len(p) for p in prompts) + max_new_tokens
    tokens = torch.zeros(len(prompts), seq, dtype=torch.int64)
    for r, p in enumerate(prompts):
        tokens[r, : len(p)] = torch.as_tensor(list(p), dtype=torch.int64)
    batch = max_batch_tokens or max(len(prompts), DEFAULT_MAX_BATCH_TOKENS)
    if batch < len(prompts):
        raise ConfigError(
            f"generate: max_batch_tokens={batch} is less than the {len(prompts)} prompts, which decode together; "
            f"pass max_batch_tokens >= {len(prompts)}"
        )
    return {
        "test_mode": False,
        "max_num_batched_tokens": batch,
        "max_num_batched_requests": len(prompts),
        "max_num_pages": len(prompts) * -(-seq // page_size),
        "page_size": page_size,
        "max_seq_length": seq,
        "meta_tensors": {
            "tokens": tokens.to(device),
            "prompt_lengths": torch.tensor([len(p) for p in prompts], dtype=torch.int32, device=device),
        },
    }


class Qwen3Generator:
    """A Qwen3 model (``config``, ``state_dict`` in Hugging Face names) compiled into one persistent
    kernel that decodes ``prompts`` greedily, at least ``max_new_tokens`` tokens each. ``init_params``
    go to PersistentKernel (``target_cc``, ``emulate=True``, ``num_workers``, ...; on a GPU the
    workers and schedulers default to ``get_configurations_from_gpu``)."""

    def __init__(
        self,
        config: Qwen3Config,
        state_dict: dict[str, torch.Tensor],
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_batch_tokens: int | None = None,
        grids: grid_plan.Qwen3Grids | None = None,
        **init_params: Any,
    ):
        from ..frontend.kernel import PersistentKernel
        from ..run.gpu import get_configurations_from_gpu

        off_gpu = init_params.get("emulate") or init_params.get("compile_only")
        device = torch.device("cpu") if off_gpu else torch.device("cuda", torch.cuda.current_device())
        params = PersistentKernel.get_default_init_parameters()
        if not off_gpu and "num_workers" not in init_params:
            params["num_workers"], params["num_local_schedulers"] = get_configurations_from_gpu(device.index)
        params.update(generation_params(prompts, max_new_tokens, device, page_size, max_batch_tokens))
        params.update(init_params)
        vocab = config.vocab_size
        bad = [(r, t) for r, p in enumerate(prompts) for t in p if not 0 <= int(t) < vocab]
        if bad:
            raise ConfigError(f"generate: prompt {bad[0][0]} holds token id {bad[0][1]}, outside the vocabulary [0, {vocab})")
        self.prompt_lengths = [len(p) for p in prompts]
        self.pk = PersistentKernel(**params)
        self.graph: Qwen3Graph = build_qwen3(self.pk, config, state_dict, grids)
        self.seconds = 0.0  # wall time of the last generate()

    def compile(self, output_dir: str | None = None) -> None:
        self.pk.compile(output_dir)

    def observe(self, callback: Callable[[int, list[int]], None]) -> None:
        """Emulated only: ``callback(iteration, requests)`` after every iteration (see
        PersistentKernel.observe_iterations); ``self.pk.tensor("logits")`` is that iteration's."""
        self.pk.observe_iterations(callback)

    def generate(self) -> list[list[int]]:
        """One launch: every request's generated tokens (up to and including an end-of-sequence token)."""
        start = time.perf_counter()
        self.pk()
        self.pk.synchronize()
        self.seconds = time.perf_counter() - start
        rows = self.pk.meta_tensors["tokens"].cpu()
        eos = self.pk.params.eos_token_id
        out = []
        for r, n in enumerate(self.prompt_lengths):
            gen = rows[r, n:].tolist()
            if eos in gen:
                gen = gen[: gen.index(eos) + 1]
            out.append(gen)
        return out

    def finalize(self) -> None:
        self.pk.finalize()
