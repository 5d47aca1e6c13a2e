"""The Python model of prepare_next_batch (mpk_runtime/batching.py): test mode, chunked prefill,
slot and token limits, paged KV bookkeeping, finishing, and invariants over random configurations."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpk_runtime as mpk
from mpk_runtime.errors import ConfigError, KernelError, MetaTensorError
from mpk_runtime.frontend import meta, params
from mpk_runtime.run.batching import BatchConfig, BatchPlanner, PagesExhausted, run_iterations


def setup(
    prompts: list[int] | None = None,
    steps: list[int] | None = None,
    page_order: list[int] | None = None,
    stops: list[int] | None = None,
    **overrides,
) -> tuple[BatchConfig, dict[str, torch.Tensor]]:
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(overrides)
    p["meta_tensors"] = {}
    if prompts is not None:
        p["meta_tensors"]["prompt_lengths"] = torch.tensor(prompts, dtype=torch.int32)
    if steps is not None:
        p["meta_tensors"]["step"] = torch.tensor(steps, dtype=torch.int32)
    if page_order is not None:
        p["meta_tensors"]["paged_kv_indices_buffer"] = torch.tensor(page_order, dtype=torch.int32)
    if stops is not None:
        p["meta_tensors"]["stop_lengths"] = torch.tensor(stops, dtype=torch.int32)
    kp = params.parse(p)
    m = meta.build(kp, torch.device("cpu"))
    return meta.batch_config(kp, m), m


def sample(m: dict[str, torch.Tensor], token: int) -> None:
    """What a sampling layer would do: one output token per batched position."""
    m["output_tokens"].fill_(token)


def kv_pages(m: dict[str, torch.Tensor], slot: int) -> list[int]:
    kv = m["paged_kv_indptr_buffer"]
    return m["paged_kv_indices_buffer"][int(kv[slot]) : int(kv[slot + 1])].tolist()


def test_test_mode_single_request_runs_the_graph_once():
    cfg, m = setup(test_mode=True, max_num_batched_tokens=4, max_seq_length=8, page_size=2, max_num_pages=2)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert m["num_new_tokens"].tolist() == [4]  # the active-token count equals the batch
    assert m["qo_indptr_buffer"].tolist() == [0, 4]
    assert torch.equal(m["input_tokens"], m["tokens"][0, :4])
    assert m["paged_kv_indptr_buffer"].tolist() == [0, 2] and kv_pages(m, 0) == [0, 1]
    assert m["paged_kv_last_page_len_buffer"].tolist() == [2]
    sample(m, 77)
    assert not planner.prepare_next_batch(1)
    assert m["step"].tolist() == m["prompt_lengths"].tolist() == [4]
    assert int(m["tokens"][0, 4]) == 77  # the sampled token was appended


def test_test_mode_counts_one_iteration():
    cfg, m = setup(test_mode=True, max_num_batched_tokens=3, max_seq_length=3, max_num_pages=3)
    assert run_iterations(cfg, m) == 1
    assert m["step"].tolist() == [3]


def test_step_is_reset_at_every_launch():
    cfg, m = setup(test_mode=True, max_num_batched_tokens=2, max_seq_length=4, max_num_pages=2)
    m["step"].fill_(3)
    BatchPlanner(cfg, m)
    assert m["step"].tolist() == [0]


def test_chunked_prefill_and_decode_share_the_token_budget():
    """Budget 4: request 0 (prompt 3) and one token of request 1 (prompt 5); then request 0 decodes
    while request 1 continues its prefill; KV pages (size 4) are taken from the queue in order."""
    cfg, m = setup([3, 5], max_num_batched_tokens=4, max_num_batched_requests=2, max_seq_length=16, page_size=4, max_num_pages=8)
    planner = BatchPlanner(cfg, m)
    tokens = m["tokens"]

    assert planner.prepare_next_batch(0)
    assert planner.batch == [0, 1]
    assert m["qo_indptr_buffer"].tolist() == [0, 3, 4] and m["num_new_tokens"].tolist() == [4]
    assert m["input_tokens"].tolist() == tokens[0, :3].tolist() + tokens[1, :1].tolist()
    assert (kv_pages(m, 0), kv_pages(m, 1)) == ([0], [1])
    assert m["paged_kv_last_page_len_buffer"].tolist() == [3, 1]

    sample(m, 500)
    assert planner.prepare_next_batch(1)
    assert m["step"].tolist() == [3, 1]
    assert int(tokens[0, 3]) == 500  # request 0 finished its prompt: its token is appended
    assert int(tokens[1, 1]) != 500  # request 1 is mid-prefill: nothing is appended
    assert m["qo_indptr_buffer"].tolist() == [0, 1, 4]
    assert m["input_tokens"].tolist() == [500] + tokens[1, 1:4].tolist()
    assert m["paged_kv_last_page_len_buffer"].tolist() == [4, 4]

    sample(m, 501)
    assert planner.prepare_next_batch(2)
    assert m["step"].tolist() == [4, 4]
    assert m["qo_indptr_buffer"].tolist() == [0, 1, 2]
    assert m["input_tokens"][:2].tolist() == [501, int(tokens[1, 4])]
    assert (kv_pages(m, 0), kv_pages(m, 1)) == ([0, 2], [1, 3])  # page 2 and 3: the next free ones
    assert m["paged_kv_last_page_len_buffer"].tolist() == [1, 1]


def test_slot_limit_admits_waiting_requests_when_one_finishes():
    cfg, m = setup([1, 1, 1], max_num_batched_tokens=8, max_num_batched_requests=2, max_seq_length=2, max_num_pages=4)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert planner.batch == [0, 1] and m["num_new_tokens"].tolist() == [2]
    assert planner.prepare_next_batch(1)  # 0 and 1 filled their rows of 2 and finished
    assert planner.batch == [2] and planner.running == [2]
    assert not planner.prepare_next_batch(2)
    assert m["step"].tolist() == [1, 1, 1]


def test_finishing_on_eos_returns_the_pages():
    cfg, m = setup([3], max_num_batched_tokens=3, max_seq_length=16, page_size=2, max_num_pages=2, eos_token_id=9)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert planner.page_queue == [] and planner.pages[0] == [0, 1]
    sample(m, 9)
    assert not planner.prepare_next_batch(1)
    assert planner.running == [] and planner.pages[0] == []
    assert sorted(planner.page_queue) == [0, 1]
    assert int(m["tokens"][0, 3]) == 9


def test_finishing_on_a_full_row():
    cfg, m = setup([2], max_num_batched_tokens=2, max_seq_length=4, max_num_pages=4, eos_token_id=-1)
    sampled = iter([40, 41])
    assert run_iterations(cfg, m, body=lambda it: sample(m, next(sampled))) == 2  # prefill, one decode
    assert m["tokens"][0, 2:].tolist() == [40, 41]
    assert m["step"].tolist() == [3]


def test_each_request_stops_at_its_own_length_while_the_others_go_on():
    cfg, m = setup(
        [2, 5, 3], stops=[4, 6, 12], max_num_batched_tokens=16, max_num_batched_requests=3, max_seq_length=12, max_num_pages=36
    )
    before = m["tokens"].clone()
    finished_at: dict[int, int] = {}
    planner = BatchPlanner(cfg, m)
    iteration = 0
    while planner.prepare_next_batch(iteration):
        for r in range(3):
            if r not in planner.running:
                finished_at.setdefault(r, iteration)
        sample(m, 50 + iteration)
        iteration += 1
    # Prefill at iteration 0 samples each first token; one more a decode iteration.
    assert finished_at == {0: 2, 1: 1} and iteration == 9  # request 2 fills its row of 12
    assert m["step"].tolist() == [3, 5, 11]
    assert m["tokens"][0, 2:4].tolist() == [50, 51] and torch.equal(m["tokens"][0, 4:], before[0, 4:])  # 4 tokens
    assert m["tokens"][1, 5].tolist() == 50 and torch.equal(m["tokens"][1, 6:], before[1, 6:])
    assert m["tokens"][2, 3:].tolist() == list(range(50, 59))
    assert sorted(planner.page_queue) == list(range(36))


@pytest.mark.parametrize(("prompt", "seq", "budget"), [(1, 1, 1), (4, 8, 4), (4, 8, 1), (7, 8, 2), (8, 8, 3), (3, 12, 8)])
def test_offline_iteration_count(prompt, seq, budget):
    """ceil(prompt / budget) prefill chunks, then decodes until the row of max_seq_length is full."""
    cfg, m = setup([prompt], max_num_batched_tokens=budget, max_seq_length=seq, max_num_pages=seq)
    want = math.ceil(prompt / budget) + max(0, seq - 1 - prompt)
    assert run_iterations(cfg, m) == want


def test_offline_eos_stops_after_the_prefill():
    cfg, m = setup(
        [5, 5], max_num_batched_tokens=2, max_num_batched_requests=2, max_seq_length=64, max_num_pages=64, eos_token_id=3
    )
    assert run_iterations(cfg, m, body=lambda it: sample(m, 3)) == 5  # 10 prompt tokens, 2 per iteration
    assert m["step"].tolist() == [5, 5]


def test_decode_without_a_free_page_raises_pages_exhausted():
    cfg, m = setup([1, 1], max_num_batched_tokens=2, max_num_batched_requests=2, max_seq_length=8, max_num_pages=2)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    with pytest.raises(
        PagesExhausted,
        match=r"request 0 needs 2 KV pages for its first 2 tokens \(page_size=1\) and the page queue is empty; raise "
        r"max_num_pages \(now 2\)",
    ) as info:
        planner.prepare_next_batch(1)
    assert isinstance(info.value, KernelError)


def test_admission_waits_for_pages():
    """Request 1 is admitted only once request 0 gave its pages back."""
    cfg, m = setup([2, 2], max_num_batched_tokens=4, max_num_batched_requests=2, max_seq_length=3, max_num_pages=2)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0) and planner.batch == [0]
    assert planner.prepare_next_batch(1) and planner.batch == [1]
    assert kv_pages(m, 0) == [0, 1]  # the same pages, recycled


def test_a_request_that_can_never_get_its_pages_is_an_error():
    """Refused when the meta tensors are built; and should such a config reach the model anyway,
    it raises instead of stopping with the request unserved."""
    with pytest.raises(MetaTensorError, match="needs 8 KV pages"):
        setup([8], max_num_batched_tokens=8, max_seq_length=16, page_size=1, max_num_pages=4)
    cfg, m = setup([8], max_num_batched_tokens=8, max_seq_length=16, page_size=1, max_num_pages=8)
    cfg = dataclasses.replace(cfg, max_num_pages=4)
    with pytest.raises(KernelError, match="waits for 8 KV pages"):
        run_iterations(cfg, m)


def test_prefill_of_several_prompts_in_one_iteration():
    """Prompts of 16, 8, 32 and 4 tokens in one batch of 60; pages of 8 (32 tokens: 4 pages, the last
    exactly full; 4 tokens: half a page)."""
    cfg, m = setup(
        [16, 8, 32, 4], max_num_batched_tokens=64, max_num_batched_requests=4, max_seq_length=40, page_size=8, max_num_pages=16
    )
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert m["qo_indptr_buffer"].tolist() == [0, 16, 24, 56, 60] and m["num_new_tokens"].tolist() == [60]
    assert m["paged_kv_indptr_buffer"].tolist() == [0, 2, 3, 7, 8]
    assert [kv_pages(m, s) for s in range(4)] == [[0, 1], [2], [3, 4, 5, 6], [7]]
    assert m["paged_kv_last_page_len_buffer"].tolist() == [8, 8, 8, 4]
    check_batch(cfg, m, planner)


def test_unused_slots_get_empty_ranges():
    """Slots past the batch repeat the last indptr entries, whatever an earlier iteration left there."""
    cfg, m = setup([3, 1], max_num_batched_tokens=4, max_num_batched_requests=4, max_seq_length=8, page_size=2, max_num_pages=8)
    m["qo_indptr_buffer"].copy_(torch.tensor([9, 9, 9, 9, 9]))
    m["paged_kv_last_page_len_buffer"].fill_(7)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert m["qo_indptr_buffer"].tolist() == [0, 3, 4, 4, 4]
    assert m["paged_kv_indptr_buffer"].tolist() == [0, 2, 3, 3, 3]
    assert m["paged_kv_last_page_len_buffer"].tolist() == [1, 1, 0, 0]


def test_history_is_in_the_cache_at_launch():
    """step=[6, 4] (pages of 4): request 0 (prompt 6) decodes at once, its 7 tokens on 2 pages; request 1
    (prompt 9) prefills its last 5 tokens, 9 tokens on 3 pages; step is set again at every launch."""
    cfg, m = setup(
        [6, 9],
        steps=[6, 4],
        max_num_batched_tokens=8,
        max_num_batched_requests=2,
        max_seq_length=16,
        page_size=4,
        max_num_pages=8,
    )
    assert cfg.initial_step == (6, 4)
    tokens = m["tokens"]
    for _ in range(2):  # two launches start from the same state
        m["step"].zero_()
        planner = BatchPlanner(cfg, m)
        assert m["step"].tolist() == [6, 4]
        assert planner.prepare_next_batch(0)
        assert m["qo_indptr_buffer"].tolist() == [0, 1, 6]
        assert m["input_tokens"][:6].tolist() == [int(tokens[0, 6])] + tokens[1, 4:9].tolist()
        assert (kv_pages(m, 0), kv_pages(m, 1)) == ([0, 1], [2, 3, 4])
        assert m["paged_kv_last_page_len_buffer"].tolist() == [3, 1]
        check_batch(cfg, m, planner)
        sample(m, 5)
        assert planner.prepare_next_batch(1)
        assert m["step"].tolist() == [7, 9] and int(tokens[0, 7]) == 5 and int(tokens[1, 9]) == 5
        assert m["qo_indptr_buffer"].tolist() == [0, 1, 2]
        assert m["paged_kv_last_page_len_buffer"].tolist() == [4, 2]  # request 0's second page is now full


def test_decode_one_token_into_a_new_page():
    """History of 8 with pages of 4: the decode token is the first of a third page."""
    cfg, m = setup([8], steps=[8], max_num_batched_tokens=1, max_seq_length=16, page_size=4, max_num_pages=4)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert kv_pages(m, 0) == [0, 1, 2] and m["paged_kv_last_page_len_buffer"].tolist() == [1]


def test_page_order_gives_a_non_contiguous_page_table():
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    cfg, m = setup(
        [6, 3],
        page_order=order,
        max_num_batched_tokens=9,
        max_num_batched_requests=2,
        max_seq_length=12,
        page_size=2,
        max_num_pages=8,
    )
    assert cfg.page_order == tuple(order)
    planner = BatchPlanner(cfg, m)
    assert planner.prepare_next_batch(0)
    assert (kv_pages(m, 0), kv_pages(m, 1)) == ([5, 2, 7], [0, 3])
    assert planner.page_queue == [6, 1, 4]


def test_history_and_page_order_in_offline_mode():
    """Many iterations: decode from a history of 5, chunked prefill of the rest of a prompt, pages from
    a shuffled queue, until both rows are full; every page comes back."""
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0)).tolist()
    cfg, m = setup(
        [5, 11],
        steps=[5, 2],
        page_order=order,
        max_num_batched_tokens=4,
        max_num_batched_requests=2,
        max_seq_length=12,
        page_size=2,
        max_num_pages=12,
    )
    planner = BatchPlanner(cfg, m)
    iterations = 0
    while planner.prepare_next_batch(iterations):
        check_batch(cfg, m, planner)
        sample(m, 7)
        iterations += 1
    # request 0: 6 decodes (steps 5..10); request 1: 9 prompt tokens in chunks of 3 (one token of the
    # budget goes to request 0's decode), which fills its row
    assert m["step"].tolist() == [11, 11]
    assert sorted(planner.page_queue) == list(range(12))
    assert iterations == 6


def test_meta_checks_of_history_and_page_order():
    with pytest.raises(MetaTensorError, match=r"step\[1\] = 8 must be in \[0, max_seq_length=8\)"):
        setup([2, 2], steps=[0, 8], max_seq_length=8, max_num_pages=8)
    with pytest.raises(MetaTensorError, match=r"must hold every page 0..3 once .*got \[0, 1, 1, 2\]"):
        setup([1], page_order=[0, 1, 1, 2], max_num_pages=4)
    with pytest.raises(
        MetaTensorError, match=r"request 0: its first prefill chunk of 1 tokens after its 6 tokens of history needs 4 KV pages"
    ):
        setup([6], steps=[6], max_seq_length=8, page_size=2, max_num_pages=3)
    with pytest.raises(
        MetaTensorError, match=r"prompt of 3 tokens \(2 of 5 are history\) must fit in one batch of max_num_batched_tokens=2"
    ):
        setup([5], steps=[2], test_mode=True, max_num_batched_tokens=2, max_seq_length=8, max_num_pages=8)


@st.composite
def configs(draw):
    page_size = draw(st.integers(1, 4))
    budget = draw(st.integers(1, 8))
    seq = draw(st.integers(1, 12))
    requests = draw(st.integers(1, 5))
    overrides = dict(
        max_num_batched_tokens=budget,
        max_num_batched_requests=draw(st.integers(1, 4)),
        page_size=page_size,
        max_seq_length=seq,
        test_mode=draw(st.booleans()),
        eos_token_id=draw(st.sampled_from([-1, 3])),
        # at least the pages of one full chunk, so that an idle kernel can always admit a request
        max_num_pages=draw(st.integers(math.ceil(budget / page_size), 3 * math.ceil(max(budget, seq) / page_size))),
    )
    prompts = draw(st.lists(st.integers(1, seq), min_size=requests, max_size=requests))
    steps = None
    if draw(st.booleans()):  # history: a step per request, with room for one more token and its pages
        steps = [draw(st.integers(0, seq - 1)) for _ in prompts]
        steps = [min(s, (overrides["max_num_pages"] - 1) * page_size) for s in steps]
    if overrides["test_mode"]:  # test mode's one pass must finish request 0's prompt
        prompts[0] = min(prompts[0], budget + (steps[0] if steps else 0))
    order = draw(st.permutations(range(overrides["max_num_pages"]))) if draw(st.booleans()) else None
    stops = None
    if draw(st.booleans()):  # a row length per request, at least one token past its prompt and history
        starts = [max(p, s) for p, s in zip(prompts, steps or [0] * requests)]
        stops = [draw(st.integers(start + 1, seq)) if start < seq else seq for start in starts]
        if any(start >= seq for start in starts):
            stops = None
    return prompts, steps, order, stops, overrides


def check_batch(cfg: BatchConfig, m: dict[str, torch.Tensor], planner: BatchPlanner) -> None:
    size = len(planner.batch)
    qo = m["qo_indptr_buffer"].tolist()[: size + 1]
    kv = m["paged_kv_indptr_buffer"].tolist()[: size + 1]
    assert 1 <= size <= cfg.max_num_batched_requests
    assert qo[0] == 0 and kv[0] == 0
    assert all(a < b for a, b in zip(qo, qo[1:])), qo  # every batched request has a token
    assert qo[-1] == int(m["num_new_tokens"][0]) <= cfg.max_num_batched_tokens
    assert all(a < b for a, b in zip(kv, kv[1:])), kv
    seen: set[int] = set()
    for slot, req in enumerate(planner.batch):
        step, n = int(m["step"][req]), qo[slot + 1] - qo[slot]
        assert torch.equal(m["input_tokens"][qo[slot] : qo[slot + 1]], m["tokens"][req, step : step + n])
        pages = kv_pages(m, slot)
        assert seen.isdisjoint(pages), (slot, pages)
        seen.update(pages)
        assert all(0 <= pg < cfg.max_num_pages for pg in pages)
        last = int(m["paged_kv_last_page_len_buffer"][slot])
        assert 1 <= last <= cfg.page_size
        assert (len(pages) - 1) * cfg.page_size + last == step + n  # the pages cover the KV length exactly
    held = [pg for r in planner.running for pg in planner.pages[r]]
    assert len(held) == len(set(held)) and set(held).isdisjoint(planner.page_queue)  # no page owned twice
    assert len(held) + len(planner.page_queue) == cfg.max_num_pages


@given(config=configs(), rng=st.randoms(use_true_random=False))
def test_batch_invariants_hold_after_every_prepare(config, rng):
    prompts, steps, order, stops, overrides = config
    try:
        cfg, m = setup(prompts, steps, order, stops, **overrides)
    except (ConfigError, MetaTensorError):  # a history whose first batch needs more pages than exist: refused up front
        assert steps is not None
        return
    planner = BatchPlanner(cfg, m)
    iteration = 0
    try:
        while planner.prepare_next_batch(iteration):
            check_batch(cfg, m, planner)
            m["output_tokens"].copy_(torch.tensor([rng.choice([1, 2, 3]) for _ in range(cfg.max_num_batched_tokens)]))
            iteration += 1
            assert iteration <= sum(prompts) + len(prompts) * cfg.max_seq_length, "no progress"
    except PagesExhausted:
        assert not cfg.test_mode  # test mode checked its pages when the meta tensors were built
        return
    first = cfg.steps_at_launch[0]
    if cfg.test_mode:
        assert iteration == 1
        assert int(m["step"][0]) == first + cfg.first_chunk(prompts[0], first)
    else:
        assert planner.next_request == len(prompts) and planner.running == []  # every request was served
        assert all(int(s) >= max(p, s0 + 1) for s, p, s0 in zip(m["step"], prompts, cfg.steps_at_launch))
        if stops is not None and overrides["eos_token_id"] == -1:  # each row ended at its own length
            ends = [max(stop, p + 1, s0 + 2) for stop, p, s0 in zip(stops, prompts, cfg.steps_at_launch)]
            assert [int(s) + 1 for s in m["step"]] == ends
        assert sorted(planner.page_queue) == list(range(cfg.max_num_pages))
