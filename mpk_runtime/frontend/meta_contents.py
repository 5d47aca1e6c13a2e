"""What the meta tensors a user gives hold, checked against the settings before anything runs: the
history (``step``), the prompts, the stop lengths and the page order. One error names every
setting to change where the prompts do not fit."""

from __future__ import annotations

import torch

from ..errors import ConfigError, MetaTensorError
from .params import KernelParams

# The meta tensors whose shapes follow a setting: an override of one must change with the setting.
_SHAPED_BY = {
    "max_seq_length": ("tokens",),
    "max_num_batched_tokens": ("input_tokens", "output_tokens"),
    "max_num_pages": ("paged_kv_indices_buffer",),
}


def check(p: KernelParams, meta: dict[str, torch.Tensor]) -> None:
    """Every prompt must fit the settings. One error names every setting to change, with the value
    that makes all the prompts fit, rather than one setting per attempt."""
    if meta["prompt_lengths"].device.type == "meta" or meta["step"].device.type == "meta":
        return
    lengths = meta["prompt_lengths"].cpu().tolist()
    steps = meta["step"].cpu().tolist()
    bad_steps = [(i, v) for i, v in enumerate(steps) if not 0 <= v < p.max_seq_length]
    if bad_steps:
        i, v = bad_steps[0]
        raise MetaTensorError(
            f"step[{i}] = {v} must be in [0, max_seq_length={p.max_seq_length}): the tokens of request {i} already in "
            f"the KV cache, with room for at least one more; raise max_seq_length or shorten the history"
        )
    _check_page_order(p, meta)
    bad = [(i, v) for i, v in enumerate(lengths) if v < 1]
    if bad:
        i, v = bad[0]
        raise MetaTensorError(f"prompt_lengths[{i}] = {v} must be in [1, max_seq_length={p.max_seq_length}]: a prompt has tokens")
    given = p.meta_tensors
    if "stop_lengths" in given:
        _check_stop_lengths(p, meta["stop_lengths"].cpu().tolist(), lengths, steps)
    reasons: list[str] = []
    need: dict[str, int] = {}
    longest = max(lengths)
    if longest > p.max_seq_length:
        i = lengths.index(longest)
        if "prompt_lengths" in given:
            reasons.append(
                f"prompt_lengths[{i}] = {longest} must be in [1, max_seq_length={p.max_seq_length}]: "
                f"a prompt must fit its row of tokens"
            )
        else:
            reasons.append(
                f"the default prompt is max_num_batched_tokens={longest} tokens long, which does not fit "
                f"max_seq_length={p.max_seq_length}"
            )
        need["max_seq_length"] = longest
    batched = p.max_num_batched_tokens
    rest = lengths[0] - steps[0]
    if p.test_mode and rest > batched:
        history = f" ({steps[0]} of {lengths[0]} are history)" if steps[0] else ""
        reasons.append(
            f"test mode runs one pass, so request 0's prompt of {rest} tokens{history} must fit in one batch of "
            f"max_num_batched_tokens={batched}"
        )
        need["max_num_batched_tokens"] = batched = rest
    # Admission waits for free pages, so a first chunk that needs more pages than exist would wait forever.
    firsts = [min(length - step, batched) if length > step else 1 for length, step in zip(lengths, steps)]
    pages = [-(-(step + first) // p.page_size) for first, step in zip(firsts, steps)]
    if max(pages) > p.max_num_pages:
        r = pages.index(max(pages))
        history = f" after its {steps[r]} tokens of history" if steps[r] else ""
        reasons.append(
            f"request {r}: its first prefill chunk of {firsts[r]} tokens{history} needs {pages[r]} KV pages of "
            f"page_size={p.page_size}, but max_num_pages={p.max_num_pages}"
        )
        need["max_num_pages"] = pages[r]
    if not reasons:
        return
    fixes = []
    for name, value in need.items():
        also = [t for t in _SHAPED_BY[name] if t in given]
        fixes.append(f"params[{name!r}] >= {value}" + (f" (and the shape of {' and '.join(also)})" if also else ""))
    shorten = " or shorten the prompt" if "prompt_lengths" in given else ""
    error = MetaTensorError if "prompt_lengths" in given else ConfigError
    raise error(f"{'; '.join(reasons)}. Set {', '.join(fixes)}{shorten}")


def _check_stop_lengths(p: KernelParams, stops: list[int], lengths: list[int], steps: list[int]) -> None:
    # A request samples at least one token after its prompt (and its history) before the planner
    # can stop it, so a stop at or below those would be a length the row never has.
    for i, (stop, length, step) in enumerate(zip(stops, lengths, steps)):
        low = max(length, step) + 1
        if not low <= stop <= p.max_seq_length:
            why = f"its prompt of {length} tokens" if length >= step else f"its {step} tokens of history"
            raise MetaTensorError(
                f"stop_lengths[{i}] = {stop} must be in [{low}, max_seq_length={p.max_seq_length}]: request {i} finishes "
                f"once its row holds that many tokens, {why} and at least one generated; "
                + ("raise max_seq_length" if low > p.max_seq_length else "pass a value in that range")
            )


def _check_page_order(p: KernelParams, meta: dict[str, torch.Tensor]) -> None:
    if "paged_kv_indices_buffer" not in p.meta_tensors:
        return
    order = meta["paged_kv_indices_buffer"].cpu()
    if not torch.equal(order.sort().values, torch.arange(p.max_num_pages, dtype=order.dtype)):
        raise MetaTensorError(
            f"meta tensor 'paged_kv_indices_buffer' sets the order in which free KV pages are handed out, so it must hold "
            f"every page 0..{p.max_num_pages - 1} once (a permutation, e.g. torch.randperm({p.max_num_pages}, "
            f"dtype=torch.int32, generator=torch.Generator().manual_seed(0))); got {order.tolist()[:8]}"
            f"{' ...' if order.numel() > 8 else ''}"
        )
