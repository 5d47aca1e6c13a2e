"""mpk_runtime: a persistent-megakernel runtime for LLM layers.

Declare tensors and layers on a PersistentKernel; the runtime splits every layer into tasks, wires
them into a task graph by their data dependencies, compiles the graph into one persistent kernel
(cached), and runs it on the GPU.
"""

from __future__ import annotations

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
    ShapeError,
    StateError,
    WatchdogError,
)
from .gpu import get_configurations_from_gpu
from .graph import DTensor
from .kernel import PersistentKernel

__all__ = [
    "ArityError", "BlockDimError", "BuildError", "CoResidencyError", "ConfigError", "DTensor", "DTypeError",
    "DeviceError", "GraphError", "GridError", "KernelError", "LayoutError", "MetaTensorError", "MpkError",
    "NameConflictError", "PersistentKernel", "ShapeError", "StateError", "WatchdogError",
    "get_configurations_from_gpu",
]
