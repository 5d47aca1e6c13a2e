"""The CUDA a host-emulated block sees: barriers (block and named), static and dynamic shared memory, every shuffle at
every width, votes, atomics, and the run order (selectable, deterministic per seed). Expected
values come from the CUDA programming guide's wording, written here independently of the shim's
PTX-based implementation."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch
from emu_helpers import THREADS as N

ORDERS = [("in_order", 0), ("reversed", 0), ("shuffled", 1), ("shuffled", 2)]


def lane_of(t: int) -> int:
    return t % 32


def table(out: torch.Tensor, rows: int) -> list[list[int]]:
    return (out[: rows * N].view(rows, N).to(torch.int64) & 0xFFFFFFFF).tolist()


@pytest.mark.parametrize("order,seed", ORDERS)
def test_barriers_and_block_reduce(kernels, order, seed):
    out = torch.zeros(9 * N, dtype=torch.int32)
    assert kernels.run("barriers", out, order=order, seed=seed).ok
    got = table(out, 9)
    assert got[0] == [(t + 1) % N for t in range(N)]  # the neighbour's write, seen across the barrier
    assert got[1] == [len(range(0, N, 3))] * N  # __syncthreads_count
    assert got[2:6] == [[1] * N, [0] * N, [1] * N, [0] * N]  # _and(true), _and(t != 5), _or(t == 77), _or(false)
    assert got[6] == [N * (N - 1) // 2] * N
    assert got[7] == [max(t * 7 % 101 for t in range(N))] * N
    assert got[8] == [1000 + N - 1 - t for t in range(N)]  # a second __shared__ array is its own


def test_dynamic_shared_memory(kernels):
    out = torch.zeros(2 * N, dtype=torch.float32)
    assert kernels.run("dynamic_shared", out, dynamic_smem=2 * N * 4).ok
    assert out[:N].tolist() == [N - 1 - t + 0.5 for t in range(N)]
    assert out[N:].tolist() == [-(N - 1 - t) for t in range(N)]


def test_dynamic_shared_memory_starts_poisoned(kernels):
    """Without race checking, a read of shared memory nobody wrote sees the poison. NaN alone vanishes
    in fmaxf and comparisons (a missing barrier before a max reduction had passed), so the tasks
    cycle through NaN and a huge positive and negative value."""
    seen = {}
    for task_id in range(6):
        out = torch.zeros(N, dtype=torch.int32)
        assert kernels.run("reads_unwritten", out, task_id=task_id, dynamic_smem=4 * N).ok
        assert (out == out[0]).all()
        seen[task_id] = out[0].view(torch.float32).item()
    assert [math.isnan(v) for v in seen.values()] == [True, False, False] * 2
    assert seen[1] == seen[4] == pytest.approx(3.39e38, rel=1e-2) and seen[2] == seen[5] == pytest.approx(-1.69e38, rel=1e-2)


def idx(lane, src, w):
    return lane // w * w + src % w


def up(lane, d, w):
    return lane - d if lane % w >= d else lane


def down(lane, d, w):
    return lane + d if lane % w + d < w else lane


def xor(lane, m, w):  # "can access earlier groups; a later group gives back the caller's own value"
    j = lane ^ m
    return lane if j // w > lane // w else j


def test_every_shuffle_at_every_width(kernels):
    out = torch.zeros(37 * N, dtype=torch.int32)
    assert kernels.run("shuffles", out).ok
    got = table(out, 37)

    def expect(source_lane):
        return [10 * (t // 32 * 32 + source_lane(lane_of(t))) + 1 for t in range(N)]

    k = 0
    for w in (1, 2, 4, 8, 16, 32):
        assert got[k] == expect(lambda lane, w=w: idx(lane, lane * 3 + 1, w)), f"__shfl_sync width {w}"
        assert got[k + 1] == expect(lambda lane, w=w: up(lane, 3, w)), f"__shfl_up_sync width {w}"
        assert got[k + 2] == expect(lambda lane, w=w: down(lane, 3, w)), f"__shfl_down_sync width {w}"
        assert got[k + 3] == expect(lambda lane, w=w: xor(lane, 5, w)), f"__shfl_xor_sync 5 width {w}"
        assert got[k + 4] == expect(lambda lane, w=w: xor(lane, 16, w)), f"__shfl_xor_sync 16 width {w}"
        k += 5
    assert got[30] == expect(lambda lane: 7)
    assert got[31] == expect(lambda lane: down(lane, 1, 32))
    src = [t // 32 * 32 + down(lane_of(t), 1, 32) for t in range(N)]
    assert got[32] == src and got[33] == src  # both halves of an 8-byte value
    assert got[34] == [2 * (t // 32 * 32 + xor(lane_of(t), 2, 32)) + 1 for t in range(N)]  # a double
    assert got[35] == [31] * N  # a 2-byte bfloat16
    assert got[36] == [10 * (t ^ 1) + 1 if lane_of(t) < 16 else 0 for t in range(N)]  # mask of lanes 0-15


def test_votes_and_syncwarp(kernels):
    out = torch.zeros(6 * N, dtype=torch.int32)
    assert kernels.run("votes", out).ok
    got = table(out, 6)
    assert got[0] == [sum(1 << lane for lane in range(32) if lane % 3 == 0)] * N
    assert got[1] == [int(t // 32 == 37 // 32) for t in range(N)]
    assert got[2] == [1] * N and got[3] == [0] * N
    odd_high = sum(1 << lane for lane in range(16, 32) if lane & 1)
    assert got[4] == [odd_high if lane_of(t) >= 16 else 0 for t in range(N)]
    assert got[5] == [1] * N


@pytest.mark.parametrize("order,seed", ORDERS)
def test_atomics(kernels, order, seed):
    out = torch.zeros(16 + N, dtype=torch.int32)
    g = torch.zeros(2, dtype=torch.int64)
    assert kernels.run("atomics", out, g, order=order, seed=seed).ok
    got = (out.to(torch.int64) & 0xFFFFFFFF).tolist()
    xor_all = 0
    for t in range(N):
        xor_all ^= t
    assert got[:9] == [N, N, 100, 3, 0xFFFFFFFF, 0xFFFF0000, xor_all, N % 10, N - 1]
    assert g.tolist() == [N * (N - 1) // 2, (N - 1) << 32]
    if order == "in_order":  # CAS chains and exchanges follow the run order
        assert got[9] == N and got[10] == N - 1
        assert got[16:] == [0xFFFFFFFF] + list(range(N - 1))
    if order == "reversed":
        assert got[9] == 1 and got[10] == 0
    # The global words it updated atomically, as the scratch check reads them (run/layer_scratch.py).
    words = dict(kernels.module.atomic_words())
    assert words[g.data_ptr()] == 8 and words[g.data_ptr() + 8] == 8
    assert not any(out.data_ptr() <= a < out.data_ptr() + out.nbytes for a in words)  # plain stores


def test_atomic_words_are_the_last_tasks_only(kernels):
    g = torch.zeros(2, dtype=torch.int64)
    assert kernels.run("atomics", torch.zeros(16 + N, dtype=torch.int32), g).ok and kernels.module.atomic_words()
    assert kernels.run("barriers", torch.zeros(9 * N, dtype=torch.int32)).ok
    assert kernels.module.atomic_words() == []


@pytest.mark.parametrize("order,seed", ORDERS)
def test_named_barriers_let_pipelines_run_their_own_rounds(kernels, order, seed):
    out = torch.zeros(6 * N, dtype=torch.int32)
    assert kernels.run("named_barriers", out, order=order, seed=seed).ok
    got, half = table(out, 6), N // 2
    for r in range(5):
        rounds = [3 if t < half else 5 for t in range(N)]
        partner = [t // half * half + (t % half + 1) % half for t in range(N)]
        assert got[r] == [1000 * r + partner[t] if r < rounds[t] else 0 for t in range(N)], f"round {r}"
    assert got[5] == [7 * (t - 64) if t // 32 == 2 else 0 for t in range(N)]  # warp 0's words, through warp 1


def test_warp_exchange_ordered_by_syncwarp(kernels):
    out = torch.zeros(N, dtype=torch.int32)
    assert kernels.run("warp_synced", out).ok
    assert out.tolist() == [3 * (t ^ 1) for t in range(N)]


def test_order_is_selectable_and_deterministic_per_seed(kernels):
    def last(order, seed=0):
        out = torch.zeros(1, dtype=torch.int32)
        assert kernels.run("last_writer", out, order=order, seed=seed).ok
        return int(out[0])

    assert last("in_order") == N - 1 and last("reversed") == 0
    by_seed = [last("shuffled", s) for s in range(8)]
    assert by_seed == [last("shuffled", s) for s in range(8)]  # same seed, same interleaving
    assert len(set(by_seed)) > 1  # different seeds expose the order dependence


def test_task_error_is_returned_with_code_and_value(kernels):
    run = kernels.run("task_error", task_id=11)
    assert run.status == "task_error" and run.task_error == (1, 42)
    assert run.report == "task 11 reported error 1 (value 42)"
    later = kernels.run("task_error", task_id=11, runtime=(9, 2, 30))  # Runtime::fail tags the report with the launch
    assert later.status == "task_error" and later.task_error == (1, 42)


def test_device_variables_are_listed_and_keep_their_values(kernels, monkeypatch):
    """A __device__ variable is state that outlives a launch: the module lists it (and no state of the
    emulator's own, nor __shared__ variables, thread-local on the host), and it keeps its value."""
    from mpk_runtime.run import device_variables as dv

    assert dv.device_variables(kernels.module.path) == ("mpk::test::launch_count",)
    out = torch.zeros(1, dtype=torch.int32)
    assert kernels.run("counts_launches", out).ok and kernels.run("counts_launches", out).ok
    assert int(out[0]) >= 2  # the second run saw the first one's count
    # Where the loaded module holds it (the scratch check watches it there: run/layer_scratch.py).
    [(name, address, size)] = kernels.module.device_variables()
    assert name == "mpk::test::launch_count" and size == 4 and ctypes.c_int.from_address(address).value == int(out[0])

    def no_readelf(*args, **kwargs):
        raise FileNotFoundError("readelf")

    monkeypatch.setattr(dv.subprocess, "run", no_readelf)
    dv.symbols.cache_clear()
    assert dv.device_variables(kernels.module.path) is None  # cannot say: the harness assumes there may be some
    assert dv.variable_memory(kernels.module.path, None) == []
    dv.symbols.cache_clear()


def test_the_runtime_says_which_launch_and_iteration_runs(kernels):
    """As a GPU worker's Runtime does (a task that tags state with them sees a relaunch as there)."""
    out = torch.full((3,), -1, dtype=torch.int64)
    assert kernels.run("runtime_view", out).ok
    assert out.tolist() == [1, 0, 0]  # the first launch's first iteration
    assert kernels.run("runtime_view", out, runtime=(4, 2, 17)).ok
    assert out.tolist() == [4, 2, 17]


def test_switch_cost_is_measurable(kernels):
    assert 0 < kernels.module.switch_ns(10_000) < 10_000
