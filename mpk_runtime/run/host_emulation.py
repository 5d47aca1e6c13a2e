"""Task bodies built for the host and run on the CPU, one task at a time.

A generated dispatcher (``codegen.generate``) is compiled with g++ against the CUDA shim in
``csrc/emulation/`` instead of nvcc: the same ``.cuh`` task bodies, with each thread block run as
fibers (``csrc/emulation/block_runner.cpp``). ``race_check=True`` builds it with ``-fsanitize=thread``,
whose hooks are our own shadow memory (``csrc/emulation/race_check.cpp``): data races, reads of
shared memory nobody wrote, dynamic shared memory overflows. Divergent barriers and warp collectives
whose masks do not match are found in every build. Reports name the task, the thread and the source
line (``-g``; paths relative to the repository).

Builds go through the content-hash cache of ``build.py`` (``$MPK_CACHE_DIR/modules``): the runner's
own objects once per cache, each generated source once per key.
"""

from __future__ import annotations

import ctypes as C
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from filelock import FileLock

from .. import archs, contract, resources
from ..build import cache as build
from ..codegen import abi
from ..errors import BuildError, ConfigError

EMULATION = resources.CSRC / "emulation"
REPO = resources.CSRC.parent
RUNTIME_SOURCES = ("block_runner.cpp", "race_check.cpp")
ARCHIVE = "runtime.a"
# Until runtime/persistent_kernel.cuh switches on MPK_HOST_EMULATION itself, the host build swaps it.
KERNEL_INCLUDE = '#include "runtime/persistent_kernel.cuh"'
HOST_ENTRY = '#include "emulation/entry.h"'
ORDERS = {"in_order": 0, "reversed": 1, "shuffled": 2}
STATUS = {0: "ok", 1: "task_error", 2: "detected", 3: "invalid"}
RACE_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "-Wno-tsan"]
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


@cache
def cxx() -> str:
    path = os.environ.get("CXX") or shutil.which("g++")
    if not path:
        raise BuildError("no host C++ compiler: install g++ or set $CXX")
    return path


@cache
def cxx_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0] if out else "unknown"


@cache
def cuda_include() -> Path:
    """The CUDA toolkit's include directory: its cuda_bf16.h / cuda_fp16.h give the host-side types."""
    home = os.environ.get("CUDA_HOME")
    candidates = [Path(home) / "include"] if home else []
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parents[1] / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for path in candidates:
        if (path / "cuda_bf16.h").is_file():
            return path
    raise BuildError(f"cuda_bf16.h not found in {', '.join(map(str, candidates))}; install the CUDA toolkit or set CUDA_HOME")


@cache
def _cuda_version() -> str:
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", (cuda_include() / "cuda.h").read_text(errors="replace"))
    return m.group(1) if m else "unknown"


def base_flags() -> list[str]:
    # Reports name files relative to the repository: g++ runs there (the compile directory) and both
    # maps strip it (the last one given is tried first). DWARF 4: GCC 12's DWARF 5 line tables keep
    # the compile directory unmapped.
    # -fno-strict-aliasing: CUDA code reads bf16 rows as uint4 (vec.cuh), which nvcc allows.
    return [
        "-std=c++17",
        "-g",
        "-gdwarf-4",
        "-fPIC",
        "-fno-strict-aliasing",
        "-fvisibility=hidden",
        "-DMPK_HOST_EMULATION",
        f"-I{resources.CSRC}",
        f"-I{cuda_include()}",
        f"-ffile-prefix-map={REPO}=",
        f"-ffile-prefix-map={REPO}/=",
    ]


def host_source(source: str) -> str:
    """``source`` (a generated dispatcher) with the host entry in place of the persistent kernel."""
    if KERNEL_INCLUDE not in source:
        raise BuildError(f"host emulation: the source does not end with {KERNEL_INCLUDE}; is it a generated dispatcher?")
    return source.replace(KERNEL_INCLUDE, HOST_ENTRY)


def _included(text: str, dirs: Sequence[Path]) -> list[Path]:
    """Every quoted include of ``text`` found under ``dirs``, transitively."""
    seen: dict[Path, None] = {}
    todo = list(_INCLUDE.findall(text))
    while todo:
        name = todo.pop()
        path = next((d / name for d in dirs if (d / name).is_file()), None)
        if path is None or path.resolve() in seen:
            continue
        seen[path.resolve()] = None
        todo.extend(_INCLUDE.findall(path.read_text()))
    return sorted(seen)


def _key(parts: Sequence[str], files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _compile(args: list[str], what: str) -> None:
    proc = subprocess.run([cxx(), *args], capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise BuildError(
            f"g++ failed ({proc.returncode}) building {what} for the host:\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}\ncommand: {cxx()} {' '.join(args)}"
        )


def _valid(entry: Path, filename: str) -> bool:
    try:
        record = json.loads((entry / build.RECORD).read_text())
        return record["module_sha256"] == hashlib.sha256((entry / filename).read_bytes()).hexdigest()
    except (OSError, ValueError, KeyError):
        return False


def _publish(entry: Path, filename: str, record: dict, make) -> None:
    """Build ``filename`` into a temporary directory with ``make(tmp)``, record its hash, and rename
    the directory to ``entry``; under a lock, re-checked, as build.build_module does."""
    with FileLock(str(entry) + ".lock"):
        if _valid(entry, filename):
            return
        if entry.exists():
            shutil.rmtree(entry)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
        try:
            make(tmp)
            record["module_sha256"] = hashlib.sha256((tmp / filename).read_bytes()).hexdigest()
            (tmp / build.RECORD).write_text(json.dumps(record, indent=1))
            os.rename(tmp, entry)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def runtime_archive() -> Path:
    """The block runner and race checker, compiled once per cache (they do not depend on the arch)."""
    flags = [*base_flags(), "-O2"]
    sources = [EMULATION / s for s in RUNTIME_SOURCES]
    headers = sorted(p for p in EMULATION.iterdir() if p.suffix == ".h")
    key = _key([cxx_version(cxx()), _cuda_version(), " ".join(flags).replace(str(REPO), "<repo>")], sources + headers)
    entry = build.cache_root() / "modules" / f"emulation-runtime-{key[:16]}"
    if not _valid(entry, ARCHIVE):

        def make(tmp: Path) -> None:
            objects = []
            for src in sources:
                obj = tmp / (src.stem + ".o")
                _compile([*flags, "-c", str(src), "-o", str(obj)], src.name)
                objects.append(str(obj))
            subprocess.run(["ar", "rcs", str(tmp / ARCHIVE), *objects], check=True, capture_output=True)

        _publish(entry, ARCHIVE, {"key": key, "flags": flags, "compiler": cxx_version(cxx())}, make)
    return entry / ARCHIVE


def build_host_module(
    source: str, arch: str, name: str, race_check: bool = False, include_dirs: Sequence[Path] = ()
) -> build.BuildResult:
    """The host module of a generated dispatcher ``source`` for ``arch`` (its worker thread count),
    from the cache or built once. ``include_dirs``: more places for its quoted includes (test kernels)."""
    if arch not in archs.ARCHS:
        raise ConfigError(f"arch {arch!r} is not a build target; use one of {', '.join(archs.NAMES)}")
    start = time.perf_counter()
    text = host_source(source)
    dirs = [resources.CSRC, *map(Path, include_dirs)]
    # Bodies at -O1: half the time of -O0 (a third with race checking), and -O2 is no faster here.
    flags = [
        *base_flags(),
        "-O1",
        f"-DMPK_TARGET_SM={archs.by_name(arch).cc}",
        f"-DMPK_WORKER_THREADS={archs.by_name(arch).worker_threads}",
        *(f"-I{d}" for d in include_dirs),
        *(RACE_FLAGS if race_check else []),
    ]
    archive = runtime_archive()
    headers = _included(text, dirs) + sorted(p for p in EMULATION.iterdir() if p.suffix == ".h")
    key = _key(
        [
            f"abi={contract.ABI_VERSION}",
            cxx_version(cxx()),
            _cuda_version(),
            " ".join(flags).replace(str(REPO), "<repo>"),
            archive.parent.name,
            text,
        ],
        headers,
    )
    name = re.sub(r"[^A-Za-z0-9_+.-]", "", name).lstrip(".")[:80] or "module"
    entry = build.cache_root() / "modules" / f"{name}-host-{arch}{'-race' if race_check else ''}-{key[:16]}"
    if _valid(entry, build.MODULE):
        return build.BuildResult(entry / build.MODULE, entry, key, True, time.perf_counter() - start)

    def make(tmp: Path) -> None:
        (tmp / "source.cpp").write_text(text)
        obj = tmp / "source.o"
        _compile([*flags, "-include", "emulation/cuda_shim.h", "-c", str(tmp / "source.cpp"), "-o", str(obj)], name)
        _compile(["-shared", "-Wl,-z,defs", str(obj), str(archive), "-o", str(tmp / build.MODULE)], name)

    _publish(
        entry,
        build.MODULE,
        {
            "key": key,
            "arch": arch,
            "name": name,
            "race_check": race_check,
            "flags": flags,
            "compiler": cxx_version(cxx()),
            "built_by_pid": os.getpid(),
            "built_at": time.time(),
        },
        make,
    )
    return build.BuildResult(entry / build.MODULE, entry, key, False, time.perf_counter() - start)


class _Options(C.Structure):  # MpkEmuOptions (csrc/emulation/entry.h)
    _fields_ = [
        ("order", C.c_int32),
        ("race_check", C.c_int32),
        ("seed", C.c_uint64),
        ("num_threads", C.c_int32),
        ("reserved", C.c_int32),
    ]


@dataclass(frozen=True)
class TaskRun:
    status: str  # "ok", "task_error" (Runtime::fail), "detected" (see report), "invalid"
    report: str
    task_error: tuple[int, int] | None = None  # (code, value) with "task_error"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def task_desc(
    variant: int,
    inputs: Sequence[int],
    outputs: Sequence[int],
    scalars: Sequence[dict] = (),
    task_id: int = 0,
    grid_idx: Sequence[int] = (0, 0, 0),
    task_type: int = 0,
) -> bytes:
    """A 128-byte MpkTaskDesc: input / output addresses (e.g. ``t.data_ptr()``), scalars as in the
    task graph JSON (``{"f": 1e-6}`` or ``{"i": 4}``). No events: the emulator runs the task alone."""
    if len(inputs) > 7 or len(outputs) > 3 or len(scalars) > 2:
        raise ConfigError(
            f"a task descriptor holds 7 inputs, 3 outputs and 2 scalars; got {len(inputs)}, {len(outputs)} and {len(scalars)}"
        )
    words = [abi.scalar_word(s["i"] if "i" in s else s["f"], "i" in s) for s in scalars] + [0] * (2 - len(scalars))
    return abi.TASK_DESC.pack(
        variant,
        task_type,
        0,
        0,
        contract.NO_EVENT,
        0,
        0,
        0,
        task_id,
        0,
        *grid_idx,
        0,
        *words,
        *inputs,
        *[0] * (7 - len(inputs)),
        *outputs,
        *[0] * (3 - len(outputs)),
    )


class HostModule:
    """A loaded host module: ``run_task`` runs one task as one block of fibers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        lib = self._lib = C.CDLL(str(path))
        lib.mpk_emu_run_task.argtypes = [
            C.c_uint32,
            C.c_char_p,
            C.c_void_p,
            C.c_void_p,
            C.c_uint32,
            C.c_void_p,
            C.c_char_p,
            C.c_int,
            C.c_void_p,
        ]
        lib.mpk_emu_switch_ns.restype = C.c_double
        lib.mpk_dynamic_smem_bytes.restype = C.c_uint
        buf = C.create_string_buffer(1024)
        lib.mpk_emu_layout(buf, len(buf))
        abi.check_layout(buf.value.decode(), str(path))
        self.worker_threads = lib.mpk_worker_threads()
        self.target_sm = lib.mpk_target_sm()
        self.dynamic_smem_bytes = lib.mpk_dynamic_smem_bytes()
        self.race_check = bool(lib.mpk_emu_race_check_built())

    def run_task(
        self,
        variant: int,
        desc: bytes,
        meta: abi.MpkMeta,
        batch: abi.MpkBatchConfig,
        *,
        dynamic_smem: int | None = None,
        order: str = "in_order",
        seed: int = 0,
        race_check: bool | None = None,
        num_threads: int = 0,
    ) -> TaskRun:
        """Run the task ``desc`` (see ``task_desc``) with dispatcher case ``variant``. ``order``: which
        runnable thread goes first between synchronization points ("in_order", "reversed", "shuffled"
        by ``seed``); ``race_check`` defaults to what the module was built with."""
        if order not in ORDERS:
            raise ConfigError(f"order={order!r}; use one of {', '.join(ORDERS)}")
        if len(desc) != abi.TASK_DESC.size:
            raise ConfigError(f"a task descriptor is {abi.TASK_DESC.size} bytes, got {len(desc)}")
        check = self.race_check if race_check is None else race_check
        opts = _Options(ORDERS[order], int(check), seed, num_threads, 0)
        report = C.create_string_buffer(16384)
        error = (C.c_longlong * 2)()
        smem = self.dynamic_smem_bytes if dynamic_smem is None else dynamic_smem
        status = self._lib.mpk_emu_run_task(
            variant, desc, C.byref(meta), C.byref(batch), smem, C.byref(opts), report, len(report), error
        )
        return TaskRun(STATUS[status], report.value.decode(errors="replace"), (error[0], error[1]) if status == 1 else None)

    def switch_ns(self, n: int = 100_000) -> float:
        """One fiber switch, in ns (the mean over n round trips)."""
        return self._lib.mpk_emu_switch_ns(n)


_loaded: dict[Path, HostModule] = {}


def load(source: str, arch: str, name: str, race_check: bool = False, include_dirs: Sequence[Path] = ()) -> HostModule:
    """Build (or find) and load the host module of ``source``; one load per module and process."""
    path = build_host_module(source, arch, name, race_check, include_dirs).path
    if path not in _loaded:
        _loaded[path] = HostModule(path)
    return _loaded[path]
