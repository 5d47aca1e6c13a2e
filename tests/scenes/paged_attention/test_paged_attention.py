"""Scene tests of the paged_attention layer (golden: reference/paged_attention/pytorch_reference.py,
paged_attention_batch). Each scene is a batch of requests (prompt length, tokens already in the KV
cache) that prepare_next_batch turns into one test-mode iteration; see common.py. Every case checks
the output rows of the batch's tokens, that no other row is written, the new keys and values in
their cache slots, and that no other slot changes."""

from hypothesis import strategies as st

from pytest_mpk import SceneTestCase, model_batches, requests, scene_test

from .common import DEFAULTS, AttentionScene, case, golden, scene_batch


@scene_test(layer="paged_attention")
class TestPrefill(AttentionScene):
    """Several prompts of different lengths in one iteration, nothing in the cache yet."""

    CASES = [
        case("four_prompts", requests=((16, 0), (8, 0), (32, 0), (4, 0))),
        case("one_prompt_d64", requests=((40, 0),), heads=4, kv_heads=1, head_dim=64),
        case("two_prompts_fp16", requests=((24, 0), (9, 0)), dtype="fp16"),
        case("long_prompt_split", requests=((200, 0),), splits=4),  # grid z splits the new tokens
        # later passes read whole tiles of the keys the task appended (sm90: by TMA)
        case("long_prompt", requests=((256, 0),)),
    ]

    def check_batch(self, meta, params):
        lengths = [p for p, _ in params["requests"]]
        assert meta.qo_indptr_buffer[1:].diff(prepend=meta.qo_indptr_buffer[:1]).tolist()[: len(lengths)] == lengths


@scene_test(layer="paged_attention")
class TestDecodeWithHistory(AttentionScene):
    """One new token per request after a history already in the KV cache (filled before the run at
    the pages the runtime assigns); with grid z, each request's keys are split and merged."""

    CASES = [
        case("b4", requests=((37, 37), (64, 64), (15, 15), (100, 100))),
        case("b4_split4", requests=((37, 37), (64, 64), (15, 15), (100, 100)), splits=4),
        case("b1_long_split4", requests=((1, 700),), splits=4),
        case("b2_d64_g8", requests=((1, 90), (1, 33)), heads=8, kv_heads=1, head_dim=64, splits=2),
        # 16 splits: the merger's threads share each chunk's splits (a short request leaves splits
        # empty); with 8 q heads a kv head its rows leave fewer threads a chunk
        case("b2_split16", requests=((40, 40), (500, 500)), splits=16),
        case("b1_g8_split16", requests=((300, 300),), heads=8, kv_heads=1, splits=16),
        case("b1_d64_split8", requests=((129, 129),), head_dim=64, splits=8),
        # the last split is one whole tile ending at the new key (sm90: by TMA, after the append)
        case("b1_split4_new_key_tile", requests=((511, 511),), splits=4),
    ]

    def check_batch(self, meta, params):
        n = len(params["requests"])
        assert meta.qo_indptr_buffer[: n + 1].tolist() == list(range(n + 1))  # one token each


@scene_test(layer="paged_attention")
class TestChunkedPrefill(AttentionScene):
    """Prompts longer than the token budget: a first chunk cut by max_num_batched_tokens, and a
    later chunk whose earlier tokens are history."""

    CASES = [
        case("first_chunk", requests=((8, 0), (40, 0)), tokens=24),  # request 1 gets 16 of its 40 tokens
        case("second_chunk", requests=((40, 16),)),  # tokens 16..39 over 16 keys of history
        case("second_chunk_split", requests=((70, 20),), splits=4),
    ]

    def check_batch(self, meta, params):
        if params["tokens"]:
            assert meta.qo_indptr_buffer.tolist() == [0, 8, 24]


@scene_test(layer="paged_attention")
class TestMixed(AttentionScene):
    """Decodes, whole prompts and prompt chunks in one iteration; unused batch slots."""

    REQUESTS = ((50, 50), (20, 0), (40, 30), (9, 9))
    CASES = [
        case("decode_and_prefill", requests=REQUESTS),
        case("decode_and_prefill_split4", requests=REQUESTS, splits=4),  # per slot: keys or tokens split
        case("unused_slots", requests=((1, 20), (6, 0)), slots=5, tokens=16),  # 3 empty slots, 9 idle rows
    ]


@scene_test(layer="paged_attention")
class TestGQA(AttentionScene):
    """q heads per kv head: 1, 4 and 8."""

    REQUESTS = ((12, 0), (1, 40))
    CASES = [
        case("g1", requests=REQUESTS, heads=4, kv_heads=4),
        case("g4", requests=REQUESTS, heads=8, kv_heads=2),
        case("g8", requests=REQUESTS, heads=16, kv_heads=2),
    ]


@scene_test(layer="paged_attention")
class TestKvHeadPairs(AttentionScene):
    """Grid y = kv_heads / 2: each task runs two kv heads at once on the two halves of the worker's
    warps; decodes over history, a mix split over grid z (each half merges its own splits), MHA."""

    CASES = [
        case("decode_b4", requests=((37, 37), (64, 64), (15, 15), (300, 300)), pairs=True),
        case("b1_split4_new_key_tile", requests=((255, 255),), splits=4, pairs=True),  # a 64-key tile
        case("mixed_split4", requests=TestMixed.REQUESTS, splits=4, pairs=True),
        case("g1_d64_shuffled", requests=((12, 0), (1, 40)), heads=4, kv_heads=4, head_dim=64, shuffle_pages=True, pairs=True),
    ]


@scene_test(layer="paged_attention")
class TestSmallQK(AttentionScene):
    """q and k heads of magnitude ~1e-4 (a prefill and a decode over history): eps (1e-6) of their
    RMSNorm then outweighs mean(x^2), so where it sits shows; the build of TestGQA::g4."""

    CASES = [case("tiny_qk", requests=TestGQA.REQUESTS, qk_scale=1e-4)]


@scene_test(layer="paged_attention")
class TestPageBoundaries(AttentionScene):
    """KV lengths at page edges: 32 and 16 tokens fill their last page exactly, 33 and 17 put one
    token on a new page; pages of 64 and 128."""

    EDGES = ((1, 31), (16, 0), (1, 32), (17, 0))
    CASES = [
        case("pages16", requests=EDGES),
        case("pages16_split4", requests=EDGES, splits=4),
        case("pages64", requests=((1, 63), (1, 64), (65, 0))),
        case("pages128", requests=((1, 127), (1, 128), (130, 0)), page_size=128),
        case("pages8_d64", requests=((1, 7), (9, 0)), page_size=8, heads=4, kv_heads=1, head_dim=64),
    ]


@scene_test(layer="paged_attention")
class TestRandomPageTable(AttentionScene):
    """Pages handed out from a shuffled free-page queue (paged_kv_indices_buffer given): every
    request's page table is non-contiguous."""

    REQUESTS = ((1, 90), (30, 0), (12, 40))
    CASES = [
        case("shuffled", requests=REQUESTS, shuffle_pages=True),
        case("shuffled_split4", requests=REQUESTS, shuffle_pages=True, splits=4),
    ]

    def check_batch(self, meta, params):
        kv = meta.paged_kv_indptr_buffer
        table = meta.paged_kv_indices_buffer[: int(kv[len(params["requests"])])]
        assert table.tolist() != sorted(table.tolist())


@scene_test(layer="paged_attention")
class TestOffline(AttentionScene):
    """Offline mode: prefill chunks, then a decode token per request and iteration until every row
    of max_seq_length is full; each iteration reads the keys the earlier ones appended."""

    CASES = [
        case("chunks_then_decodes", requests=((6, 0), (1, 20), (12, 4)), tokens=8, page_size=8),
        case("chunks_then_decodes_split4", requests=((6, 0), (1, 20), (12, 4)), tokens=8, page_size=8, splits=4),
    ]

    def kernel_params(self, params):
        kp = scene_batch(params)
        rows = -(-kp["max_seq_length"] // params["page_size"])
        return {**kp, "test_mode": False, "max_num_pages": len(params["requests"]) * rows + 2}

    def compute_golden(self, args, params):
        batches = list(model_batches(self.kernel_params(params)))
        assert len(batches) > 5
        return golden(args, batches)


@scene_test(layer="paged_attention")
class TestSweep(AttentionScene):
    """Random batches (requests of random prompt and history lengths) over page sizes: lengths are
    runtime values, so every example of one arch shares one build."""

    SWEEP = {
        **{k: st.just(v) for k, v in DEFAULTS.items()},
        "requests": requests(max_requests=4, max_prompt=48, max_history=80),
        "page_size": st.sampled_from([16, 32, 64, 128]),
        "shuffle_pages": st.booleans(),
        "splits": st.just(4),
    }


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
