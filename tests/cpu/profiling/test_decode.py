"""decode(): buffers laid out by the device's recorder (ported in conftest) become task spans,
prepare_next_batch spans, dropped counts and dangling records; nothing is invented."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mpk_runtime import contract
from mpk_runtime.profile.decode import Dangling, PrepareSpan, TaskSpan, decode
from mpk_runtime.profile.stats import ProfileError

T0 = 1_700_000_000_000_000_000  # a %globaltimer value (ns since the epoch): beyond 32 bits


def test_one_worker_in_order(recorder):
    dev = recorder(3 * 64, num_workers=2)
    dev.task(0, task=0, begin=T0, end=T0 + 500)
    dev.task(0, task=1, begin=T0 + 500, end=T0 + 1700)
    p = decode(dev.tensor(), 2, 1)
    assert p.tasks == [TaskSpan(0, 0, 0, 0, T0, T0 + 500), TaskSpan(1, 0, 0, 1, T0 + 500, T0 + 1700)]
    assert p.tasks[1].duration_ns == 1200
    assert (p.dropped, p.dropped_by_region, p.dangling, p.prepare) == (0, (0, 0, 0), [], [])
    assert p.problems() is None


def test_workers_iterations_and_prepare(recorder):
    dev = recorder(4 * 100, num_workers=3)
    for it in range(3):
        t = T0 + it * 10_000
        dev.prepare(it, t, t + 100)
        dev.task(0, task=0, begin=t + 200, end=t + 300, iteration=it)
        dev.task(2, task=1, begin=t + 250, end=t + 900, iteration=it)
        dev.task(0, task=2, begin=t + 950, end=t + 1000, iteration=it)
    dev.prepare(3, T0 + 30_000, T0 + 30_050)  # the call that returns false and ends the launch
    p = decode(dev.tensor(), 3, 1)
    assert [(s.worker, s.event_no, s.task, s.iteration) for s in p.tasks if s.worker == 0] == [
        (0, 0, 0, 0),
        (0, 1, 2, 0),
        (0, 2, 0, 1),
        (0, 3, 2, 1),
        (0, 4, 0, 2),
        (0, 5, 2, 2),
    ]
    assert [(s.event_no, s.task, s.iteration, s.begin_ns) for s in p.tasks if s.worker == 2] == [
        (0, 1, 0, T0 + 250),
        (1, 1, 1, T0 + 10_250),
        (2, 1, 2, T0 + 20_250),
    ]
    assert not [s for s in p.tasks if s.worker == 1]
    assert p.prepare == [PrepareSpan(i, 0, T0 + i * 10_000, T0 + i * 10_000 + 100) for i in range(3)] + [
        PrepareSpan(3, 0, T0 + 30_000, T0 + 30_050)
    ]
    assert p.dropped == 0 and not p.dangling


def test_overflow_counts_dropped_records_and_keeps_the_first(recorder):
    # 2 workers + 1 scheduler, 11 words each: 1 counter + 5 records. Worker 0 tries 8 tasks (16
    # records): the first 5 records fit, so 2 complete tasks, a begin without its end, 11 dropped.
    dev = recorder(33, num_workers=2)
    for i in range(8):
        dev.task(0, task=i, begin=T0 + 100 * i, end=T0 + 100 * i + 50)
    dev.task(1, task=9, begin=T0, end=T0 + 10)
    p = decode(dev.words, 2, 1)
    assert [s.task for s in p.tasks if s.worker == 0] == [0, 1]
    assert [s.task for s in p.tasks if s.worker == 1] == [9]
    assert p.dropped_by_region == (11, 0, 0) and p.dropped == 11
    assert p.dangling == [Dangling("worker 0", "begin", "task", 2, 0, T0 + 200)]
    assert "11 records dropped" in p.problems() and "worker 0: 11" in p.problems()
    assert "1 dangling" in p.problems()


def test_a_lost_end_in_the_middle_leaves_both_neighbours_intact():
    # Records written by hand: task 5 began and the next record is task 6's begin.
    words = [
        3,
        T0,
        5 | contract.PROF_TASK_BEGIN << 32,
        T0 + 10,
        6 | contract.PROF_TASK_BEGIN << 32,
        T0 + 20,
        6 | contract.PROF_TASK_END << 32,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]
    p = decode(words, 1, 1)
    assert p.tasks == [TaskSpan(6, 0, 0, 0, T0 + 10, T0 + 20)]
    assert p.dangling == [Dangling("worker 0", "begin", "task", 5, 0, T0)]


def test_an_end_without_its_begin_and_a_mismatched_end_are_dangling():
    words = [
        3,
        T0,
        4 | contract.PROF_TASK_END << 32,  # nothing open
        T0 + 5,
        7 | contract.PROF_TASK_BEGIN << 32,
        T0 + 9,
        8 | contract.PROF_TASK_END << 32,  # ends a task that is not the open one
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]
    p = decode(words, 1, 1)
    assert p.tasks == []
    assert [(d.edge, d.id, d.timestamp_ns) for d in p.dangling] == [("end", 4, T0), ("begin", 7, T0 + 5), ("end", 8, T0 + 9)]


def test_a_dangling_prepare_next_batch(recorder):
    dev = recorder(3 * 5, num_workers=2)  # 5 words a region: 2 records
    dev.prepare(0, T0, T0 + 10)
    dev.prepare(1, T0 + 20, T0 + 30)
    p = decode(dev.words, 2, 1)
    assert p.prepare == [PrepareSpan(0, 0, T0, T0 + 10)]
    assert p.dropped_by_region == (0, 0, 2)
    assert "scheduler 0: 2" in p.problems()


def test_the_same_task_in_another_iteration_does_not_close_a_span():
    words = [2, T0, 3 | contract.PROF_TASK_BEGIN << 32, T0 + 4, 3 | contract.PROF_TASK_END << 32 | 1 << 40, 0, 0, 0, 0, 0]
    p = decode(words, 1, 1)
    assert not p.tasks
    assert [(d.edge, d.iteration) for d in p.dangling] == [("begin", 0), ("end", 1)]


def test_empty_buffer():
    p = decode(torch.zeros(3 * 40, dtype=torch.uint64), 2, 1)
    assert (p.tasks, p.prepare, p.dangling, p.dropped) == ([], [], [], 0)


def test_full_64_bit_timestamps_through_an_int64_tensor(recorder):
    """Timestamps with the top bit set read back unsigned (no sign, no 32-bit wrap)."""
    big = 2**63 + 12345
    dev = recorder(3 * 10, num_workers=2)
    dev.task(1, task=3, begin=big, end=big + 2**33)
    signed = dev.tensor().view(torch.int64)
    assert int(signed[dev.region_words + 1]) < 0
    (span,) = decode(signed, 2, 1).tasks
    assert (span.begin_ns, span.duration_ns) == (big, 2**33)


def test_trailing_words_that_fill_no_region_are_ignored(recorder):
    dev = recorder(3 * 7 + 2, num_workers=2)  # capacity not divisible by the recorder count
    dev.task(1, task=0, begin=T0, end=T0 + 1)
    assert dev.region_words == 7
    assert decode(dev.words, 2, 1).tasks == [TaskSpan(0, 0, 1, 0, T0, T0 + 1)]


@pytest.mark.parametrize(
    "buffer, workers, schedulers, match",
    [
        ([0] * 8, 2, 1, "cannot hold one record for each of 3 recorders .*at least 9 entries"),
        ([0] * 9, 0, 1, "num_workers=0"),
        (torch.zeros(4, 9, dtype=torch.uint64), 2, 1, "1-D uint64 tensor"),
        (torch.zeros(9, dtype=torch.float32), 2, 1, "1-D uint64 tensor"),
    ],
)
def test_unusable_buffers_are_errors(buffer, workers, schedulers, match):
    with pytest.raises(ProfileError, match=match):
        decode(buffer, workers, schedulers)


@pytest.mark.parametrize(
    "region, kind, match",
    [
        (0, 9, "record kind 9"),
        (0, contract.PROF_PREPARE_BEGIN, "not one a worker writes"),
        (1, contract.PROF_TASK_BEGIN, "not one a scheduler writes"),
    ],
)
def test_records_from_another_abi_are_errors(recorder, region, kind, match):
    dev = recorder(2 * 5, num_workers=1)
    dev.record(region, kind, 0, 0, T0)
    with pytest.raises(ProfileError, match=match):
        decode(dev.words, 1, 1)


def test_an_end_before_its_begin_is_corruption(recorder):
    dev = recorder(2 * 5, num_workers=1)
    dev.task(0, task=0, begin=T0 + 10, end=T0)
    with pytest.raises(ProfileError, match="precedes its begin"):
        decode(dev.words, 1, 1)


@given(
    region_words=st.integers(3, 40),
    spare=st.integers(0, 4),
    num_workers=st.integers(1, 4),
    runs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 1000)), max_size=60),
)
def test_decode_inverts_the_device_recorder(recorder, region_words, spare, num_workers, runs):
    """Whatever fits is decoded exactly; what does not fit is counted; only the last record a worker
    kept can be a begin without its end."""
    capacity = region_words * (num_workers + 1) + min(spare, num_workers)  # spare words fill no region
    dev = recorder(capacity, num_workers)
    now, expected = T0, {w: [] for w in range(num_workers)}
    for worker, task, duration in runs:
        w = worker % num_workers
        dev.task(w, task, now, now + duration)
        expected[w].append((task, now, now + duration))
        now += duration + 1
    p = decode(dev.words, num_workers, 1)
    fits = (capacity // (num_workers + 1) - 1) // 2
    for w, runs_of_w in expected.items():
        kept = min(2 * len(runs_of_w), fits)
        assert [(s.task, s.begin_ns, s.end_ns) for s in p.tasks if s.worker == w] == runs_of_w[: kept // 2]
        assert [s.event_no for s in p.tasks if s.worker == w] == list(range(kept // 2))
        assert p.dropped_by_region[w] == 2 * len(runs_of_w) - kept
        lost = [d for d in p.dangling if d.recorder == f"worker {w}"]
        assert [(d.edge, d.id) for d in lost] == ([("begin", runs_of_w[kept // 2][0])] if kept % 2 else [])


def test_the_problem_sentence_stays_short_when_every_worker_overflowed(recorder):
    dev = recorder(10 * 3, num_workers=9)  # one record a region
    for w in range(9):
        dev.task(w, task=w, begin=T0, end=T0 + 1)
    text = decode(dev.words, 9, 1).problems()
    assert text.startswith("incomplete profile: 9 records dropped because the profiler buffer was full (worker 0: 1, ")
    assert "worker 3: 1 and 5 more recorders), 9 dangling" in text and "worker 4" not in text
