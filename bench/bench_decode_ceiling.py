"""The speed of light of issue 11's decodes: a split-KV decode without its math (bench/decode_ceiling.cu,
built here with nvcc for this GPU), timed as bench_paged_attention.py times the layer, against the
same KV-read floor (KV bytes / the copy bandwidth of this run).

Each variant keeps some of the dependent steps every split-KV body has: reading the page table before
the first copy ("chain" 1; 2: each row's page index read from global memory as its copy is issued),
and the partials, count and merge after the last ("merge"); the stream is the body's (cp.async of 16
bytes by every thread, `stages` stages of `tile` keys; "bulk": a bulk copy a row by one warp, on an
mbarrier a stage; "tensor": a tensor copy a page of the kv head from a tensor map of the cache, by one
thread; "copied by": every warp in turn with its math, or P warps that only copy while the
others only compute); "slots 2" runs two tasks at once an SM on 128 threads each; "math ns" stands for
the math with that much waiting after each 128 keys, "reads: stage" for its shared-memory reads (every
byte of a tile read back once). What a variant does not reach, no body of that shape reaches: the
real math, the q rows and the append only add to these times.

    python bench/bench_decode_ceiling.py [--cases small|large|producers|tensor|all]   # writes $OUT/bench_decode_ceiling.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from mpk_runtime import archs

sys.path.insert(0, str(Path(__file__).parent))
import cuda_program  # noqa: E402
import layer_bench  # noqa: E402
import timing  # noqa: E402

SOURCE = Path(__file__).with_name("decode_ceiling.cu")
HKV, D = 8, 128
MATH_NS = 700  # the body's math, about 0.7 us a 128-key tile (docs/PERFORMANCE.md, ninth session)
# (slots, stages, tile keys, chain, merge, math ns, bulk, lds): the tree's shape (one task an SM, 2
# stages of 128 keys) step by step, deeper stages, two tasks an SM; then with the math's time; then
# with the math's shared-memory reads, the rows copied by cp.async or as bulk copies.
SMALL_VARIANTS = [
    (1, 2, 128, 0, 0, 0, 0, 0, 0),
    (1, 2, 128, 1, 0, 0, 0, 0, 0),
    (1, 2, 128, 2, 0, 0, 0, 0, 0),
    (1, 2, 128, 1, 1, 0, 0, 0, 0),
    (1, 3, 128, 1, 1, 0, 0, 0, 0),
    (1, 4, 64, 1, 1, 0, 0, 0, 0),
    (2, 3, 64, 0, 0, 0, 0, 0, 0),
    (2, 3, 64, 1, 1, 0, 0, 0, 0),
    (1, 2, 128, 1, 1, MATH_NS, 0, 0, 0),
    (1, 2, 128, 2, 1, MATH_NS, 0, 0, 0),
    (1, 3, 128, 1, 1, MATH_NS, 0, 0, 0),
    (1, 2, 64, 1, 1, MATH_NS, 0, 0, 0),
    (1, 4, 64, 1, 1, MATH_NS, 0, 0, 0),
    (2, 3, 64, 1, 1, MATH_NS, 0, 0, 0),
    (1, 2, 128, 1, 1, 0, 0, 1, 0),
    (1, 2, 128, 1, 1, 0, 1, 1, 0),
    (1, 2, 128, 1, 1, MATH_NS, 0, 1, 0),
    (1, 2, 128, 1, 1, MATH_NS, 1, 0, 0),
    (1, 2, 128, 1, 1, MATH_NS, 1, 1, 0),
]
LARGE_VARIANTS = [
    (1, 2, 128, 1, 1, 0, 0, 0, 0),
    (1, 2, 128, 1, 1, MATH_NS, 0, 0, 0),
    (1, 3, 128, 1, 1, MATH_NS, 0, 0, 0),
    (2, 2, 64, 1, 1, MATH_NS, 0, 0, 0),
    (2, 3, 64, 1, 1, MATH_NS, 0, 0, 0),
    (1, 2, 128, 1, 1, MATH_NS, 0, 1, 0),
    (1, 2, 128, 1, 1, MATH_NS, 1, 1, 0),
    (2, 2, 64, 1, 1, MATH_NS, 0, 1, 0),
    (2, 2, 64, 1, 1, MATH_NS, 1, 1, 0),
]
# Producer warps (the last field) against every warp copying and computing in turn, with the math's
# time and twice it (the body's real math took about 0.9 us a 128-key tile on an H200: 2026-11-29).
SPEC_VARIANTS = [
    (1, 2, 128, 1, 1, MATH_NS, 0, 1, 0),
    (1, 2, 128, 1, 1, 2 * MATH_NS, 0, 1, 0),
    (1, 4, 64, 1, 1, 2 * MATH_NS, 0, 1, 0),
    (1, 4, 64, 1, 1, MATH_NS, 0, 1, 1),
    (1, 4, 64, 1, 1, MATH_NS, 0, 1, 2),
    (1, 4, 64, 1, 1, 2 * MATH_NS, 0, 1, 1),
    (1, 4, 64, 1, 1, 2 * MATH_NS, 0, 1, 2),
    (1, 2, 128, 1, 1, 2 * MATH_NS, 0, 1, 2),
    (1, 4, 64, 1, 1, 2 * MATH_NS, 0, 1, 4),
]
# Tensor copies (bulk 2: a page of the kv head a copy, from a tensor map, by one thread) against cp.async.
TENSOR_VARIANTS = [
    (1, 2, 128, 1, 1, 0, 2, 1, 0),
    (1, 2, 128, 1, 1, MATH_NS, 2, 1, 0),
    (1, 2, 128, 1, 1, 2 * MATH_NS, 0, 1, 0),
    (1, 2, 128, 1, 1, 2 * MATH_NS, 2, 1, 0),
    (1, 3, 128, 1, 1, 2 * MATH_NS, 2, 1, 0),
    (1, 4, 64, 1, 1, 2 * MATH_NS, 2, 1, 0),
    (2, 2, 64, 1, 1, 2 * MATH_NS, 0, 1, 0),
    (2, 2, 64, 1, 1, 2 * MATH_NS, 2, 1, 0),
]
# (B, S), splits, variants by group (--cases): the two small decodes at several grids, two of the
# large ones, then the four at the bench's grids for the producer warps and for the tensor copies.
CASES = {
    "small": [((1, 8192), (8, 16, 32), SMALL_VARIANTS), ((8, 1024), (1, 2, 4), SMALL_VARIANTS)],
    "large": [((8, 8192), (2,), LARGE_VARIANTS), ((32, 4096), (1,), LARGE_VARIANTS)],
    "producers": [((b, s), (z,), SPEC_VARIANTS) for b, s, z in ((1, 8192, 16), (8, 1024, 2), (8, 8192, 2), (32, 4096, 1))],
    "tensor": [((b, s), (z,), TENSOR_VARIANTS) for b, s, z in ((1, 8192, 16), (8, 1024, 2), (8, 8192, 2), (32, 4096, 1))],
}
COPIES = {0: "cp.async", 1: "bulk rows", 2: "tensor"}


def build(arch: archs.Arch, where: Path) -> Path:
    return cuda_program.build(SOURCE, arch, where)


# The program's figures for one case (B S Z slots stages tile chain merge copies math_ns bulk lds
# producers); a case it cannot run raises CaseFailed with the program's message.
CaseFailed = cuda_program.CaseFailed
run = cuda_program.figures


def table(rows: list[dict]) -> list[str]:
    """Markdown rows; a grid whose copies run side by side is marked (its time is a throughput), and a
    case that failed says so with the program's message."""
    out = [
        "| B, S | Z | slots | stages × tile | copies | copied by | chain | merge | reads | math ns | µs a layer "
        "| % of floor | span µs | span % of floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        copied_by = f"{r['producers']} warps" if r["producers"] else "all"
        case = (
            f"| {r['B']} × {r['S']} | {r['Z']} | {r['slots']} | {r['stages']} × {r['tile']} | "
            f"{COPIES[r['bulk']]} | {copied_by} | "
            f"{r['chain']} | {r['merge']} | {'stage' if r['lds'] else 'word'} | {r['math_ns']} | "
        )
        if "error" in r:
            out.append(case + f"FAILED: {r['error']} | | | |")
            continue
        mark = f" ({r['side_by_side']} side by side)" if r["side_by_side"] > 1 else ""
        out.append(
            case
            + f"{r['per_layer_us']:.1f}{mark} | {r['pct_of_floor']:.0f}% | {r['span_us']:.1f} | {r['span_pct_of_floor']:.0f}% |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", choices=[*CASES, "all"], default="all")
    cases = [c for name, cs in CASES.items() if parser.parse_args().cases in (name, "all") for c in cs]
    facts = timing.device_facts()
    copy = layer_bench.copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(archs.native_for(torch.cuda.get_device_capability(0)), Path(tmp))
        for (b, s), splits, variants in cases:
            kv_bytes = b * s * HKV * D * 2 * 2
            copies = max(3, min(8, -(-(256 << 20) // kv_bytes)))  # past L2 together, as bench_paged_attention
            floor = kv_bytes / (copy * 1e12) * 1e6
            for z in splits:
                for slots, stages, tile, chain, merge, math_ns, bulk, lds, producers in variants:
                    if bulk and torch.cuda.get_device_capability(0)[0] < 9:
                        continue  # bulk copies are sm90's
                    shape = {"B": b, "S": s, "Z": z, "slots": slots, "stages": stages, "tile": tile}
                    shape |= {"chain": chain, "merge": merge, "math_ns": math_ns, "bulk": bulk, "lds": lds}
                    shape |= {"producers": producers, "copies": copies, "floor_us": floor}
                    try:  # a failing case is reported with the others, not in place of them
                        r = run(exe, [b, s, z, slots, stages, tile, chain, merge, copies, math_ns, bulk, lds, producers])
                    except CaseFailed as failed:
                        rows.append({**shape, "error": str(failed)})
                        continue
                    rows.append(
                        {
                            **shape,
                            **r,
                            "pct_of_floor": 100 * floor / r["per_layer_us"],
                            "span_pct_of_floor": 100 * floor / r["span_us"],
                            "side_by_side": layer_bench.side_by_side(b * HKV * z, int(r["sms"]) * slots),
                        }
                    )
    print(f"{facts['device']}, {facts['date']}: copy bandwidth {copy:.2f} TB/s; a split-KV decode without its math")
    print("\n".join(table(rows)))
    timing.save("bench_decode_ceiling", {**facts, "copy_TBps": copy, "rows": rows})
    if failed := sum("error" in r for r in rows):
        raise SystemExit(f"bench_decode_ceiling: {failed} of {len(rows)} cases failed (their rows say why)")


if __name__ == "__main__":
    main()
