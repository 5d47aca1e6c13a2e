"""Declared: the task registry and one module per task.

Enters: nothing (each module registers its task on import). Leaves: ``TaskSpec`` objects (a task's
arguments, partitions, template arguments, archs, cost model, slice reference), looked up by name.
Adding a task is adding a module here (and its .cuh, reference and tests), nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil

from .partition import Arg, Partition, SliceInfo, split, whole
from .registry import all_specs, get, on_register, register_task
from .spec import TaskFailure, TaskSpec

_INFRASTRUCTURE = {"partition", "registry", "spec", "references", "peer_exchange"}
for _m in pkgutil.iter_modules(__path__):
    if _m.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "Arg",
    "Partition",
    "SliceInfo",
    "TaskFailure",
    "TaskSpec",
    "all_specs",
    "get",
    "on_register",
    "register_task",
    "split",
    "whole",
]
