"""The speed of light of issue 14's MoE block at one token: gate / up and down as one pass over the
routed experts' bytes, without the math (bench/moe_ceiling.cu, built here with nvcc for this GPU),
against the floor bench_moe.py judges the block by: (8 experts x 3 * I * H + E * H) * 2 bytes / the
copy bandwidth of this run. What a variant does not reach, no body of that shape reaches: the math,
the routing weights and the residual only add to these times.

Each variant: `stages` x `stage_kb` KB in flight a CTA, by cp.async from every thread or (`copy`
TMA, sm90 on) by the TMA unit from one thread; w2 as the model keeps it ((H, I) an expert: a unit's
16 columns are 32 bytes of each of 2048 rows) or transposed ((I, H): 16 contiguous rows); `sync`: a
__syncthreads after each stage's wait (a body whose warps share a stage needs one);
`router`: the 16 router CTAs read the router's weights and write the logits first (else the expert
CTAs start from the previous block's combine, a stand-in for a router that costs nothing);
`combine`: partials, then a combine into the bf16 output (else atomics into an fp32 output: no
combine, but an output no bf16 layer reads and a sum whose order changes from run to run).
Every case also checks what it streamed (a checksum of the chunks read against one of the routed
experts' bytes); a case whose check fails is a failed row, and the bench exits non-zero.

    python bench/bench_moe_ceiling.py   # writes $OUT/bench_moe_ceiling.json
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from mpk_runtime import archs

sys.path.insert(0, str(Path(__file__).parent))
import cuda_program  # noqa: E402
import layer_bench  # noqa: E402
import timing  # noqa: E402

SOURCE = Path(__file__).with_name("moe_ceiling.cu")
E, K, H, I = 128, 8, 2048, 768
BLOCKS = 10
# (stages, stage KB, w2 layout, sync, router, combine, copy): the bytes in flight first, a body's
# __syncthreads, the TMA unit; then what a body could drop: w2's layout, the router, the combine.
VARIANTS = [
    (4, 16, 0, 0, 1, 1, 0),
    (4, 32, 0, 0, 1, 1, 0),
    (6, 32, 0, 0, 1, 1, 0),
    (6, 32, 0, 1, 1, 1, 0),
    (4, 32, 0, 1, 1, 1, 1),
    (6, 32, 0, 1, 1, 1, 1),
    (6, 32, 1, 0, 1, 1, 0),
    (6, 32, 1, 1, 1, 1, 1),
    (6, 32, 0, 0, 0, 1, 0),
    (6, 32, 1, 0, 0, 1, 0),
    (6, 32, 0, 0, 1, 0, 0),
    (6, 32, 1, 0, 1, 0, 0),
    (6, 32, 1, 1, 1, 0, 1),
    (6, 32, 1, 0, 0, 0, 0),
    (6, 32, 1, 1, 0, 0, 1),
]
LAYOUTS = {0: "(H, I)", 1: "(I, H)"}
OUTPUTS = {1: "combine, bf16", 0: "atomics, fp32"}
COPIES = {0: "cp.async", 1: "TMA"}
ARGS = "blocks stages stage_kb layout sync router combine copy"


def build(arch: archs.Arch, where: Path) -> Path:
    return cuda_program.build(SOURCE, arch, where)


def table(rows: list[dict]) -> list[str]:
    """Markdown rows; a case that failed says so with the program's message."""
    out = [
        "| stages × KB | copy | w2 | sync | router | output | µs a block | % of floor | route | stream | partial "
        "| wait | combine |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        case = (
            f"| {r['stages']} × {r['stage_kb']} | {COPIES[r['copy']]} | {LAYOUTS[r['layout']]} | {r['sync']} | "
            f"{r['router']} | {OUTPUTS[r['combine']]} | "
        )
        if "error" in r:
            out.append(case + f"FAILED: {r['error']} | | | | | | |")
            continue
        out.append(
            case + f"{r['per_block_us']:.1f} | {r['pct_of_floor']:.0f}% | {r['route_us']:.2f} | {r['stream_us']:.2f} | "
            f"{r['partial_us']:.2f} | {r['wait_us']:.2f} | {r['combine_us']:.2f} |"
        )
    return out


def main() -> None:
    facts = timing.device_facts()
    copy = layer_bench.copy_bandwidth()
    floor = (K * 3 * I * H + E * H) * 2 / (copy * 1e12) * 1e6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(archs.native_for(torch.cuda.get_device_capability(0)), Path(tmp))
        for variant in VARIANTS:
            case = dict(zip(ARGS.split()[1:], variant))
            if case["copy"] and torch.cuda.get_device_capability(0)[0] < 9:
                continue  # the TMA unit is sm90's
            try:  # a failing case is reported with the others, not in place of them
                r = cuda_program.figures(exe, [BLOCKS, *variant])
            except cuda_program.CaseFailed as failed:
                rows.append({**case, "error": str(failed)})
                continue
            rows.append({**case, **r, "pct_of_floor": 100 * floor / r["per_block_us"]})
    print(f"{facts['device']}, {facts['date']}: copy bandwidth {copy:.2f} TB/s; floor {floor:.1f} µs a block")
    print("MoE block at one token, one pass over the routed experts, no math (phases: medians over CTAs, µs)")
    print("\n".join(table(rows)))
    timing.save("bench_moe_ceiling", {**facts, "copy_TBps": copy, "floor_us": floor, "rows": rows})
    if failed := sum("error" in r for r in rows):
        raise SystemExit(f"bench_moe_ceiling: {failed} of {len(rows)} cases failed (their rows say why)")


if __name__ == "__main__":
    main()
