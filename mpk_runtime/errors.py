"""One exception hierarchy for the runtime.

Every error derives from :class:`MpkError` and, where one fits, from the builtin that describes it,
so callers can catch either (``except ValueError`` keeps working for bad arguments). Two helpers
word what messages share: the nearest known name, and a value shown with its type.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any


def near_hint(name: str, known: Collection[str], listing: str) -> str:
    """The end of an unknown-name message: "did you mean 'x'?" for the closest known name, else
    ``listing`` followed by every known one (e.g. "the parameters are")."""
    near = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {near[0]!r}?" if near else f"{listing} {', '.join(known)}"


def shown(value: Any) -> str:
    """``value`` for a message: its repr, cut to 40 characters, and its type."""
    text = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return f"{text} ({type(value).__name__})"


class MpkError(Exception):
    """Base class of every error raised by mpk_runtime."""


class ConfigError(MpkError, ValueError):
    """An init parameter of PersistentKernel is unknown, missing or out of range."""


class BlockDimError(MpkError, ValueError):
    """block_dim does not match the worker thread count of the target architecture."""


class GridError(MpkError, ValueError):
    """grid_dim is malformed or does not divide the dimensions it partitions."""


class ShapeError(MpkError, ValueError):
    """A tensor's shape does not fit the layer it is passed to."""


class DTypeError(MpkError, TypeError):
    """A tensor's dtype is not supported by, or inconsistent within, a layer."""


class LayoutError(MpkError, ValueError):
    """A tensor is not contiguous (row-major)."""


class DeviceError(MpkError, RuntimeError):
    """A tensor or GPU is not where the kernel needs it (wrong device, no GPU)."""


class NameConflictError(MpkError, ValueError):
    """A tensor name is already taken in this kernel."""


class ArityError(MpkError, ValueError):
    """A task would have more inputs or outputs than a task descriptor can carry."""


class GraphError(MpkError, ValueError):
    """The task graph is malformed (no layers, a tensor from another kernel, ...)."""


class WeightError(MpkError, ValueError):
    """A model's state_dict lacks a weight the config needs, or has one it does not use."""


class MetaTensorError(MpkError, ValueError):
    """A meta tensor override has the wrong shape, dtype, device or contents."""


class StateError(MpkError, RuntimeError):
    """A method was called at the wrong point of the kernel's life cycle."""


class BuildError(MpkError, RuntimeError):
    """nvcc failed, or a built module could not be loaded."""


class MemoryBudgetError(MpkError, MemoryError):
    """Sizes given by the user (shapes, init parameters) need more memory than the budget allows;
    raised before anything is allocated (see mpk_runtime.memory)."""


class CoResidencyError(MpkError, RuntimeError):
    """The persistent kernel's CTAs cannot all be resident on the GPU at once."""


class ProfileError(MpkError, ValueError):
    """A profiler buffer, profile CSV or profile query is malformed or names nothing that exists."""


class KernelError(MpkError, RuntimeError):
    """The persistent kernel stopped with an error reported by the device."""


class RankError(MpkError, RuntimeError):
    """Another rank of a multi-rank kernel failed or stopped responding, or the ranks disagree.

    ``ranks`` lists the ranks concerned (those that did not answer, for a timeout); ``failures``
    what the ranks that said they failed said."""

    def __init__(self, message: str, ranks: list[int] | None = None, failures: dict[int, str] | None = None):
        super().__init__(message)
        self.ranks = list(ranks or [])
        self.failures = dict(failures or {})


class EmulationError(KernelError):
    """The CPU emulator found a fault in device code that the device would not report, or not as
    precisely: a data race, a divergent barrier, a warp collective some lanes never reach, an access
    outside a task's slices or outside every tensor, a fault in a task body, or a prepare_next_batch
    that disagrees with its model. The message names the task (or iteration), the thread and the
    source line; ``report`` holds the emulator's own text. Also raised when the emulator cannot run
    a kernel as it is (an edited replayed source under the slice-reference backend, which runs the
    tasks' Python references, not CUDA code)."""

    def __init__(self, message: str, report: str = ""):
        super().__init__(message)
        self.report = report


class WatchdogError(KernelError):
    """The device watchdog stopped a kernel in which nothing progressed for too long.

    ``record`` holds what every stuck worker was waiting for (see ``mpk_runtime.diagnostics``).
    """

    def __init__(self, message: str, record: list | None = None):
        super().__init__(message)
        self.record = record or []
