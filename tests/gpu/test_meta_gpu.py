"""Meta tensors after a launch: the device's prepare_next_batch against the Python model."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.frontend import meta
from mpk_runtime.run import batching


def noop_graph(pk):
    src = pk.attach_input(torch.ones(4, dtype=torch.int32, device="cuda"), "src")
    dst = pk.attach_input(torch.zeros(4, dtype=torch.int32, device="cuda"), "dst")
    pk.noop_layer([src], [dst], grid_dim=(4, 1, 1), block_dim=pk.block_dim, probe=True)
    pk.compile()


def model_run(pk, iterations_body=None):
    """The Python model on CPU copies of the kernel's meta tensors, as they were before the launch."""
    cpu = {k: v.cpu().clone() for k, v in pk.meta_tensors.items()}
    n = batching.run_iterations(meta.batch_config(pk.params, cpu), cpu, iterations_body)
    return cpu, n


def assert_meta_equal(pk, expected):
    for name, want in expected.items():
        assert torch.equal(pk.meta_tensors[name].cpu(), want), name


def test_default_meta_single_request(make_pk):
    pk = make_pk(max_num_batched_tokens=16, max_seq_length=32, max_num_pages=4, page_size=8)
    noop_graph(pk)
    expected, iterations = model_run(pk)
    pk()
    pk.synchronize()
    assert iterations == 1
    assert pk.meta_tensors["step"].tolist() == [16]  # step[0] == prompt_lengths[0]
    assert pk.meta_tensors["num_new_tokens"].item() == 16  # active tokens == the batch
    assert_meta_equal(pk, expected)


@pytest.mark.parametrize(
    "prompts,budget,slots",
    [
        ([16, 8, 32, 4], 64, 4),  # all four fit
        ([16, 8, 32, 4], 40, 4),  # the third is a partial prefill chunk
        ([5, 7, 3], 64, 2),  # only two slots
    ],
)
def test_multi_request_batches(make_pk, prompts, budget, slots):
    max_seq = 48
    tokens = torch.randint(1, 30000, (len(prompts), max_seq), dtype=torch.int64, device="cuda")
    pk = make_pk(
        max_num_batched_tokens=budget,
        max_num_batched_requests=slots,
        max_seq_length=max_seq,
        max_num_pages=32,
        page_size=4,
        meta_tensors={"tokens": tokens, "prompt_lengths": torch.tensor(prompts, dtype=torch.int32, device="cuda")},
    )
    noop_graph(pk)
    expected, _ = model_run(pk)
    pk()
    pk.synchronize()
    assert_meta_equal(pk, expected)
    qo = pk.meta_tensors["qo_indptr_buffer"].tolist()
    assert qo[0] == 0 and qo[1] == min(prompts[0], budget)


@pytest.mark.parametrize(("stops", "steps"), [(None, [9, 9]), ([4, 8], [3, 7])], ids=["full rows", "stop_lengths"])
def test_offline_mode_runs_until_every_request_is_done(make_pk, stops, steps):
    """Production offline mode: prefill, then one decode token per iteration until the rows are full,
    or hold stop_lengths tokens (no sampling task here, so output_tokens stay 0 and eos_token_id=-1
    never appears)."""
    prompts = [3, 5]
    meta = {"prompt_lengths": torch.tensor(prompts, dtype=torch.int32, device="cuda")}
    if stops:
        meta["stop_lengths"] = torch.tensor(stops, dtype=torch.int32, device="cuda")
    pk = make_pk(
        test_mode=False,
        max_num_batched_tokens=8,
        max_num_batched_requests=2,
        max_seq_length=10,
        max_num_pages=6,
        page_size=4,
        meta_tensors=meta,
    )
    noop_graph(pk)
    expected, iterations = model_run(pk)
    pk()
    pk.synchronize()
    assert iterations > 2
    assert_meta_equal(pk, expected)
    assert pk.meta_tensors["step"].tolist() == steps


@pytest.mark.parametrize("test_mode", [True, False], ids=["test_mode", "offline"])
def test_history_and_page_order(make_pk, test_mode):
    """Requests with tokens already in the KV cache (step given), a shuffled free-page queue and more
    slots than requests: the device and the model agree, launch after launch (each starts over)."""
    prompts, steps, max_seq, pages = [16, 8, 32, 4], [0, 8, 20, 9], 48, 40
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(3)).to(torch.int32)
    pk = make_pk(
        test_mode=test_mode,
        max_num_batched_tokens=40,
        max_num_batched_requests=6,
        max_seq_length=max_seq,
        max_num_pages=pages,
        page_size=4,
        meta_tensors={
            "tokens": torch.randint(1, 30000, (4, max_seq), dtype=torch.int64, device="cuda"),
            "prompt_lengths": torch.tensor(prompts, dtype=torch.int32, device="cuda"),
            "step": torch.tensor(steps, dtype=torch.int32, device="cuda"),
            "paged_kv_indices_buffer": order.cuda(),
        },
    )
    noop_graph(pk)
    expected, iterations = model_run(pk)
    for _ in range(2):
        pk()
        pk.synchronize()
        assert_meta_equal(pk, expected)
    assert (iterations == 1) == test_mode
    if test_mode:  # 16 prompt tokens, a decode after 8, the last 12 of 32, a decode after 9; two slots unused
        assert pk.meta_tensors["qo_indptr_buffer"].tolist() == [0, 16, 17, 29, 30, 30, 30]
        assert pk.meta_tensors["paged_kv_indptr_buffer"].tolist() == [0, 4, 7, 15, 18, 18, 18]
        assert pk.meta_tensors["paged_kv_indices_buffer"][:18].tolist() == order[:18].tolist()
        assert pk.meta_tensors["step"].tolist() == [16, 9, 32, 10]
