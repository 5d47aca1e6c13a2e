"""The CPU cores of an xdist worker: each worker's torch gets its share of them, not all of them.

torch's CPU ops run on an OpenMP pool as large as the machine's cores, and its threads spin for a
while after every parallel region before they sleep. With one pool per worker, N workers on N cores
keep N x N threads busy, most of them spinning through the other workers' time slices: on a 2-core
machine the emulated scenes took 2.6 times the CPU time with two workers that they took in one
process (docs/PERFORMANCE.md, "The main command and torch's threads").
"""

from __future__ import annotations

import os

THREADS_ENV = "OMP_NUM_THREADS"  # set by the user: theirs is kept; set here: the worker's children share it


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share_cores(worker_count: int) -> int | None:
    """Give this xdist worker's torch ``usable cores // worker_count`` threads (at least one), also
    for the processes it starts (through OMP_NUM_THREADS). Returns the count, or None where the user
    already chose one with OMP_NUM_THREADS."""
    if worker_count < 1:
        raise ValueError(f"an xdist session has at least one worker, got worker_count={worker_count}")
    if os.environ.get(THREADS_ENV):
        return None
    threads = max(1, usable_cores() // worker_count)
    os.environ[THREADS_ENV] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return threads
