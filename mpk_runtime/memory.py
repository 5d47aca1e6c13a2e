"""The memory budget: sizes that come from the user (shapes in a signature, init parameters, new
tensors) are checked before anything is allocated, so that a typo is a clear error, not a 16 GiB
allocation, a bare MemoryError or a machine that swaps.

The limit of a device comes from what it has free now: half the host memory available to this
process (the least of MemAvailable in /proc/meminfo, the cgroup's limit less its usage, and the
address space rlimit less what is mapped) for CPU tensors, the other half being left to the rest
of the process (torch, the golden, copies); 90% of ``torch.cuda.mem_get_info``'s free memory for
a GPU's. The environment can set others: ``MPK_MEMORY_LIMIT`` (host) and ``MPK_GPU_MEMORY_LIMIT``
(each GPU), in bytes or with a unit (``512M``, ``8G``, ``1.5T``; binary units). Tensors on the
meta device need no memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, MemoryBudgetError, MpkError

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
HOST_SHARE = 0.5
GPU_SHARE = 0.9
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # v1
)


@dataclass(frozen=True)
class Need:
    """One allocation: what it is (``tensor 'x' (bf16 [8, 4096])``) and its size in bytes."""

    what: str
    nbytes: int

    def renamed(self, note: str) -> Need:
        """The same need, its description followed by ``note`` (e.g. what sizes it)."""
        return Need(f"{self.what[:-1]}: {note})" if self.what.endswith(")") else f"{self.what} ({note})", self.nbytes)


def tensor_need(what: str, shape: Iterable[int], dtype: Any) -> Need:
    """The need of ``what`` (e.g. "tensor 'x'"), of ``shape`` and ``dtype`` (a torch dtype or a
    dtypes.DType)."""
    from . import dtypes

    shape = [int(d) for d in shape]
    with contextlib.suppress(MpkError):
        dtype = dtype if isinstance(dtype, dtypes.DType) else dtypes.lookup(dtype)
    itemsize = getattr(dtype, "itemsize", None) or _torch_itemsize(dtype)
    short = getattr(dtype, "short", None) or str(dtype).replace("torch.", "")
    n = itemsize
    for d in shape:
        n *= d
    return Need(f"{what} ({short} {shape})", n)


def _torch_itemsize(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def parse_size(name: str, text: str) -> int:
    m = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not m:
        raise ConfigError(f"{name}={text[:40]!r} must be a size in bytes, e.g. 8G, 512M or 1073741824")
    n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if n < 1:
        raise ConfigError(f"{name}={text[:40]!r} is less than one byte, a budget nothing fits; give a size such as 8G")
    return n


def limit(device: Any) -> tuple[int | None, str]:
    """The bytes ``device`` may still allocate, and where that figure comes from (None: no limit).
    Both variables are read whichever the device, so a bad one is reported where it is first used."""
    kind = getattr(device, "type", str(device))
    if kind == "meta":
        return None, "no limit"
    given = {v: parse_size(v, os.environ[v]) for v in ("MPK_MEMORY_LIMIT", "MPK_GPU_MEMORY_LIMIT") if os.environ.get(v)}
    variable = "MPK_GPU_MEMORY_LIMIT" if kind == "cuda" else "MPK_MEMORY_LIMIT"
    if variable in given:
        return given[variable], f"set by {variable}"
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0] * GPU_SHARE), f"budget (90% of the memory free on {device} now)"
    free = host_available()
    return (None, "no limit") if free is None else (int(free * HOST_SHARE), "budget (half the host memory available now)")


def host_available() -> int | None:
    """Bytes this process can still allocate on the host, as far as the system says (None: unknown)."""
    found = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    for limit_file, usage_file in CGROUP_FILES:
        with contextlib.suppress(OSError, ValueError):
            cap = Path(limit_file).read_text().strip()
            if cap != "max" and int(cap) < 2**60:
                found.append(int(cap) - int(Path(usage_file).read_text()))
    with contextlib.suppress(OSError, ValueError, IndexError):
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            status = Path("/proc/self/status").read_text()
            mapped = int(re.search(r"^VmSize:\s+(\d+) kB", status, re.M).group(1)) * 1024  # type: ignore[union-attr]
            found.append(soft - mapped)
    return max(0, min(found)) if found else None


def check(needs: Iterable[Need], device: Any, where: str, fix: str = "use smaller sizes") -> None:
    """MemoryBudgetError, before anything is allocated, when ``needs`` together do not fit what
    ``device`` may still allocate. The message names the largest need, the total and the limit."""
    needs = list(needs)
    total = sum(n.nbytes for n in needs)
    cap, source = limit(device)
    if cap is None or total <= cap or not needs:
        return
    biggest = max(needs, key=lambda n: n.nbytes)
    on = "host memory" if getattr(device, "type", str(device)) == "cpu" else f"memory on {device}"
    together = f" ({format_bytes(total)} in all with {len(needs) - 1} more)" if total > biggest.nbytes * 1.01 else ""
    variable = "MPK_GPU_MEMORY_LIMIT" if getattr(device, "type", "") == "cuda" else "MPK_MEMORY_LIMIT"
    raise MemoryBudgetError(
        f"{where}: {biggest.what} needs {format_bytes(biggest.nbytes)}{together} of {on}, more than the "
        f"{format_bytes(cap)} {source}; {fix}, or set {variable} (bytes, e.g. 64G)"
    )


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"
