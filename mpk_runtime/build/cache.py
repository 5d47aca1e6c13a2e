"""The content-addressed build cache: a generated source is built once, by one process, and found
again by every later one.

Key: sha256 of the generated source, the content of every csrc header it includes (transitively),
the nvcc version, the arch, the flags and the ABI version. Entries live in ``$MPK_CACHE_DIR`` (else
``$XDG_CACHE_HOME/mpk``, else ``~/.cache/mpk``; an empty variable counts as unset) under readable
names (``rmsnorm_bf16_16_4096-sm90-<hash>``, holding ``module.so``; a device-only build
``rmsnorm_bf16_16_4096-sm90-cubin-<hash>``, holding ``module.cubin``).

- One build per key: a lock per key (lock.py) with a re-check after acquiring it; waiting is
  bounded, and a stopped or too slow holder is built around (lock.py says why that is safe).
- Atomic publication: a build happens in a temporary directory named for its process and is
  published by one rename; leftovers of killed builds are removed by the next process that uses
  the cache, never a live process's.
- Healing: an entry that is damaged in any way it can be detected (cache_fs.entry_problem: a
  record that is not an object or lacks a field, a module whose hash does not match, a file or a
  dangling link in its place, ...) is set aside and rebuilt, with one line saying so, also in
  ``BuildResult.note``.
- Sharing: entries get the modes the umask allows (README: "A shared build cache"); every file
  system error is a BuildError naming the path and the fix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import resources
from ..contract import ABI_VERSION
from ..errors import BuildError
from . import cache_fs
from .cache_fs import CUBIN, MODULE, RECORD, SOURCE, entry_problem, fs_error, fs_errors
from .lock import build_lock, lock_timeout
from .nvcc import compile_to, flags_for, included_headers, nvcc, nvcc_version

log = logging.getLogger("mpk_runtime.build")
_cleaned: set[Path] = set()  # cache roots whose leftovers this process has removed
_scheduler_checked: set[tuple[Path, str]] = set()  # (cache root, arch): scheduler checks built or found
SCHEDULER_CHECK = resources.CSRC / "runtime" / "scheduler_check.cu"


@dataclass(frozen=True)
class BuildResult:
    path: Path  # the module (a cubin for a device-only build)
    entry: Path  # its cache directory
    key: str
    cached: bool  # True: loaded from the cache; False: built by this call
    seconds: float
    note: str | None = None  # one line when the build was not an ordinary one (a damaged entry rebuilt, ...)


def cache_key(source: str, arch: str, python_extension: bool = False, device_only: bool = False) -> str:
    nv = nvcc()
    h = hashlib.sha256()
    # The headers' contents are hashed below; their location is not, so clones share entries.
    flags = " ".join(flags_for(arch, python_extension, device_only)).replace(str(resources.CSRC), "<csrc>")
    for part in (f"abi={ABI_VERSION}", f"arch={arch}", f"nvcc={nvcc_version(nv)}", flags, source):
        h.update(part.encode())
        h.update(b"\0")
    for header in included_headers(source):
        # A test-only task's header may lie outside csrc (included as tasks/../..): named in full.
        inside = header.is_relative_to(resources.CSRC)
        h.update(str(header.relative_to(resources.CSRC) if inside else header).encode())
        h.update(header.read_bytes())
    return h.hexdigest()


def cache_root() -> Path:
    """The cache directory, created if needed; BuildError (the path and the fix) if it cannot be."""
    root = os.environ.get("MPK_CACHE_DIR")
    if root:
        try:
            path = Path(root).expanduser()
        except RuntimeError:  # ~user of no such user, or no home directory
            raise BuildError(f"MPK_CACHE_DIR={root!r}: its ~ names no home directory; set it to a full path") from None
    else:
        try:
            path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpk"
        except RuntimeError:  # no home directory to be found
            raise BuildError("build cache: no home directory and no XDG_CACHE_HOME; set MPK_CACHE_DIR") from None
    path = path.absolute()  # relative to where the process started: the compilers run in another directory
    with fs_errors("create the cache directory", path / "modules"):
        (path / "modules").mkdir(parents=True, exist_ok=True)
    tag = path / "CACHEDIR.TAG"
    if not tag.exists():
        with fs_errors("write", tag):
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# pytest-mpk build cache: safe to delete.\n")
    return path


def entry_is_valid(entry: Path, key: str | None = None, filename: str = MODULE) -> bool:
    """Whether ``entry`` is a sound cache entry (of ``key``; default: the key its name ends with)."""
    key = key if key is not None else _key_of(entry)
    try:
        return entry_problem(entry, key, filename) is None
    except BuildError:
        return False


def build_module(
    source: str,
    arch: str,
    name: str,
    python_extension: bool = False,
    device_only: bool = False,
    source_file: Path | None = None,
) -> BuildResult:
    """The module for ``source`` on ``arch``: from the cache, or built once and published there.
    ``device_only``: the device code alone, a cubin (nvcc.py), for a kernel that never runs on a GPU.
    ``source_file``: where ``source`` is the user's to edit (a replayed test_rank<r>.cu), which a
    build error's file:line references then name; else they name a copy kept under the cache."""
    if device_only:
        check_scheduler(arch)
    key = cache_key(source, arch, python_extension, device_only)
    entry = entry_path(name, arch, key, device_only)
    filename = CUBIN if device_only else MODULE

    def make(tmp: Path) -> None:
        with fs_errors("write the build's files in", tmp):
            (tmp / SOURCE).write_text(source)
        try:
            compile_to(tmp / SOURCE, tmp / filename, arch, python_extension, device_only)
        except BuildError as e:  # its lines name the source in tmp, which goes: name one that stays
            if source_file is not None:
                raise BuildError(str(e).replace(str(tmp / SOURCE), str(source_file))) from None
            raise naming_kept_source(e, tmp / SOURCE, source, entry.name) from None

    return publish(entry, key, filename, nvcc_record(key, arch, name, python_extension, device_only), make)


def nvcc_record(key: str, arch: str, name: str, python_extension: bool = False, device_only: bool = False) -> dict:
    """What an nvcc entry's build.json records besides the module's digest and the build's time."""
    flags = flags_for(arch, python_extension, device_only)
    return {"key": key, "arch": arch, "name": safe_name(name), "nvcc": nvcc_version(nvcc()), "flags": flags}


def safe_name(name: str) -> str:
    """A module name as its cache entry's name begins: readable, and staying inside the cache."""
    return re.sub(r"[^A-Za-z0-9_+.-]", "", name).lstrip(".")[:80] or "module"


def entry_path(name: str, arch: str, key: str, device_only: bool = False) -> Path:
    """Where the module ``name`` of ``key`` lives in the cache."""
    return cache_root() / "modules" / f"{safe_name(name)}-{arch}{'-cubin' if device_only else ''}-{key[:16]}"


def naming_kept_source(error: BuildError, built: Path, source: str, name: str) -> BuildError:
    """``error`` of a compiler that refused ``source`` (built as ``built``, in a build directory that
    is removed), its file:line references pointing at a copy that stays instead:
    ``<cache>/failed/<entry><suffix of built>``; the error as it was if no copy can be written."""
    try:
        failed = cache_root() / "failed"
        failed.mkdir(exist_ok=True)
        kept = failed / f"{name}{built.suffix}"
        kept.write_text(source)
    except (OSError, BuildError):
        return error
    return BuildError(str(error).replace(str(built), str(kept)))


def check_scheduler(arch: str) -> None:
    """A device-only module leaves out the scheduler (runtime/persistent_kernel.cuh), which does not
    depend on the graph: compiled here instead, once per arch and cache (and again when a header it
    includes changes), so that a compile-only or emulated run still proves it builds for the arch."""
    checked = (cache_root(), arch)
    if checked in _scheduler_checked:
        return
    _scheduler_checked.add(checked)  # before the build: build_module comes back here
    try:
        build_module(SCHEDULER_CHECK.read_text(), arch, "scheduler-check", device_only=True)
    except BaseException:
        _scheduler_checked.discard(checked)
        raise


def publish(entry: Path, key: str, filename: str, record: dict, make: Callable[[Path], None]) -> BuildResult:
    """The cache entry ``entry`` of ``key``, holding ``filename``: found sound, or built by
    ``make(tmp)`` into a temporary directory, recorded (``record`` plus the file's sha256) and
    published by one rename, under the entry's lock, healing a damaged entry on the way. Every kind
    of entry (nvcc modules, host-emulation modules and archives) goes through here."""
    start = time.perf_counter()
    modules = entry.parent
    timeout = lock_timeout()  # checked on every use, not only when a build needs the lock
    if entry_problem(entry, key, filename) is None:
        return BuildResult(entry / filename, entry, key, True, time.perf_counter() - start)
    if modules not in _cleaned:
        _cleaned.add(modules)
        cache_fs.clean_leftovers(modules)
    with build_lock(Path(f"{entry}.lock"), timeout, log.warning) as lock:
        problem = entry_problem(entry, key, filename)  # again: another process may have built it while we waited
        if problem is None:
            return BuildResult(entry / filename, entry, key, True, time.perf_counter() - start)
        notes = [] if lock.held else [f"built without the lock: {lock.note}"]
        if problem != "missing":
            notes.insert(0, f"rebuilt {entry.name}: {problem}")
            if lock.held:  # without the lock, the holder may be about to publish: leave the entry to the rename below
                cache_fs.discard(entry, modules)
        note = "; ".join(notes) or None
        if note:
            log.warning("mpk build cache: %s", note)
        cached = build_and_publish(entry, key, filename, record, make)
    return BuildResult(entry / filename, entry, key, cached, time.perf_counter() - start, note)


def build_and_publish(
    entry: Path, key: str, filename: str, record: dict, make: Callable[[Path], None], seconds: float | None = None
) -> bool:
    """Build into a temporary directory and rename it to ``entry``. True when another process
    published a sound entry first (that one is used, ours dropped). ``seconds``: the build's share of
    a compile made for several entries at once (cubin_batch.py), recorded in place of ``make``'s time."""
    modules = entry.parent
    tmp = cache_fs.temp_dir(modules, entry.name)
    try:
        start = time.perf_counter()
        make(tmp)
        # build_seconds: what a cold run spends on this entry, for finding the costly builds
        full = {
            **record,
            "module_sha256": cache_fs.sha256(tmp / filename),
            "built_by_pid": os.getpid(),
            "built_at": time.time(),
            "build_seconds": round(time.perf_counter() - start if seconds is None else seconds, 3),
        }
        with fs_errors("write the build's files in", tmp):
            (tmp / RECORD).write_text(json.dumps(full, indent=1))
        cache_fs.share(tmp)
        return _publish(tmp, entry, key, filename)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, entry: Path, key: str, filename: str) -> bool:
    for _ in range(2):
        try:
            os.rename(tmp, entry)
            return False
        except OSError as e:
            if not os.path.lexists(entry):
                raise fs_error(e, "publish the build as", entry) from None
        problem = entry_problem(entry, key, filename)
        if problem is None:
            return True  # another process published the same key first
        log.warning("mpk build cache: replacing %s, published meanwhile but damaged: %s", entry.name, problem)
        cache_fs.discard(entry, entry.parent)
    raise BuildError(f"build cache: cannot publish {entry}: it keeps reappearing damaged; remove it, or set MPK_CACHE_DIR")


def _key_of(entry: Path) -> str:
    record = entry / RECORD
    try:
        data = json.loads(record.read_text())
        return str(data["key"]) if isinstance(data, dict) else ""
    except (OSError, ValueError, KeyError, RecursionError):
        return ""
