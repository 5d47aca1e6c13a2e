"""Loading the canonical PyTorch references: ``reference/<layer>/pytorch_reference.py``.

Every layer has one plain-PyTorch function, named after the layer, in that file. The emulator
uses it as the layer's slice reference, the harness as the default golden, and task-body tests
import it too, so all levels of verification agree on one definition.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ..errors import GraphError
from ..resources import REFERENCE_ROOT

_modules: dict[Path, ModuleType] = {}


def load_module(path: Path) -> ModuleType:
    """Import a pytorch_reference.py by path (they are not a package), once per path."""
    path = path.resolve()
    mod = _modules.get(path)
    if mod is None:
        name = f"mpk_reference_{abs(hash(str(path))):x}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise GraphError(f"cannot import reference file {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[path] = mod
    return mod


def find(function: str, search: list[Path] | None = None, layer: str | None = None) -> Callable:
    """The reference ``function``: from the first ``pytorch_reference.py`` in ``search`` that defines
    it, else from ``reference/<layer>/`` (``layer`` defaults to the function's name)."""
    return find_in(function, search, layer)[0]


def find_in(function: str, search: list[Path] | None = None, layer: str | None = None) -> tuple[Callable, Path]:
    """``find``, and the ``pytorch_reference.py`` it took the function from."""
    candidates = [d / "pytorch_reference.py" for d in (search or [])]
    candidates.append(REFERENCE_ROOT / (layer or function) / "pytorch_reference.py")
    for path in candidates:
        if path.is_file():
            fn = getattr(load_module(path), function, None)
            if callable(fn):
                return fn, path
    tried = ", ".join(str(p) for p in candidates)
    raise GraphError(
        f"no reference function {function!r} found (looked in {tried}); define "
        f"def {function}(...) in reference/{layer or function}/pytorch_reference.py (a task declared outside the "
        f"repository: in a pytorch_reference.py beside the module that declares it)"
    )
