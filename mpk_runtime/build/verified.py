"""Device-only builds of variants already compiled. An emulated or compile-only kernel's nvcc build
(a cubin, never run) is there to check that every task body compiles and assembles for its arch. A
module whose every variant was compiled for the arch before, with the same nvcc, flags and headers,
has nothing left to check: around the variants it holds only generated code that switches between
them. This index remembers the variants of every device-only build that succeeded, and such a
module's cache entry records that instead of a cubin.

A variant's key: the arch, nvcc's version, the device-only flags, whether warp jitter is defined,
its call (task function and template arguments) and the content of every header it needs (the
runtime's and its task's). Variants of tasks outside the registry are never keyed: a module with one
is always built.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .. import resources
from ..errors import ConfigError
from .cache_fs import fs_errors
from .nvcc import flags_for, included_headers, nvcc, nvcc_version

VERIFIED = "verified.json"  # the entry's file when no nvcc ran (cache.build_module)
_CALL = re.compile(r"^\s*case \d+:.*\n\s*(\S.*\(task, rt\);)\s*$", re.M)


def variant_keys(source: str, arch: str) -> list[str] | None:
    """The keys of the dispatcher's variants in a generated ``source``, or None when one cannot be
    keyed (no variants found, or a task the registry does not have for ``arch``)."""
    from ..tasks import registry  # the registry imports nothing of build/: imported here, when needed

    calls = _CALL.findall(source)
    if not calls:
        return None
    by_function = {spec.function: spec for spec in registry.all_specs()}
    flags = " ".join(flags_for(arch, device_only=True)).replace(str(resources.CSRC), "<csrc>")
    base = [arch, nvcc_version(nvcc()), flags, f"jitter={'#define MPK_WARP_JITTER' in source}"]
    keys = []
    for call in calls:
        spec = by_function.get(call.split("<", 1)[0].split("(", 1)[0])
        if spec is None:
            return None
        try:
            header = spec.header_for(arch)
        except ConfigError:
            return None
        needs = f'#include "runtime/task_api.cuh"\n#include "tasks/{header}"\n#include "runtime/persistent_kernel.cuh"\n'
        h = hashlib.sha256()
        for part in (*base, call):
            h.update(part.encode())
            h.update(b"\0")
        for path in included_headers(needs):
            h.update(str(path.relative_to(resources.CSRC)).encode())
            h.update(path.read_bytes())
        keys.append(h.hexdigest())
    return keys


def _index(root: Path, arch: str) -> Path:
    return root / "verified" / arch


def all_compiled(root: Path, arch: str, keys: list[str]) -> bool:
    index = _index(root, arch)
    return all((index / key).is_file() for key in keys)


def remember(root: Path, arch: str, keys: list[str]) -> None:
    """Record ``keys`` as compiled (after a device-only build of their module succeeded)."""
    index = _index(root, arch)
    with fs_errors("record compiled variants in", index):
        index.mkdir(parents=True, exist_ok=True)
        for key in keys:
            (index / key).touch()
