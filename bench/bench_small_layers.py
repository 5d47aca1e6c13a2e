"""rmsnorm, silu_mul, embed, greedy sampling (argmax_partial + argmax_reduce) and the two MoE routings
(moe_topk_softmax_routing, moe_sigmoid_group_routing) inside the megakernel, next to their torch
equivalents, in one run. These layers move little data at decode batch sizes, so their time is
latency: the profiler's span of the layer inside the megakernel (median over launches) against one
call of the torch op. What matters is that they are not the bottleneck of a block. Each has its own
entry point, bench/bench_<layer>.py (bench_moe_routing.py for the routings), which runs only its rows.

    python bench/bench_small_layers.py    # writes $OUT/bench_small_layers.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import bench_moe  # noqa: E402

import layer_bench  # noqa: E402
import timing  # noqa: E402

COPIES = 8
bf = torch.bfloat16


def rmsnorm(copy: float) -> list[layer_bench.Result]:
    out = []
    for batch, hidden in ((1, 4096), (16, 4096)):
        xs = [torch.randn(batch, hidden, dtype=bf, device="cuda") for _ in range(COPIES)]
        w = torch.randn(hidden, dtype=bf, device="cuda")
        ys = [torch.empty_like(x) for x in xs]
        shared = {}

        def build(pk, i, xs=xs, w=w, ys=ys, shared=shared, batch=batch):
            if i == 0:
                shared["w"] = pk.attach_input(w, "w")
            pk.rmsnorm_layer(
                input=pk.attach_input(xs[i], f"x{i}"),
                weight=shared["w"],
                output=pk.attach_input(ys[i], f"y{i}"),
                grid_dim=(batch, 1, 1),
                block_dim=pk.block_dim,
            )

        def torch_op(i, xs=xs, w=w):
            F.rms_norm(xs[i], (xs[i].shape[-1],), w, 1e-6)

        nbytes = 2 * batch * hidden * 2 + hidden * 2
        out.append(layer_bench.measure_latency(f"rmsnorm b{batch} h{hidden}", build, torch_op, nbytes, COPIES, copy))
    return out


def silu_mul(copy: float) -> list[layer_bench.Result]:
    out = []
    for batch, inter, groups in ((1, 12288, 128), (8, 12288, 128)):
        xs = [torch.randn(batch, 2 * inter, dtype=bf, device="cuda") for _ in range(COPIES)]
        ys = [torch.empty(batch, inter, dtype=bf, device="cuda") for _ in range(COPIES)]

        def build(pk, i, xs=xs, ys=ys, groups=groups):
            pk.silu_mul_layer(
                input=pk.attach_input(xs[i], f"x{i}"),
                output=pk.attach_input(ys[i], f"y{i}"),
                grid_dim=(groups, 1, 1),
                block_dim=pk.block_dim,
            )

        def torch_op(i, xs=xs):
            g, u = xs[i].chunk(2, dim=-1)
            F.silu(g) * u

        nbytes = 3 * batch * inter * 2
        out.append(layer_bench.measure_latency(f"silu_mul b{batch} i{inter}", build, torch_op, nbytes, COPIES, copy))
    return out


def embed(copy: float) -> list[layer_bench.Result]:
    out = []
    vocab, hidden = 151936, 4096
    table = torch.randn(vocab, hidden, dtype=bf, device="cuda")
    for batch in (1, 16):
        ys = [torch.empty(batch, hidden, dtype=bf, device="cuda") for _ in range(COPIES)]
        tokens = torch.randint(0, vocab, (1, batch), dtype=torch.int64, device="cuda")
        shared = {}

        def build(pk, i, ys=ys, shared=shared):
            if i == 0:
                shared["ids"] = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
                shared["table"] = pk.attach_input(table, "table")
            pk.embed_layer(
                input=shared["ids"],
                weight=shared["table"],
                output=pk.attach_input(ys[i], f"y{i}"),
                grid_dim=(16, 1, 1),
                block_dim=pk.block_dim,
            )

        def torch_op(i, tokens=tokens, ys=ys):
            torch.index_select(table, 0, tokens[0], out=ys[i])

        params = dict(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch, meta_tensors={"tokens": tokens})
        out.append(
            layer_bench.measure_latency(
                f"embed b{batch} h{hidden}", build, torch_op, 2 * batch * hidden * 2, COPIES, copy, **params
            )
        )
    return out


def sampling(copy: float) -> list[layer_bench.Result]:
    out = []
    vocab, parts = 151936, 128
    for batch in (1, 16):
        logits = [torch.randn(batch, vocab, dtype=bf, device="cuda") for _ in range(COPIES)]
        toks = [torch.empty(batch, dtype=torch.int64, device="cuda") for _ in range(COPIES)]

        def build(pk, i, logits=logits, toks=toks, batch=batch):
            vals = pk.new_tensor((batch, parts), torch.float32, f"v{i}")
            idx = pk.new_tensor((batch, parts), torch.int64, f"i{i}")
            pk.argmax_partial_layer(
                input=pk.attach_input(logits[i], f"l{i}"),
                values=vals,
                indices=idx,
                grid_dim=(parts, 1, 1),
                block_dim=pk.block_dim,
            )
            pk.argmax_reduce_layer(
                values=vals, indices=idx, output=pk.attach_input(toks[i], f"t{i}"), grid_dim=(1, 1, 1), block_dim=pk.block_dim
            )

        def torch_op(i, logits=logits, toks=toks):
            torch.argmax(logits[i], dim=-1, out=toks[i])

        out.append(layer_bench.measure_latency(f"argmax b{batch} v{vocab}", build, torch_op, batch * vocab * 2, COPIES, copy))
    return out


def routing(copy: float) -> list[layer_bench.Result]:
    """Qwen3-30B-A3B's routing (E 128, top 8, softmax) and DeepSeek-V3's (E 256, top 8 of the 4 best of 8
    groups, sigmoid plus bias, scaled by 2.5). torch computes the weights and the expert indices only;
    the layers also write the expert-major routing rows and the expert mask that the expert layers read."""
    out = []
    for label, experts, groups, kept in (("softmax e128", 128, None, None), ("group e256 g8/4", 256, 8, 4)):
        for batch in (1, 64):
            topk = 8
            logits = [torch.randn(batch, experts, dtype=bf, device="cuda") for _ in range(COPIES)]
            bias = (torch.randn(experts, device="cuda") * 0.1).float()

            def build(pk, i, logits=logits, bias=bias, batch=batch, experts=experts, groups=groups, kept=kept, topk=topk):
                outs = {
                    "topk_weights": pk.new_tensor((batch, topk), torch.float32, f"w{i}"),
                    "routing_indices": pk.new_tensor((experts, batch), torch.int32, f"r{i}"),
                    "expert_mask": pk.new_tensor((experts + 1,), torch.int32, f"m{i}"),
                }
                x = pk.attach_input(logits[i], f"l{i}")
                if groups is None:
                    pk.moe_topk_softmax_routing_layer(input=x, **outs, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
                else:
                    pk.moe_sigmoid_group_routing_layer(
                        input=x, score_bias=pk.attach_input(bias, f"b{i}"), **outs, n_group=groups, topk_group=kept,
                        norm_topk_prob=True, routed_scaling_factor=2.5, grid_dim=(1, 1, 1), block_dim=pk.block_dim,
                    )  # fmt: skip

            def torch_op(i, logits=logits, bias=bias, groups=groups, kept=kept, topk=topk):
                if groups is None:  # the weights (softmax over the top k, renormalized) and the experts
                    w, idx = torch.softmax(logits[i].float(), dim=-1).topk(topk, dim=-1)
                    return w / w.sum(dim=-1, keepdim=True), idx
                return bench_moe.torch_group_route(logits[i], bias, groups, kept, topk, 2.5)

            params = dict(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch)
            nbytes = batch * experts * 2 + batch * topk * 4 + experts * batch * 4 + (experts + 1) * 4
            name = f"routing {label} b{batch}"
            out.append(layer_bench.measure_latency(name, build, torch_op, nbytes, COPIES, copy, **params))
    return out


LAYERS = {"rmsnorm": rmsnorm, "silu_mul": silu_mul, "embed": embed, "argmax": sampling, "routing": routing}


def main(only: str | None = None) -> None:
    facts, copy = timing.device_facts(), layer_bench.copy_bandwidth()
    rows = [r for name, fn in LAYERS.items() if only in (None, name) for r in fn(copy)]
    timing.save(f"bench_{only or 'small_layers'}", {**facts, "copy_TBps": copy, "rows": [r.row() for r in rows]})
    print(f"{facts['device']}, {facts['date']}; copy bandwidth {copy:.2f} TB/s")
    for r in rows:
        print(r.line())


if __name__ == "__main__":
    main()
