"""nvcc: finding it, the flags of a target arch (from the arch table), the csrc headers a source
includes, and one compile.

Two kinds of build: the full one, a shared library holding the kernel and its host side
(csrc/runtime/host.cuh) that the GPU runner loads; and a device-only one (``-cubin``: cicc and ptxas
only) for kernels that never run on a GPU (emulated, compile-only), which still checks that every
task body compiles and assembles for the target arch. A cubin that never runs needs no fast code:
it is built with light NVVM optimization and none in ptxas (``-Xcicc -O1 -Xptxas -O0``). Over the
175 cubins of a cold default suite (each build timed, two at a time on the 2-core machine) that
took 245 s where ``-G`` took 339 s: ``-G``'s unoptimized PTX is several times larger, and ptxas
spent most of a build on it (11.0 of 12.7 s for the largest, the tiny model: 5.2 s now). The
optimized build takes longer still. The cubins are a quarter of the size on disk. And it holds
only what depends on the graph (``MPK_DEVICE_ONLY``, runtime/persistent_kernel.cuh): the workers
with the task bodies, in one instantiation, not the two a launch needs (2.8 s where two took 4.8 s
for the tiny model, 0.7 s where 0.9 s for a lone silu_mul); the scheduler, the same in every
module, is compiled once per arch and cache instead (cache.py, ``scheduler-check``). What is left
of a small module's build is mostly nvcc's own (the CUDA headers, preprocessed and parsed), so a
cold run builds its cubins several modules to one nvcc run (cubin_batch.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from .. import archs, resources
from ..errors import BuildError, ConfigError

SHARED_FLAGS = ["-shared", "-Xcompiler", "-fPIC"]
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def nvcc() -> str:
    path = shutil.which("nvcc") or next(
        (str(p) for p in (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc",) if p.exists()), None
    )
    if path is None:
        raise BuildError("nvcc not found on PATH or in $CUDA_HOME/bin; install the CUDA toolkit (13.0) or set CUDA_HOME")
    return path


@cache
def nvcc_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def flags_for(arch: str, python_extension: bool = False, device_only: bool = False) -> list[str]:
    """nvcc flags for ``arch``: a shared library, or with ``device_only`` a cubin. A Python extension
    (the pybind11 task-body modules) also gets the pybind11 and Python headers, whose paths (and so
    the Python version) enter the cache key."""
    if arch not in archs.ARCHS:
        raise ConfigError(f"arch {arch!r} is not a build target; use one of {', '.join(archs.NAMES)}")
    extra: list[str] = []
    if python_extension:
        import sysconfig

        import pybind11

        extra = [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", "-Xcompiler", "-fvisibility=hidden"]
    target = archs.ARCHS[arch]
    # A shared library's flags keep their order, and so existing entries their cache keys. Its line
    # table is for compute-sanitizer and the profiler; a cubin never runs, so it goes without, and
    # without fast code (see the module docstring for what each choice costs).
    if device_only:
        light = ["-Xcicc", "-O1", "-Xptxas", "-O0", "-DMPK_DEVICE_ONLY"]
        return ["-std=c++17", "-O3", "-cubin", *light, f"-I{resources.CSRC}", *target.cubin_flags, *extra]
    return ["-std=c++17", "-O3", *SHARED_FLAGS, "-lineinfo", f"-I{resources.CSRC}", *target.nvcc_flags, *extra]


def included_headers(source: str) -> list[Path]:
    """Every header ``source`` includes, transitively, found as nvcc finds a quoted include: next to
    the file that includes it, else under csrc (the generated source's includes: under csrc). So a
    task header's own helper beside it is hashed too, and an edit of it rebuilds the module.
    csrc/emulation/ is left out: runtime/persistent_kernel.cuh includes it only for a host build
    (MPK_HOST_EMULATION, build/host.py), so an edit there rebuilds no nvcc module."""
    return resolve_includes(source, [resources.CSRC], skip=("emulation/",))


def resolve_includes(text: str, dirs: list[Path], skip: tuple[str, ...] = ()) -> list[Path]:
    """The quoted includes of ``text``, transitively: each looked for in the including file's
    directory first (as the compilers do; not for ``text`` itself, a generated source), then in
    ``dirs`` (first match wins). Names starting with a ``skip`` prefix under ``dirs`` are left out."""
    seen: dict[Path, None] = {}
    todo: list[tuple[str, Path | None]] = [(name, None) for name in _INCLUDE.findall(text)]
    while todo:
        name, beside = todo.pop()
        local = beside / name if beside is not None else None
        if local is not None and local.is_file():
            path: Path | None = local
        elif name.startswith(skip) and skip:
            continue
        else:
            path = next((d / name for d in dirs if (d / name).is_file()), None)
        if path is None or path.resolve() in seen:
            continue
        path = path.resolve()
        seen[path] = None
        todo.extend((n, path.parent) for n in _INCLUDE.findall(path.read_text()))
    return sorted(seen)


def compile_to(source_path: Path, out: Path, arch: str, python_extension: bool = False, device_only: bool = False) -> None:
    """Run nvcc on ``source_path`` into ``out``; BuildError with the compiler's output on failure."""
    cmd = [nvcc(), *flags_for(arch, python_extension, device_only), "-o", str(out), str(source_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(
            f"nvcc failed ({proc.returncode}) building {source_path} for {arch}:\n{proc.stderr.strip() or proc.stdout.strip()}"
            f"\ncommand: {' '.join(cmd)}"
        )
