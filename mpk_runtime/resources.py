"""Where the files that ship beside the Python code live: the CUDA sources (``csrc/``) and the
canonical PyTorch references (``reference/``). One place resolves them, for a checkout, an
editable install and an installed wheel alike."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[0]


# A wheel carries them inside the package (mpk_runtime/_data/...); a checkout has them at its root.
CSRC: Path = _first_existing(_PACKAGE / "_data" / "csrc", _PACKAGE.parent / "csrc")
REFERENCE_ROOT: Path = _first_existing(_PACKAGE / "_data" / "reference", _PACKAGE.parent / "reference")
CSRC_TASKS: Path = CSRC / "tasks"
