"""Graph building time, graph file size and memory, on the CPU: no GPU, no nvcc.

What is measured is what ``compile()`` does before nvcc: the layer calls (tasks and their
dependencies), the schedule, the compiled graph with its dispatcher source and signature
(``frontend.lowering.lower``), and the task graph JSON as ``compile(output_dir=...)`` writes it.
Kernels are compile-only for sm90 (``target_cc=90``) with 132 workers; weights are on the meta
device (no memory), intermediates are real.

Graphs:
- ``noop_65535``: one no-op layer of grid (65535, 1, 1).
- ``alternating_N``: N one-task no-op layers alternating between two tensors (a -> b, b -> a, ...).
- ``qwen3_8b_decode_L``: L decoder layers shaped like Qwen3-8B (hidden 4096, q/k/v 4096/1024/1024,
  intermediate 12288, vocab 151936), a decode batch of 8 tokens, grids as in bench/bench_mlp.py:
  per layer rmsnorm (8 tasks), qkv linear (96), attention stood in for by a no-op over the token
  rows (8), o_proj linear + residual (64), rmsnorm (8), gate/up linear (256), silu_mul (128),
  down linear + residual (128); around them the embedding, the final norm, the LM head (128) and
  greedy sampling (128 + 1). Activations are reused by every layer, the residual stream in place.

Each graph is built in a fresh process, ``--repeat`` times timed (the fastest is reported, with
its wall and its CPU time: the machine may be shared, and the build is single-threaded, so on an
idle machine the wall time is the CPU time) and once under tracemalloc (peak Python memory of the build). Reading the
JSON back (``CompiledGraph.from_json``, every field checked, as a replay does) is timed apart; it
is not part of the build. ``python bench/bench_graph_build.py [--repeat N] [--out FILE] [GRAPH ...]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc

import torch

import mpk_runtime as mpk
from mpk_runtime.frontend.lowering import lower
from mpk_runtime.graph.compiled import CompiledGraph
from mpk_runtime.graph.compiled_writer import graph_text

H, Q, KV, I, VOCAB, BATCH = 4096, 4096, 1024, 12288, 151936, 8
WORKERS = 132


def kernel() -> mpk.PersistentKernel:
    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(compile_only=True, target_cc=90, test_mode=True, num_workers=WORKERS, max_num_batched_tokens=BATCH)
    params.update(max_seq_length=BATCH, max_num_pages=BATCH)
    return mpk.PersistentKernel(**params)


def noop(pk: mpk.PersistentKernel, width: int = 65535) -> None:
    a = pk.attach_input(torch.zeros(width, 4, dtype=torch.int32), "a")
    b = pk.attach_input(torch.zeros(width, 4, dtype=torch.int32), "b")
    pk.noop_layer(inputs=[a], outputs=[b], grid_dim=(width, 1, 1), block_dim=pk.block_dim)


def alternating(pk: mpk.PersistentKernel, layers: int) -> None:
    a = pk.attach_input(torch.zeros(8, 4, dtype=torch.int32), "a")
    b = pk.attach_input(torch.zeros(8, 4, dtype=torch.int32), "b")
    for k in range(layers):
        src, dst = (a, b) if k % 2 == 0 else (b, a)
        pk.noop_layer(inputs=[src], outputs=[dst], grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def qwen3(pk: mpk.PersistentKernel, layers: int) -> None:
    bf, bd = torch.bfloat16, pk.block_dim

    def weight(name: str, *shape: int) -> mpk.DTensor:
        return pk.attach_input(torch.empty(*shape, dtype=bf, device="meta"), name)

    ids = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
    x = pk.new_tensor((BATCH, H), bf, "x")
    xn = pk.new_tensor((BATCH, H), bf, "xn")
    qkv = pk.new_tensor((BATCH, Q + 2 * KV), bf, "qkv")
    attn = pk.new_tensor((BATCH, Q), bf, "attn")
    mid = pk.new_tensor((BATCH, 2 * I), bf, "mid")
    act = pk.new_tensor((BATCH, I), bf, "act")
    pk.embed_layer(input=ids, weight=weight("embedding", VOCAB, H), output=x, grid_dim=(8, 1, 1), block_dim=bd)
    for n in range(layers):
        pk.rmsnorm_layer(input=x, weight=weight(f"ln1_{n}", H), output=xn, grid_dim=(BATCH, 1, 1), block_dim=bd)
        pk.linear_layer(input=xn, weight=weight(f"wqkv_{n}", Q + 2 * KV, H), output=qkv, grid_dim=(96, 1, 1), block_dim=bd)
        pk.noop_layer(inputs=[qkv], outputs=[attn], grid_dim=(BATCH, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=attn, weight=weight(f"wo_{n}", H, Q), residual=x, output=x, grid_dim=(64, 1, 1), block_dim=bd
        )
        pk.rmsnorm_layer(input=x, weight=weight(f"ln2_{n}", H), output=xn, grid_dim=(BATCH, 1, 1), block_dim=bd)
        pk.linear_layer(input=xn, weight=weight(f"wgu_{n}", 2 * I, H), output=mid, grid_dim=(256, 1, 1), block_dim=bd)
        pk.silu_mul_layer(input=mid, output=act, grid_dim=(128, 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=act, weight=weight(f"wd_{n}", H, I), residual=x, output=x, grid_dim=(128, 1, 1), block_dim=bd
        )
    logits = pk.new_tensor((BATCH, VOCAB), bf, "logits")
    values = pk.new_tensor((BATCH, 128), torch.float32, "values")
    indices = pk.new_tensor((BATCH, 128), torch.int64, "indices")
    pk.rmsnorm_layer(input=x, weight=weight("ln_f", H), output=xn, grid_dim=(BATCH, 1, 1), block_dim=bd)
    pk.linear_layer(input=xn, weight=weight("lm_head", VOCAB, H), output=logits, grid_dim=(128, 1, 1), block_dim=bd)
    pk.argmax_partial_layer(input=logits, values=values, indices=indices, grid_dim=(128, 1, 1), block_dim=bd)
    out = pk.attach_input(torch.zeros(BATCH, dtype=torch.int64), "tokens")
    pk.argmax_reduce_layer(values=values, indices=indices, output=out, grid_dim=(1, 1, 1), block_dim=bd)


def declare(name: str):
    kind, _, arg = name.rpartition("_")
    if name == "noop_65535":
        return lambda pk: noop(pk, 65535)
    if kind == "alternating":
        return lambda pk: alternating(pk, int(arg))
    if kind == "qwen3_8b_decode":
        return lambda pk: qwen3(pk, int(arg))
    raise SystemExit(f"unknown graph {name!r}")


def build(name: str) -> dict:
    """Build graph ``name`` once; the time of each stage and the figures of the result."""
    c0, t0 = time.process_time(), time.perf_counter()
    pk = kernel()
    declare(name)(pk)
    t1 = time.perf_counter()
    source, graph, signature = lower(pk._graph, pk.params, pk.arch)  # variants, source, schedule, compiled graph
    t2 = time.perf_counter()
    text = graph_text(graph)
    c3, t3 = time.process_time(), time.perf_counter()
    CompiledGraph.from_json(json.loads(text), name)  # what a replay reads back, every field checked
    t4 = time.perf_counter()
    return {
        "tasks": len(graph.tasks),
        "layers": len(graph.layers),
        "deps": sum(len(t.deps) for t in graph.tasks),
        "events": len(graph.schedule.events),
        "graph_json_bytes": len(text.encode()),
        "declare_s": t1 - t0,
        "lower_s": t2 - t1,
        "json_s": t3 - t2,
        "total_s": t3 - t0,
        "total_cpu_s": c3 - c0,
        "read_back_s": t4 - t3,
    }


def child(name: str, repeat: int) -> dict:
    row = min((build(name) for _ in range(repeat)), key=lambda r: r["total_s"])  # the least disturbed run
    tracemalloc.start()
    build(name)
    row["peak_python_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    row["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


DEFAULT = ["noop_65535", "alternating_5000", "qwen3_8b_decode_9", "qwen3_8b_decode_18", "qwen3_8b_decode_36"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*", default=DEFAULT)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_graph_build.json"))
    ap.add_argument("--repeat", type=int, default=3, help="builds per graph; the fastest is reported (default 3)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return
    rows = []
    for name in args.graphs:  # each in a fresh process: memory figures of one graph alone
        cmd = [sys.executable, __file__, "--child", name, "--repeat", str(args.repeat)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        row = {"graph": name, **json.loads(out.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(
            f"{name:22} {row['tasks']:6} tasks {row['deps']:8} deps  total {row['total_s']:6.2f} s "
            f"(cpu {row['total_cpu_s']:.2f} s; "
            f"declare {row['declare_s']:.2f}, lower {row['lower_s']:.2f}, json {row['json_s']:.2f}; read back "
            f"{row['read_back_s']:.2f})  "
            f"json {row['graph_json_bytes'] / 2**20:7.2f} MB  peak {row['peak_python_mb']:7.1f} MB  "
            f"rss {row['max_rss_mb']:.0f} MB",
            flush=True,
        )
    facts = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "command": f"python bench/bench_graph_build.py --repeat {args.repeat} " + " ".join(args.graphs),
        "load_average": os.getloadavg(),
    }
    with open(args.out, "w") as f:
        json.dump({"facts": facts, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
