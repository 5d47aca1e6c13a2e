"""How long the suites take without a GPU, cold (an empty build cache) and warm (the cache the cold
run filled): the default suite (plain ``pytest``: tests/cpu and tests/scenes, emulated) and the
README's main command (``pytest -p mpk tests/scenes``). Targets on the 2-core machine: the default
suite <= 4 min cold and <= 90 s warm, the main command <= 3 min cold and <= 60 s warm.

Besides the wall time it prints the CPU time of the run and its children (nvcc included), the load
average before and after, and how many cache entries the run built (nvcc modules, host-emulation
modules) with the seconds their compiles took: on a shared machine the wall time alone says little,
and the builds are most of a cold run's work.

    python bench/bench_cpu_suite.py                 # both suites, cold then warm
    python bench/bench_cpu_suite.py --suite main    # one of them
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = {
    "default": ["pytest", "-q"],
    "main": ["pytest", "-p", "mpk", "tests/scenes", "-q"],
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def builds_since(cache: Path, start: float) -> dict:
    """The cache entries published since ``start`` (wall clock), nvcc modules and host builds, and
    the seconds their compiles took (``build_seconds``, summed)."""
    counts: dict[str, float] = {"nvcc": 0, "host": 0, "nvcc_s": 0.0, "host_s": 0.0}
    for record in (cache / "modules").glob("*/build.json"):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("built_at", 0) >= start:
            kind = "host" if "compiler" in data else "nvcc"
            counts[kind] += 1
            counts[f"{kind}_s"] += data.get("build_seconds", 0.0)
    return {k: round(v, 1) for k, v in counts.items()}


def run(suite: str, cache: Path) -> dict:
    env = {**os.environ, "MPK_CACHE_DIR": str(cache)}
    env.pop("CI", None)  # the profile a developer gets
    cmd = [str(Path(sys.executable).parent / SUITES[suite][0]), *SUITES[suite][1:]]
    load = os.getloadavg()[0]
    cpu, start, began = children_cpu(), time.perf_counter(), time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    lines = proc.stdout.strip().splitlines()
    return {
        "suite": suite,
        "command": " ".join(SUITES[suite]),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "built": builds_since(cache, began),
        "exit": proc.returncode,
        "summary": lines[-1] if lines else proc.stderr[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=[*SUITES, "both"], default="both")
    parser.add_argument("--keep-cache", metavar="DIR", help="Use (and keep) this cache directory; it must not exist yet")
    args = parser.parse_args()
    suites = list(SUITES) if args.suite == "both" else [args.suite]
    # PYTHONDONTWRITEBYTECODE=1 (set on the project's machines) makes every process compile every module
    # from source: about 12 s of a warm default suite (docs/PERFORMANCE.md, twentieth session).
    # Files an earlier run without it left are still read: say how many of ours there are.
    cached = sum(1 for top in ("mpk_runtime", "pytest_mpk", "tests") for _ in (ROOT / top).glob("**/__pycache__/*.pyc"))
    bytecode = "written" if not os.environ.get("PYTHONDONTWRITEBYTECODE") else f"not written ({cached} .pyc of ours cached)"
    facts = {"machine": f"{os.cpu_count()} CPUs", "python": sys.version.split()[0], "bytecode": bytecode}
    print(json.dumps({**facts, "date": time.strftime("%F %T")}))
    for suite in suites:
        cache = Path(args.keep_cache) if args.keep_cache else Path(tempfile.mkdtemp(prefix="mpk-bench-")) / "cache"
        if cache.exists():
            sys.exit(f"{cache} exists: a cold run needs an empty cache")
        try:
            for state in ("cold", "warm"):
                print(json.dumps({"state": state, **run(suite, cache)}), flush=True)
        finally:
            if not args.keep_cache:
                shutil.rmtree(cache.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
