"""The batch a scene's one test-mode iteration runs: ``kernel_params`` that make prepare_next_batch
batch given requests (``batch_params``) or leave rows of a token batch inactive (``active_tokens``),
and a Hypothesis strategy for requests (``requests``) that reaches the batches a layer reading the
meta tensors gets wrong: decodes beside prefills, a history ending exactly on a page, one token into
a new page, one request or several."""

from __future__ import annotations

from typing import Any

Request = tuple[int, int]  # (prompt length, tokens already in the KV cache)


def first_chunk(prompt: int, history: int) -> int:
    """A request's new tokens in its first iteration, with tokens to spare: the rest of its prompt,
    or one token (a decode) once the prompt is cached."""
    return prompt - history if prompt > history else 1


def batch_params(
    requests: Any, *, tokens: int = 0, slots: int = 0, page_size: int = 16, spare_pages: int = 2, shuffle_pages: bool = False
) -> dict[str, Any]:
    """``kernel_params`` that put ``requests`` ((prompt length, tokens already cached), ...) in one
    test-mode iteration: ``tokens`` is max_num_batched_tokens (0: every request's first chunk fits;
    fewer cut the last admitted prompt and leave later requests out), ``slots`` max_num_batched_requests
    (0: one a request; more leave slots unused), the pages exactly what the requests hold after the
    iteration plus ``spare_pages`` nobody gets, handed out in order, or in a random order with
    ``shuffle_pages`` (seeded: the same each call). With ``first_batch_meta`` on the result a scene
    fills the history of each request into the pages it will get."""
    import torch

    reqs = _requests(requests)
    sizes = (("tokens", tokens, 0), ("slots", slots, 0), ("page_size", page_size, 1), ("spare_pages", spare_pages, 0))
    for name, value, least in sizes:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"batch_params: {name}={value!r} must be an int >= {least}")
    pages = sum(-(-(h + first_chunk(p, h)) // page_size) for p, h in reqs) + spare_pages
    meta = {
        "prompt_lengths": torch.tensor([p for p, _ in reqs], dtype=torch.int32),
        "step": torch.tensor([h for _, h in reqs], dtype=torch.int32),
    }
    if shuffle_pages:
        order = torch.Generator().manual_seed(pages)
        meta["paged_kv_indices_buffer"] = torch.randperm(pages, generator=order, dtype=torch.int32)
    return {
        "max_num_batched_tokens": tokens or sum(first_chunk(p, h) for p, h in reqs),
        "max_num_batched_requests": slots or len(reqs),
        "max_num_pages": pages,
        "page_size": page_size,
        "max_seq_length": max(max(p, h + 1) for p, h in reqs) + 1,
        "meta_tensors": meta,
    }


def _requests(requests: Any) -> list[Request]:
    try:
        reqs = [tuple(r) for r in requests]
    except TypeError:
        reqs = []
    ok = reqs and all(
        len(r) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in r) and r[0] >= 1 and r[1] >= 0 for r in reqs
    )
    if not ok:
        raise ValueError(
            f"batch_params: requests={requests!r} must be a non-empty sequence of (prompt length >= 1, tokens already "
            f"cached >= 0) int pairs, e.g. ((16, 0), (1, 20))"
        )
    return reqs  # type: ignore[return-value]


def requests(max_requests: int = 4, max_prompt: int = 48, max_history: int = 80, page_size: int = 16) -> Any:
    """A Hypothesis strategy for ``batch_params``' requests: 1 to ``max_requests`` of them, each a
    prefill (history below the prompt), a decode (history at or past it), or a history that ends on
    a page boundary or one token past it (``page_size``). A ``SWEEP`` value:
    ``{"requests": pytest_mpk.requests(), ...}``."""
    from hypothesis import strategies as st

    edge = st.integers(0, max_history // page_size).flatmap(
        lambda k: st.sampled_from([k * page_size, k * page_size + 1]).filter(lambda h: h <= max_history)
    )
    history = st.one_of(st.integers(0, max_history), edge)
    one = st.tuples(st.integers(1, max_prompt), history)
    return st.lists(one, min_size=1, max_size=max_requests).map(tuple)


def active_tokens(rows: int, active: int) -> dict[str, Any]:
    """``kernel_params`` for a batch of ``rows`` token rows whose iteration has only ``active`` tokens
    (one request with an ``active``-token prompt): layers compute the first ``active`` rows and leave
    the rest alone, so the golden marks them unwritten
    (``Expected(value, written=torch.arange(rows) < active)``)."""
    import torch

    for name, value in (("rows", rows), ("active", active)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"active_tokens: {name}={value!r} must be an int >= 1")
    if active > rows:
        raise ValueError(
            f"active_tokens: active={active} tokens do not fit rows={rows}; give at most {rows} active tokens, or more rows"
        )
    return {
        "max_num_batched_tokens": rows,
        "max_seq_length": rows,
        "max_num_pages": rows,
        "meta_tensors": {"prompt_lengths": torch.tensor([active], dtype=torch.int32)},
    }
