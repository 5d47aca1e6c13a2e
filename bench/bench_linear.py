"""linear at batch 1, 4 and 16 with a 4096 x 12288 bf16 weight, timed inside the megakernel, next to
torch.nn.functional.linear and the copy bandwidth of the same run. Target: >= 80% of copy bandwidth
and faster than F.linear.

    python bench/bench_linear.py     # writes $OUT/bench_linear.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import layer_bench  # noqa: E402
import timing  # noqa: E402

K, N, TASKS, COPIES = 4096, 12288, 128, 6


def main() -> None:
    facts = timing.device_facts()
    copy = layer_bench.copy_bandwidth()
    weights = [torch.randn(N, K, dtype=torch.bfloat16, device="cuda") / K**0.5 for _ in range(COPIES)]
    rows = []
    for batch in (1, 4, 16):
        x = torch.randn(batch, K, dtype=torch.bfloat16, device="cuda")
        outs = [torch.empty(batch, N, dtype=torch.bfloat16, device="cuda") for _ in range(COPIES)]

        attached = {}

        def build(pk, i, x=x, outs=outs, attached=attached):
            if i == 0:  # copies are built in order on a fresh kernel: the shared input once
                attached["x"] = pk.attach_input(x, "x")
            pk.linear_layer(
                input=attached["x"],
                weight=pk.attach_input(weights[i], f"w{i}"),
                output=pk.attach_input(outs[i], f"y{i}"),
                grid_dim=(TASKS, 1, 1),
                block_dim=pk.block_dim,
            )

        def torch_op(i, x=x, outs=outs):
            torch.matmul(x, weights[i].T, out=outs[i])

        nbytes = N * K * 2 + batch * K * 2 + batch * N * 2
        r = layer_bench.measure(f"linear b{batch} {K}x{N}", build, torch_op, nbytes, COPIES, copy)
        torch.testing.assert_close(outs[0], F.linear(x, weights[0]), atol=2e-2, rtol=2e-2)
        rows.append(r)
    timing.save("bench_linear", {**facts, "copy_TBps": copy, "rows": [r.row() for r in rows]})
    print(f"{facts['device']}, {facts['date']}; copy bandwidth {copy:.2f} TB/s")
    for r in rows:
        print(r.line())


if __name__ == "__main__":
    main()
