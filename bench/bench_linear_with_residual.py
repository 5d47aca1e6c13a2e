"""linear_with_residual (the MLP's down projection: 12288 -> 4096, bf16) inside the megakernel, next
to torch's addmm of the same shapes, in one run.   python bench/bench_linear_with_residual.py"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import layer_bench  # noqa: E402
import timing  # noqa: E402

K, N, TASKS, COPIES = 12288, 4096, 128, 6


def main() -> None:
    facts, copy = timing.device_facts(), layer_bench.copy_bandwidth()
    bf = torch.bfloat16
    ws = [torch.randn(N, K, dtype=bf, device="cuda") / K**0.5 for _ in range(COPIES)]
    rows = []
    for batch in (1, 8, 16):
        x = torch.randn(batch, K, dtype=bf, device="cuda")
        rs = [torch.randn(batch, N, dtype=bf, device="cuda") for _ in range(COPIES)]
        ys = [torch.empty(batch, N, dtype=bf, device="cuda") for _ in range(COPIES)]
        shared = {}

        def build(pk, i, x=x, rs=rs, ys=ys, shared=shared):
            if i == 0:
                shared["x"] = pk.attach_input(x, "x")
            pk.linear_with_residual_layer(
                input=shared["x"],
                weight=pk.attach_input(ws[i], f"w{i}"),
                residual=pk.attach_input(rs[i], f"r{i}"),
                output=pk.attach_input(ys[i], f"y{i}"),
                grid_dim=(TASKS, 1, 1),
                block_dim=pk.block_dim,
            )

        def torch_op(i, x=x, rs=rs, ys=ys):
            torch.addmm(rs[i], x, ws[i].T, out=ys[i])

        nbytes = N * K * 2 + batch * K * 2 + 2 * batch * N * 2
        rows.append(layer_bench.measure(f"linear_with_residual b{batch}", build, torch_op, nbytes, COPIES, copy))
    timing.save("bench_linear_with_residual", {**facts, "copy_TBps": copy, "rows": [r.row() for r in rows]})
    print(f"{facts['device']}, {facts['date']}; copy bandwidth {copy:.2f} TB/s")
    for r in rows:
        print(r.line())


if __name__ == "__main__":
    main()
