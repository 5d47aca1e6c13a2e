"""A rule of csrc/ that would otherwise be checked by hand: inline PTX lives only in
csrc/primitives/ (task bodies and the runtime call named primitives). Formatting is checked by
clang-format in .ci/run and the pre-commit hooks."""

from __future__ import annotations

import re

from mpk_runtime.resources import CSRC

SOURCES = sorted(p for p in CSRC.rglob("*") if p.suffix in (".cuh", ".h", ".cu"))
ASM = re.compile(r"\basm\b")


def test_inline_ptx_only_in_primitives():
    outside = [
        f"{p.relative_to(CSRC)}:{n}"
        for p in SOURCES
        if p.parent != CSRC / "primitives"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if ASM.search(line)
    ]
    assert not outside, f"asm outside csrc/primitives/ (wrap it in a primitive there): {', '.join(outside)}"
