"""cpu_share.py: an xdist worker's torch gets its share of the cores (and passes it on to the
processes it starts), a user's OMP_NUM_THREADS is kept, and a worker count below one is refused."""

from __future__ import annotations

import pytest
import torch

from pytest_mpk import cpu_share


@pytest.fixture
def threads_set(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What share_cores asks of torch, recorded instead of done (this process's pool stays as it is)."""
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv(cpu_share.THREADS_ENV, raising=False)
    return calls


@pytest.mark.parametrize(("cores", "workers", "threads"), [(2, 2, 1), (16, 8, 2), (16, 3, 5), (2, 4, 1), (1, 1, 1)])
def test_each_worker_gets_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch, threads_set: list[int], cores: int, workers: int, threads: int
) -> None:
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: cores)
    assert cpu_share.share_cores(workers) == threads
    assert threads_set == [threads]
    assert cpu_share.os.environ[cpu_share.THREADS_ENV] == str(threads)  # for the worker's children


def test_the_users_thread_count_is_kept(monkeypatch: pytest.MonkeyPatch, threads_set: list[int]) -> None:
    monkeypatch.setenv(cpu_share.THREADS_ENV, "6")
    assert cpu_share.share_cores(2) is None
    assert threads_set == [] and cpu_share.os.environ[cpu_share.THREADS_ENV] == "6"


@pytest.mark.parametrize("workers", [0, -1])
def test_a_worker_count_below_one_is_refused(threads_set: list[int], workers: int) -> None:
    with pytest.raises(ValueError, match=f"at least one worker, got worker_count={workers}"):
        cpu_share.share_cores(workers)
    assert threads_set == []


def test_usable_cores_is_the_affinity_mask() -> None:
    assert cpu_share.usable_cores() == len(cpu_share.os.sched_getaffinity(0))
