"""The Qwen3-style dense MLP (hidden 4096, intermediate 12288, bf16), tensor parallel over the GPUs
of one host, against the same MLP on one GPU (TP=1), in one run. Column-parallel gate / up, row-
parallel down, one all-reduce with the residual, all in one persistent kernel per rank. As in
bench_mlp.py, two MLPs with their own weights run back to back (the second on the first's output);
times are per MLP (a test-mode launch / 2, the launch's fixed cost included).

    mpirun -n 2 python bench/bench_tp_mlp.py     # any world size; rank 0 prints and writes $OUT/bench_tp_mlp.json

The TP=1 MLP runs on rank 0 alone, built as bench_mlp.py builds it, while the other ranks wait.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_mlp  # noqa: E402

import layer_bench  # noqa: E402
import timing  # noqa: E402

H, I = bench_mlp.H, bench_mlp.I
DOWN_TASKS = 128


def shard(p: dict, rank: int, world: int) -> dict:
    rows = slice(rank * I // world, (rank + 1) * I // world)
    return {"wn": p["wn"], "wg": p["wg"][rows].clone(), "wu": p["wu"][rows].clone(), "wd": p["wd"][:, rows].contiguous()}


def build_tp_mlp(pk, tag: str, X, r, out, p: dict, batch: int, world: int):
    bf, bd = torch.bfloat16, pk.block_dim
    i = I // world
    up_tasks = max(2, bench_mlp.UP_TASKS // world)
    R, O = pk.attach_input(r, f"r{tag}"), pk.attach_input(out, f"out{tag}")
    xn = pk.new_tensor((batch, H), bf, f"xn{tag}")
    mid = pk.new_tensor((batch, 2 * i), bf, f"mid{tag}")
    act = pk.new_tensor((batch, i), bf, f"act{tag}")
    partial = pk.new_tensor((batch, H), bf, f"partial{tag}")
    wgu = pk.shuffle_tensors(
        [pk.attach_input(p["wg"], f"wg{tag}"), pk.attach_input(p["wu"], f"wu{tag}")], 0, up_tasks // 2, f"wgu{tag}"
    )
    pk.rmsnorm_layer(input=X, weight=pk.attach_input(p["wn"], f"wn{tag}"), output=xn, grid_dim=(batch, 1, 1), block_dim=bd)
    pk.linear_layer(input=xn, weight=wgu, output=mid, grid_dim=(up_tasks, 1, 1), block_dim=bd)
    pk.silu_mul_layer(input=mid, output=act, grid_dim=(up_tasks // 2, 1, 1), block_dim=bd)
    pk.linear_layer(
        input=act, weight=pk.attach_input(p["wd"], f"wd{tag}"), output=partial, grid_dim=(DOWN_TASKS, 1, 1), block_dim=bd
    )
    buf = pk.new_comm_tensor((2, world, batch, H), bf, f"allreduce{tag}")
    pk.allreduce_layer(partial, buf, O, residual=R, grid_dim=(16, 1, 1), block_dim=bd)
    return O


def tp_kernel(batch: int, shards: list[dict], world: int, x, rs, outs):
    pk = layer_bench.kernel(
        max_num_batched_tokens=batch, max_num_batched_requests=batch, max_seq_length=batch, max_num_pages=batch, comm_timeout=120
    )
    X = pk.attach_input(x, "x")
    for i, p in enumerate(shards):
        X = build_tp_mlp(pk, str(i), X, rs[i], outs[i], p, batch, world)
    pk.compile()
    return pk


def main() -> None:
    world = timing.mpi_ranks("bench_tp_mlp.py")
    full = [bench_mlp.weights(0), bench_mlp.weights(1)]  # the same draw on every rank
    shards = [shard(p, world.rank, world.size) for p in full]
    if world.rank != 0:
        del full
    rows = []
    for batch in (1, 8):
        g = torch.Generator(device="cuda").manual_seed(100 + batch)
        x = torch.randn(batch, H, dtype=torch.bfloat16, device="cuda", generator=g)
        rs = [torch.randn(batch, H, dtype=torch.bfloat16, device="cuda", generator=g) for _ in shards]
        outs = [torch.empty(batch, H, dtype=torch.bfloat16, device="cuda") for _ in shards]
        pk = tp_kernel(batch, shards, world.size, x, rs, outs)
        world.exchange(f"tp b{batch}", None, 300)
        tp_us = timing.time_us(pk, reps=50, warmup=5, device_bound=True, ranks=world) / 2
        pk.synchronize(timeout=60)
        pk.finalize()
        row = {"batch": batch, "tp_size": world.size, "mpk_tp_launch_us": tp_us}
        if world.rank == 0:
            ref = bench_mlp.torch_chain(x.float(), [r.float() for r in rs], [{k: v.float() for k, v in p.items()} for p in full])
            err = ((outs[-1].float() - ref).norm() / ref.norm()).item()
            assert err <= 1e-2, f"TP MLP b{batch}: relative error {err:.3g} against fp32 math"
            one, x1, rs1, outs1 = bench_mlp.megakernel(batch, full, decode=False)
            tp1_us = timing.time_us(one, reps=50, warmup=5, device_bound=True) / 2
            one.synchronize()
            one.finalize()
            row.update(rel_error_vs_fp32=err, mpk_tp1_launch_us=tp1_us, tp1_over_tp=tp1_us / tp_us)
        world.exchange(f"tp1 b{batch}", None, 600)
        rows.append(row)
    if world.rank == 0:
        facts = timing.device_facts()
        timing.save("bench_tp_mlp", {**facts, "world_size": world.size, "rows": rows})
        print(f"{facts['device']} x {world.size}, {facts['date']}; MLP hidden {H}, intermediate {I}, bf16, per MLP")
        for r in rows:
            print(
                f"b{r['batch']}: TP={world.size} {r['mpk_tp_launch_us']:.1f} us (relative error {r['rel_error_vs_fp32']:.2e}), "
                f"TP=1 {r['mpk_tp1_launch_us']:.1f} us; TP=1 / TP={world.size}: {r['tp1_over_tp']:.2f}"
            )
        ok = all(r["tp1_over_tp"] > 1 for r in rows)
        print(f"goal (TP={world.size} faster than TP=1 at b1 and b8): {timing.judged('met' if ok else 'NOT met')}")


if __name__ == "__main__":
    main()
