"""The ranks' message channel (run/bootstrap.py) over an in-memory network in place of MPI: keyed
exchanges, a rank that says it failed ends the others' waits at once, one that never comes is named
after the timeout, and exchanges are matched by purpose, so a rank that skipped one stays in step."""

from __future__ import annotations

import threading
import time
from collections import deque

import pytest

from mpk_runtime import RankError
from mpk_runtime.run.bootstrap import MpiWorld


class _Status:
    source = -1

    def Get_source(self) -> int:
        return self.source


class _Done:
    def Test(self) -> bool:
        return True


class _Comm:
    """One rank's end of a shared in-memory network (isend / iprobe / recv, as mpi4py's lowercase API)."""

    def __init__(self, queues: dict, rank: int, size: int):
        self.queues, self.rank, self.size = queues, rank, size

    def isend(self, data, dest: int, tag: int) -> _Done:
        self.queues[(self.rank, dest)].append(data)
        return _Done()

    def iprobe(self, source: int, tag: int, status: _Status) -> bool:
        for q in range(self.size):
            if self.queues[(q, self.rank)]:
                status.source = q
                return True
        return False

    def recv(self, source: int, tag: int):
        return self.queues[(source, self.rank)].popleft()


class _Mpi:
    ANY_SOURCE = -1
    Status = _Status


def worlds(n: int) -> list[MpiWorld]:
    queues = {(a, b): deque() for a in range(n) for b in range(n)}
    out = []
    for r in range(n):
        w = object.__new__(MpiWorld)
        w._mpi, w.comm, w.rank, w.size = _Mpi, _Comm(queues, r, n), r, n
        w.context, w._counts, w._mailbox, w._sending = "", {}, {}, []
        out.append(w)
    return out


def together(*calls):
    results, errors = [None] * len(calls), [None] * len(calls)

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as e:  # noqa: BLE001
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors


def test_every_rank_gets_every_payload_by_rank():
    a, b, c = worlds(3)
    results, errors = together(*(lambda w=w: w.exchange("hello", f"from {w.rank}", 10) for w in (a, b, c)))
    assert errors == [None] * 3
    assert results == [["from 0", "from 1", "from 2"]] * 3


def test_a_rank_that_says_it_failed_ends_the_wait_at_once():
    a, b = worlds(2)
    b.set_context("item")
    a.set_context("item")
    b.fail("rank 1 could not build")
    start = time.monotonic()
    with pytest.raises(RankError, match="rank 0: rank 1 failed: rank 1 could not build") as info:
        a.exchange("compiled", None, 30)
    assert time.monotonic() - start < 5 and info.value.failures == {1: "rank 1 could not build"}
    results, errors = together(
        lambda: a.exchange("outcome", "ok", 10, abandon=False), lambda: b.exchange("outcome", "bad", 10, abandon=False)
    )
    assert errors == [None, None] and results[0] == ["ok", "bad"]


def test_a_rank_that_never_comes_is_named_after_the_timeout():
    a, _ = worlds(2)
    with pytest.raises(RankError, match=r"rank 0: rank 1 did not reach 'built' within 0.2 s") as info:
        a.exchange("built", None, 0.2)
    assert info.value.ranks == [1] and info.value.failures == {}


def test_exchanges_match_by_purpose_and_context():
    a, b = worlds(2)
    a.set_context("old")
    b.set_context("old")
    with pytest.raises(RankError):
        a.exchange("heap", "stale", 0)  # sent; b never takes it
    a.set_context("new")
    b.set_context("new")
    results, errors = together(lambda: a.exchange("heap", "a", 10), lambda: b.exchange("heap", "b", 10))
    assert errors == [None, None] and results == [["a", "b"], ["a", "b"]]
