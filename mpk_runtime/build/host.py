"""Host builds: a generated dispatcher compiled with g++ for the CPU emulator instead of nvcc.

The same source nvcc builds (``codegen.generate``, or a replay's saved ``test_rank0.cu``) is compiled
with ``-DMPK_HOST_EMULATION`` and the CUDA shim forced in (``csrc/emulation/cuda_shim.h``), so
``runtime/persistent_kernel.cuh`` includes the host entry (``emulation/entry.h``) in place of the
kernel: the task bodies run as fibers, one thread block at a time (``run/host_runner.py`` loads and
runs them). ``race_check=True`` builds with ``-fsanitize=thread``, whose hooks are our own shadow
memory (``csrc/emulation/race_check.cpp``): races, unwritten shared memory, accesses outside a task's
slices. Reports name files relative to the repository (``-g1``, prefix maps).

Entries go through the content-hash cache of ``cache.py`` (same locking and publishing): the
runner's archive once per cache; the shim's precompiled header and the part of a module's C entry
that does not depend on its tasks (``emulation/entry_common.cpp``) once per set of flags; each module
once per key.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from .. import archs, contract, resources
from ..errors import BuildError, ConfigError
from . import cache as build_cache
from .nvcc import resolve_includes

EMULATION = resources.CSRC / "emulation"
REPO = resources.CSRC.parent
RUNTIME_SOURCES = ("block_runner.cpp", "tma.cpp", "race_check.cpp", "faults.cpp", "symbols.cpp")
ARCHIVE = "runtime.a"
ENTRY_COMMON = EMULATION / "entry_common.cpp"
ENTRY_OBJECT = "entry_common.o"
SHIM = "emulation/cuda_shim.h"
PCH = "shim_pch.h"  # a header that includes the shim; g++ reads shim_pch.h.gch beside it instead
# What the precompiled header holds: the shim, and <string>, which the C entry's block runner
# declarations include (its parse was 0.09 s of a small module's 0.23 s here). Nothing of ours
# beyond the shim: a source may define a macro before it includes a header of ours, which a
# header already read from the .gch would not see.
PCH_TEXT = f'#include "{SHIM}"\n#include <string>\n'
# What entry_common.o is compiled from (with the shim first): its headers key it, and every module that links it.
ENTRY_COMMON_TEXT = f'#include "{SHIM}"\n#include "emulation/entry_common.cpp"\n'
RACE_FLAGS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "-Wno-tsan"]


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
def cuda_version() -> str:
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", (cuda_include() / "cuda.h").read_text(errors="replace"))
    return m.group(1) if m else "unknown"


def base_flags(include_dirs: Sequence[Path] = ()) -> list[str]:
    # Reports name files relative to the repository: g++ runs there (the compile directory) and both
    # maps strip it (the last one given is tried first). DWARF 4: GCC 12's DWARF 5 line tables keep
    # the compile directory unmapped. -g1 after it (-gdwarf-4 alone means -g2): the line tables and
    # the inlined calls that the reports' addr2line -i reads, without the types and locals, which
    # were about 15% of a module's compile. -fno-strict-aliasing: CUDA code reads bf16 rows as uint4
    # (vec.cuh), which nvcc allows. ``include_dirs`` come before csrc, so they can stand in for a
    # header of it (a test's patched copy of a body). -fstack-clash-protection: a frame larger than a
    # page touches each page as it grows, so a local array past a fiber's stack faults on its guard
    # page (a stack overflow, reported) instead of reaching into the next fiber's stack.
    return [
        "-std=c++17",
        "-gdwarf-4",
        "-g1",
        "-fPIC",
        "-fstack-clash-protection",
        "-fno-strict-aliasing",
        "-fvisibility=hidden",
        *(f"-I{d}" for d in include_dirs),
        f"-I{resources.CSRC}",
        f"-I{cuda_include()}",
        f"-ffile-prefix-map={REPO}=",
        f"-ffile-prefix-map={REPO}/=",
    ]


def included(text: str, dirs: Sequence[Path]) -> list[Path]:
    """Every quoted include of ``text``, transitively, found as g++ finds it: beside the including
    file, else under ``dirs`` (first match wins)."""
    return resolve_includes(text, list(dirs))


def _key(parts: Sequence[str], files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for f in files:
        h.update(str(f).replace(str(REPO), "<repo>").encode())
        h.update(f.read_bytes())
    return h.hexdigest()


# What g++ and the assembler say of inline PTX compiled for the CPU.
_PTX_ON_THE_CPU = re.compile(
    r"Error: (no such instruction|invalid instruction suffix|unknown pseudo-op)|impossible constraint in 'asm'|invalid 'asm'"
    r"|unknown register name"
)
_PTX_HINT = (
    "\nThe host emulator builds task bodies with g++ for the CPU, where inline PTX (asm) cannot assemble: "
    "put the asm under #ifndef MPK_HOST_EMULATION with C++ that does the same in the #else (as "
    "csrc/primitives/*.cuh do), or use one of those primitives"
)


def _compile(args: list[str], what: str) -> None:
    proc = subprocess.run([cxx(), *args], capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        said = proc.stderr.strip() or proc.stdout.strip()
        raise BuildError(
            f"g++ failed ({proc.returncode}) building {what} for the host:\n{said}"
            f"{_PTX_HINT if _PTX_ON_THE_CPU.search(said) else ''}\ncommand: {cxx()} {' '.join(args)}"
        )


def _portable(flags: Sequence[str]) -> str:
    return " ".join(flags).replace(str(REPO), "<repo>")


def _without_include_dirs(flags: Sequence[str]) -> str:
    """``flags`` as a shared build (the precompiled shim, the entry object) is keyed by: not by the
    include directories, which differ from test to test, but by the headers they resolve to."""
    return _portable([f for f in flags if not f.startswith("-I")])


def runtime_archive() -> Path:
    """The block runner, race checker and fault handler, once per cache (they do not depend on the arch)."""
    flags = [*base_flags(), "-O2", "-DMPK_HOST_EMULATION"]
    sources = [EMULATION / s for s in RUNTIME_SOURCES]
    headers = sorted(p for p in EMULATION.iterdir() if p.suffix == ".h")
    key = _key([cxx_version(cxx()), cuda_version(), _portable(flags)], sources + headers)
    entry = build_cache.cache_root() / "modules" / f"emulation-runtime-{key[:16]}"
    if not build_cache.entry_is_valid(entry, key, ARCHIVE):

        def make(tmp: Path) -> None:
            # The files at once: the first emulated run of a cold cache waits for them (6 s of g++
            # here), and so does every other process that needs them meanwhile.
            objects = [str(tmp / (src.stem + ".o")) for src in sources]
            with ThreadPoolExecutor(max(1, min(len(sources), os.cpu_count() or 1))) as pool:
                for f in [pool.submit(_compile, [*flags, "-c", str(s), "-o", o], s.name) for s, o in zip(sources, objects)]:
                    f.result()
            subprocess.run(["ar", "rcs", str(tmp / ARCHIVE), *objects], check=True, capture_output=True)

        record = {"key": key, "arch": "host", "flags": flags, "compiler": cxx_version(cxx())}
        build_cache.publish(entry, key, ARCHIVE, record, make)
    return entry / ARCHIVE


def shim_pch(flags: Sequence[str], dirs: Sequence[Path]) -> Path | None:
    """The CUDA shim precompiled with exactly ``flags`` (its CUDA headers are most of a small module's
    compile time: 0.5 s of 0.9 s here): the path of a header that includes the shim, with its .gch
    beside it, to pass to ``-include``. g++ uses the .gch only when the flags match and otherwise
    reads the header, which is the same code, so a stale or foreign .gch costs time, never
    correctness. Once per cache and set of flags (arch, race checking): not per include directory
    (a test's own, say), which GCC does not ask to match; the headers the shim resolves to, which
    the key covers, are what matters. None for a compiler other than GCC (whose precompiled
    headers work differently)."""
    compiler = cxx_version(cxx())
    if "g++" not in compiler and "GCC" not in compiler:
        return None
    headers = included(PCH_TEXT, dirs)
    key = _key([compiler, cuda_version(), _without_include_dirs(flags), PCH, PCH_TEXT], headers)
    entry = build_cache.cache_root() / "modules" / f"emulation-shim-pch-{key[:16]}"

    def make(tmp: Path) -> None:
        (tmp / PCH).write_text(PCH_TEXT)
        gch = tmp / f"{PCH}.gch"
        _compile([*flags, "-x", "c++-header", str(tmp / PCH), "-o", str(gch)], "the CUDA shim's precompiled header")

    record = {"key": key, "arch": "host", "flags": list(flags), "compiler": compiler}
    build_cache.publish(entry, key, f"{PCH}.gch", record, make)
    return entry / PCH


def entry_common(flags: Sequence[str], dirs: Sequence[Path], pch: Path | None) -> Path:
    """``emulation/entry_common.cpp`` compiled with exactly the module's ``flags`` (its arch's
    defines, race checking) and include ``dirs`` (a test's header standing in for one of csrc is
    used here too): the C entry's code that is the same in every module, 0.3 s of the 0.5 s a small
    module's compile took here when each module compiled it. Once per cache, flags and headers."""
    # A directory that stands in for one of csrc's headers gives another key (_without_include_dirs).
    headers = included(ENTRY_COMMON_TEXT, dirs)
    key = _key([cxx_version(cxx()), cuda_version(), _without_include_dirs(flags), ENTRY_OBJECT], headers)
    entry = build_cache.cache_root() / "modules" / f"emulation-entry-common-{key[:16]}"

    def make(tmp: Path) -> None:
        _compile(
            [*flags, "-include", str(pch) if pch else SHIM, "-c", str(ENTRY_COMMON), "-o", str(tmp / ENTRY_OBJECT)],
            "emulation/entry_common.cpp",
        )

    record = {"key": key, "arch": "host", "flags": list(flags), "compiler": cxx_version(cxx())}
    build_cache.publish(entry, key, ENTRY_OBJECT, record, make)
    return entry / ENTRY_OBJECT


def build_host_module(
    source: str, arch: str, name: str, race_check: bool = False, include_dirs: Sequence[Path] = ()
) -> build_cache.BuildResult:
    """The host module of a generated dispatcher ``source`` for ``arch`` (its defines from the arch
    table), from the cache or built once. ``include_dirs``: searched before csrc for the quoted
    includes (test kernels, or a patched copy of a csrc header)."""
    if arch not in archs.ARCHS:
        raise ConfigError(f"arch {arch!r} is not a build target; use one of {', '.join(archs.NAMES)}")
    dirs = [*map(Path, include_dirs), resources.CSRC]
    # Bodies at -O1: half the time of -O0 (a third with race checking), and -O2 is no faster here.
    flags = [*base_flags(include_dirs), "-O1", *archs.ARCHS[arch].host_flags, *(RACE_FLAGS if race_check else [])]
    archive = runtime_archive()
    # The module links entry_common.o, built with the same flags: its headers are in the key too.
    headers = included(ENTRY_COMMON_TEXT + source, dirs)
    parts = [f"abi={contract.ABI_VERSION}", cxx_version(cxx()), cuda_version(), _portable(flags), archive.parent.name, source]
    key = _key(parts, headers)
    name = build_cache.safe_name(name)
    entry = build_cache.cache_root() / "modules" / f"{name}-host-{arch}{'-race' if race_check else ''}-{key[:16]}"

    def make(tmp: Path) -> None:
        (tmp / "source.cpp").write_text(source)
        obj = tmp / "source.o"
        pch = shim_pch(flags, dirs)
        common = entry_common(flags, dirs, pch)
        # The debug lines and __FILE__ name the entry the build is renamed to, not tmp, which goes: an
        # emulator report's "inlined at .../source.cpp:37" then points at a file that exists.
        where = f"-ffile-prefix-map={tmp}={entry}"
        try:
            _compile([*flags, where, "-include", str(pch) if pch else SHIM, "-c", str(tmp / "source.cpp"), "-o", str(obj)], name)
        except BuildError as e:  # its lines name the source in tmp, which goes: name a copy that stays
            raise build_cache.naming_kept_source(e, tmp / "source.cpp", source, entry.name) from None
        _compile(["-shared", "-Wl,-z,defs", str(obj), str(common), str(archive), "-o", str(tmp / build_cache.MODULE)], name)

    record = {"key": key, "arch": arch, "name": name, "race_check": race_check, "flags": flags, "compiler": cxx_version(cxx())}
    return build_cache.publish(entry, key, build_cache.MODULE, record, make)
