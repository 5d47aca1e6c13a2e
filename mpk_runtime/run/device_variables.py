"""The ``__device__`` variables of a host-emulation module: state that outlives a launch, and a case
(a process loads each module once). Read from the module's symbol table by readelf (binutils, which
the g++ that builds host modules comes with): the writable objects that are not thread-local
(``__shared__`` is thread_local in the host build) and not the emulator's own."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

# Section header: [Nr] Name Type Address Off Size ES Flg Lk Inf Al (Flg may be empty).
SECTION = re.compile(r"^\s*\[\s*(\d+)\]\s+\S+\s+\S+(?:\s+[0-9a-f]+){4}\s+([A-Za-z]*)\s+\d+\s+\d+\s+\d+\s*$")
# Symbol: Num: Value Size Type Bind Vis Ndx Name
SYMBOL = re.compile(r"^\s*\d+:\s+[0-9a-f]+\s+\S+\s+OBJECT\s+\S+\s+\S+\s+(\d+)\s+(.+)$")
# The emulator runtime's state, the static locals' guards, and what the compiler and libstdc++ add.
NOT_THE_TASKS = ("mpk::emu::", "guard variable for mpk::emu::", "_", "DW.ref.", "completed.", "std::", "__gnu_cxx::")


@cache
def device_variables(path: Path) -> tuple[str, ...] | None:
    """The variables' names, sorted; None when readelf cannot say (missing, or not an ELF file)."""
    try:
        out = subprocess.run(["readelf", "-SsW", "--demangle", str(path)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    lines = out.splitlines()
    writable = {m.group(1) for line in lines if (m := SECTION.match(line)) and "W" in m.group(2) and "T" not in m.group(2)}
    names = {
        m.group(2).strip()
        for line in lines
        if (m := SYMBOL.match(line)) and m.group(1) in writable and not m.group(2).startswith(NOT_THE_TASKS)
    }
    return tuple(sorted(names))
