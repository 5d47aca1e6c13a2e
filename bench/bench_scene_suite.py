"""How fast the scene suite runs.

- ``--twenty``: a scene file of 20 cases, run once to build, then again with every build a cache
  hit: the wall time of the second run (target: under 10 s on one GPU).
- ``--scaling 1 4``: the whole tests/scenes suite from a cold cache with ``-n 1`` and with ``-n 4``
  (pytest-xdist, one worker per GPU): the speed-up (target: >= 3x on 4 GPUs).

    python bench/bench_scene_suite.py --twenty
    python bench/bench_scene_suite.py --scaling 1 4
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import timing  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TWENTY = """
import torch
from pytest_mpk import Case, Out, SceneTestCase, scene_test

SHAPES = [(b, h) for b in (1, 2, 4, 8, 16) for h in (1024, 2048, 4096, 8192)]


@scene_test(layer="rmsnorm")
class TestTwenty(SceneTestCase):
    CASES = [Case(f"b{b}_h{h}", batch=b, hidden=h) for b, h in SHAPES]

    def generate_args(self, params):
        b, h = params["batch"], params["hidden"]
        return {"input": torch.randn(b, h, dtype=torch.bfloat16), "weight": torch.randn(h, dtype=torch.bfloat16),
                "output": Out(torch.empty(b, h, dtype=torch.bfloat16))}

    def build(self, pk, t, params):
        pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(params["batch"], 1, 1),
                         block_dim=pk.block_dim)
"""


def pytest_run(args: list[str], cache: str) -> tuple[float, str]:
    env = {**os.environ, "MPK_CACHE_DIR": cache}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "mpk", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    if proc.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-1000:]}")
    slowest = [line for line in proc.stdout.splitlines() if re.match(r"\d+\.\d+s (setup|call|teardown) ", line)]
    if slowest:  # --durations: where a parallel run's tail comes from
        print("\n".join(["  slowest items:", *(f"    {line}" for line in slowest)]))
    return wall, tail


def twenty() -> dict:
    cache = tempfile.mkdtemp(prefix="mpk-bench-cache-")
    d = Path(tempfile.mkdtemp(prefix="mpk-twenty-"))
    (d / "test_twenty.py").write_text(TWENTY)
    cold, cold_tail = pytest_run([str(d / "test_twenty.py")], cache)
    warm, warm_tail = pytest_run([str(d / "test_twenty.py")], cache)
    print(f"20-case scene file: cold {cold:.1f} s ({cold_tail}); all cache hits {warm:.1f} s ({warm_tail})")
    return {"cold_s": cold, "warm_s": warm, "warm_summary": warm_tail}


def scaling(workers: list[int]) -> dict:
    out = {}
    for n in workers:
        cache = tempfile.mkdtemp(prefix="mpk-bench-cache-")
        wall, tail = pytest_run(["tests/scenes", "-n", str(n), "--durations=6"], cache)
        out[n] = {"wall_s": wall, "summary": tail}
        print(f"tests/scenes, cold cache, -n {n}: {wall:.1f} s ({tail})", flush=True)
    base = out[workers[0]]["wall_s"]
    for n in workers[1:]:
        print(f"speed-up -n {n} over -n {workers[0]}: {base / out[n]['wall_s']:.2f}x")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--twenty", action="store_true")
    ap.add_argument("--scaling", type=int, nargs="+")
    args = ap.parse_args()
    facts = timing.device_facts()
    import torch

    facts["gpus"] = torch.cuda.device_count()
    result = {**facts}
    if args.twenty:
        result["twenty"] = twenty()
    if args.scaling:
        result["scaling"] = scaling(args.scaling)
    timing.save("bench_scene_suite" + ("_scaling" if args.scaling else ""), result)


if __name__ == "__main__":
    main()
