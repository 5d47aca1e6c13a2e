"""paged_attention on the GPU against the reference (reference/paged_attention): Qwen3-8B shapes
(32 q heads, 8 kv heads, head_dim 128), decode after long histories with split keys (merged by the
last split), a long prefill split by tokens, mixed batches, offline iterations and relaunches; the
sm90 build and the sm80 build (PTX, JIT-compiled) on the same GPU. The scenes of
tests/scenes/paged_attention cover the small shapes (run them with --arch sm90 --arch sm80)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.harness import find_reference, model_batches

paged_attention = find_reference("paged_attention", layer="paged_attention")
paged_attention_batch = find_reference("paged_attention_batch", layer="paged_attention")
rope_tables = find_reference("rope_tables", layer="paged_attention")
H, HKV, D = 32, 8, 128
BF = torch.bfloat16


class Batch:
    """A batch of (prompt, history) requests: kernel parameters, and tensors on the GPU with each
    history already in the KV cache at the pages prepare_next_batch will give it."""

    def __init__(self, requests, page_size, tokens=None, offline_seq=None, seed=0):
        torch.manual_seed(seed)
        first = [p - h if p > h else 1 for p, h in requests]
        self.requests, self.page = requests, page_size
        self.seq = offline_seq or max(max(p, h + 1) for p, h in requests) + 1
        lengths = [self.seq] * len(requests) if offline_seq else [h + f for (_, h), f in zip(requests, first)]
        self.init = dict(
            test_mode=offline_seq is None,
            max_num_batched_tokens=tokens or sum(first),
            max_num_batched_requests=len(requests),
            max_num_pages=sum(-(-n // page_size) for n in lengths) + 1,
            page_size=page_size,
            max_seq_length=self.seq,
        )
        t = self.init["max_num_batched_tokens"]
        self.x = torch.randn(t, (H + 2 * HKV) * D, dtype=BF, device="cuda")
        self.q_norm = (1 + 0.1 * torch.randn(D, device="cuda")).to(BF)
        self.k_norm = (1 + 0.1 * torch.randn(D, device="cuda")).to(BF)
        self.cos, self.sin = (x.cuda() for x in rope_tables(self.seq, D))
        pages = self.init["max_num_pages"]
        self.k = torch.randn(pages, page_size, HKV, D, dtype=BF, device="cuda")
        self.v = torch.randn(pages, page_size, HKV, D, dtype=BF, device="cuda")
        self.out = torch.full((t, H * D), float("nan"), dtype=BF, device="cuda")
        first_batch = next(model_batches(self.params(cpu=True)))
        self.fill_history(first_batch)
        self.k0, self.v0 = self.k.clone(), self.v.clone()

    def params(self, cpu: bool = False) -> dict:
        """Init parameters with fresh meta tensors (a launch advances the step it was given)."""
        device = "cpu" if cpu else "cuda"
        meta = {
            "prompt_lengths": torch.tensor([p for p, _ in self.requests], dtype=torch.int32, device=device),
            "step": torch.tensor([h for _, h in self.requests], dtype=torch.int32, device=device),
        }
        return {**self.init, "meta_tensors": meta}

    def fill_history(self, m) -> None:
        qo, kv = m["qo_indptr_buffer"], m["paged_kv_indptr_buffer"]
        for slot in range(len(self.requests)):
            if qo[slot + 1] <= qo[slot]:
                continue  # not in the first batch (then its pages are unknown here: tests batch them all)
            pages = m["paged_kv_indices_buffer"][int(kv[slot]) : int(kv[slot + 1])].long().cuda()
            kv_len = (len(pages) - 1) * self.page + int(m["paged_kv_last_page_len_buffer"][slot])
            history = kv_len - int(qo[slot + 1] - qo[slot])
            if history:
                empty = torch.empty(0, HKV, D, dtype=BF, device="cuda")
                rows = torch.randn(history, self.x.shape[1], dtype=BF, device="cuda")
                _, k, v = paged_attention(rows, empty, empty, self.q_norm, self.k_norm, self.cos, self.sin, HKV)
                where = (pages[:, None] * self.page + torch.arange(self.page, device="cuda")).reshape(-1)[:history]
                self.k.view(-1, HKV, D)[where], self.v.view(-1, HKV, D)[where] = k, v

    def kernel(self, make_pk, cc: int, splits: int, heads_per_task: int = 1):
        pk = make_pk(target_cc=cc, **self.params())
        names = ("x", "k", "v", "q_norm", "k_norm", "cos", "sin", "out")
        t = {n: pk.attach_input(getattr(self, n), n) for n in names}
        pk.paged_attention_layer(
            input=t["x"],
            k_cache=t["k"],
            v_cache=t["v"],
            q_norm=t["q_norm"],
            k_norm=t["k_norm"],
            cos_pos_embed=t["cos"],
            sin_pos_embed=t["sin"],
            output=t["out"],
            grid_dim=(len(self.requests), HKV // heads_per_task, splits),
            block_dim=pk.block_dim,
        )
        pk.compile()
        return pk

    def check(self, batches) -> None:
        """The output rows and caches against the reference replaying ``batches`` (meta dicts)."""
        k, v, out, rows, slots = self.k0, self.v0, None, None, None
        for m in batches:
            m = {n: t.cuda() for n, t in m.items()}
            r = paged_attention_batch(
                self.x, k, v, self.q_norm, self.k_norm, self.cos, self.sin, m["qo_indptr_buffer"],
                m["paged_kv_indptr_buffer"], m["paged_kv_indices_buffer"], m["paged_kv_last_page_len_buffer"], output=out,
            )  # fmt: skip
            k, v, out = r.k_cache, r.v_cache, r.output
            rows = r.rows if rows is None else rows | r.rows
            slots = r.slots if slots is None else slots | r.slots
        torch.testing.assert_close(self.out[rows].float(), out[rows].float(), rtol=2e-2, atol=2e-2)
        assert self.out[~rows].isnan().all(), "rows of no token were written"
        torch.testing.assert_close(self.k[slots].float(), k[slots].float(), rtol=2e-2, atol=2e-2)
        assert torch.equal(self.k[~slots], self.k0[~slots]) and torch.equal(self.v, v)


CASES = [
    # (target_cc, requests (prompt, history), page size, grid z, kv heads a task)
    (90, [(1, 4095)], 16, 16, 1),  # B=1, S=4096: 16 splits of 256 keys
    (90, [(1, 999)] * 8, 64, 1, 1),
    (90, [(1, h) for h in (3000, 17, 1200, 64, 2047)], 16, 16, 1),  # short requests leave splits empty
    (90, [(1024, 0)], 64, 16, 1),  # prefill, split by tokens
    (90, [(300, 0), (1, 700), (129, 64), (16, 16)], 16, 1, 1),
    (80, [(1, 1500)] * 4, 64, 4, 1),
    (80, [(300, 0), (1, 700), (129, 64), (16, 16)], 16, 4, 1),
    # two kv heads a task (grid y = 4): halves of 4 warps (sm90) and of 2 (sm80)
    (90, [(1, 999)] * 8, 64, 1, 2),
    (90, [(1, h) for h in (3000, 17, 1200, 64, 2047)], 16, 16, 2),
    (90, [(300, 0), (1, 700), (129, 64), (16, 16)], 16, 4, 2),
    (80, [(1, 1500)] * 4, 64, 4, 2),
]


@pytest.mark.parametrize(
    ("cc", "requests", "page", "splits", "heads_per_task"),
    CASES,
    ids=[f"sm{c[0]}-b{len(c[1])}-z{c[3]}-hp{c[4]}-{i}" for i, c in enumerate(CASES)],
)
def test_against_the_reference(make_pk, cc, requests, page, splits, heads_per_task):
    b = Batch(requests, page)
    pk = b.kernel(make_pk, cc, splits, heads_per_task)
    pk()
    pk.synchronize()
    b.check(model_batches(b.params(cpu=True)))


def test_relaunches_are_identical(make_pk):
    """The split merge (a counter tagged with launch and iteration) works launch after launch, and
    the result does not depend on which split finishes last."""
    b = Batch([(1, 2000), (1, 77), (40, 0)], 16)
    pk = b.kernel(make_pk, 90, 16)
    results = []
    for _ in range(3):
        b.k.copy_(b.k0)
        b.v.copy_(b.v0)
        pk()
        pk.synchronize()
        results.append(b.out.clone())
    assert all(torch.equal(results[0], r) for r in results[1:])
    b.check(model_batches(b.params(cpu=True)))


@pytest.mark.parametrize("splits", [1, 16])
def test_offline_iterations(make_pk, splits):
    """Offline mode: chunked prefill, then a decode token per request and iteration until every row
    is full; each iteration reads what the earlier ones appended (sm90)."""
    b = Batch([(1, 200), (10, 150), (40, 0)], 16, tokens=16, offline_seq=230)  # all three in the first batch
    pk = b.kernel(make_pk, 90, splits)
    pk()
    pk.synchronize()
    batches = list(model_batches(b.params(cpu=True)))
    assert len(batches) > 20
    b.check(batches)


def test_profiled_decode_marks_its_phases(make_pk, tmp_path):
    """A profiled launch (Runtime::mark) records the body's phases: every task of a key-split decode
    ends phases 0..4 in order (the last one counts its split), its phases add up to the task's
    span, the spec names them, and the output is still right."""
    pytest.importorskip("perfetto")
    from mpk_runtime.profile.stats import per_phase, read_csv, read_phases_csv
    from mpk_runtime.tasks import registry

    b = Batch([(1, 700), (1, 300)], 64)
    prof = torch.zeros(1 << 16, dtype=torch.uint64, device="cuda")

    def make_profiled(**params):
        return make_pk(profiler_tensor=prof, trace_name=str(tmp_path / "attention"), **params)

    pk = b.kernel(make_profiled, 90, 4)
    pk()
    pk.synchronize()
    b.check(model_batches(b.params(cpu=True)))
    runs = {(r.worker, r.event_no): r for r in read_csv(pk.profile_paths["csv"])}
    phases: dict[tuple[int, int], list] = {}
    for r in read_phases_csv(pk.profile_paths["phases"]):
        phases.setdefault((r.worker, r.event_no), []).append(r)
    assert len(phases) == len(runs) == 2 * HKV * 4  # every task marks
    names = registry.get("paged_attention").phases
    for run, ps in phases.items():
        assert [p.phase_no for p in ps] == [0, 1, 2, 3, 4, -1], run
        assert [p.phase for p in ps] == list(names), run
        assert sum(p.duration_ns for p in ps) == runs[run].duration_ns
    medians = {e["phase"]: e["median_ns"] for e in per_phase(read_phases_csv(pk.profile_paths["phases"]))}
    print("paged_attention phases, median ns:", medians)  # shown by -rA
