"""Building big graphs with the cyclic garbage collector paused.

A graph of tens of thousands of tasks is hundreds of thousands of small objects, none of them
garbage; while they are made, every full collection walks all of them again, which made graph
building several times slower (bench/bench_graph_build.py). Collection resumes afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
