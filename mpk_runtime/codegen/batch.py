"""Several generated dispatchers in one device-only translation unit, so that one nvcc run checks
them all (build/cubin_batch.py).

A device-only build (a cubin that never runs) of a small module spends most of its time on what is
the same in every module: the CUDA headers, nvcc's preprocessing and cicc's parse. Eight modules of
one scene class took 5.0 s as eight builds and 1.1 s as one. The batch source holds each module's
definitions (its opcode enum, shared memory sizes and assertions, name table and ``execute_task``)
in a namespace of its own, then the runtime as a module's source includes it (the worker, and the
assertion that the hungriest module's shared memory fits the arch), then one kernel per module with
its tasks, under the worker's launch bounds and the same flags.

Only sources in the form ``dispatcher.generate`` writes are batched; anything else (an edited
replay, a test's hand-written source) is built alone, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dispatcher import BANNER, JITTER

RUNTIME = '#include "runtime/persistent_kernel.cuh"'
TASK_API = '#include "runtime/task_api.cuh"'
OPEN, CLOSE = "namespace mpk {", "}  // namespace mpk"


@dataclass(frozen=True)
class Dispatcher:
    """What one generated source declares: its task headers, whether it has warp jitter, and the
    text inside its ``namespace mpk``."""

    headers: tuple[str, ...]  # '#include "tasks/..."' lines
    jitter: bool
    body: str


def parse(source: str) -> Dispatcher | None:
    """The parts of a source ``dispatcher.generate`` wrote; None for any other source."""
    lines = source.splitlines()
    if not lines or lines[0] != BANNER or OPEN not in lines or CLOSE not in lines:
        return None
    start, end = lines.index(OPEN), len(lines) - 1 - lines[::-1].index(CLOSE)
    head, tail = lines[:start], lines[end + 1 :]
    if [t for t in tail if t.strip()] != [RUNTIME]:
        return None
    jitter = JITTER in head
    includes = [h for h in head if h.startswith("#include")]
    others = [h for h in head if h.strip() and not h.startswith(("//", "#include")) and h != JITTER]
    if others or not includes or includes[0] != TASK_API or not all(h.startswith('#include "tasks/') for h in includes[1:]):
        return None
    return Dispatcher(tuple(includes[1:]), jitter, "\n".join(lines[start + 1 : end]))


def batch_source(parts: list[Dispatcher], arch: str) -> str:
    """One translation unit checking every dispatcher of ``parts`` (all with the same jitter)."""
    if len({p.jitter for p in parts}) > 1:
        raise ValueError("a batch mixes sources with and without warp jitter: batch them apart")
    headers = sorted({h for p in parts for h in p.headers})
    out = [BANNER, f"// module: batch of {len(parts)}", f"// target: {arch}"]
    if parts and parts[0].jitter:
        out.append(JITTER)
    out += [TASK_API, *headers, ""]
    for i, p in enumerate(parts):
        out += [OPEN, f"namespace module_{i} {{", p.body, f"}}  // namespace module_{i}", CLOSE, ""]
    sizes = ", ".join(f"module_{i}::kDynamicSmemBytes" for i in range(len(parts)))
    out += [
        OPEN,
        "",
        "// The worker's own code, once; the modules' tasks are in kernels of their own below.",
        f"constexpr unsigned kDynamicSmemBytes = max_of({{0u, {sizes}}});",
        "inline char const *task_type_name(int) { return nullptr; }",
        "__device__ __forceinline__ void execute_task(uint32_t, TaskDesc const &, Runtime const &) {}",
        "",
        CLOSE,
        "",
        RUNTIME,
        "",
        OPEN,
        "",
        "// Each module's tasks in a kernel of the worker's launch bounds: one kernel with all of them",
        "// took ptxas twice as long as these.",
    ]
    out += [
        f"__global__ void __launch_bounds__(kWorkerThreads, 1) module_{i}_tasks(TaskDesc const *task, Runtime const *rt) {{\n"
        f"  module_{i}::execute_task(task->variant, *task, *rt);\n}}"
        for i in range(len(parts))
    ]
    out += ["", CLOSE, ""]
    return "\n".join(out)
