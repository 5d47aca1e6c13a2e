"""All-reduce of a (B, 4096) bf16 tensor across the GPUs of one host: inside the persistent kernel,
next to NCCL (torch.distributed.all_reduce) eager and replayed from a CUDA graph, in the same run.

    mpirun -n 2 python bench/bench_allreduce.py     # any world size; rank 0 prints and writes $OUT/bench_allreduce.json

- mpk: one test-mode launch runs a chain of n all-reduces, each on the previous one's output (two output
  tensors in turn); the time of one all-reduce is (T(n) - T(1)) / (n - 1), which removes the launch's
  fixed cost. Every rank launches back to back (timing.time_us with device_bound), and the ranks'
  kernels meet at every all-reduce. Several grids are tried per batch (they share one module per grid)
  and the fastest is reported, with the others in the JSON.
- NCCL: all_reduce of the same tensor in place, eager, and from a CUDA graph of 10 calls (per call),
  both timed back to back as the anchor does.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import mpk_runtime as mpk
from mpk_runtime.harness import find_reference

sys.path.insert(0, str(Path(__file__).parent))
import timing  # noqa: E402

H = 4096
CHAIN = 17
GRIDS = {1: [(8, 1, 1), (16, 1, 1), (32, 1, 1)], 8: [(16, 1, 1), (32, 1, 1), (64, 1, 1)]}
GRIDS[64] = [(16, 4, 1), (32, 2, 1), (32, 4, 1)]
GRIDS[256] = [(32, 4, 1), (64, 2, 1), (64, 4, 1)]
allreduce = find_reference("allreduce")


def add_chain(pk, x: torch.Tensor, world_size: int, grid: tuple[int, int, int], n: int) -> torch.Tensor:
    """n all-reduces on pk, each on the previous one's output: the input, then outputs that two tensors
    take in turn; returns the last output. Each all-reduce needs its own communication buffer (a rank may
    write the next one's data before its peers have read this one's), but not its own output: a tensor
    per output made the host check twice as many tensors at each launch, and the chains' launches timed
    the host (2 x H200, 2026-11-30)."""
    outs = [torch.empty_like(x) for _ in range(min(n, 2))]
    t, turns = pk.attach_input(x, "x"), [pk.attach_input(out, f"out{i}") for i, out in enumerate(outs)]
    for i in range(n):
        buf = pk.new_comm_tensor((2, world_size, *x.shape), x.dtype, f"buf{i}")
        pk.allreduce_layer(t, buf, turns[i % 2], grid_dim=grid, block_dim=pk.block_dim)
        t = turns[i % 2]
    return outs[(n - 1) % 2]


def kernel(world, batch: int, grid: tuple[int, int, int], n: int, x: torch.Tensor):
    params = mpk.PersistentKernel.get_default_init_parameters()
    workers, schedulers = mpk.get_configurations_from_gpu(torch.cuda.current_device())
    params.update(
        test_mode=True,
        num_workers=workers,
        num_local_schedulers=schedulers,
        max_num_batched_tokens=batch,
        max_seq_length=batch,
        max_num_pages=batch,
        comm_timeout=120,
    )
    pk = mpk.PersistentKernel(**params)
    last = add_chain(pk, x, world.size, grid, n)
    pk.compile()
    return pk, last


def mpk_us(world, batch: int, grid: tuple[int, int, int], xs: list[torch.Tensor]) -> float:
    x = xs[world.rank].cuda()
    times = {}
    want = allreduce(xs)
    for n in (1, CHAIN):
        pk, last = kernel(world, batch, grid, n, x)
        world.exchange(f"start b{batch} {grid} n{n}", None, 300)
        times[n] = timing.time_us(pk, reps=50, warmup=5, device_bound=True, ranks=world)
        pk.synchronize(timeout=60)
        if n == 1:
            assert torch.equal(last.cpu(), want), f"b{batch} {grid}: the all-reduce differs from the reference"
        elif world.size == 2:  # x + x doubles exactly: every output of the chain is exact
            assert torch.equal(last.cpu(), want * 2 ** (n - 1)), f"b{batch} {grid}: the chain's last output differs"
        pk.finalize()
    return (times[CHAIN] - times[1]) / (CHAIN - 1)


def nccl_us(batch: int) -> tuple[float, float]:
    x = torch.randn(batch, H, dtype=torch.bfloat16, device="cuda")
    eager = timing.time_us(lambda: dist.all_reduce(x), reps=200, warmup=20)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dist.all_reduce(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(10):
                dist.all_reduce(x)
    torch.cuda.synchronize()
    # Timed as the anchor times it (shared/anchors/allreduce_anchor.py), back to back, without
    # device_bound: a NCCL graph's replay waits on the host for the GPU (267-781 us of host time a replay
    # with the GPU held in timing's spin, 2 x H200, 2026-11-30), so it cannot be queued ahead of the
    # GPU, and what back-to-back replays give is its cost.
    replay = timing.time_us(graph.replay, reps=50, warmup=5) / 10
    return eager, replay


def main() -> None:
    world = timing.mpi_ranks("bench_allreduce.py")
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = world.exchange("nccl port", port if world.rank == 0 else None, 120)[0]
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=world.rank,
        world_size=world.size,
        device_id=torch.device("cuda", torch.cuda.current_device()),
    )
    rows = []
    for batch, grids in GRIDS.items():
        g = torch.Generator().manual_seed(batch)
        xs = list(torch.randn(world.size, batch, H, generator=g).to(torch.bfloat16))
        by_grid = {str(grid): mpk_us(world, batch, grid, xs) for grid in grids}
        best = min(by_grid, key=by_grid.__getitem__)
        world.exchange(f"nccl b{batch}", None, 300)
        eager, graph = nccl_us(batch)
        rows.append(
            {
                "batch": batch,
                "bytes": batch * H * 2,
                "mpk_us": by_grid[best],
                "mpk_grid": best,
                "mpk_us_by_grid": by_grid,
                "nccl_eager_us": eager,
                "nccl_cuda_graph_us": graph,
                "nccl_graph_over_mpk": graph / by_grid[best],
            }
        )
    dist.destroy_process_group()
    if world.rank == 0:
        facts = timing.device_facts()
        timing.save(
            "bench_allreduce",
            {**facts, "world_size": world.size, "chain": CHAIN, "nccl": str(torch.cuda.nccl.version()), "rows": rows},
        )
        print(f"{facts['device']} x {world.size}, {facts['date']}, torch {facts['torch']}, NCCL {torch.cuda.nccl.version()}")
        print(f"{'B':>4} {'KiB':>6} | {'mpk (grid)':>24} | {'NCCL eager':>10} | {'NCCL graph':>10} | graph/mpk")
        for r in rows:
            print(
                f"{r['batch']:>4} {r['bytes'] / 1024:>6.0f} | {r['mpk_us']:>8.2f} us {r['mpk_grid']:>12} | "
                f"{r['nccl_eager_us']:>7.1f} us | {r['nccl_cuda_graph_us']:>7.1f} us | {r['nccl_graph_over_mpk']:>5.2f}"
            )
        ok = all(r["mpk_us"] < r["nccl_cuda_graph_us"] for r in rows) and all(r["mpk_us"] <= 5.0 for r in rows if r["batch"] <= 8)
        print(
            f"goal (faster than NCCL in a CUDA graph at every B, <= 5 us at B <= 8): {timing.judged('met' if ok else 'NOT met')}"
        )


if __name__ == "__main__":
    main()
