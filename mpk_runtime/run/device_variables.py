"""The ``__device__`` variables of a host-emulation module: state that outlives a launch, and a case
(a process loads each module once), and memory every task of the module can write. Read from the
module's symbol table by readelf (binutils, which the g++ that builds host modules comes with): the
writable objects that are not thread-local (``__shared__`` is thread_local in the host build) and not
the emulator's own."""

from __future__ import annotations

import ctypes as C
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import NamedTuple

# Section header: [Nr] Name Type Address Off Size ES Flg Lk Inf Al (Flg may be empty).
SECTION = re.compile(r"^\s*\[\s*(\d+)\]\s+\S+\s+\S+(?:\s+[0-9a-f]+){4}\s+([A-Za-z]*)\s+\d+\s+\d+\s+\d+\s*$")
# Symbol: Num: Value Size Type Bind Vis Ndx Name (a large size in hex).
SYMBOL = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+(\S+)\s+(OBJECT|FUNC)\s+\S+\s+\S+\s+(\S+)\s+(.+)$")
# The emulator runtime's state, the static locals' guards, and what the compiler and libstdc++ add.
NOT_THE_TASKS = ("mpk::emu::", "guard variable for mpk::emu::", "_", "DW.ref.", "completed.", "std::", "__gnu_cxx::")
ANCHOR = "mpk_abi_version"  # an exported function: its address, less its offset, is the module's base


class Variable(NamedTuple):
    name: str
    offset: int  # from the address the module is loaded at
    size: int  # bytes


@cache
def symbols(path: Path) -> tuple[tuple[Variable, ...], int | None] | None:
    """The variables, sorted by name, and the offset of ANCHOR; None when readelf cannot say."""
    try:
        out = subprocess.run(["readelf", "-SsW", "--demangle", str(path)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    lines = out.splitlines()
    writable = {m.group(1) for line in lines if (m := SECTION.match(line)) and "W" in m.group(2) and "T" not in m.group(2)}
    variables: dict[str, Variable] = {}  # .dynsym and .symtab may both list one
    anchor = None
    for m in filter(None, map(SYMBOL.match, lines)):
        value, size, kind, section, name = m.groups()
        name = name.strip()
        if kind == "FUNC" and name == ANCHOR:
            anchor = int(value, 16)
        elif kind == "OBJECT" and section in writable and not name.startswith(NOT_THE_TASKS):
            variables[name] = Variable(name, int(value, 16), int(size, 0))
    return tuple(sorted(variables.values())), anchor


def device_variables(path: Path) -> tuple[str, ...] | None:
    """The variables' names, sorted; None when readelf cannot say (missing, or not an ELF file)."""
    found = symbols(path)
    return None if found is None else tuple(v.name for v in found[0])


def variable_memory(path: Path, library: C.CDLL) -> list[tuple[str, int, int]]:
    """(name, address, bytes) of each variable of the module at ``path`` as ``library`` loaded it;
    [] when readelf cannot say."""
    found = symbols(path)
    if found is None or not found[0] or found[1] is None:
        return []
    variables, anchor = found
    base = C.cast(getattr(library, ANCHOR), C.c_void_p).value - anchor  # type: ignore[operator]  # a function's address
    return [(v.name, base + v.offset, v.size) for v in variables]
