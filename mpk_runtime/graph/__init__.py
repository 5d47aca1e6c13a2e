"""Graph: from layer calls to a scheduled, typed task graph.

Enters: tensors and layer calls (TaskSpec, grid, bound arguments) from the front end. Leaves: a
``CompiledGraph`` (compiled.py): every tensor, layer, variant and task with its slices and
producers, and the schedule (worker queues, events, triggers), typed and immutable, which every
later stage (codegen, build artifacts, run, profile) reads.

    tensors.py       DTensor, regions and slices, the aliasing check
    task_graph.py    layers split into tasks through their partitions
    dependencies.py  read/write hazards between tasks
    schedule.py      placement on workers, events
    variants.py      distinct template instantiations
    shuffle.py       interleaved weights (shuffle_tensors)
    compiled.py      the CompiledGraph and its JSON (compiled_reader.py reads it back, field by
                     field, compiled_checks.py checks what the fields must agree on,
                     compiled_writer.py writes the text)
    bulk.py          the garbage collector paused while big graphs are built
    queries.py       critical path, a task's producers and consumers, DOT (what mpk-graph prints)
"""

from __future__ import annotations

from .compiled import CompiledGraph, build_compiled
from .schedule import Schedule, build_schedule
from .task_graph import Layer, Task, TaskGraph, check_grid
from .tensors import DTensor, Region, TensorSlice
from .variants import Variant, collect_variants

__all__ = [
    "CompiledGraph",
    "DTensor",
    "Layer",
    "Region",
    "Schedule",
    "Task",
    "TaskGraph",
    "TensorSlice",
    "Variant",
    "build_compiled",
    "build_schedule",
    "check_grid",
    "collect_variants",
]
