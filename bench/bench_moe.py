"""The MoE block of Qwen3-30B-A3B (E=128 experts, top-8, hidden 2048, expert intermediate 768, bf16)
inside the megakernel at 1, 4, 16 and 64 active tokens, against the floor of the bytes actually
routed and against torch, in one run.

- megakernel: LAYERS MoE blocks chained as consecutive decoder layers would be (block l+1 takes
  block l's output; 1.2 GB of weights each), router linear -> routing -> w13 with SiLU-mul fused ->
  w2 with the weighted sum + residual; w13 routes the tokens itself from the logits, beside the
  routing task (moe_topk_w13_linear; --w13 routed: moe_w13_linear after the routing task), and w2
  sums each token's experts itself (moe_w2_mul_sum_add, each task owning H / T columns; --w2 split:
  moe_w2_linear, then moe_mul_sum_add). --routing group routes DeepSeek-V3's way instead
  (moe_sigmoid_group_routing: sigmoid scores plus a bias, the 4 best of 8 groups, scaled by 2.5),
  and gate / up with it (moe_group_w13_linear; --w13 routed: moe_w13_linear after the routing).
  One block costs
  (T(LAYERS) - T(BASE)) / (LAYERS - BASE), which removes the launch's fixed cost (the per-launch
  time / LAYERS is reported too). BASE = 2: a 1-block launch at 1 token was at times host-bound on
  an H200 (the host took 48-54 us to issue it, its GPU time about 50 us), which makes T(1) the host's.
- floor: per block, (distinct experts routed x 3 * I * H + E * H) * 2 bytes / copy bandwidth, with
  the experts each block really routed (read back from its expert_mask) and the copy bandwidth of
  this run; averaged over the blocks the difference times.
- torch: the same chain, (a) eager, looping over the routed experts (data-dependent shapes), and
  (b) with static shapes (each (token, slot) row's expert weights gathered, then batched matmuls)
  replayed from a CUDA graph; per block = chain / LAYERS.
- self-check: every block's logits, routing (exactly, against the reference routing of the
  megakernel's own logits), expert outputs and block output against fp32 math on that routing.
- --profile: the span of each layer inside one launch (profiler), per block, at B = 1 and 64, and the
  median of each phase the expert layers' bodies mark (Runtime::mark).

    python bench/bench_moe.py [--profile] [--batches 1,4] [--w13 topk|routed] [--w2 sum|split]
                              [--routing softmax|group]
    # writes $OUT/bench_moe.json; table last
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

from mpk_runtime.harness import find_reference
from mpk_runtime.profile.stats import per_phase, read_phases_csv
from mpk_runtime.tasks.moe_w2_mul_sum_add import column_slices

sys.path.insert(0, str(Path(__file__).parent))
import layer_bench  # noqa: E402
import timing  # noqa: E402

E, K, H, I = 128, 8, 2048, 768
BATCHES = (1, 4, 16, 64)
LAYERS = 4
BASE = 2  # blocks of the launch subtracted: enough GPU time per launch that the host keeps up
ROUTER_TASKS, COMBINE_TASKS = E // 8, H // 64
bf = torch.bfloat16
GROUPS, KEPT_GROUPS, SCALE = 8, 4, 2.5  # --routing group: DeepSeek-V3's groups and scaling, on these experts
softmax_reference = find_reference("moe_topk_softmax_routing")
group_reference = find_reference("moe_sigmoid_group_routing")


def make_layers(seed: int = 0) -> list[dict]:
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape, scale):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(bf)

    return [
        {
            "wr": rnd(E, H, scale=H**-0.5),
            "w13": rnd(E, 2 * I, H, scale=H**-0.5),
            "w2": rnd(E, H, I, scale=I**-0.5),
            "bias": (torch.randn(E, device="cuda", generator=g) * 0.1).float(),  # --routing group's score_bias
        }
        for _ in range(LAYERS)
    ]


def megakernel(
    batch: int,
    layers: list[dict],
    count: int,
    x: torch.Tensor,
    res: list[torch.Tensor],
    compiled: bool = True,
    routing_in_w13: bool = True,
    w2_sum: bool = True,
    group_routing: bool = False,
    **params,
):
    """A kernel running the first `count` blocks (compiled unless `compiled=False`); returns it and each
    block's tensors (CUDA). routing_in_w13: gate / up routes the tokens itself (moe_topk_w13_linear,
    beside the routing task); else it waits for the routing task (moe_w13_linear). w2_sum: the down
    projection sums each token's experts itself (moe_w2_mul_sum_add; no `y`); else moe_w2_linear and
    moe_mul_sum_add. group_routing: moe_sigmoid_group_routing instead of the softmax routing, and
    moe_group_w13_linear instead of moe_topk_w13_linear."""
    pk = layer_bench.kernel(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch, **params)
    tasks, bd = pk.params.num_workers, pk.block_dim
    X = pk.attach_input(x, "x")
    blocks = []
    for i in range(count):
        t = {
            "logits": torch.empty(batch, E, dtype=bf, device="cuda"),
            "topk_weights": torch.empty(batch, K, device="cuda"),
            "routing_indices": torch.empty(E, batch, dtype=torch.int32, device="cuda"),
            "expert_mask": torch.empty(E + 1, dtype=torch.int32, device="cuda"),
            "act": torch.empty(batch, K, I, dtype=bf, device="cuda"),
            "out": torch.empty(batch, H, dtype=bf, device="cuda"),
        }
        if not w2_sum:  # the experts' outputs before the weighted sum
            t["y"] = torch.empty(batch, K, H, dtype=bf, device="cuda")
        a = {n: pk.attach_input(v, f"{n}{i}") for n, v in {**t, **layers[i], "res": res[i]}.items()}
        route = dict(routing_indices=a["routing_indices"], expert_mask=a["expert_mask"])
        pk.linear_layer(input=X, weight=a["wr"], output=a["logits"], grid_dim=(ROUTER_TASKS, 1, 1), block_dim=bd)
        if group_routing:
            pk.moe_sigmoid_group_routing_layer(
                input=a["logits"], score_bias=a["bias"], topk_weights=a["topk_weights"], **route, n_group=GROUPS,
                topk_group=KEPT_GROUPS, routed_scaling_factor=SCALE, grid_dim=(1, 1, 1), block_dim=bd,
            )  # fmt: skip
        else:
            pk.moe_topk_softmax_routing_layer(
                input=a["logits"], topk_weights=a["topk_weights"], **route, grid_dim=(1, 1, 1), block_dim=bd
            )
        if routing_in_w13 and group_routing:  # beside the routing task, which keeps a worker of its own
            pk.moe_group_w13_linear_layer(
                input=X, weight=a["w13"], router_logits=a["logits"], score_bias=a["bias"], output=a["act"], n_group=GROUPS,
                topk_group=KEPT_GROUPS, grid_dim=(tasks - 1, 1, 1), block_dim=bd,
            )  # fmt: skip
        elif routing_in_w13:
            pk.moe_topk_w13_linear_layer(
                input=X, weight=a["w13"], router_logits=a["logits"], output=a["act"], grid_dim=(tasks - 1, 1, 1), block_dim=bd
            )
        else:
            pk.moe_w13_linear_layer(input=X, weight=a["w13"], **route, output=a["act"], grid_dim=(tasks, 1, 1), block_dim=bd)
        if w2_sum:  # the most 16-column slices of H that the workers hold: 128 at H = 2048
            slices = column_slices(H, tasks)
            pk.moe_w2_mul_sum_add_layer(
                input=a["act"], weight=a["w2"], **route, topk_weights=a["topk_weights"], residual=a["res"],
                output=a["out"], grid_dim=(slices, 1, 1), block_dim=bd,
            )  # fmt: skip
        else:
            pk.moe_w2_linear_layer(input=a["act"], weight=a["w2"], **route, output=a["y"], grid_dim=(tasks, 1, 1), block_dim=bd)
            pk.moe_mul_sum_add_layer(
                input=a["y"],
                topk_weights=a["topk_weights"],
                residual=a["res"],
                output=a["out"],
                grid_dim=(COMBINE_TASKS, 1, 1),
                block_dim=bd,
            )
        blocks.append({**t, "x": x if i == 0 else blocks[-1]["out"], "res": res[i]})
        X = a["out"]
    if compiled:
        pk.compile()
    return pk, blocks


def prebuild(batches, cc: int, mode: dict) -> None:
    """Build the module of every batch size at once (nvcc processes in parallel; later compiles hit the
    cache): each graph in a compile-only kernel, built as the GPU needs it (compile() would build a cubin)."""
    from mpk_runtime import harness

    def one(batch):
        x = torch.empty(batch, H, dtype=bf, device="meta")
        shapes = {"wr": (E, H), "w13": (E, 2 * I, H), "w2": (E, H, I)}
        layers = [{n: torch.empty(*shape, dtype=bf, device="meta") for n, shape in shapes.items()}]
        layers[0]["bias"] = torch.empty(E, device="meta")
        pk, _ = megakernel(batch, layers, 1, x, [x.clone()], compiled=False, compile_only=True, target_cc=cc, **mode)
        harness.build_for(pk, on_gpu=True)

    try:
        with ThreadPoolExecutor(len(batches)) as pool:
            list(pool.map(one, batches))
    except Exception as e:  # only a head start: the timed kernels build what is missing one by one
        print(f"prebuild: {type(e).__name__}: {e}")


def torch_route(x, p, group: bool):
    """The routing weights and experts of the tokens x: softmax over the top k, or DeepSeek-V3's (group)."""
    logits = F.linear(x, p["wr"])
    if group:
        return torch_group_route(logits, p["bias"])
    vals, idx = logits.float().topk(K, dim=-1)
    return torch.softmax(vals, dim=-1), idx


def torch_group_route(logits, bias, groups=GROUPS, kept=KEPT_GROUPS, topk=K, scale=SCALE):
    """DeepSeek-V3's routing in torch ops: the weights (normalized, scaled) and the experts."""
    scores = logits.float().sigmoid()
    choice = scores + bias
    group_scores = choice.view(choice.shape[0], groups, -1).topk(2, dim=-1).values.sum(dim=-1)
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, group_scores.topk(kept, dim=-1).indices, True)
    choice = choice.masked_fill(~keep.repeat_interleave(choice.shape[1] // groups, dim=1), float("-inf"))
    idx = choice.topk(topk, dim=-1).indices
    w = scores.gather(1, idx)
    return w / w.sum(dim=-1, keepdim=True) * scale, idx


def torch_loop(x, res, p, group: bool = False):
    """Eager: one gate/up and down matmul per routed expert, on the rows routed to it."""
    w, idx = torch_route(x, p, group)
    out = res.float()
    flat = idx.flatten()
    for e in flat.unique().tolist():
        rows = (flat == e).nonzero().flatten()
        tok = rows // K
        gu = F.linear(x[tok], p["w13"][e])
        h = F.silu(gu[:, :I]) * gu[:, I:]
        out.index_add_(0, tok, F.linear(h, p["w2"][e]).float() * w.flatten()[rows, None])
    return out.to(bf)


def torch_static(x, res, p, group: bool = False):
    """Static shapes (CUDA-graph-able): the expert weights of every (token, slot) row gathered, then bmm."""
    w, idx = torch_route(x, p, group)
    flat = idx.flatten()
    xs = x.repeat_interleave(K, dim=0)[:, :, None]
    gu = torch.bmm(p["w13"].index_select(0, flat), xs)[..., 0]
    h = (F.silu(gu[:, :I]) * gu[:, I:])[:, :, None]
    y = torch.bmm(p["w2"].index_select(0, flat), h)[..., 0]
    return ((y.float() * w.flatten()[:, None]).view(-1, K, H).sum(dim=1) + res.float()).to(bf)


def chain(fn, x, res, layers, group: bool):
    for r, p in zip(res, layers):
        x = fn(x, r, p, group)
    return x


def check(blocks, layers, group: bool) -> list[str]:
    """Problems of the megakernel's blocks against fp32 math on their own routing (empty: all good)."""
    bad = []
    for i, (b, p) in enumerate(zip(blocks, layers)):
        x = b["x"].float()
        logits = x @ p["wr"].float().T
        if (b["logits"].float() - logits).abs().max() > 0.02 * logits.abs().max() + 1e-2:
            bad.append(f"block {i}: router logits off")
        if group:
            w, r, m = group_reference(b["logits"].cpu(), p["bias"].cpu(), K, GROUPS, KEPT_GROUPS, True, SCALE)
        else:
            w, r, m = softmax_reference(b["logits"].cpu(), K)
        if not (torch.equal(r, b["routing_indices"].cpu()) and torch.equal(m, b["expert_mask"].cpu())):
            bad.append(f"block {i}: routing differs from the reference routing of its logits")
        if not torch.allclose(w, b["topk_weights"].cpu(), rtol=1e-5, atol=1e-6):
            bad.append(f"block {i}: topk_weights off")
        act = torch.zeros(x.shape[0], K, I, device="cuda")
        y = torch.zeros(x.shape[0], K, H, device="cuda")
        for e in (b["expert_mask"][1:] > b["expert_mask"][:-1]).nonzero().flatten().tolist():
            t = b["routing_indices"][e].nonzero().flatten()
            j = b["routing_indices"][e, t].long() - 1
            gu = x[t] @ p["w13"][e].float().T
            act[t, j] = F.silu(gu[:, :I]) * gu[:, I:]
            y[t, j] = act[t, j] @ p["w2"][e].float().T
        out = b["res"].float() + (y * b["topk_weights"][..., None]).sum(dim=1)
        for name, got, want in (("act", b["act"], act), ("y", b.get("y"), y), ("out", b["out"], out)):
            if got is None:
                continue  # w2 summed the experts itself: no y
            err = ((got.float() - want).norm() / want.norm()).item()
            if err > 1e-2:
                bad.append(f"block {i}: {name} relative error {err:.2e}")
    return bad


def layer_spans(batch, layers, x, res, cc: int, mode: dict) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each layer type's span inside one launch (first task begin to last task end), median over blocks and
    launches; and for the task types whose bodies mark phases (Runtime::mark), each phase's median over tasks."""
    prof = torch.zeros(1 << 22, dtype=torch.uint64, device="cuda")
    trace = str(Path(tempfile.mkdtemp()) / "trace")
    pk, _ = megakernel(batch, layers, LAYERS, x, res, profiler_tensor=prof, trace_name=trace, target_cc=cc, **mode)
    spans: dict[str, list[float]] = {}
    phase_rows = []
    for _ in range(5):
        pk()
        pk.synchronize()
        phase_rows += read_phases_csv(pk.profile_paths["phases"])
        by_layer: dict[str, list[int]] = {}
        for row in csv.DictReader(open(pk.profile_paths["csv"])):
            lo_hi = by_layer.setdefault(row["layer"], [1 << 62, 0])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], int(row["begin_ns"])), max(lo_hi[1], int(row["end_ns"]))
        for layer, (lo, hi) in by_layer.items():
            spans.setdefault(layer.rsplit("_", 1)[0], []).append((hi - lo) / 1e3)
    pk.finalize()
    medians: dict[str, dict[str, float]] = {}
    for e in per_phase(phase_rows):
        medians.setdefault(e["task_type_name"], {})[e["phase"]] = e["median_ns"] / 1e3
    return {k: statistics.median(v) for k, v in spans.items()}, medians


def main() -> None:
    ap = argparse.ArgumentParser(description="MoE block (Qwen3-30B-A3B shapes) in the megakernel vs the floor and torch")
    ap.add_argument("--profile", action="store_true", help="Also report each layer's span inside the megakernel")
    ap.add_argument("--target-cc", type=int, default=None, metavar="CC", help="Build for this arch (80: the sm80 path, PTX JIT)")
    ap.add_argument(
        "--batches", default=",".join(map(str, BATCHES)), metavar="B,B", help="Active tokens to time (default 1,4,16,64)"
    )
    ap.add_argument(
        "--w13", choices=("topk", "routed"), default="topk",
        help="gate / up: routes the tokens itself beside the routing task (topk, default), or after it (routed)",
    )  # fmt: skip
    ap.add_argument(
        "--w2", choices=("sum", "split"), default="sum",
        help="down projection: sums each token's experts itself (sum, default), or moe_w2_linear then moe_mul_sum_add (split)",
    )  # fmt: skip
    ap.add_argument(
        "--routing", choices=("softmax", "group"), default="softmax",
        help="Qwen3's top-k softmax routing (default), or DeepSeek-V3's group routing",
    )  # fmt: skip
    args = ap.parse_args()
    group = args.routing == "group"
    mode = dict(routing_in_w13=args.w13 == "topk", w2_sum=args.w2 == "sum", group_routing=group)
    batches = [int(b) for b in args.batches.split(",") if b]
    facts = timing.device_facts()
    cc = args.target_cc or torch.cuda.get_device_capability()[0] * 10
    copy = layer_bench.copy_bandwidth()
    prebuild(batches, cc, mode)
    layers = make_layers()
    expert_bytes, router_bytes = 3 * I * H * 2, E * H * 2
    rows, problems = [], []
    for batch in batches:
        x = torch.randn(batch, H, dtype=bf, device="cuda")
        res = [torch.randn(batch, H, dtype=bf, device="cuda") for _ in range(LAYERS)]
        base, _ = megakernel(batch, layers, BASE, x, res, target_cc=cc, **mode)
        many, blocks = megakernel(batch, layers, LAYERS, x, res, target_cc=cc, **mode)
        t_base = timing.time_us(base, reps=20, warmup=3, device_bound=True)
        t_many = timing.time_us(many, reps=20, warmup=3, device_bound=True)
        base.synchronize()
        many.synchronize()
        mpk_us = (t_many - t_base) / (LAYERS - BASE)
        experts = [int((b["expert_mask"][1:] > b["expert_mask"][:-1]).sum()) for b in blocks]
        floor_us = statistics.mean((n * expert_bytes + router_bytes) / (copy * 1e12) * 1e6 for n in experts[BASE:])
        problems += [f"B={batch} {p}" for p in check(blocks, layers, group)]
        base.finalize()
        many.finalize()

        eager_us = timing.time_us(lambda: chain(torch_loop, x, res, layers, group), reps=3, warmup=1, rounds=3) / LAYERS  # noqa: B023
        stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            chain(torch_static, x, res, layers, group)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            chain(torch_static, x, res, layers, group)
        graph_us = timing.time_us(graph.replay, reps=10, warmup=2, device_bound=True) / LAYERS
        del graph
        torch.cuda.empty_cache()
        row = {
            "batch": batch,
            "distinct_experts": experts,
            "floor_us": floor_us,
            "mpk_us": mpk_us,
            "mpk_launch_per_block_us": t_many / LAYERS,
            "torch_eager_us": eager_us,
            "torch_cuda_graph_us": graph_us,
            "pct_of_floor": 100 * floor_us / mpk_us,
            "eager_over_mpk": eager_us / mpk_us,
            "graph_over_mpk": graph_us / mpk_us,
        }
        if args.profile and batch in (1, 64):
            row["layer_spans_us"], row["phase_median_us"] = layer_spans(batch, layers, x, res, cc, mode)
        rows.append(row)
    timing.save(
        "bench_moe",
        {
            **facts,
            "target_cc": cc,
            "w13": args.w13,
            "w2": args.w2,
            "routing": args.routing,
            "copy_TBps": copy,
            "layers": LAYERS,
            "rows": rows,
            "problems": problems,
        },
    )

    print(
        f"{facts['device']}, {facts['date']}, sm{cc}; copy {copy:.2f} TB/s; E={E} k={K} H={H} I={I}; {LAYERS} blocks in a chain; "
        f"routing {args.routing}, w13 {args.w13}, w2 {args.w2}"
    )
    for r in rows:
        if "layer_spans_us" in r:
            spans = ", ".join(f"{k} {v:.1f}" for k, v in r["layer_spans_us"].items())
            print(f"B={r['batch']} layer spans (us, per block): {spans}")
            for task_type, medians in r["phase_median_us"].items():
                print(f"B={r['batch']} {task_type} phases, median us: " + "; ".join(f"{n} {v:.2f}" for n, v in medians.items()))
    print("problems: " + ("; ".join(problems) if problems else "none (every block checked against fp32 math)"))
    heads = ("B", "experts", "floor us", "mpk us", "% floor", "launch/blk", "eager us", "graph us", "eager/mpk", "graph/mpk")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (3, 8, 9, 8, 8, 10, 9, 9, 9, 9))))
    for r in rows:
        print(
            f"{r['batch']:>3} {statistics.mean(r['distinct_experts']):>8.1f} {r['floor_us']:>9.1f} {r['mpk_us']:>8.1f} "
            f"{r['pct_of_floor']:>7.0f}% {r['mpk_launch_per_block_us']:>10.1f} {r['torch_eager_us']:>9.1f} "
            f"{r['torch_cuda_graph_us']:>9.1f} {r['eager_over_mpk']:>9.2f} {r['graph_over_mpk']:>9.2f}"
        )
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
