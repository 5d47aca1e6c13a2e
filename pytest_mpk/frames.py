"""Which frames of a traceback are the scene's own code (its build(), generate_args, ...): the ones
a report shows an error at, past the harness's, the runtime's, torch's and Python's own."""

from __future__ import annotations

import sysconfig
from pathlib import Path

_LIBRARIES = ("_pytest", "pluggy", "hypothesis", "pytest_mpk", "mpk_runtime", "torch")
_STDLIB = sysconfig.get_paths()["stdlib"]  # contextlib's wrapper of a decorated function, say


def is_scene_code(path: str) -> bool:
    return not any(f"/{p}/" in path for p in _LIBRARIES) and not Path(path).is_relative_to(_STDLIB)
