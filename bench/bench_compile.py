"""Compile time of a one-layer graph: cold (empty cache) and a cache hit in a fresh process.

python bench/bench_compile.py    # writes $OUT/bench_compile.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import timing  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, mpk_runtime as mpk
t1 = time.perf_counter()
target = int(sys.argv[1])
params = mpk.PersistentKernel.get_default_init_parameters()
params.update(test_mode=True, target_cc=target)
pk = mpk.PersistentKernel(**params)
x = pk.attach_input(torch.randn(16, 4096, dtype=torch.bfloat16, device="cuda"), "x")
w = pk.attach_input(torch.randn(4096, dtype=torch.bfloat16, device="cuda"), "w")
y = pk.attach_input(torch.empty(16, 4096, dtype=torch.bfloat16, device="cuda"), "y")
pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
t2 = time.perf_counter()
pk.compile()
t3 = time.perf_counter()
pk(); pk.synchronize(); pk.finalize()
print(json.dumps({"import_s": t1 - t0, "compile_s": t3 - t2, "cached": pk.build_result.cached,
                  "build_s": pk.build_result.seconds}))
"""


def run(target: int, cache: str) -> dict:
    env = {**os.environ, "MPK_CACHE_DIR": cache}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(target)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    data["process_s"] = time.perf_counter() - t0
    return data


def main() -> None:
    facts = timing.device_facts()
    rows = []
    for target in (90, 80):
        cache = tempfile.mkdtemp(prefix="mpk-bench-cache-")
        cold, hit = run(target, cache), run(target, cache)
        assert not cold["cached"] and hit["cached"]
        rows.append(
            {
                "target_cc": target,
                "cold_compile_s": cold["compile_s"],
                "hit_compile_s": hit["compile_s"],
                "hit_process_s": hit["process_s"],
                "import_s": hit["import_s"],
            }
        )
    timing.save("bench_compile", {**facts, "rows": rows})
    print(f"{facts['device']}, {facts['date']}")
    print(f"{'target':>6} {'cold compile s':>15} {'cache hit s':>12} {'hit process s':>14}")
    for r in rows:
        print(f"{r['target_cc']:6} {r['cold_compile_s']:15.2f} {r['hit_compile_s']:12.3f} {r['hit_process_s']:14.2f}")


if __name__ == "__main__":
    main()
