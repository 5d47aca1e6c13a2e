"""Per-task cost of the runtime on no-op graphs, next to empty kernels replayed from a CUDA graph.

Graphs (no-op tasks; per-task cost = (T(N) - T(N0)) / (N - N0), which removes the fixed cost of a
launch: start-up, prepare_next_batch, termination):
- chain, round_robin: N dependent tasks, each on another SM than its producer: the dependent hop;
- chain, locality: the same chain placed by the default policy (one worker: no cross-SM hop);
- independent: N tasks with no dependencies, spread over all workers;
- fan-out / fan-in: 1 -> N -> 1.
The CUDA graph column replays a dependent chain of N empty kernels (the anchor's launch_cost.cu).

    python bench/bench_dispatch.py            # H100: prints a table, writes $OUT/bench_dispatch.json
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import mpk_runtime as mpk  # noqa: E402

import timing  # noqa: E402

EMPTY_KERNEL = r"""
__global__ void empty_kernel() {}
extern "C" int launch_empty(void *stream) {
  empty_kernel<<<1, 32, 0, (cudaStream_t)stream>>>();
  return (int)cudaGetLastError();
}
"""


def empty_kernel_lib() -> ctypes.CDLL:
    d = Path(tempfile.mkdtemp())
    (d / "empty.cu").write_text(EMPTY_KERNEL)
    subprocess.run(
        [
            "nvcc",
            "-O2",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-o",
            str(d / "empty.so"),
            str(d / "empty.cu"),
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(d / "empty.so"))
    lib.launch_empty.argtypes = [ctypes.c_void_p]
    return lib


def cuda_graph_us(lib: ctypes.CDLL, n: int) -> float:
    stream = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for _ in range(3):
            lib.launch_empty(stream.cuda_stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(n):
                lib.launch_empty(stream.cuda_stream)
    return timing.time_us(g.replay, reps=10, warmup=3, device_bound=True)


def kernel(placement: str) -> mpk.PersistentKernel:
    params = mpk.PersistentKernel.get_default_init_parameters()
    workers, schedulers = mpk.get_configurations_from_gpu(0)
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers, placement=placement)
    return mpk.PersistentKernel(**params)


def add_noop_graph(pk: mpk.PersistentKernel, shape: str, n: int, device: str = "cuda") -> None:
    """The no-op graph `shape` of n tasks (n in the middle layer of a fan), on int32 tensors of `device`."""
    bd = pk.block_dim

    def t(name, size):
        return pk.attach_input(torch.zeros(size, dtype=torch.int32, device=device), name)

    if shape == "chain":
        # Two tensors, read and written in turn: each task depends on the one before it alone. A
        # tensor per task instead made the host's launch check (a fingerprint per attached tensor,
        # 0.5-1 us each) as long as the GPU's run: 10001 tensors timed the host, not the chain.
        ping, pong = t("ping", 1), t("pong", 1)
        for i in range(n):
            src, dst = (ping, pong) if i % 2 == 0 else (pong, ping)
            pk.noop_layer([src], [dst], grid_dim=(1, 1, 1), block_dim=bd)
    elif shape == "independent":
        pk.noop_layer([t("a", n)], [t("b", n)], grid_dim=(n, 1, 1), block_dim=bd)
    elif shape == "fan":
        src, mid, wide, sink = t("src", 1), t("mid", n), t("wide", n), t("sink", 1)
        pk.noop_layer([src], [mid], grid_dim=(1, 1, 1), block_dim=bd)
        pk.noop_layer([mid], [wide], grid_dim=(n, 1, 1), block_dim=bd)
        pk.noop_layer([wide], [sink], grid_dim=(1, 1, 1), block_dim=bd)


def noop_graph(shape: str, n: int, placement: str) -> mpk.PersistentKernel:
    pk = kernel(placement)
    add_noop_graph(pk, shape, n)
    pk.compile()
    return pk


def mpk_us(shape: str, n: int, placement: str) -> float:
    pk = noop_graph(shape, n, placement)
    us = timing.time_us(pk, reps=20, warmup=3, device_bound=True)
    pk.synchronize()
    pk.finalize()
    return us


def main() -> None:
    facts = timing.device_facts()
    lib = empty_kernel_lib()
    n0, n1 = 100, 10000
    graph_per_node = (cuda_graph_us(lib, n1) - cuda_graph_us(lib, n0)) / (n1 - n0)
    rows = []
    for shape, placement in [
        ("chain", "round_robin"),
        ("chain", "locality"),
        ("independent", "locality"),
        ("fan", "locality"),
        ("fan", "round_robin"),
    ]:
        t0, t1 = mpk_us(shape, n0, placement), mpk_us(shape, n1, placement)
        per_task = (t1 - t0) / (n1 - n0)
        rows.append(
            {
                "graph": shape,
                "placement": placement,
                "n0": n0,
                "n1": n1,
                "t0_us": t0,
                "t1_us": t1,
                "per_task_us": per_task,
                "cuda_graph_per_node_us": graph_per_node,
                "ratio_to_cuda_graph": per_task / graph_per_node,
            }
        )
        print(f"{shape} {placement}: {per_task:.3f} us/task", flush=True)
    timing.save("bench_dispatch", {**facts, "rows": rows})
    print(f"{facts['device']} ({facts['sms']} SMs), driver {facts['driver']}, torch {facts['torch']}, {facts['date']}")
    print(f"CUDA graph of empty kernels (dependent chain): {graph_per_node:.3f} us/node")
    print(f"{'graph':12} {'placement':12} {'T(100) us':>10} {'T(10000) us':>12} {'us/task':>8} {'vs graph':>8}")
    for r in rows:
        print(
            f"{r['graph']:12} {r['placement']:12} {r['t0_us']:10.1f} {r['t1_us']:12.1f} "
            f"{r['per_task_us']:8.3f} {r['ratio_to_cuda_graph']:8.2f}"
        )


if __name__ == "__main__":
    main()
