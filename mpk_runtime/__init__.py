"""mpk_runtime: a persistent-megakernel runtime for LLM layers.

Declare tensors and layers on a PersistentKernel; the runtime splits every layer into tasks, wires
them into a task graph by their data dependencies, compiles the graph into one persistent kernel
(cached), and runs it on the GPU. The subpackages follow that pipeline:

    frontend/  PersistentKernel, init parameters, meta tensors   (declared)
    tasks/     the task registry: one spec per task               (declared)
    graph/     tasks, dependencies, schedule -> CompiledGraph     (graph, schedule)
    codegen/   the dispatcher source and the binary layout        (generated code)
    build/     nvcc, the content-addressed cache, compile outputs (build)
    run/       the GPU launch, the CPU emulator, diagnostics      (launched or emulated)
    profile/   traces, statistics, pictures
    cli/       mpk-profile, mpk-graph (argument parsing only)

Foundation modules every stage may use: errors, archs (the one arch table), contract (constants
shared with csrc), dtypes, resources (where csrc/ and reference/ are), memory (the budget that
sizes from the user are checked against before anything is allocated). ``harness`` is the small
set of entry points the pytest plugin uses besides this public API.
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
    EmulationError,
    GraphError,
    GridError,
    KernelError,
    LayoutError,
    MemoryBudgetError,
    MetaTensorError,
    MpkError,
    NameConflictError,
    ProfileError,
    RankError,
    ShapeError,
    StateError,
    WatchdogError,
    WeightError,
)

if TYPE_CHECKING:
    from .frontend.comm import run_emulated_ranks
    from .frontend.kernel import PersistentKernel
    from .graph.tensors import DTensor
    from .run.gpu import get_configurations_from_gpu

# Imported on first use: tools such as mpk-profile need none of torch.
_LAZY = {
    "PersistentKernel": ".frontend.kernel",
    "DTensor": ".graph.tensors",
    "get_configurations_from_gpu": ".run.gpu",
    "run_emulated_ranks": ".frontend.comm",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ArityError",
    "BlockDimError",
    "BuildError",
    "CoResidencyError",
    "ConfigError",
    "DTensor",
    "DTypeError",
    "DeviceError",
    "EmulationError",
    "GraphError",
    "GridError",
    "KernelError",
    "LayoutError",
    "MemoryBudgetError",
    "MetaTensorError",
    "MpkError",
    "NameConflictError",
    "PersistentKernel",
    "ProfileError",
    "RankError",
    "ShapeError",
    "StateError",
    "WatchdogError",
    "WeightError",
    "get_configurations_from_gpu",
    "run_emulated_ranks",
]
