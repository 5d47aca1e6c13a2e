"""The content-addressed build cache: a generated source is built once, by one process, and found
again by every later one.

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
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from .. import resources
from ..contract import ABI_VERSION
from .nvcc import compile_to, flags_for, included_headers, nvcc, nvcc_version

MODULE = "module.so"
SOURCE = "source.cu"
RECORD = "build.json"


@dataclass(frozen=True)
class BuildResult:
    path: Path  # the module
    entry: Path  # its cache directory
    key: str
    cached: bool  # True: loaded from the cache; False: built by this call
    seconds: float


def cache_key(source: str, arch: str, python_extension: bool = False) -> str:
    nv = nvcc()
    h = hashlib.sha256()
    # The headers' contents are hashed below; their location is not, so clones share entries.
    flags = " ".join(flags_for(arch, python_extension)).replace(str(resources.CSRC), "<csrc>")
    for part in (f"abi={ABI_VERSION}", f"arch={arch}", f"nvcc={nvcc_version(nv)}", flags, source):
        h.update(part.encode())
        h.update(b"\0")
    for header in included_headers(source):
        h.update(str(header.relative_to(resources.CSRC)).encode())
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


def entry_is_valid(entry: Path, filename: str = MODULE) -> bool:
    try:
        record = json.loads((entry / RECORD).read_text())
        return record["module_sha256"] == _sha256(entry / filename)
    except (OSError, ValueError, KeyError):
        return False


def publish(entry: Path, filename: str, record: dict, make: Callable[[Path], None]) -> bool:
    """Make sure ``entry`` holds a valid ``filename``: under the entry's lock, re-checked, build it
    with ``make(tmp)`` into a temporary directory, record its hash in ``record`` and rename the
    directory into place. Returns True when another process had built it (nothing was built here).
    Every kind of cache entry (nvcc modules, host-emulation modules and archives) goes through here."""
    with FileLock(str(entry) + ".lock"):
        if entry_is_valid(entry, filename):  # another process built it while we waited
            return True
        if entry.exists():
            shutil.rmtree(entry)  # damaged: a half-deleted entry or a module that no longer matches its record
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
        try:
            make(tmp)
            (tmp / RECORD).write_text(json.dumps({**record, "module_sha256": _sha256(tmp / filename)}, indent=1))
            os.rename(tmp, entry)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return False


def build_module(source: str, arch: str, name: str, python_extension: bool = False) -> BuildResult:
    """The module for ``source`` on ``arch``: from the cache, or built once and published there."""
    start = time.perf_counter()
    key = cache_key(source, arch, python_extension)
    name = re.sub(r"[^A-Za-z0-9_+.-]", "", name).lstrip(".")[:80] or "module"  # stays inside the cache
    modules = cache_root() / "modules"
    entry = modules / f"{name}-{arch}-{key[:16]}"
    if entry_is_valid(entry):
        return BuildResult(entry / MODULE, entry, key, True, time.perf_counter() - start)

    def make(tmp: Path) -> None:
        (tmp / SOURCE).write_text(source)
        compile_to(tmp / SOURCE, tmp / MODULE, arch, python_extension)

    record = {
        "key": key,
        "arch": arch,
        "name": name,
        "nvcc": nvcc_version(nvcc()),
        "flags": flags_for(arch, python_extension),
        "built_by_pid": os.getpid(),
        "built_at": time.time(),
    }
    cached = publish(entry, MODULE, record, make)
    return BuildResult(entry / MODULE, entry, key, cached, time.perf_counter() - start)
