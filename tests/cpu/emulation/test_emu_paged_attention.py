"""The paged_attention CUDA body (csrc/tasks/common/paged_attention.cuh) built for the host and run
task by task on the CPU against the reference: prefill, decode with history, chunks, split keys
merged through the workspace counter, split tokens, shuffled page tables, sm80 and sm90 thread
counts; and a race-checking build of it.
The primitives it uses (mma, cp.async, the 16-byte loads) run their host versions
(csrc/primitives, MPK_HOST_EMULATION).
"""

from __future__ import annotations

import random

import pytest
import torch

from mpk_runtime import harness
from mpk_runtime.codegen import abi
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.frontend import meta as fmeta
from mpk_runtime.frontend import params as fparams
from mpk_runtime.graph.tensor_maps import tensor_maps
from mpk_runtime.graph.variants import Variant
from mpk_runtime.run import host_runner
from mpk_runtime.tasks import registry
from mpk_runtime.tasks.paged_attention import kv_map_geometry, tma_box_rows, workspace_floats

ref = harness.find_reference("paged_attention_batch", layer="paged_attention")
rope_tables = harness.find_reference("rope_tables", layer="paged_attention")


def load(targs: list, arch: str, race: bool, page_size: int) -> host_runner.HostModule:
    """The body's variant of ``targs`` (the spec's template arguments but the TMA box rows, which the
    page size gives, as the layer's check_params does: sm90 variants of pages of 16 rows and more
    read their history tiles through the emulator's TMA)."""
    targs = [*targs, tma_box_rows(page_size)]
    source = codegen.generate([Variant(0, registry.get("paged_attention"), targs)], arch)
    return host_runner.load(source, arch, "paged_attention_host", race_check=race)


def run_layer(module, requests, *, head_dim, group, kv_heads, splits, page_size, pairs=False, shuffle=False, seed=0,
              race=False, counters=None, maps=None):  # fmt: skip
    """Every task of one layer over a batch of (prompt, history) requests, in a shuffled order; the
    output, caches and meta, and the reference's BatchResult. pairs: grid y = kv_heads / 2 (two kv
    heads a task, on the two halves of the warps). counters: what the workspace's split-count words
    hold before the layer (int64 values; default: zeros, a fresh workspace). maps: the kv_maps input
    (default: the layer's, tensor_maps of the caches as the spec asks)."""
    torch.manual_seed(seed)
    first = [p - h if p > h else 1 for p, h in requests]
    tokens, slots = sum(first) + 2, len(requests) + 1  # an idle row and an unused slot
    pages = sum(-(-(h + f) // page_size) for (_, h), f in zip(requests, first)) + 2
    seq = max(max(p, h + 1) for p, h in requests) + 1
    overrides = {
        "prompt_lengths": torch.tensor([p for p, _ in requests], dtype=torch.int32),
        "step": torch.tensor([h for _, h in requests], dtype=torch.int32),
    }
    if shuffle:
        overrides["paged_kv_indices_buffer"] = torch.randperm(pages, dtype=torch.int32)
    init = dict(
        test_mode=True,
        max_num_batched_tokens=tokens,
        max_num_batched_requests=slots,
        max_num_pages=pages,
        page_size=page_size,
        max_seq_length=seq,
        meta_tensors=overrides,
    )
    m = harness.first_batch_meta(init)
    p = fparams.parse(init)
    batch = fmeta.batch_config(p, fmeta.build(p, torch.device("cpu")))
    heads, d, bf = group * kv_heads, head_dim, torch.bfloat16
    x = torch.randn(tokens, (heads + 2 * kv_heads) * d, dtype=bf)
    k_cache, v_cache = torch.randn(pages, page_size, kv_heads, d, dtype=bf), torch.randn(pages, page_size, kv_heads, d, dtype=bf)
    q_norm, k_norm = (1 + 0.1 * torch.randn(d)).to(bf), (1 + 0.1 * torch.randn(d)).to(bf)
    cos, sin = rope_tables(seq, d)
    out = torch.full((tokens, heads * d), float("nan"), dtype=bf)
    want = ref(x, k_cache, v_cache, q_norm, k_norm, cos, sin, m["qo_indptr_buffer"], m["paged_kv_indptr_buffer"],
               m["paged_kv_indices_buffer"], m["paged_kv_last_page_len_buffer"], output=out)  # fmt: skip
    ws = torch.zeros(max(4, workspace_floats(tokens, slots, heads, kv_heads, d, splits)), dtype=torch.float32)
    if maps is None and tma_box_rows(page_size):  # the emulator checks its geometry against the body's copies
        maps = tensor_maps([k_cache, v_cache], *kv_map_geometry(tma_box_rows(page_size)))
    if counters is not None:  # the first slots * kv_heads int64 words: one per (request slot, kv head)
        ws.view(torch.int64)[: slots * kv_heads] = counters
    meta_struct, batch_struct = abi.meta_struct(m), abi.batch_struct(batch)
    per_task = 2 if pairs else 1
    tasks = [(a, b, c) for a in range(slots) for b in range(kv_heads // per_task) for c in range(splits)]
    random.Random(seed).shuffle(tasks)
    e = x.element_size()
    for i, (a, b, c) in enumerate(tasks):
        ins = [x.data_ptr(), q_norm.data_ptr(), k_norm.data_ptr(), cos.data_ptr(), sin.data_ptr()]
        first = b * per_task  # the task's first kv head: where its output boxes start
        outs = [k_cache.data_ptr() + first * d * e, v_cache.data_ptr() + first * d * e, out.data_ptr() + first * group * d * e]
        desc = host_runner.task_desc(
            0,
            ins + ([ws.data_ptr()] if splits > 1 else []) + ([maps.data_ptr()] if maps is not None else []),
            outs,
            [{"f": 1e-6}],
            task_id=i,
            grid_idx=(a, b, c),
        )
        run = module.run_task(0, desc, meta_struct, batch_struct, order="shuffled", seed=seed + i, race_check=race)
        assert run.ok, run.report
    return out, k_cache, v_cache, want


@pytest.mark.parametrize(
    "box, swizzle, message",
    [
        (
            [64, 1, 8, 1],
            128,
            r"copies a box \[64, 1, 16, 1\] of dims \[64, 1, 16, 21\] .* through a map of a box \[64, 1, 8, 1\]",
        ),
        ([64, 1, 16, 1], 0, r"swizzle 128\) through a map of a box \[64, 1, 16, 1\] .* swizzle 0 bytes\): the layer's"),
        (None, 0, r"copies through a tensor map of zeros, which no layer encoded"),
    ],
    ids=["box rows", "swizzle", "zeros"],
)
def test_a_map_that_is_not_the_bodys_copies_is_reported(box, swizzle, message):
    """The emulator compares the geometry of each TMA copy with the map the device would read (the
    spec's box and the body's R, the swizzle), and refuses a map nobody encoded."""
    module = load(["__nv_bfloat16", 64, 4, 1, 1, 1], "sm90", race=False, page_size=16)
    k = torch.zeros(21, 16, 1, 64, dtype=torch.bfloat16)  # as run_layer's caches: 21 pages of 16, one kv head
    maps = torch.zeros(2, 128, dtype=torch.uint8) if box is None else tensor_maps([k, k], box, swizzle)
    shape = dict(head_dim=64, group=4, kv_heads=1, splits=1, page_size=16)
    with pytest.raises(AssertionError, match=rf"TMA copy through another map.*{message}|{message}"):
        run_layer(module, ((1, 300),), **shape, maps=maps)  # history of two whole tiles


def check(out, k_cache, v_cache, want) -> None:
    torch.testing.assert_close(out[want.rows], want.output[want.rows], rtol=1.6e-2, atol=1e-2)
    assert out[~want.rows].isnan().all(), "a row of no new token was written"
    torch.testing.assert_close(k_cache, want.k_cache, rtol=1.6e-2, atol=1e-2)
    assert torch.equal(k_cache[~want.slots], want.k_cache[~want.slots])  # other slots untouched
    assert torch.equal(v_cache, want.v_cache)


CONFIGS = {
    # name: (arch, head_dim, group, kv_heads, splits, page_size, requests, shuffled pages, pairs)
    "prefill_and_decode": ("sm90", 64, 4, 1, 1, 16, ((20, 0), (1, 40), (9, 3)), False, False),
    "split_keys_and_tokens": ("sm80", 64, 4, 1, 3, 16, ((1, 150), (40, 0), (5, 30)), True, False),
    "d128_gqa2_pages8": ("sm90", 128, 2, 2, 2, 8, ((3, 60), (18, 0)), False, False),
    "mha_pages1": ("sm80", 64, 1, 2, 1, 1, ((12, 0), (1, 9)), True, False),
    # 11 new tokens x 4 heads: 3 m-tiles, taken 2 then 1, so the first pass ends its keys before the
    # last new key: the new keys a pass reads from the input stop at its causal end
    "chunk_in_two_passes": ("sm90", 64, 4, 1, 1, 16, ((14, 3), (1, 20)), False, False),
    # 8 warps, head_dim 128: decodes of several 128-key tiles a split, of one, of part of one; a
    # decode of 501 keys next to a 2 m-tile chunk
    # sm90 (TMA tiles of history): a chunk of 40 tokens after 3 tiles of history, in two passes of
    # m-tiles; a stage takes two TMA tiles in the first pass and one in the second, so a pass that
    # kept the mbarriers' phases of the pass before would wait for a phase already complete
    "chunk_after_history_in_two_passes": ("sm90", 64, 4, 1, 1, 16, ((424, 384), (1, 300)), True, False),
    "d128_long_decodes_split": ("sm90", 128, 4, 2, 2, 16, ((1, 700), (1, 129), (1, 64)), True, False),
    "d128_gqa8_decode_and_chunk": ("sm90", 128, 8, 1, 1, 32, ((1, 500), (3, 200)), False, False),
    # two kv heads a task: halves of 4 warps (sm90) and of 2 (sm80), each its own stream; decodes
    # of several tiles, split keys merged by each half, a prefill split by tokens, a chunk
    "pairs_d128_decodes": ("sm90", 128, 4, 4, 1, 16, ((1, 300), (1, 64), (5, 40)), True, True),
    "pairs_d128_split_keys_and_tokens": ("sm90", 128, 4, 2, 3, 16, ((1, 500), (30, 0)), False, True),
    # sm100 takes the sm90 path (TMA tiles of history, 8 warps): decodes split over a page size of 32
    "sm100_d128_tma_decodes": ("sm100", 128, 4, 2, 2, 32, ((1, 600), (1, 257), (3, 140)), True, False),
    "pairs_sm80_d64_split": ("sm80", 64, 2, 2, 2, 8, ((1, 90), (12, 5), (1, 7)), True, True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_body_on_the_host(name):
    arch, d, group, kv_heads, splits, page_size, requests, shuffle, pairs = CONFIGS[name]
    module = load(["__nv_bfloat16", d, group, kv_heads, splits, 2 if pairs else 1], arch, race=False, page_size=page_size)
    shape = dict(head_dim=d, group=group, kv_heads=kv_heads, splits=splits, page_size=page_size)
    check(*run_layer(module, requests, **shape, pairs=pairs, shuffle=shuffle))


def test_no_race_in_the_body():
    """Decode with split keys and a prefill split by tokens, every task's threads interleaved at
    random: the race checker finds nothing (shared memory tiles, the merge scratch)."""
    module = load(["__nv_bfloat16", 64, 4, 1, 2, 1], "sm80", race=True, page_size=16)
    check(*run_layer(module, ((1, 40), (20, 4)), head_dim=64, group=4, kv_heads=1, splits=2, page_size=16, race=True))


def test_no_race_at_eight_warps():
    """The sm90 thread count (8 warps, head_dim 128): decode splits of two tiles and of one, and a
    4 m-tile chunk, threads interleaved at random: the race checker finds nothing."""
    module = load(["__nv_bfloat16", 128, 4, 1, 2, 1], "sm90", race=True, page_size=16)
    requests = ((1, 300), (1, 40), (16, 4))
    check(*run_layer(module, requests, head_dim=128, group=4, kv_heads=1, splits=2, page_size=16, race=True))


def test_no_race_between_the_halves_of_a_pair():
    """Two kv heads a task at 8 warps: each half streams, merges its splits and counts on its own
    named barrier and shared memory; threads of both halves interleaved at random, the race checker
    finds nothing (a shared scratch or a barrier id the halves shared would be reported)."""
    module = load(["__nv_bfloat16", 128, 4, 2, 2, 2], "sm90", race=True, page_size=16)
    requests = ((1, 200), (1, 30), (12, 4))
    check(*run_layer(module, requests, head_dim=128, group=4, kv_heads=2, splits=2, page_size=16, pairs=True, race=True))


# The split count's word: launch id (32 bits) | iteration (16) | count (16); the host runs every task
# as launch 1, iteration 0.
TAG = 1 << 32


@pytest.mark.parametrize(
    "word",
    [
        pytest.param(TAG | 2, id="this_tag_full"),  # the same layer run twice (a body run alone twice)
        pytest.param((7 << 32) | (3 << 16) | 1, id="later_tag"),  # a wrapped iteration: the start's atomicMax keeps it
        pytest.param((0 << 32) | (9 << 16) | 1, id="earlier_tag"),  # an earlier launch: the start's atomicMax replaces it
    ],
)
def test_split_count_from_a_stale_word(word):
    """Splits count themselves done on a tagged word that each split's atomicMax makes current at its
    start. When it cannot (a stale word with a later tag), every split's add lands on the stale word
    and the compare-and-swap path restarts it: the merge still happens exactly once, and right."""
    module = load(["__nv_bfloat16", 64, 4, 1, 2, 1], "sm80", race=False, page_size=16)
    shape = dict(head_dim=64, group=4, kv_heads=1, splits=2, page_size=16)
    check(*run_layer(module, ((1, 40), (1, 90)), **shape, counters=word))
