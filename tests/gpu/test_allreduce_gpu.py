"""The all-reduce across GPUs, run under MPI, one rank per GPU:

    mpirun -n 2 python -m pytest tests/gpu/test_allreduce_gpu.py -p mpk     (any world size)

Every rank runs every test in step. Results are exact (fp32 sums in rank order, one rounding, on
every rank alike); a rank that never launches, or whose task never signals, makes the others' watchdog
name it; ranks that build different graphs are refused at compile()."""

from __future__ import annotations

import time

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.harness import find_reference, mpi_world

allreduce = find_reference("allreduce")
pytestmark = pytest.mark.mpk_gpus(2)
H = 4096


@pytest.fixture(scope="module")
def world():
    """The MPI job's channel; the tests need one rank per GPU."""
    w = mpi_world()
    if w is None:
        pytest.skip("run under MPI: mpirun -n 2 python -m pytest tests/gpu/test_allreduce_gpu.py")
    return w


@pytest.fixture
def make(world):
    """Kernels of this rank (world_size and mpi_rank from MPI), finalized at teardown in every rank."""
    made = []

    def build(**overrides) -> mpk.PersistentKernel:
        params = mpk.PersistentKernel.get_default_init_parameters()
        workers, schedulers = mpk.get_configurations_from_gpu(torch.cuda.current_device())
        params.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers, comm_timeout=60)
        params.update(overrides)
        pk = mpk.PersistentKernel(**params)
        made.append(pk)
        return pk

    yield build
    for pk in made:
        try:
            pk.finalize()
        except mpk.KernelError:
            pass


def inputs(world, batch: int, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every rank's input (the same draw on every rank) and a residual, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(world.size, batch, H, generator=g).to(torch.bfloat16)
    return list(xs), torch.randn(batch, H, generator=g).to(torch.bfloat16)


def allreduce_graph(pk, x, batch: int, layers: int, residual=None, grid=(16, 1, 1)):
    """``layers`` chained all-reduces on ``x`` (the first with ``residual``); returns the outputs."""
    outs = []
    t = pk.attach_input(x, "x")
    res = pk.attach_input(residual, "res") if residual is not None else None
    for i in range(layers):
        out = torch.full((batch, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        o = pk.attach_input(out, f"out{i}")
        buf = pk.new_comm_tensor((2, pk.world_size, batch, H), torch.bfloat16, f"buf{i}")
        pk.allreduce_layer(t, buf, o, residual=res if i == 0 else None, grid_dim=grid, block_dim=pk.block_dim)
        outs.append(out)
        t = o
    return outs


@pytest.mark.parametrize("batch, grid", [(1, (16, 1, 1)), (8, (32, 1, 1)), (64, (32, 4, 1)), (256, (64, 4, 1))])
def test_sum_over_ranks_plus_residual_is_exact(world, make, batch, grid):
    xs, res = inputs(world, batch, seed=batch)
    pk = make(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch)
    outs = allreduce_graph(pk, xs[world.rank].cuda(), batch, 2, res.cuda(), grid)
    pk.compile()
    first = allreduce(xs, res)
    want = allreduce([first] * world.size)
    for launch in range(4):  # the signals' epochs and the buffers' generations go on across launches
        for o in outs:
            o.fill_(float("nan"))
        pk()
        pk.synchronize(timeout=60)
        assert torch.equal(outs[0].cpu(), first), f"launch {launch}"
        assert torch.equal(outs[1].cpu(), want), f"launch {launch}"


def test_decode_loop_of_many_iterations(world, make):
    """Offline mode: one launch runs 16 iterations, each all-reducing the same input."""
    steps, batch = 16, 8
    xs, _ = inputs(world, batch, seed=7)
    pk = make(
        test_mode=False,
        max_num_batched_tokens=batch,
        max_num_batched_requests=batch,
        max_seq_length=steps + 1,
        max_num_pages=batch * (steps + 1),
        meta_tensors={
            "tokens": torch.ones(batch, steps + 1, dtype=torch.int64, device="cuda"),
            "prompt_lengths": torch.ones(batch, dtype=torch.int32, device="cuda"),
        },
    )
    outs = allreduce_graph(pk, xs[world.rank].cuda(), batch, 3, grid=(16, 2, 1))
    pk.compile()
    pk()
    pk.synchronize(timeout=60)
    want = allreduce([allreduce([allreduce(xs)] * world.size)] * world.size)
    assert torch.equal(outs[2].cpu(), want)


def test_a_rank_that_never_launches_is_named_by_the_others(world, make):
    batch = 8
    xs, _ = inputs(world, batch, seed=3)
    pk = make(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch, watchdog_timeout=1.0)
    allreduce_graph(pk, xs[world.rank].cuda(), batch, 1)
    pk.compile()
    silent = world.size - 1
    if world.rank == silent:
        world.exchange("the others have run", None, 120)
        return
    start = time.monotonic()
    pk()
    with pytest.raises(mpk.WatchdogError) as info:
        pk.synchronize(timeout=60)
    world.exchange("the others have run", None, 120)
    assert time.monotonic() - start < 30
    msg = str(info.value)
    assert f"rank {world.rank} of {world.size}: watchdog:" in msg, msg
    assert f"for rank {silent}, whose part of it has not come (rank {silent} has sent this task nothing" in msg, msg
    assert {r["rank"] for r in info.value.record} == {silent}
    with pytest.raises(mpk.KernelError, match="signals are out of step now: build new kernels on every rank"):
        pk()


def test_a_rank_whose_task_never_signals(world, make):
    """The last rank's first all-reduce task waits for a producer count it can never get: its own watchdog
    names the local event, every other rank's names the last rank."""
    batch = 8
    xs, _ = inputs(world, batch, seed=4)
    pk = make(
        max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch, watchdog_timeout=1.0, placement="round_robin"
    )
    w = torch.ones(H, dtype=torch.bfloat16, device="cuda")
    x = pk.attach_input(xs[world.rank].cuda(), "x")
    normed = pk.new_tensor((batch, H), torch.bfloat16, "normed")
    out = pk.attach_input(torch.zeros(batch, H, dtype=torch.bfloat16, device="cuda"), "out")
    buf = pk.new_comm_tensor((2, world.size, batch, H), torch.bfloat16, "buf")
    pk.rmsnorm_layer(input=x, weight=pk.attach_input(w, "w"), output=normed, grid_dim=(batch, 1, 1), block_dim=pk.block_dim)
    pk.allreduce_layer(normed, buf, out, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    ar = pk.compiled_graph.layers[1]
    stuck = next(t.id for t in pk.compiled_graph.tasks[ar.first_task : ar.first_task + ar.num_tasks] if t.wait_event is not None)
    last = world.size - 1
    if world.rank == last:
        pk._runner.device_graph.set_wait_count(stuck, 1000)
    pk()
    with pytest.raises(mpk.WatchdogError) as info:
        pk.synchronize(timeout=60)
    msg = str(info.value)
    if world.rank == last:
        assert f"waits in task {stuck} allreduce_0[" in msg and "on event" in msg, msg
    else:
        assert f"for rank {last}, whose part of it has not come" in msg, msg


def test_ranks_that_build_different_graphs_are_refused(world, make):
    pk = make(max_num_batched_tokens=1, max_seq_length=1, max_num_pages=1)
    allreduce_graph(pk, torch.zeros(1, H, dtype=torch.bfloat16, device="cuda"), 1, 1, grid=(16 if world.rank == 0 else 8, 1, 1))
    with pytest.raises(
        mpk.RankError,
        match=r"rank \d built a different layers and schedule.* than rank \d: every rank must build the same layers",
    ):
        pk.compile()


def test_a_saved_graph_replays_on_every_rank(world, make, tmp_path):
    """compile(output_dir) on every rank, then each rank's directory replayed in that rank
    (PersistentKernel.from_artifacts: the communication tensors allocated again): the replayed ranks
    all-reduce as the built ones did."""
    batch = 8
    xs, res = inputs(world, batch, seed=11)
    out_dir = world.exchange("the artifacts directory", str(tmp_path), 120)[0]  # rank 0's, for every rank
    pk = make(max_num_batched_tokens=batch, max_seq_length=batch, max_num_pages=batch)
    (out,) = allreduce_graph(pk, xs[world.rank].cuda(), batch, 1, residual=res.cuda())
    pk.compile(out_dir)
    pk()
    pk.synchronize(timeout=60)
    want = allreduce(xs, res)
    assert torch.equal(out.cpu(), want)
    pk.finalize()

    again = torch.full((batch, H), float("nan"), dtype=torch.bfloat16, device="cuda")
    replayed = mpk.PersistentKernel.from_artifacts(
        out_dir, {"x": xs[world.rank].cuda(), "res": res.cuda(), "out0": again}, world.rank, comm_timeout=60
    )
    try:
        replayed.compile()
        replayed()
        replayed.synchronize(timeout=60)
    finally:
        replayed.finalize()
    assert torch.equal(again.cpu(), want)
