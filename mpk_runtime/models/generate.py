"""Greedy decoding of a batch of prompts with one persistent kernel: ``Qwen3Generator``.

The kernel runs in offline mode: one launch prefills every prompt (in chunks of at most
max_num_batched_tokens tokens per iteration), then decodes one token per request and iteration,
feeding each sampled token back, until each request has ``max_new_tokens`` new tokens (or sampled
``eos_token_id``): the ``stop_lengths`` meta tensor ends each row at its prompt + max_new_tokens, so a
short prompt stops as early as a long one. All requests run at once, each with the KV pages of its
own prompt and new tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import memory
from ..errors import ConfigError
from . import grids as grid_plan
from .config import Qwen3Config, as_int, require_config
from .qwen3 import Qwen3Graph, build_qwen3, cache_needs

DEFAULT_PAGE_SIZE = 16
DEFAULT_MAX_BATCH_TOKENS = 16  # one 16-row mma tile: decode steps stream the weights at full speed
INT32_MAX = 2**31 - 1  # the kernel's sizes are int32 on the device
INT64_MAX = 2**63 - 1  # token ids are int64


def generation_params(
    prompts: Sequence[Sequence[int]] | torch.Tensor,
    max_new_tokens: int,
    device: torch.device | str = "cpu",
    page_size: int = DEFAULT_PAGE_SIZE,
    max_batch_tokens: int | None = None,
    vocab_size: int | None = None,
) -> dict[str, Any]:
    """PersistentKernel init parameters (offline mode) that decode ``prompts`` together, each until it
    has ``max_new_tokens`` new tokens (or sampled eos_token_id), with the meta tensors on ``device``.

    ``prompts``: a list of prompts, each a list (or a 1-D integer tensor) of token ids, or a 2-D
    integer tensor with a prompt a row. Token ids are integers in [0, ``vocab_size``) (without one,
    any int64 >= 0). ``max_batch_tokens``: the batch's rows (default: the number of prompts, at least 16)."""
    if vocab_size is not None:
        _count("vocab_size", vocab_size, INT64_MAX)
    rows = _prompt_rows(prompts, vocab_size)
    longest = max(len(p) for p in rows)
    _count("max_new_tokens", max_new_tokens, INT32_MAX - longest)
    _count("page_size", page_size)
    if max_batch_tokens is None:
        batch = max(len(rows), DEFAULT_MAX_BATCH_TOKENS)
    else:
        batch = _count("max_batch_tokens", max_batch_tokens)
    if batch < len(rows):
        raise ConfigError(
            f"generate: max_batch_tokens={batch} is less than the {len(rows)} prompts, which decode together; "
            f"pass max_batch_tokens >= {len(rows)}"
        )
    seq = longest + max_new_tokens
    need = memory.tensor_need("the tokens meta tensor", (len(rows), seq), torch.int64)
    plural = "s" if len(rows) != 1 else ""
    need = need.renamed(f"{len(rows)} row{plural} of the longest prompt's {longest} + max_new_tokens={max_new_tokens} tokens")
    fix = f"ask for fewer new tokens than max_new_tokens={max_new_tokens}"
    for where in {torch.device("cpu"), torch.device(device)}:  # made on the host, then moved
        memory.check([need], where, "generate", fix)
    tokens = torch.zeros(len(rows), seq, dtype=torch.int64)
    for r, p in enumerate(rows):
        tokens[r, : len(p)] = torch.tensor(p, dtype=torch.int64)
    stops = [len(p) + max_new_tokens for p in rows]
    return {
        "test_mode": False,
        "max_num_batched_tokens": batch,
        "max_num_batched_requests": len(rows),
        "max_num_pages": sum(-(-stop // page_size) for stop in stops),  # every request runs from the start
        "page_size": page_size,
        "max_seq_length": seq,
        "meta_tensors": {
            "tokens": tokens.to(device),
            "prompt_lengths": torch.tensor([len(p) for p in rows], dtype=torch.int32, device=device),
            "stop_lengths": torch.tensor(stops, dtype=torch.int32, device=device),
        },
    }


def _count(name: str, v: Any, limit: int = INT32_MAX) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= limit:
        raise ConfigError(f"generate: {name}={v!r} must be a positive integer (at most {limit})")
    return v


def _prompt_rows(prompts: Any, vocab_size: int | None) -> list[list[int]]:
    """``prompts`` as lists of Python ints, each token id checked."""
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2:
            raise ConfigError(
                f"generate: a tensor of prompts must be 2-D (a prompt a row), got shape {tuple(prompts.shape)}; "
                f"for one prompt pass prompts[None]"
            )
        prompts = prompts.tolist()
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise ConfigError(
            f"generate: prompts={prompts!r} must be a list of prompts, each a list of token ids, or a 2-D integer "
            f"tensor (a prompt a row)"
        )
    if not prompts:
        raise ConfigError("generate: give at least one prompt, each of at least one token id")
    top, where = (INT64_MAX + 1, "[0, 2**63)") if vocab_size is None else (vocab_size, f"the vocabulary [0, {vocab_size})")
    rows = []
    for r, p in enumerate(prompts):
        if isinstance(p, torch.Tensor):
            p = p.tolist()
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence):
            raise ConfigError(f"generate: prompt {r} is {p!r} ({type(p).__name__}); each prompt is a list of token ids")
        if not p:
            raise ConfigError(f"generate: prompt {r} is empty; give at least one prompt, each of at least one token id")
        row = []
        for t in p:
            i = as_int(t)
            if i is None:
                raise ConfigError(f"generate: prompt {r} holds token id {t!r} ({type(t).__name__}); token ids are integers")
            if not 0 <= i < top:
                raise ConfigError(f"generate: prompt {r} holds token id {i}, outside {where}")
            row.append(i)
        rows.append(row)
    return rows


OWN_PARAMS = ("page_size", "max_batch_tokens", "grids")  # Qwen3Generator's keywords that are no kernel parameter
# Kernel parameters the generator derives from its own arguments, and what sets each: one given
# anyway would be overridden in part (a test_mode run decodes one step, and generate() would return
# the rows it never wrote) or contradict the meta tensors made for the prompts.
DERIVED = {
    "test_mode": "it decodes in offline mode, every token in one launch",
    "max_num_batched_tokens": "set by max_batch_tokens=",
    "max_num_batched_requests": "one slot per prompt",
    "max_num_pages": "sized by the prompts, max_new_tokens and page_size=",
    "max_seq_length": "the longest prompt + max_new_tokens",
    "meta_tensors": "made from the prompts",
}


class Qwen3Generator:
    """A Qwen3 model (``config``, ``state_dict`` in Hugging Face names) compiled into one persistent
    kernel that decodes ``prompts`` greedily (as ``generation_params`` takes them: lists of token ids,
    or a 2-D integer tensor), ``max_new_tokens`` tokens each (fewer after an end-of-sequence token). ``init_params``
    go to PersistentKernel (``target_cc``, ``emulate=True``, ``num_workers``, ...; on a GPU the
    workers and schedulers default to ``get_configurations_from_gpu``)."""

    def __init__(
        self,
        config: Qwen3Config,
        state_dict: dict[str, torch.Tensor],
        prompts: Sequence[Sequence[int]] | torch.Tensor,
        max_new_tokens: int,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_batch_tokens: int | None = None,
        grids: grid_plan.Qwen3Grids | None = None,
        **init_params: Any,
    ):
        from ..frontend import params as kernel_params
        from ..frontend.kernel import PersistentKernel
        from ..run.gpu import get_configurations_from_gpu, require_gpu

        kernel_params.check_names("Qwen3Generator", init_params, [*kernel_params.names(), *OWN_PARAMS])
        for k in filter(DERIVED.__contains__, init_params):  # in the caller's order
            raise ConfigError(f"Qwen3Generator: {k}={init_params[k]!r} is the generator's own ({DERIVED[k]}); leave it out")
        require_config(config, "Qwen3Generator")
        off_gpu = init_params.get("emulate") or init_params.get("compile_only")
        if not off_gpu:
            require_gpu("Qwen3Generator")
        device = torch.device("cpu") if off_gpu else torch.device("cuda", torch.cuda.current_device())
        params = PersistentKernel.get_default_init_parameters()
        if not off_gpu and "num_workers" not in init_params:
            params["num_workers"], params["num_local_schedulers"] = get_configurations_from_gpu(device.index)
        gen = generation_params(prompts, max_new_tokens, device, page_size, max_batch_tokens, config.vocab_size)
        memory.check(  # before the kernel's own allocations: the cache is sized by the prompts and max_new_tokens
            cache_needs(config, gen["max_num_pages"], page_size, gen["max_seq_length"]),
            device,
            "Qwen3Generator",
            f"ask for fewer new tokens than max_new_tokens={max_new_tokens}, or pass fewer or shorter prompts (each "
            f"prompt's cache holds its own tokens + max_new_tokens)",
        )
        params.update(gen)
        params.update(init_params)
        self.prompt_lengths: list[int] = gen["meta_tensors"]["prompt_lengths"].tolist()
        self.max_new_tokens = max_new_tokens
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
        """One launch: every request's max_new_tokens generated tokens (up to and including an
        end-of-sequence token, if it samples one)."""
        start = time.perf_counter()
        self.pk()
        self.pk.synchronize()
        self.seconds = time.perf_counter() - start
        rows = self.pk.meta_tensors["tokens"].cpu()
        eos = self.pk.params.eos_token_id
        out = []
        for r, n in enumerate(self.prompt_lengths):
            gen = rows[r, n : n + self.max_new_tokens].tolist()
            if eos in gen:
                gen = gen[: gen.index(eos) + 1]
            out.append(gen)
        return out

    def finalize(self) -> None:
        self.pk.finalize()
