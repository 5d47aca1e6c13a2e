"""Building a generated translation unit with nvcc, through a content-addressed cache.

Key: sha256 of the generated source, the content of every csrc header it includes (transitively),
the nvcc version, the arch, the flags and the ABI version. Entries live in ``$MPK_CACHE_DIR`` (else
``$XDG_CACHE_HOME/mpk``, else ``~/.cache/mpk``) under readable names (``rmsnorm_bf16_16_4096-<hash>``).
A file lock per key with a re-check after acquiring it means that many processes asking for one key
build it once; builds happen in a temporary directory published by an atomic rename; an entry whose
recorded hash no longer matches its module is detected, removed and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from filelock import FileLock

from .abi import ABI_VERSION
from .errors import BuildError, ConfigError

CSRC = Path(__file__).resolve().parents[1] / "csrc"
COMMON_FLAGS = ["-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"]
ARCH_FLAGS = {
    # PTX + SASS for compute_80: Ampere-path kernels also run on newer GPUs through the PTX JIT.
    "sm80": ["-gencode=arch=compute_80,code=[compute_80,sm_80]", "-DMPK_TARGET_SM=80", "-DMPK_WORKER_THREADS=128"],
    "sm90": ["-gencode=arch=compute_90a,code=sm_90a", "-DMPK_TARGET_SM=90", "-DMPK_WORKER_THREADS=256"],
    "sm100": ["-gencode=arch=compute_100a,code=sm_100a", "-DMPK_TARGET_SM=100", "-DMPK_WORKER_THREADS=256"],
}
MODULE = "module.so"
SOURCE = "source.cu"
RECORD = "build.json"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


@dataclass(frozen=True)
class BuildResult:
    path: Path  # the module
    entry: Path  # its cache directory
    key: str
    cached: bool  # True: loaded from the cache; False: built by this call
    seconds: float


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


def flags_for(arch: str, python_extension: bool = False) -> list[str]:
    """nvcc flags for ``arch``; a Python extension (the pybind11 task-body modules) also gets the
    pybind11 and Python headers, whose paths (and so the Python version) enter the cache key."""
    if arch not in ARCH_FLAGS:
        raise ConfigError(f"arch {arch!r} is not a build target; use one of {', '.join(ARCH_FLAGS)}")
    extra: list[str] = []
    if python_extension:
        import sysconfig

        import pybind11

        extra = [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", "-Xcompiler", "-fvisibility=hidden"]
    return COMMON_FLAGS + [f"-I{CSRC}"] + ARCH_FLAGS[arch] + extra


def included_headers(source: str) -> list[Path]:
    """Every csrc header ``source`` includes, transitively (quoted includes resolve under csrc)."""
    seen: dict[Path, None] = {}
    todo = list(_INCLUDE.findall(source))
    while todo:
        path = (CSRC / todo.pop()).resolve()
        if path in seen or not path.is_file():
            continue
        seen[path] = None
        todo.extend(_INCLUDE.findall(path.read_text()))
    return sorted(seen)


def cache_key(source: str, arch: str, python_extension: bool = False) -> str:
    nv = nvcc()
    h = hashlib.sha256()
    # The headers' contents are hashed below; their location is not, so clones share entries.
    flags = " ".join(flags_for(arch, python_extension)).replace(str(CSRC), "<csrc>")
    for part in (f"abi={ABI_VERSION}", f"arch={arch}", f"nvcc={nvcc_version(nv)}", flags, source):
        h.update(part.encode())
        h.update(b"\0")
    for header in included_headers(source):
        h.update(str(header.relative_to(CSRC)).encode())
        h.update(header.read_bytes())
    return h.hexdigest()


def cache_root() -> Path:
    root = os.environ.get("MPK_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpk"
    (path / "modules").mkdir(parents=True, exist_ok=True)
    tag = path / "CACHEDIR.TAG"
    if not tag.exists():
        tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# pytest-mpk build cache: safe to delete.\n")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry_is_valid(entry: Path) -> bool:
    try:
        record = json.loads((entry / RECORD).read_text())
        return record["module_sha256"] == _sha256(entry / MODULE)
    except (OSError, ValueError, KeyError):
        return False


def compile_to(source_path: Path, out: Path, arch: str, python_extension: bool = False) -> None:
    """Run nvcc on ``source_path`` into ``out``; BuildError with the compiler's output on failure."""
    cmd = [nvcc(), *flags_for(arch, python_extension), "-o", str(out), str(source_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(
            f"nvcc failed ({proc.returncode}) building {source_path} for {arch}:\n{proc.stderr.strip() or proc.stdout.strip()}"
            f"\ncommand: {' '.join(cmd)}"
        )


def build_module(source: str, arch: str, name: str, python_extension: bool = False) -> BuildResult:
    """The module for ``source`` on ``arch``: from the cache, or built once and published there."""
    start = time.perf_counter()
    key = cache_key(source, arch, python_extension)
    name = re.sub(r"[^A-Za-z0-9_+.-]", "", name).lstrip(".")[:80] or "module"  # stays inside the cache
    modules = cache_root() / "modules"
    entry = modules / f"{name}-{arch}-{key[:16]}"
    if entry_is_valid(entry):
        return BuildResult(entry / MODULE, entry, key, True, time.perf_counter() - start)
    with FileLock(str(entry) + ".lock"):
        if entry_is_valid(entry):  # another process built it while we waited
            return BuildResult(entry / MODULE, entry, key, True, time.perf_counter() - start)
        if entry.exists():
            shutil.rmtree(entry)  # damaged: a half-deleted entry or a module that no longer matches its record
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=modules))
        try:
            (tmp / SOURCE).write_text(source)
            compile_to(tmp / SOURCE, tmp / MODULE, arch, python_extension)
            record = {"key": key, "arch": arch, "name": name, "nvcc": nvcc_version(nvcc()),
                      "flags": flags_for(arch, python_extension),
                      "module_sha256": _sha256(tmp / MODULE), "built_by_pid": os.getpid(), "built_at": time.time()}
            (tmp / RECORD).write_text(json.dumps(record, indent=1))
            os.rename(tmp, entry)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return BuildResult(entry / MODULE, entry, key, False, time.perf_counter() - start)


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it (keeps timestamps, and editors, calm)."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True
