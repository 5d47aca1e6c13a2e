"""pytest_mpk.batch_params and pytest_mpk.requests: the kernel parameters that batch given requests
in one test-mode iteration, as the model of prepare_next_batch then plans them, and the strategy that
draws such requests."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_mpk import batch_params, first_batch_meta, requests


def test_every_request_gets_its_first_chunk_and_its_pages() -> None:
    kp = batch_params(((5, 0), (1, 20), (16, 16)))  # a prefill, a decode, a decode at a page boundary
    m = first_batch_meta(kp)
    assert m.qo_indptr_buffer.tolist() == [0, 5, 6, 7]
    assert m.paged_kv_last_page_len_buffer.tolist() == [5, 5, 1]  # 21 and 17 tokens: one into a new page
    assert kp["max_num_pages"] == 1 + 2 + 2 + 2  # what they hold after the iteration, and two spare
    assert kp["max_seq_length"] == 22


def test_a_small_budget_cuts_a_prompt_and_spare_slots_stay_empty() -> None:
    m = first_batch_meta(batch_params(((8, 0), (40, 0), (3, 3)), tokens=20, slots=5))
    assert m.qo_indptr_buffer.tolist() == [0, 8, 20, 20, 20, 20]  # request 1 gets 12 of 40; request 2 waits
    assert int(m.num_new_tokens[0]) == 20


def test_shuffled_pages_are_the_same_every_call() -> None:
    one, two = (batch_params(((30, 0), (2, 40)), shuffle_pages=True)["meta_tensors"] for _ in range(2))
    table = one["paged_kv_indices_buffer"]
    assert torch.equal(table, two["paged_kv_indices_buffer"])
    assert sorted(table.tolist()) == list(range(len(table))) and table.tolist() != sorted(table.tolist())


@pytest.mark.parametrize(
    ("requests_", "options", "message"),
    [
        ((), {}, r"requests=\(\) must be a non-empty sequence of \(prompt length >= 1, tokens already cached >= 0\)"),
        (((0, 3),), {}, r"requests=\(\(0, 3\),\) must be"),
        (((4, -1),), {}, r"requests=\(\(4, -1\),\) must be"),
        (((4, 1, 2),), {}, r"must be a non-empty sequence"),
        ((4,), {}, r"requests=\(4,\) must be"),
        (((4.0, 0),), {}, r"must be a non-empty sequence"),
        (((4, 0),), {"tokens": -1}, r"batch_params: tokens=-1 must be an int >= 0"),
        (((4, 0),), {"slots": 1.5}, r"batch_params: slots=1.5 must be an int >= 0"),
        (((4, 0),), {"page_size": 0}, r"batch_params: page_size=0 must be an int >= 1"),
        (((4, 0),), {"spare_pages": True}, r"batch_params: spare_pages=True must be an int >= 0"),
    ],
)
def test_bad_requests_and_sizes_are_named(requests_, options, message) -> None:
    with pytest.raises(ValueError, match=message):
        batch_params(requests_, **options)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(requests(), st.sampled_from([16, 64]))
def test_the_strategy_s_requests_all_run_in_the_first_iteration(reqs, page_size) -> None:
    kp = batch_params(reqs, page_size=page_size)
    m = first_batch_meta(kp)
    assert int(m.num_new_tokens[0]) == kp["max_num_batched_tokens"]
    assert all(m.qo_indptr_buffer[1:] > m.qo_indptr_buffer[:-1])  # every slot holds a request


def test_the_strategy_reaches_page_edges_and_decodes() -> None:
    """Histories that end on a page or one token past it, and decodes beside prefills, are drawn."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(requests(page_size=16))
    def draw(reqs) -> None:
        for prompt, history in reqs:
            seen.add("decode" if history >= prompt else "prefill")
            if history and history % 16 in (0, 1):
                seen.add(f"edge+{history % 16}")
        if len(reqs) > 1:
            seen.add("several")

    draw()
    assert seen >= {"decode", "prefill", "edge+0", "edge+1", "several"}, seen
