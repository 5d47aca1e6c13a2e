"""mpk_runtime: a persistent-megakernel runtime for LLM layers.

Declare tensors and layers on a PersistentKernel; the runtime splits every layer into tasks, wires
them into a task graph by their data dependencies, compiles the graph into one persistent kernel
(cached), and runs it on the GPU.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import (
    ArityError,
    BlockDimError,
    BuildError,
    ConfigError,
    CoResidencyError,
    DeviceError,
    DTypeError,
    GraphError,
    GridError,
    KernelError,
    LayoutError,
    MetaTensorError,
    MpkError,
    NameConflictError,
    ProfileError,
    ShapeError,
    StateError,
    WatchdogError,
)

if TYPE_CHECKING:
    from .gpu import get_configurations_from_gpu
    from .graph import DTensor
    from .kernel import PersistentKernel

# Imported on first use: tools such as mpk-profile need none of torch.
_LAZY = {"PersistentKernel": ".kernel", "DTensor": ".graph", "get_configurations_from_gpu": ".gpu"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ArityError", "BlockDimError", "BuildError", "CoResidencyError", "ConfigError", "DTensor", "DTypeError",
    "DeviceError", "GraphError", "GridError", "KernelError", "LayoutError", "MetaTensorError", "MpkError",
    "NameConflictError", "PersistentKernel", "ProfileError", "ShapeError", "StateError", "WatchdogError",
    "get_configurations_from_gpu",
]
