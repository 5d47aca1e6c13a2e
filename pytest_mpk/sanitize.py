"""--mpk-sanitize TOOL: a GPU case reruns in a subprocess under NVIDIA's compute-sanitizer, and its
findings, mapped back to the tasks of the case's graph, fail the case.

The child is the case's own repro command with ``--mpk-backend gpu``, run as
``compute-sanitizer --tool TOOL ... python -m pytest ...``, with PyTorch's caching allocator off
(``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: every tensor its own cudaMalloc, so that memcheck sees the
end of each) and the watchdog's timeout raised (sanitized kernels run 10 to 100 times slower). Every
nvcc build has ``-lineinfo`` (mpk_runtime/build/nvcc.py), so findings carry csrc file:line. The
child keeps its artifacts, and writes the attached tensors' device addresses (``ADDRESSES``), which
map an address in a finding to a tensor, an element and the task whose slice holds it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mpk_runtime.harness import WATCHDOG_MAX_S

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
CHILD = "MPK_SANITIZE_CHILD"  # set in the child: it runs the case itself
ADDRESSES = "mpk_addresses.json"  # in the child's artifacts directory: name -> [address, bytes]
ERROR_EXIT = 86  # compute-sanitizer's exit status when it found something
SLOWDOWN = 50  # the watchdog's timeout in the child, in multiples of the session's
_PREFIX = "========= "
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "Target application", "LEAK SUMMARY")
_SOURCE = re.compile(r"((?<![\w/.-])[\w/.-]*\w\.(?:cuh|cu|h)):(\d+)")  # absolute or not
_ADDRESS = re.compile(r"\b(?:Address|address) (0x[0-9a-fA-F]+)")
_BLOCK = re.compile(r"block \((\d+),\s*(\d+),\s*(\d+)\)")


def find_tool() -> str | None:
    """compute-sanitizer on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        path = Path(root or "/nonexistent", "bin", "compute-sanitizer")
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def check_usable(tool: str | None, gpus: list[str]) -> str:
    """The sanitizer's path; pytest.UsageError when it cannot run here."""
    path = find_tool()
    if path is None:
        raise pytest.UsageError(
            f"--mpk-sanitize {tool}: compute-sanitizer not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin; "
            f"install the CUDA toolkit or put its bin directory on PATH"
        )
    if not gpus:
        raise pytest.UsageError(
            f"--mpk-sanitize {tool}: no GPU is visible (CUDA_VISIBLE_DEVICES / nvidia-smi); compute-sanitizer checks "
            f"kernels on a GPU, and emulated cases have --mpk-emulate-check instead"
        )
    return path


@dataclass
class Finding:
    headline: str
    details: list[str] = field(default_factory=list)


def parse(output: str) -> list[Finding]:
    """The findings in compute-sanitizer's output: a headline at the prefix's indent, its details
    indented further; banners, summaries and host backtraces left out."""
    findings: list[Finding] = []
    current: Finding | None = None
    for line in output.splitlines():
        if not line.startswith(_PREFIX.rstrip()):
            continue
        body = line[len(_PREFIX) :] if line.startswith(_PREFIX) else ""
        if not body.strip():
            current = None
        elif body.startswith(" "):
            if current is not None and "Host Frame" not in body and "Saved host backtrace" not in body:
                current.details.append(body.strip())
        elif body.startswith(_NOT_FINDINGS) or body.startswith("Program hit"):
            current = None
        else:
            current = Finding(body.strip())
            findings.append(current)
    return findings


def explain(finding: Finding, graph: dict[str, Any] | None, addresses: dict[str, list[int]], csrc: str) -> str:
    """One finding as report lines: what, where in the source, which block and tasks, which tensor."""
    lines = [finding.headline]
    text = "\n".join([finding.headline, *finding.details])
    sources = dict.fromkeys(_SOURCE.findall(text))
    for path, line in sources:
        lines.append(f"  at {_short(path, csrc)}:{line}{_tasks_of_source(path, graph)}")
    if not sources:  # a location without a file:line we recognise: show the tool's own words
        lines += [f"  {d}" for d in finding.details if d.startswith("at ")][:2]
    block = _BLOCK.search(text)
    if block and graph is not None:
        lines.append(f"  {_worker(int(block.group(1)), graph)}")
    for address in dict.fromkeys(_ADDRESS.findall(text)):
        lines.append(f"  {address}: {_tensor_at(int(address, 16), addresses)}")
    if len(lines) == 1:
        lines += [f"  {d}" for d in finding.details[:4]]
    return "\n".join(lines)


def _short(path: str, csrc: str) -> str:
    return "csrc/" + path[len(csrc) :].lstrip("/") if csrc and path.startswith(csrc) else path


def _tasks_of_source(path: str, graph: dict[str, Any] | None) -> str:
    """The layers whose task body is the header at ``path`` (csrc/tasks/<arch>/<task>.cuh)."""
    if graph is None or "/tasks/" not in path:
        return ""
    stem = Path(path).stem
    layers = [layer["name"] for layer in graph["layers"] if layer["task"] == stem]
    return f" (the body of task {stem}: layers {', '.join(layers)})" if layers else ""


def _worker(block: int, graph: dict[str, Any]) -> str:
    queues = graph["schedule"]["queues"]
    if block >= len(queues):
        return f"block {block}: not a worker (a scheduler block of the runtime)"
    tasks = {t["id"]: t for t in graph["tasks"]}
    ran = [f"{tasks[i]['label']} (task {i})" for i in queues[block] if i in tasks]
    shown = ", ".join(ran[:6]) + (f" and {len(ran) - 6} more" if len(ran) > 6 else "")
    return f"block {block} is worker {block}, which runs {shown or 'no task'}"


def _tensor_at(address: int, addresses: dict[str, list[int]]) -> str:
    for name, (start, nbytes) in addresses.items():
        if start <= address < start + nbytes:
            return f"byte {address - start} of tensor {name!r}"
    near = min(addresses.items(), key=lambda kv: min(abs(address - kv[1][0]), abs(address - kv[1][0] - kv[1][1])), default=None)
    if near is None:
        return "not in any attached tensor"
    offset, nbytes = address - near[1][0], near[1][1]
    side = "past its end" if offset >= nbytes else "before its start"
    return f"not in any attached tensor; offset {offset} from tensor {near[0]!r} of {nbytes} bytes: {side}"


def child_command(tool_path: str, tool: str, repro: str, hang_timeout: float) -> list[str]:
    """The sanitizer's command line for a case whose repro line is ``repro``."""
    args = shlex.split(repro)[1:]  # drop "pytest"
    return [
        tool_path,
        "--tool",
        tool,
        "--error-exitcode",
        str(ERROR_EXIT),
        "--print-limit",
        "50",
        sys.executable,
        "-m",
        "pytest",
        *args,
        "--mpk-backend",
        "gpu",
        "--mpk-no-warp-jitter",  # the tools see races and barriers directly; the sleeps only slow them
        "--mpk-keep-artifacts",
        "--mpk-hang-timeout",
        str(min(hang_timeout * SLOWDOWN, WATCHDOG_MAX_S)),  # the watchdog's limit
        "-p",
        "no:cacheprovider",
        "-n",  # one process: the sanitizer watches its child, not xdist's workers (and "-p no:xdist"
        "0",  # would leave a project's addopts "-n auto" unparsable)
        "-q",
    ]


def run(tool_path: str, tool: str, repro: str, hang_timeout: float, artifacts: Path, cwd: Path) -> None:
    """Run the case under the sanitizer; pytest.fail with its findings (and the child's own failure)."""
    env = {**os.environ, CHILD: tool, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    cmd = child_command(tool_path, tool, repro, hang_timeout)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    output = proc.stdout + proc.stderr
    raw = artifacts / f"compute-sanitizer-{tool}.log"  # the tool's own words, whatever the parse makes of them
    artifacts.mkdir(parents=True, exist_ok=True)
    raw.write_text(output)
    graph_path, addresses_path = artifacts / "task_graph_rank0.json", artifacts / ADDRESSES
    graph = json.loads(graph_path.read_text()) if graph_path.is_file() else None
    addresses = json.loads(addresses_path.read_text()) if addresses_path.is_file() else {}
    findings = parse(output)
    if findings:
        from mpk_runtime.harness import CSRC

        csrc = str(CSRC.resolve())
        shown = "\n".join(explain(f, graph, addresses, csrc) for f in findings)
        pytest.fail(
            f"compute-sanitizer {tool}: {len(findings)} finding(s)\n{shown}\nartifacts: {artifacts} (the tool's output: "
            f"{raw.name})\ncommand: {shlex.join(cmd)}",
            pytrace=False,
        )
    if proc.returncode not in (0, ERROR_EXIT):
        tail = "\n".join(output.strip().splitlines()[-30:])
        pytest.fail(f"under compute-sanitizer {tool} the case failed (exit {proc.returncode}):\n{tail}", pytrace=False)


def initcheck_child() -> bool:
    """This process is initcheck's child: device memory that no task writes must stay unwritten
    (no poison), so that the tool sees a read of it."""
    return os.environ.get(CHILD) == "initcheck"


def record_addresses(directory: Path, tensors: dict[str, Any]) -> None:
    """In a sanitizer's child: the attached tensors' device addresses, for ``explain``."""
    if os.environ.get(CHILD):
        spans = {n: [t.data_ptr(), t.numel() * t.element_size()] for n, t in tensors.items()}
        (directory / ADDRESSES).write_text(json.dumps(spans))
