"""Task declarations. Every module in this package registers its task on import; adding a task
is adding a module here (and its .cuh, reference and tests), nothing else."""

from __future__ import annotations

import importlib
import pkgutil

from .registry import TaskSpec, all_specs, get, register_task, split, whole

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "registry":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["TaskSpec", "all_specs", "get", "register_task", "split", "whole"]
