"""paged_attention, Qwen3-8B shapes (32 q heads, 8 kv heads, head_dim 128, bf16, pages of 64), timed
inside the megakernel next to torch in the same run:

- decode (one new token per request after S - 1 tokens of history) at (B, S) = (1, 8192), (8, 1024),
  (8, 8192), (32, 4096), (64, 2048): the megakernel time of one layer is (T(n copies) - T(1)) / (n - 1)
  (layer_bench.measure's method: each copy has its own KV cache, together past L2); the KV-read floor
  is the KV bytes / the copy bandwidth measured in this run; torch: a paged gather + SDPA, and SDPA
  on a contiguous cache, both replayed from a CUDA graph. Targets: >= 80% of the floor, >= 2.5x
  faster than gather + SDPA, within 1.25x of contiguous SDPA, with torch timed as the anchors were
  (one cache, read again and again). torch is also timed the megakernel's way ("past L2": copies
  with caches of their own): a small case's keys fit in L2, which the anchors' way lets torch use.
  Also one copy's span in a launch of its own (the layer's latency, without the launch's fixed
  cost), and from the same profiled launches where it goes (span_phases.py: the phases of the
  tasks, and the chain of the task that ends last; printed with --phases, always in the JSON).
  The copies are independent, so a grid of at most half as many tasks as workers runs two or more
  of them side by side: (T(n) - T(1)) / (n - 1) is then a throughput, not a layer's latency, and
  such a row is marked instead of judged against the targets.
- prefill of one 4096-token prompt against causal torch SDPA (CUDA graph): reported only.
Every case checks its first copy's output against the reference before it is timed.

    python bench/bench_paged_attention.py [--arch sm90|sm80] [--phases]   # writes $OUT/bench_paged_attention.json
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

import mpk_runtime as mpk

sys.path.insert(0, str(Path(__file__).parent))
from mpk_runtime.harness import find_reference  # noqa: E402

import layer_bench  # noqa: E402
import span_phases  # noqa: E402
import timing  # noqa: E402

paged_attention_batch = find_reference("paged_attention_batch", layer="paged_attention")
rope_tables = find_reference("rope_tables", layer="paged_attention")

H, HKV, D, PAGE = 32, 8, 128, 64
# (B, S, grid z, kv heads a task: 2 is grid y = HKV / 2, the two halves of the warps streaming at once).
# Each grid gives a copy about as many tasks as an H100 or H200 has workers (128 or more of 131), so
# that the copies run one after another. Not wholly: a copy's last tasks (its merges) overlap the next
# copy's first, so the per-copy time can differ from one copy's span either way (PERFORMANCE.md,
# "A split's appended key by TMA": 18.5 µs a copy against a 16.7 µs span at B 1 x 8192).
DECODE = [(1, 8192, 16, 1), (8, 1024, 2, 1), (8, 8192, 2, 1), (32, 4096, 1, 2), (64, 2048, 1, 2)]
PREFILL = (4096, 128)  # tokens, grid z: each task 32 new tokens of one kv head, 128 rows, one pass
BF = torch.bfloat16


def graphed(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


class Layer:
    """One batch of requests and the tensors of `copies` independent paged_attention layers over it."""

    def __init__(self, prompts: list[int], history: list[int], tokens: int, copies: int, seed: int = 0):
        torch.manual_seed(seed)
        self.b = len(prompts)
        self.tokens = tokens
        self.seq = max(max(p, h + 1) for p, h in zip(prompts, history)) + 1
        kv_len = [h + (p - h if p > h else 1) for p, h in zip(prompts, history)]
        self.pages = sum(-(-n // PAGE) for n in kv_len)
        self.prompts, self.history = prompts, history
        self.x = torch.randn(tokens, (H + 2 * HKV) * D, dtype=BF, device="cuda")
        self.q_norm = (1 + 0.1 * torch.randn(D, device="cuda")).to(BF)
        self.k_norm = (1 + 0.1 * torch.randn(D, device="cuda")).to(BF)
        self.cos, self.sin = (t.cuda() for t in rope_tables(self.seq, D))
        shape = (self.pages, PAGE, HKV, D)
        self.k = [torch.randn(shape, dtype=BF, device="cuda") for _ in range(copies)]
        self.v = [torch.randn(shape, dtype=BF, device="cuda") for _ in range(copies)]
        self.out = [torch.zeros(tokens, H * D, dtype=BF, device="cuda") for _ in range(copies)]
        self.k0, self.v0 = self.k[0].clone(), self.v[0].clone()

    @property
    def params(self) -> dict:
        """Init parameters, with fresh meta tensors: a launch advances the `step` it was given."""
        return dict(
            max_num_batched_tokens=self.tokens,
            max_num_batched_requests=self.b,
            max_num_pages=self.pages,
            page_size=PAGE,
            max_seq_length=self.seq,
            meta_tensors={
                "prompt_lengths": torch.tensor(self.prompts, dtype=torch.int32, device="cuda"),
                "step": torch.tensor(self.history, dtype=torch.int32, device="cuda"),
            },
        )

    def build(self, splits: int, pairs: int = 1):
        shared = {}

        def build(pk, i):
            if i == 0:
                for name in ("x", "q_norm", "k_norm", "cos", "sin"):
                    shared[name] = pk.attach_input(getattr(self, name), name)
            pk.paged_attention_layer(
                input=shared["x"],
                k_cache=pk.attach_input(self.k[i], f"k{i}"),
                v_cache=pk.attach_input(self.v[i], f"v{i}"),
                q_norm=shared["q_norm"],
                k_norm=shared["k_norm"],
                cos_pos_embed=shared["cos"],
                sin_pos_embed=shared["sin"],
                output=pk.attach_input(self.out[i], f"o{i}"),
                grid_dim=(self.b, HKV // pairs, splits),
                block_dim=pk.block_dim,
            )

        return build

    def check(self, arch: str, splits: int, pairs: int) -> float:
        """Run copy 0 once; the worst |error| of its output against the reference (asserted)."""
        pk = layer_bench.kernel(target_cc=int(arch[2:]), **self.params)
        self.k[0].copy_(self.k0)
        self.v[0].copy_(self.v0)
        self.build(splits, pairs)(pk, 0)
        pk.compile()
        pk()
        pk.synchronize()
        m = pk.meta_tensors
        r = paged_attention_batch(
            self.x, self.k0, self.v0, self.q_norm, self.k_norm, self.cos, self.sin,
            m["qo_indptr_buffer"], m["paged_kv_indptr_buffer"], m["paged_kv_indices_buffer"], m["paged_kv_last_page_len_buffer"],
        )  # fmt: skip
        pk.finalize()
        got = self.out[0][r.rows].float()
        torch.testing.assert_close(got, r.output[r.rows].float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(self.k[0][r.slots].float(), r.k_cache[r.slots].float(), rtol=2e-2, atol=2e-2)
        return (got - r.output[r.rows].float()).abs().max().item()


def megakernel_us(layer: Layer, arch: str, splits: int, pairs: int, copies: int) -> float:
    one = layer_bench.launch_us(layer.build(splits, pairs), 1, target_cc=int(arch[2:]), **layer.params)
    many = layer_bench.launch_us(layer.build(splits, pairs), copies, target_cc=int(arch[2:]), **layer.params)
    return (many - one) / (copies - 1)


def torch_decode_us(b: int, s: int, copies: int) -> dict[str, float]:
    """torch's decode attention for the same shapes, replayed from CUDA graphs: SDPA on a contiguous
    cache, and a paged cache (random page table) gathered by indexing, then SDPA. Each is timed two
    ways: one cache read again and again (as anchors/attn_anchor.py measured it; a small case's
    33.5 MB of keys and values then stays in the 50 MB L2), and the megakernel's way, (T(n) - T(1)) /
    (n - 1) over a graph of n calls on n caches of their own (together past L2)."""
    q = torch.randn(b, H, 1, D, dtype=BF, device="cuda")
    ks = [torch.randn(b, HKV, s, D, dtype=BF, device="cuda") for _ in range(copies)]
    vs = [torch.randn_like(ks[0]) for _ in range(copies)]
    table = torch.randperm(b * s // PAGE, device="cuda").view(b, s // PAGE)
    paged = [
        (k.transpose(1, 2).reshape(b * s // PAGE, PAGE, HKV, D), v.transpose(1, 2).reshape(b * s // PAGE, PAGE, HKV, D))
        for k, v in zip(ks, vs)
    ]

    def sdpa(i: int):
        return F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=True)

    def gather_sdpa(i: int):
        kc, vc = paged[i]
        kk = kc[table].reshape(b, s, HKV, D).transpose(1, 2)
        vv = vc[table].reshape(b, s, HKV, D).transpose(1, 2)
        return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)

    times = {}
    for name, fn in (("sdpa", sdpa), ("gather_sdpa", gather_sdpa)):
        one = timing.time_us(graphed(lambda fn=fn: fn(0)), reps=50, device_bound=True)
        many = timing.time_us(graphed(lambda fn=fn: [fn(i) for i in range(copies)]), reps=20, device_bound=True)
        times[f"{name}_us"] = one
        times[f"{name}_past_l2_us"] = (many - one) / (copies - 1)
    return times


def decode_case(b: int, s: int, splits: int, pairs: int, arch: str, copy_tbps: float) -> dict:
    kv_bytes = 2 * b * HKV * s * D * 2
    copies = max(3, min(8, -(-(256 << 20) // kv_bytes)))
    layer = Layer([s - 1] * b, [s - 1] * b, b, copies)
    err = layer.check(arch, splits, pairs)
    mpk_us = megakernel_us(layer, arch, splits, pairs, copies)
    phases = span_phases.span_phases(
        layer_bench.profiled_runs(layer.build(splits, pairs), target_cc=int(arch[2:]), **layer.params)
    )
    workers, _ = mpk.get_configurations_from_gpu(0)
    del layer
    torch.cuda.empty_cache()

    torch_us = torch_decode_us(b, s, copies)
    floor_us = kv_bytes / (copy_tbps * 1e12) * 1e6
    return {
        "case": f"decode B={b} S={s}",
        "grid_z": splits,
        "kv_heads_per_task": pairs,
        "copies": copies,
        "mpk_us": mpk_us,
        "span_us": phases["span_us"],
        "phases": phases,
        "copies_side_by_side": layer_bench.side_by_side(b * (HKV // pairs) * splits, workers),
        "floor_us": floor_us,
        "pct_of_floor": 100 * floor_us / mpk_us,
        **torch_us,
        "gather_over_mpk": torch_us["gather_sdpa_us"] / mpk_us,
        "mpk_over_sdpa": mpk_us / torch_us["sdpa_us"],
        "gather_past_l2_over_mpk": torch_us["gather_sdpa_past_l2_us"] / mpk_us,
        "mpk_over_sdpa_past_l2": mpk_us / torch_us["sdpa_past_l2_us"],
        "max_abs_err": err,
    }


def prefill_case(arch: str) -> dict:
    n, splits = PREFILL
    layer = Layer([n], [0], n, 2)
    err = layer.check(arch, splits, 1)
    mpk_us = megakernel_us(layer, arch, splits, 1, 2)
    del layer
    q = torch.randn(1, H, n, D, dtype=BF, device="cuda")
    k = torch.randn(1, HKV, n, D, dtype=BF, device="cuda")
    v = torch.randn_like(k)
    sdpa_us = timing.time_us(
        graphed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)), reps=20, device_bound=True
    )
    flops = 4 * H * D * n * n / 2  # causal: QK^T and PV over half the square
    return {
        "case": f"prefill {n} tokens",
        "grid_z": splits,
        "mpk_us": mpk_us,
        "sdpa_us": sdpa_us,
        "mpk_over_sdpa": mpk_us / sdpa_us,
        "mpk_tflops": flops / mpk_us / 1e6,
        "sdpa_tflops": flops / sdpa_us / 1e6,
        "max_abs_err": err,
    }


def prebuild(arch: str, decode: list[tuple[int, int, int, int]]) -> None:
    """Build the modules of every grid (z, kv heads a task) at once (nvcc processes in parallel); the cases then load
    them from the cache. Each graph is made in a compile-only kernel and built as the GPU needs it
    (its compile() would build a cubin)."""
    import mpk_runtime as mpk
    from mpk_runtime import harness

    def build(grid: tuple[int, int]) -> None:
        layer = Layer([16], [0], 16, 1)
        params = mpk.PersistentKernel.get_default_init_parameters()
        params.update(test_mode=True, compile_only=True, target_cc=int(arch[2:]), num_workers=8)
        params.update({**layer.params, "meta_tensors": {k: v.cpu() for k, v in layer.params["meta_tensors"].items()}})
        pk = mpk.PersistentKernel(**params)
        for name in ("x", "q_norm", "k_norm", "cos", "sin"):
            setattr(layer, name, getattr(layer, name).cpu())
        layer.k, layer.v, layer.out = [t.cpu() for t in layer.k], [t.cpu() for t in layer.v], [t.cpu() for t in layer.out]
        layer.build(*grid)(pk, 0)
        harness.build_for(pk, on_gpu=True)

    with ThreadPoolExecutor() as pool:
        list(pool.map(build, sorted({(z, hp) for _, _, z, hp in decode} | {(PREFILL[1], 1)})))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm90", choices=["sm80", "sm90"])
    parser.add_argument("--skip-prefill", action="store_true")
    parser.add_argument("--phases", action="store_true", help="Also print where each decode copy's span goes (its tasks' phases)")
    parser.add_argument(
        "--decode",
        metavar="BxS[:Z:HP],...",
        help="Only these decode cases, e.g. 1x8192,8x1024 (default: all five); :Z:HP sets the grid (z, kv heads a task)",
    )
    args = parser.parse_args()
    decode = DECODE
    if args.decode:
        grids = {(b, s): (z, hp) for b, s, z, hp in DECODE}
        decode = []
        for c in args.decode.split(","):
            bs, *grid = c.split(":")
            b, s = (int(n) for n in bs.split("x"))
            if (b, s) not in grids or len(grid) not in (0, 2) or (grid and grid[1] not in ("1", "2")):
                known = ",".join(f"{b}x{s}" for b, s, _, _ in DECODE)
                parser.error(f"--decode {c}: the decode cases are {known}, each with an optional :Z:HP (HP 1 or 2)")
            decode.append((b, s, *((int(grid[0]), int(grid[1])) if grid else grids[b, s])))
    arch = args.arch
    facts = timing.device_facts()
    prebuild(arch, decode)
    copy = layer_bench.copy_bandwidth()
    rows = [decode_case(b, s, z, hp, arch, copy) for b, s, z, hp in decode]
    prefill = None if args.skip_prefill else prefill_case(arch)
    timing.save("bench_paged_attention", {**facts, "arch": arch, "copy_TBps": copy, "decode": rows, "prefill": prefill})
    print(f"{facts['device']}, {facts['date']}, {arch} build; copy bandwidth {copy:.2f} TB/s")
    head = ["z/hp", "mpk us", "span us", "floor us", "% floor", "gather+sdpa", "x faster", "sdpa", "mpk/sdpa"]
    head += ["| past L2: gather+sdpa", "x faster", "sdpa", "mpk/sdpa"]
    widths = (5, 8, 8, 9, 8, 12, 9, 8, 9, 22, 9, 8, 9)
    print(f"{'case':22} " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths)))
    for r in rows:
        ok = r["pct_of_floor"] >= 80 and r["gather_over_mpk"] >= 2.5 and r["mpk_over_sdpa"] <= 1.25
        n = r["copies_side_by_side"]
        verdict = f"{n} copies side by side: a throughput" if n > 1 else timing.judged("meets targets" if ok else "BELOW TARGET")
        print(
            f"{r['case']:22} {r['grid_z']:3d}/{r['kv_heads_per_task']} {r['mpk_us']:8.1f} {r['span_us']:8.1f} "
            f"{r['floor_us']:9.1f} {r['pct_of_floor']:7.0f}% "
            f"{r['gather_sdpa_us']:12.1f} {r['gather_over_mpk']:8.2f}x {r['sdpa_us']:8.1f} {r['mpk_over_sdpa']:8.2f}x "
            f"{r['gather_sdpa_past_l2_us']:22.1f} {r['gather_past_l2_over_mpk']:8.2f}x {r['sdpa_past_l2_us']:8.1f} "
            f"{r['mpk_over_sdpa_past_l2']:8.2f}x  {verdict}"
        )
    print(
        "the verdict uses torch timed as the anchors were (one cache read again: a small case stays in L2); "
        "'past L2' times torch as the megakernel is timed, over copies of their own"
    )
    for r in rows if args.phases else ():
        print("\n".join(span_phases.describe(r["case"], r["phases"])))
    if prefill:
        p = prefill
        print(
            f"{p['case']:22} {p['grid_z']:3d}/1 {p['mpk_us']:8.1f} us ({p['mpk_tflops']:.0f} TFLOP/s) vs causal sdpa "
            f"{p['sdpa_us']:.1f} us ({p['sdpa_tflops']:.0f} TFLOP/s): {p['mpk_over_sdpa']:.2f}x"
        )


if __name__ == "__main__":
    main()
