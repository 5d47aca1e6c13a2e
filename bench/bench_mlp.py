"""The Qwen3-style dense MLP (RMSNorm -> gate/up linear -> SiLU*mul -> down linear + residual,
hidden 4096, intermediate 12288, bf16) as one megakernel, next to the same torch ops eager and
replayed from a CUDA graph, in one run. Two MLPs with their own weights (302 MB each, past L2) run
back to back, the second on the first's output as consecutive decoder layers would, in both the
megakernel and torch; times are per MLP.

- mpk launch: one test-mode launch runs both MLPs; time per launch / 2 (the launch's fixed cost
  included, as a CUDA graph replay includes its own).
- mpk decode loop: one offline-mode launch runs many iterations (the persistent kernel's steady
  state: prepare_next_batch, both MLPs, END_OF_TASK_GRAPH); time per iteration / 2.

    python bench/bench_mlp.py       # writes $OUT/bench_mlp.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import layer_bench  # noqa: E402
import timing  # noqa: E402

H, I = 4096, 12288
UP_TASKS, DOWN_TASKS = 256, 128
ITERATIONS = 32


def weights(seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    bf = torch.bfloat16
    return {
        "wn": torch.randn(H, dtype=bf, device="cuda", generator=g),
        "wg": torch.randn(I, H, dtype=bf, device="cuda", generator=g) * 0.02,
        "wu": torch.randn(I, H, dtype=bf, device="cuda", generator=g) * 0.02,
        "wd": torch.randn(H, I, dtype=bf, device="cuda", generator=g) * 0.02,
    }


def torch_mlp(x, r, p):
    xf = x.float()
    xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * p["wn"]
    g, u = F.linear(xn, p["wg"]), F.linear(xn, p["wu"])
    return F.linear(F.silu(g) * u, p["wd"]) + r


def build_mlp(pk, tag: str, X, r, out, p, batch: int):
    bf, bd = torch.bfloat16, pk.block_dim
    R, O = pk.attach_input(r, f"r{tag}"), pk.attach_input(out, f"out{tag}")
    xn = pk.new_tensor((batch, H), bf, f"xn{tag}")
    mid = pk.new_tensor((batch, 2 * I), bf, f"mid{tag}")
    act = pk.new_tensor((batch, I), bf, f"act{tag}")
    wgu = pk.shuffle_tensors(
        [pk.attach_input(p["wg"], f"wg{tag}"), pk.attach_input(p["wu"], f"wu{tag}")], 0, UP_TASKS // 2, f"wgu{tag}"
    )
    pk.rmsnorm_layer(input=X, weight=pk.attach_input(p["wn"], f"wn{tag}"), output=xn, grid_dim=(batch, 1, 1), block_dim=bd)
    pk.linear_layer(input=xn, weight=wgu, output=mid, grid_dim=(UP_TASKS, 1, 1), block_dim=bd)
    pk.silu_mul_layer(input=mid, output=act, grid_dim=(UP_TASKS // 2, 1, 1), block_dim=bd)
    pk.linear_with_residual_layer(
        input=act, weight=pk.attach_input(p["wd"], f"wd{tag}"), residual=R, output=O, grid_dim=(DOWN_TASKS, 1, 1), block_dim=bd
    )
    return O


def megakernel(batch: int, sets: list[dict], decode: bool):
    bf = torch.bfloat16
    x = torch.randn(batch, H, dtype=bf, device="cuda")
    rs = [torch.randn(batch, H, dtype=bf, device="cuda") for _ in sets]
    outs = [torch.empty(batch, H, dtype=bf, device="cuda") for _ in sets]
    params = dict(
        max_num_batched_tokens=batch,
        max_num_batched_requests=batch,
        max_seq_length=ITERATIONS + 1,
        max_num_pages=batch * (ITERATIONS + 1),
    )
    if decode:  # `batch` requests of one prompt token each, decoding until their rows are full
        params.update(
            test_mode=False,
            meta_tensors={
                "tokens": torch.ones(batch, ITERATIONS + 1, dtype=torch.int64, device="cuda"),
                "prompt_lengths": torch.ones(batch, dtype=torch.int32, device="cuda"),
            },
        )
    pk = layer_bench.kernel(**params)
    X = pk.attach_input(x, "x")
    for i, p in enumerate(sets):
        X = build_mlp(pk, str(i), X, rs[i], outs[i], p, batch)
    pk.compile()
    return pk, x, rs, outs


def torch_chain(x, rs, sets):
    for r, p in zip(rs, sets):
        x = torch_mlp(x, r, p)
    return x


def main() -> None:
    facts = timing.device_facts()
    copy = layer_bench.copy_bandwidth()
    sets = [weights(0), weights(1)]
    floor_us = 3 * I * H * 2 / (copy * 1e12) * 1e6
    rows = []
    for batch in (1, 8):
        pk, x, rs, outs = megakernel(batch, sets, decode=False)
        launch_us = timing.time_us(pk, reps=50, warmup=5, device_bound=True) / 2
        pk.synchronize()
        # Both are bf16 pipelines that round at different points; judge each against fp32 math.
        ref = torch_chain(x.float(), [r.float() for r in rs], [{k: v.float() for k, v in p.items()} for p in sets])
        err_mpk = ((outs[-1].float() - ref).norm() / ref.norm()).item()
        err_torch = ((torch_chain(x, rs, sets).float() - ref).norm() / ref.norm()).item()
        assert err_mpk <= max(1e-2, 1.5 * err_torch), f"megakernel MLP error {err_mpk:.3g} vs torch's {err_torch:.3g}"
        pk.finalize()
        dk, *_ = megakernel(batch, sets, decode=True)
        loop_us = timing.time_us(dk, reps=5, warmup=1, rounds=3, device_bound=True) / ITERATIONS / 2
        dk.finalize()

        eager_us = timing.time_us(lambda: torch_chain(x, rs, sets), reps=50) / 2  # noqa: B023
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                torch_chain(x, rs, sets)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            torch_chain(x, rs, sets)
        graph_us = timing.time_us(graph.replay, reps=100, device_bound=True) / 2
        rows.append(
            {
                "batch": batch,
                "rel_error_mpk": err_mpk,
                "rel_error_torch_bf16": err_torch,
                "mpk_launch_us": launch_us,
                "mpk_decode_loop_us": loop_us,
                "torch_eager_us": eager_us,
                "torch_cuda_graph_us": graph_us,
                "floor_us": floor_us,
                "copy_TBps": copy,
                "mpk_launch_vs_graph": graph_us / launch_us,
                "mpk_loop_vs_graph": graph_us / loop_us,
                "mpk_launch_pct_of_copy": 100 * floor_us / launch_us,
                "mpk_loop_pct_of_copy": 100 * floor_us / loop_us,
            }
        )
    timing.save("bench_mlp", {**facts, "rows": rows})
    print(f"{facts['device']}, {facts['date']}; copy bandwidth {copy:.2f} TB/s; floor {floor_us:.1f} us per MLP")
    for r in rows:
        print(
            f"MLP b{r['batch']} (relative error vs fp32: mpk {r['rel_error_mpk']:.2e}, torch bf16 "
            f"{r['rel_error_torch_bf16']:.2e}): mpk launch {r['mpk_launch_us']:.1f} us "
            f"({r['mpk_launch_pct_of_copy']:.0f}% of copy), "
            f"mpk decode loop {r['mpk_decode_loop_us']:.1f} us ({r['mpk_loop_pct_of_copy']:.0f}%), torch eager "
            f"{r['torch_eager_us']:.1f} us, CUDA graph {r['torch_cuda_graph_us']:.1f} us; graph/mpk launch "
            f"{r['mpk_launch_vs_graph']:.2f}, graph/mpk loop {r['mpk_loop_vs_graph']:.2f}"
        )


if __name__ == "__main__":
    main()
