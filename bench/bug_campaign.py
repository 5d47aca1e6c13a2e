"""Injected-bug campaign: how many realistic bugs the default scenes catch.

Each mutation of bench/mutations.py is one text replacement in one csrc header. For each, the
repository is copied (without .git, build outputs or caches) into a temp dir, the patch is applied
there, and the scene files of the layers that run the mutated code are run against the copy:

    PYTHONPATH=<copy> python -m pytest -p mpk <scenes in the copy> -p no:cacheprovider -q --maxfail=1 \
        -n N --mpk-backend BACKEND

so that the copy's mpk_runtime and pytest_mpk, and with them its csrc, are the ones imported (checked
for every mutation before pytest runs). Caught: pytest exits 1 with a failing case. Missed: exit 0.
Anything else (the patched code does not build, a usage error, no tests, a timeout) is an invalid
mutation and counts neither way. Mutations of code the emulator does not run (gpu_only) are skipped
under --backend emulate.

    python bench/bug_campaign.py --backend emulate --jobs 1 -n 2 --out bugs-emulate.md
    python bench/bug_campaign.py --backend gpu --jobs 12 -n 0 --timeout 420 --out bugs-gpu.md
    python bench/bug_campaign.py --only rmsnorm-eps-outside-rsqrt embed-accepts-id-vocab
    python bench/bug_campaign.py --list
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutations import MUTATIONS, Mutation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Not copied: version control, build outputs, caches and artifacts (anywhere in the tree), and the
# top-level build / dist folders (mpk_runtime/build is a package and is copied).
SKIP_ANYWHERE = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", ".mpk-artifacts"}
SKIP_TOP = {"build", "dist", ".venv", "venv"}


class MutationError(ValueError):
    """A mutation that cannot be applied to the current csrc (its `old` text is not there exactly once)."""


def occurrences(mutation: Mutation, csrc: Path) -> int:
    return (csrc / mutation.file).read_text().count(mutation.old)


def apply(mutation: Mutation, csrc: Path) -> None:
    """Patch csrc/<file> in place; refuses unless `old` occurs exactly once."""
    path = csrc / mutation.file
    text = path.read_text()
    n = text.count(mutation.old)
    if n != 1:
        raise MutationError(
            f"mutation {mutation.id}: csrc/{mutation.file} holds its `old` text {n} times, not exactly once "
            f"({mutation.old!r}); update bench/mutations.py"
        )
    path.write_text(text.replace(mutation.old, mutation.new))


def problems(mutations: list[Mutation], root: Path = ROOT) -> list[str]:
    """What is wrong with the list against the tree at `root` (empty: well-formed)."""
    found = []
    seen = set()
    for m in mutations:
        if m.id in seen:
            found.append(f"duplicate id {m.id}")
        seen.add(m.id)
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m.id):
            found.append(f"{m.id}: ids are lower-case words joined by '-'")
        if m.old == m.new:
            found.append(f"{m.id}: `new` equals `old`")
        if not m.kind or not m.description or "\n" in m.description:
            found.append(f"{m.id}: needs a kind and a one-line description")
        path = root / "csrc" / m.file
        if not path.is_file():
            found.append(f"{m.id}: csrc/{m.file} does not exist")
        else:
            n = path.read_text().count(m.old)
            if n != 1:
                found.append(f"{m.id}: its `old` text occurs {n} times in csrc/{m.file}, not exactly once")
        if not m.selection:
            found.append(f"{m.id}: no scenes selected")
        for sel in m.selection:
            file, _, cls = sel.partition("::")
            scene = root / file
            if not scene.is_file() or not file.startswith("tests/scenes/"):
                found.append(f"{m.id}: selected scene file {file} does not exist under tests/scenes")
            elif cls and not re.search(rf"^class {re.escape(cls)}\b", scene.read_text(), re.M):
                found.append(f"{m.id}: {file} has no class {cls}")
    return found


def copy_tree(root: Path, dest: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory).resolve() == root.resolve()
        return {n for n in names if n in SKIP_ANYWHERE or n.endswith(".egg-info") or (top and n in SKIP_TOP)}

    shutil.copytree(root, dest, ignore=ignore, symlinks=True)


@dataclass
class Result:
    mutation: Mutation
    outcome: str  # caught, missed, invalid, skipped
    detail: str
    seconds: float
    tail: str = ""


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)
    return env


def imported_from(copy: Path) -> str:
    """Where the copy's environment imports mpk_runtime's csrc and pytest_mpk from (both must be in the copy)."""
    code = "import mpk_runtime.resources as r, pytest_mpk; print(r.CSRC); print(pytest_mpk.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=_env(copy), capture_output=True, text=True, check=True)
    csrc, plugin = out.stdout.split()
    for p in (csrc, plugin):
        if not Path(p).resolve().is_relative_to(copy.resolve()):
            raise RuntimeError(f"the copy's environment imports {p}, outside the copy {copy}: the mutation would not be tested")
    return csrc


# "FAILED [emulated (CUDA bodies on the CPU)] tests/...::Case[sm90] - message" (the backend tag is the plugin's)
FAILED = re.compile(r"^(FAILED|ERROR) (?:\[[^\]]*\] )?(\S+)(?: - (.*))?$", re.M)
# pytest-xdist turns --maxfail into an interruption: exit code 2 after a failing case.
STOPPED = "stopping after 1 failures"


def first_failure(output: str) -> str:
    """The first failing case and the first line of its report (the line under its "____ case ____"
    header in the FAILURES section, else pytest's first "E   ..." line)."""
    m = next((f for f in FAILED.finditer(output) if f.group(1) == "FAILED"), None) or FAILED.search(output)
    if not m:
        return ""
    case = m.group(2).split("/")[-1]
    reason = (m.group(3) or "").strip()
    section = re.search(r"^={3,} FAILURES ={3,}\n_{3,} .+? _{3,}\n(.*?)(?:^_{3,} |^-{3,} |^={3,} )", output, re.M | re.S)
    if not reason and section:
        lines = [ln.strip() for ln in section.group(1).splitlines()]
        reason = next((ln for ln in lines if ln and not ln.startswith("[gw")), "")
    if not reason:
        e = re.search(r"^E +(\S.*)$", output, re.M)
        reason = e.group(1).strip() if e else ""
    return f"{case}: {reason}"[:240]


def classify(rc: int, output: str) -> tuple[str, str]:
    failed = [m for m in FAILED.finditer(output) if m.group(1) == "FAILED"]
    if rc in (1, 2) and "BuildError" in output:
        return "invalid", "the patched code does not build: " + first_failure(output)
    if failed and (rc == 1 or (rc == 2 and STOPPED in output)):
        return "caught", first_failure(output)
    if rc == 0:
        return "missed", "every selected case passed"
    if rc == 1:
        return "invalid", "exit 1 without a failing case (errors only): " + first_failure(output)
    return "invalid", f"pytest exit code {rc}"


def run_one(
    m: Mutation,
    backend: str,
    workers: str,
    timeout: float,
    verbose_check: bool,
    logs: Path | None,
    extra: list[str],
    patch: bool = True,
) -> Result:
    """The scenes of m against a patched copy (patch=False: the unpatched copy, for a baseline)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mpk-bug-{m.id}-") as tmp:
        copy = Path(tmp) / "repo"
        copy_tree(ROOT, copy)
        if patch:
            apply(m, copy / "csrc")
        csrc = imported_from(copy)
        if verbose_check:
            print(f"[{m.id}] the copy's environment imports csrc from {csrc}", flush=True)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "mpk",
            *m.selection,
            "-p",
            "no:cacheprovider",
            "-q",
            "--maxfail=1",
            "-n",
            workers,
            "--mpk-backend",
            backend,
            *extra,
        ]
        try:
            proc = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return Result(m, "invalid", f"timed out after {timeout:g} s", time.monotonic() - start, out[-3000:])
        output = proc.stdout + proc.stderr
        if logs:
            (logs / f"{m.id}.log").write_text(f"$ {' '.join(cmd)}\n# rc {proc.returncode}\n{output}")
        outcome, detail = classify(proc.returncode, output)
        return Result(m, outcome, detail, time.monotonic() - start, output[-3000:] if outcome == "invalid" else "")


def table(results: list[Result]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| id | kind | description | caught? | first failure / reason | s |", "|---|---|---|---|---|---|"]
    for r in results:
        m = r.mutation
        lines.append(f"| {m.id} | {m.kind} | {cell(m.description)} | {r.outcome} | {cell(r.detail)} | {r.seconds:.0f} |")
    valid = [r for r in results if r.outcome in ("caught", "missed")]
    caught = sum(r.outcome == "caught" for r in valid)
    pct = 100.0 * caught / len(valid) if valid else 0.0
    lines += ["", f"caught {caught} of {len(valid)} valid mutations ({pct:.0f}%)"]
    return "\n".join(lines) + "\n"


def gpu_visible() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("gpu", "emulate"), help="Where the scenes run (default: gpu when a GPU is visible)")
    parser.add_argument("--jobs", type=int, default=1, metavar="K", help="Mutations run in parallel")
    parser.add_argument("-n", dest="workers", default="0", metavar="N", help="pytest-xdist workers per mutation (0: none)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="Run only these mutations, in this order")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="S", help="Seconds per mutation")
    parser.add_argument("--out", type=Path, metavar="FILE", help="Write the markdown table here")
    parser.add_argument(
        "--pytest-arg",
        dest="extra",
        action="append",
        default=[],
        metavar="ARG",
        help="One more pytest argument for every mutation (repeatable), e.g. --pytest-arg=--mpk-emulate-check",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="First run each selection unpatched; mutations whose unpatched scenes fail are invalid",
    )
    parser.add_argument("--logs", type=Path, metavar="DIR", help="Keep each mutation's pytest output here")
    parser.add_argument("--list", action="store_true", help="List the mutations and exit")
    args = parser.parse_args(argv)

    bad = problems(MUTATIONS)
    if bad:
        print("the mutation list does not fit the current csrc:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 2
    chosen = MUTATIONS
    if args.only:
        unknown = set(args.only) - {m.id for m in MUTATIONS}
        if unknown:
            print(f"unknown mutation ids: {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
            return 2
        by_id = {m.id: m for m in MUTATIONS}
        chosen = [by_id[i] for i in dict.fromkeys(args.only)]  # run in the order given
    if args.list:
        for m in chosen:
            where = f"csrc/{m.file}" + ("  (gpu only)" if m.gpu_only else "")
            print(f"{m.id:36} {m.kind:20} {where}\n    {m.description}\n    {' '.join(m.selection)}")
        return 0
    backend = args.backend or ("gpu" if gpu_visible() else "emulate")
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)

    results: dict[str, Result] = {}
    todo = []
    for m in chosen:
        if m.gpu_only and backend == "emulate":
            results[m.id] = Result(m, "skipped", f"gpu only: the emulator does not run csrc/{m.file}", 0.0)
        else:
            todo.append(m)
    run = (backend, args.workers, args.timeout)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        if args.baseline:
            selections = list(dict.fromkeys(m.selection for m in todo))
            nulls = [Mutation(f"baseline-{i}", "baseline", "unpatched", "", "", "", sel) for i, sel in enumerate(selections)]
            print(f"baseline: {len(nulls)} selections unpatched", flush=True)
            futures = [pool.submit(run_one, n, *run, False, args.logs, args.extra, False) for n in nulls]
            failing = {}
            for n, f in zip(nulls, futures):
                r = f.result()
                if r.outcome != "missed":  # the unpatched scenes did not simply pass
                    failing[n.selection] = f"the unpatched scenes do not pass ({r.outcome}: {r.detail})"
                    print(f"baseline {' '.join(n.selection)}: {failing[n.selection]}", flush=True)
            for m in [m for m in todo if m.selection in failing]:
                results[m.id] = Result(m, "invalid", failing[m.selection], 0.0)
                todo.remove(m)
        print(f"{len(todo)} mutations on backend {backend}, {args.jobs} at a time; {len(results)} not run", flush=True)
        futures = {pool.submit(run_one, m, *run, i == 0, args.logs, args.extra): m for i, m in enumerate(todo)}
        for f in as_completed(futures):
            m = futures[f]
            try:
                r = f.result()
            except Exception as e:  # a broken copy or import check: report it, keep going
                r = Result(m, "invalid", f"{type(e).__name__}: {e}", 0.0)
            results[m.id] = r
            print(f"{r.outcome:8} {m.id} ({r.seconds:.0f} s) {r.detail}", flush=True)
            if r.outcome == "invalid" and r.tail:
                print("    " + "\n    ".join(r.tail.strip().splitlines()[-25:]), flush=True)

    text = table([results[m.id] for m in chosen])
    print("\n" + text)
    if args.out:
        extra = f" (pytest {' '.join(args.extra)})" if args.extra else ""
        args.out.write_text(f"Backend: {backend}{extra}\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
