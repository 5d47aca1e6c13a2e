"""Rules of csrc/ that would otherwise be checked by hand: inline PTX lives only in
csrc/primitives/ (task bodies and the runtime call named primitives), and every file is formatted
as the repository's .clang-format says."""

from __future__ import annotations

import re
import subprocess

import pytest

from mpk_runtime.build import CSRC

SOURCES = sorted(p for p in CSRC.rglob("*") if p.suffix in (".cuh", ".h", ".cu"))
ASM = re.compile(r"\basm\b")


def test_inline_ptx_only_in_primitives():
    outside = [f"{p.relative_to(CSRC)}:{n}" for p in SOURCES if p.parent != CSRC / "primitives"
               for n, line in enumerate(p.read_text().splitlines(), 1) if ASM.search(line)]
    assert not outside, f"asm outside csrc/primitives/ (wrap it in a primitive there): {', '.join(outside)}"


def test_csrc_is_clang_formatted():
    clang_format = pytest.importorskip("clang_format", reason="pip install -e '.[dev]' installs clang-format")
    cmd = [clang_format.get_executable("clang-format"), "--dry-run", "-Werror", *map(str, SOURCES)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"run clang-format -i on these files:\n{proc.stderr[-4000:]}"
