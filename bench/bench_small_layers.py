"""rmsnorm, silu_mul, embed and greedy sampling (argmax_partial + argmax_reduce) inside the
megakernel, next to their torch equivalents, in one run. These layers move little data at decode
batch sizes, so their time is latency: the profiler's span of the layer inside the megakernel
(median over launches) against one call of the torch op. What matters is that they are not the
bottleneck of a block. Each has its own entry point, bench/bench_<layer>.py, which runs only its rows.

    python bench/bench_small_layers.py    # writes $OUT/bench_small_layers.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
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


LAYERS = {"rmsnorm": rmsnorm, "silu_mul": silu_mul, "embed": embed, "argmax": sampling}


def main(only: str | None = None) -> None:
    facts, copy = timing.device_facts(), layer_bench.copy_bandwidth()
    rows = [r for name, fn in LAYERS.items() if only in (None, name) for r in fn(copy)]
    timing.save(f"bench_{only or 'small_layers'}", {**facts, "copy_TBps": copy, "rows": [r.row() for r in rows]})
    print(f"{facts['device']}, {facts['date']}; copy bandwidth {copy:.2f} TB/s")
    for r in rows:
        print(r.line())


if __name__ == "__main__":
    main()
