"""What a task body costs in the host emulator (no GPU needed): one task of each body, at a shape the
scenes use, run as one block of fibers, plainly and checked (race checking and slice bounds, what
--mpk-emulate-check runs); one fiber switch; and the host build times.

    python bench/bench_host_emulation.py [--arch sm90] [--reps 5]   # JSON lines; a table for docs/PERFORMANCE.md

Each figure is the best of ``--reps`` rounds of the mean over a few runs of the same task (ctypes call
included, graph interleaving and tensor copies not), in CPU time of this process (time.process_time),
so that other users of a shared machine do not inflate it; the best round is the least disturbed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

bf16 = torch.bfloat16


def bodies(pk):
    """(name, shape, build the layer) for every body: the shapes of the scenes' cases."""

    def rmsnorm(b, h):
        x, w, y = torch.randn(b, h, dtype=bf16), torch.randn(h, dtype=bf16), torch.empty(b, h, dtype=bf16)
        pk.rmsnorm_layer(
            input=pk.attach_input(x, "x"),
            weight=pk.attach_input(w, "w"),
            output=pk.attach_input(y, "y"),
            grid_dim=(b, 1, 1),
            block_dim=pk.block_dim,
        )

    def linear(b, k, n, tasks, residual=False, dtype=bf16):
        x, w = torch.randn(b, k, dtype=dtype), torch.randn(n, k, dtype=dtype) / k**0.5
        args = dict(
            input=pk.attach_input(x, "x"),
            weight=pk.attach_input(w, "w"),
            output=pk.attach_input(torch.empty(b, n, dtype=dtype), "y"),
        )
        if residual:
            pk.linear_with_residual_layer(
                **args,
                residual=pk.attach_input(torch.randn(b, n, dtype=dtype), "r"),
                grid_dim=(tasks, 1, 1),
                block_dim=pk.block_dim,
            )
        else:
            pk.linear_layer(**args, grid_dim=(tasks, 1, 1), block_dim=pk.block_dim)

    def silu_mul(b, inter, groups):
        x, y = torch.randn(b, 2 * inter, dtype=bf16), torch.empty(b, inter, dtype=bf16)
        pk.silu_mul_layer(
            input=pk.attach_input(x, "x"), output=pk.attach_input(y, "y"), grid_dim=(groups, 1, 1), block_dim=pk.block_dim
        )

    def embed(b, vocab, hidden, tasks):
        tokens = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
        w, y = torch.randn(vocab, hidden, dtype=bf16), torch.empty(b, hidden, dtype=bf16)
        pk.embed_layer(
            input=tokens,
            weight=pk.attach_input(w, "w"),
            output=pk.attach_input(y, "y"),
            grid_dim=(tasks, 1, 1),
            block_dim=pk.block_dim,
        )

    def argmax(b, vocab, parts):
        x = pk.attach_input(torch.randn(b, vocab, dtype=bf16), "logits")
        values, indices = pk.new_tensor((b, parts), torch.float32, "values"), pk.new_tensor((b, parts), torch.int64, "indices")
        pk.argmax_partial_layer(input=x, values=values, indices=indices, grid_dim=(parts, 1, 1), block_dim=pk.block_dim)
        pk.argmax_reduce_layer(
            values=values,
            indices=indices,
            output=pk.attach_input(torch.empty(b, dtype=torch.int64), "t"),
            grid_dim=(1, 1, 1),
            block_dim=pk.block_dim,
        )

    def noop(b):
        x = torch.randint(1, 100, (b, 4), dtype=torch.int32)
        pk.noop_layer(
            inputs=[pk.attach_input(x, "x")],
            outputs=[pk.attach_input(torch.empty_like(x), "y")],
            grid_dim=(b, 1, 1),
            block_dim=pk.block_dim,
            probe=True,
        )

    return {
        "rmsnorm": ("bf16, 1 row x 4096", lambda: rmsnorm(16, 4096)),
        "linear (tensor cores)": ("bf16, batch 4, K 1024, 64 rows of W", lambda: linear(4, 1024, 2048, 32)),
        "linear (tensor cores, big)": ("bf16, batch 1, K 4096, 128 rows of W", lambda: linear(1, 4096, 12288, 96)),
        "linear (plain path)": ("bf16, batch 2, K 200, 32 rows of W", lambda: linear(2, 200, 96, 3)),
        "linear_with_residual": ("bf16, batch 8, K 2048, 32 rows of W", lambda: linear(8, 2048, 1024, 32, residual=True)),
        "silu_mul": ("bf16, batch 8, 128 columns", lambda: silu_mul(8, 4096, 32)),
        "embed": ("bf16, batch 1, 256 columns", lambda: embed(1, 32000, 4096, 16)),
        "argmax_partial": ("bf16, batch 16, 256 columns", lambda: argmax(16, 4096, 16)),
        "noop (probe)": ("int32, 1 row of 4", lambda: noop(4)),
    }


def per_task_us(tasks, task, reps: int, runs: int) -> float:
    tasks.run_task(task, 0, 1)
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for i in range(runs):
            tasks.run_task(task, 0, i)
        best = min(best, (time.process_time() - t0) / runs * 1e6)
    return best


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm90", choices=["sm80", "sm90", "sm100"])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("MPK_CACHE_DIR", tempfile.mkdtemp(prefix="mpk-bench-emu-"))
    import mpk_runtime as mpk

    rows = []
    for check in (False, True):
        for name, (shape, _) in bodies(None).items():
            p = mpk.PersistentKernel.get_default_init_parameters()
            p.update(test_mode=True, target_cc=int(args.arch[2:]), emulate=True, emulate_check=check, num_workers=1)
            if name == "embed":
                p.update(max_num_batched_tokens=1, max_seq_length=1, max_num_pages=1)
            pk = mpk.PersistentKernel(**p)
            bodies(pk)[name][1]()
            t0 = time.perf_counter()
            pk.compile()
            build_s = time.perf_counter() - t0
            tasks = pk._runner.tasks  # HostTasks: one task at a time, in the batch of iteration 0
            tasks.begin()
            tasks.prepare_next_batch(0)
            task = pk.compiled_graph.tasks[0]
            us = per_task_us(tasks, task, args.reps, runs=3 if "big" in name else 10)
            tasks.end()
            pk.finalize()
            rows.append(
                {"body": name, "shape": shape, "checked": check, "us_per_task": round(us, 1), "build_s": round(build_s, 2)}
            )
            print(json.dumps(rows[-1]), flush=True)
    from mpk_runtime.run import host_runner

    switch = min(host_runner.load_module(pk.host_build_result.path).switch_ns(200_000) for _ in range(3))
    print(json.dumps({"fiber_switch_ns": round(switch, 1), "cpu": cpu_name(), "cores": os.cpu_count(), "arch": args.arch}))
    print("\n| body | shape (one task) | plain | checked |\n|---|---|---|---|")
    for plain, checked in zip(rows[: len(rows) // 2], rows[len(rows) // 2 :]):
        print(f"| {plain['body']} | {plain['shape']} | {plain['us_per_task']:.0f} µs | {checked['us_per_task']:.0f} µs |")


if __name__ == "__main__":
    main()
