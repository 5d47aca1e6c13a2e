"""The all-reduce layer and the ranks of a graph on the CPU: argument checks, the communication
heap's layout, the multi-rank emulator (sums, interleavings, a rank that never signals), and the
world size and rank that MPI gives."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime import contract
from mpk_runtime.build import artifacts, replay
from mpk_runtime.frontend import params as kernel_params
from mpk_runtime.run import bootstrap, diagnostics, multirank, transport
from mpk_runtime.tasks import references

allreduce = references.find("allreduce")


def rank_kernel(rank: int, world: int, batch: int = 4, hidden: int = 128, emulate: bool = True, **extra) -> mpk.PersistentKernel:
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(
        test_mode=True,
        target_cc=80,
        world_size=world,
        mpi_rank=rank,
        num_workers=3,
        max_num_batched_tokens=batch,
        max_seq_length=batch,
        max_num_pages=batch,
        **({"emulate": True} if emulate else {"compile_only": True}),
    )
    p.update(extra)
    return mpk.PersistentKernel(**p)


def chained(world: int, xs: torch.Tensor, res: torch.Tensor, grid=(4, 2, 1), layers: int = 2):
    """Per rank: ``layers`` all-reduces, each on the previous one's output (the first with a residual)."""
    kernels, outs = [], []
    b, h = xs.shape[1:]
    for r in range(world):
        pk = rank_kernel(r, world, b, h)
        x = pk.attach_input(xs[r].clone(), "x")
        residual = pk.attach_input(res.clone(), "res")
        for i in range(layers):
            out = pk.attach_input(torch.full((b, h), float("nan"), dtype=xs.dtype), f"out{i}")
            buf = pk.new_comm_tensor((2, world, b, h), xs.dtype, f"buf{i}")
            pk.allreduce_layer(x, buf, out, residual=residual if i == 0 else None, grid_dim=grid, block_dim=pk.block_dim)
            x = out
        pk.compile()
        kernels.append(pk)
        outs.append(pk.tensor(f"out{layers - 1}"))
    return kernels, outs


@pytest.mark.parametrize("world", [2, 4, 8])
def test_emulated_ranks_sum_in_rank_order_and_agree_bit_for_bit(world):
    torch.manual_seed(world)
    xs = torch.randn(world, 4, 128, dtype=torch.bfloat16)
    res = torch.randn(4, 128, dtype=torch.bfloat16)
    kernels, outs = chained(world, xs, res)
    for seed in (1, 2):
        mpk.run_emulated_ranks(kernels, seed=seed)
        first = allreduce(list(xs), res)
        want = allreduce([first] * world)
        for r in range(world):
            assert torch.equal(outs[r], want), f"rank {r}, seed {seed}"


def test_a_rank_that_never_signals_is_named_by_the_others():
    xs = torch.randn(2, 4, 128, dtype=torch.bfloat16)
    kernels, _ = chained(2, xs, torch.zeros(4, 128, dtype=torch.bfloat16), layers=1)
    graph = kernels[1].compiled_graph
    stuck = graph.layers[0].first_task + 3
    with pytest.raises(mpk.WatchdogError) as info:
        multirank.run_ranks([k._runner for k in kernels], seed=0, hold={(1, stuck)})
    msg = str(info.value)
    assert msg.startswith("emulated run of 2 ranks deadlocked in iteration 0"), msg
    assert f"rank 0: worker 0 waits in task {stuck} allreduce_0[3] for rank 1" in msg, msg
    assert "rank 1: no worker was waiting on an event" in msg, msg
    entry = next(e for e in info.value.record if e["at_rank"] == 0)
    assert (entry["task"], entry["rank"], entry["last_signal"]) == (stuck, 1, 0)


def test_one_rank_alone_is_a_copy_plus_the_residual():
    pk = rank_kernel(0, 1)
    x, res = torch.randn(4, 128, dtype=torch.bfloat16), torch.randn(4, 128, dtype=torch.bfloat16)
    out = torch.zeros(4, 128, dtype=torch.bfloat16)
    buf = pk.new_comm_tensor((2, 1, 4, 128), torch.bfloat16, "buf")
    pk.allreduce_layer(
        pk.attach_input(x, "x"),
        buf,
        pk.attach_input(out, "o"),
        residual=pk.attach_input(res, "r"),
        grid_dim=(2, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    pk()
    assert torch.equal(out, allreduce([x], res))


def test_an_emulated_rank_runs_only_with_its_peers():
    kernels, _ = chained(2, torch.randn(2, 4, 128, dtype=torch.bfloat16), torch.zeros(4, 128, dtype=torch.bfloat16), layers=1)
    with pytest.raises(mpk.StateError, match=r"rank 0: an emulated kernel of world_size=2 runs together .*run_emulated_ranks"):
        kernels[0]()
    with pytest.raises(mpk.RankError, match=r"kernels\[0\] is rank 1 of 2; pass the 2 ranks in rank order"):
        mpk.run_emulated_ranks(kernels[::-1])


def test_no_ranks_at_all_is_an_error():
    with pytest.raises(mpk.RankError, match=r"run_emulated_ranks: no kernels given; pass every rank's compiled kernel"):
        mpk.run_emulated_ranks([])


def test_one_kernel_instead_of_a_list_is_an_error():
    kernels, _ = chained(2, torch.randn(2, 4, 128, dtype=torch.bfloat16), torch.zeros(4, 128, dtype=torch.bfloat16), layers=1)
    with pytest.raises(mpk.StateError, match=r"run_emulated_ranks: kernels=.* must be a list of every rank's kernel"):
        mpk.run_emulated_ranks(kernels[0])


def _allreduce_rank(r: int, grid=(4, 1, 1), buffer="buf", rows=4, extra=None, output_dir=None):
    pk = rank_kernel(r, 2)
    buf = pk.new_comm_tensor((2, 2, rows, 128), torch.bfloat16, buffer)
    x, o = (pk.attach_input(torch.zeros(rows, 128, dtype=torch.bfloat16), n) for n in "xo")
    if extra:
        pk.attach_input(torch.zeros(8, dtype=torch.bfloat16), extra)
    pk.allreduce_layer(x, buf, o, grid_dim=grid, block_dim=pk.block_dim)
    pk.compile(output_dir)
    return pk


@pytest.mark.parametrize(
    "rank1, where",
    [
        (dict(grid=(2, 1, 1)), r"layers\[0\]\.grid\[0\] is 2 on rank 1, 4 on rank 0"),
        (dict(buffer="buf1"), r"tensors\[0\]\.name is 'buf1' on rank 1, 'buf' on rank 0"),
        (dict(extra="junk"), r"tensors \(length\) is 4 on rank 1, 3 on rank 0"),
    ],
    ids=["grid", "a tensor's name", "a tensor only rank 1 has"],
)
def test_ranks_that_built_different_graphs_are_an_error(rank1, where):
    """What the GPU ranks compare by digest (transport.fingerprint: tensors, layers, schedule), the
    emulator compares too, and names the first difference: a tensor that one rank alone declares,
    or names differently, had run (or ended in a KeyError) emulated while the GPU refused it."""
    kernels = [_allreduce_rank(0), _allreduce_rank(1, **rank1)]
    with pytest.raises(
        mpk.RankError,
        match=rf"^rank 1 built a different task graph or schedule than rank 0: {where}; every rank must declare the same "
        r"tensors and layers \(names, shapes, grids\) with the same num_workers",
    ):
        mpk.run_emulated_ranks(kernels)


def test_layer_checks_name_the_fix():
    pk = rank_kernel(0, 2, emulate=False)
    x = pk.attach_input(torch.zeros(4, 128, dtype=torch.bfloat16), "x")
    o = pk.attach_input(torch.zeros(4, 128, dtype=torch.bfloat16), "o")
    plain = pk.new_tensor((2, 2, 4, 128), torch.bfloat16, "plain")
    with pytest.raises(
        mpk.GraphError, match=r"buffer .* must be a communication tensor.*pk.new_comm_tensor\(\(2, pk.world_size, 4, 128\)"
    ):
        pk.allreduce_layer(x, plain, o, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    wrong = pk.new_comm_tensor((2, 1, 4, 128), torch.bfloat16, "wrong")
    with pytest.raises(mpk.ShapeError, match=r"buffer must be bf16 of shape \(2, 2, 4, 128\)"):
        pk.allreduce_layer(x, wrong, o, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    buf = pk.new_comm_tensor((2, 2, 4, 128), torch.bfloat16, "buf")
    with pytest.raises(
        mpk.ShapeError, match=r"grid x = 32 gives slices of 4 columns; each slice row must be whole 16-byte vectors"
    ):
        pk.allreduce_layer(x, buf, o, grid_dim=(32, 1, 1), block_dim=pk.block_dim)
    pk.allreduce_layer(x, buf, o, grid_dim=(4, 2, 1), block_dim=pk.block_dim)
    o2 = pk.attach_input(torch.zeros(4, 128, dtype=torch.bfloat16), "o2")
    with pytest.raises(
        mpk.GraphError, match="buffer 'buf' is already used by another layer; every all-reduce layer needs its own"
    ):
        pk.allreduce_layer(o, buf, o2, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    with pytest.raises(mpk.StateError, match=r"tensor\('buf'\): a communication tensor's memory is allocated by compile\(\)"):
        pk.tensor("buf")


def test_compile_only_builds_for_two_ranks_without_mpi(tmp_path):
    pk = rank_kernel(1, 2, emulate=False)
    x, o, r = (pk.attach_input(torch.zeros(4, 128, dtype=torch.bfloat16), n) for n in ("x", "o", "r"))
    buf = pk.new_comm_tensor((2, 2, 4, 128), torch.bfloat16, "buf")
    pk.allreduce_layer(x, buf, o, residual=r, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.compile(output_dir=tmp_path)
    assert pk.build_result.entry.name.startswith("allreduce_bf16_4_32_4_128_t")
    assert (tmp_path / "test_rank1.cu").is_file() and (tmp_path / "task_graph_rank1.json").is_file()
    assert pk.compiled_graph.tensor("buf").kind == "comm"
    assert (pk.world_size, pk.rank) == (2, 1)


def test_heap_layout_is_aligned_and_ends_with_the_signals():
    layout = transport.plan([("a", 100), ("b", 512)], num_tasks=5, world_size=2)
    assert layout.offsets == {"a": 0, "b": 256}
    assert (layout.signals, layout.num_signals, layout.nbytes) == (768, 10, 768 + 80)


def test_watchdog_record_of_a_wait_for_another_rank():
    view = diagnostics.ScheduleView(["allreduce_0[0]", "allreduce_0[1]"], [[0], [1]], [0, 1], [None, None], [])
    status = torch.tensor([[1, 7, 1, -1], [-1, -1, -1, -1]], dtype=torch.int32)
    record = diagnostics.watchdog_record(view, 0, 7, status.flip(0), torch.zeros(2), lambda task, q: 3)
    assert record == [{"worker": 1, "task": 1, "label": "allreduce_0[1]", "rank": 1, "last_signal": 3}]
    line = diagnostics.format_watchdog(record, 0, 10**9, 1.0).splitlines()[1]
    assert "worker 1 waits in task 1 allreduce_0[1] for rank 1, whose part of it has not come" in line
    assert "the last rank 1 sent is for iteration 2, counting every launch" in line
    assert contract.NO_RANK == 0xFFFFFFFF


def test_world_size_and_rank_come_from_the_mpi_launcher(monkeypatch):
    pytest.importorskip("mpi4py")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert bootstrap.launched() == (4, 3, 1)
    d = mpk.PersistentKernel.get_default_init_parameters()
    assert (d["world_size"], d["mpi_rank"]) == (4, 3)
    p = kernel_params.parse({"test_mode": True})
    assert (p.world_size, p.mpi_rank) == (4, 3)
    for name in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        monkeypatch.delenv(name)
    monkeypatch.delenv("PMI_SIZE", raising=False)
    assert bootstrap.launched() is None and mpk.PersistentKernel.get_default_init_parameters()["world_size"] == 1


def test_more_than_one_rank_on_the_gpu_needs_mpi(monkeypatch):
    monkeypatch.setattr(bootstrap, "launched", lambda: None)
    with pytest.raises(mpk.ConfigError, match=r"world_size=2 on the GPU needs one process per rank started by MPI.*mpirun -n 2"):
        bootstrap.require_world(2, 0)
    with pytest.raises(mpk.ConfigError, match=r"world_size=64 is more than the 32 ranks"):
        kernel_params.parse({"world_size": 64})


@pytest.mark.parametrize("world", [2, 3])
def test_allgather_puts_every_rank_side_by_side_with_global_indices(world):
    kernels, outs, parts = [], [], []
    for r in range(world):
        pk = rank_kernel(r, world, batch=4, hidden=64)
        idx = torch.arange(4 * 8, dtype=torch.int64).reshape(4, 8) + 100 * r
        val = torch.randn(4, 8)
        all_idx = torch.zeros(4, 8 * world, dtype=torch.int64)
        all_val = torch.zeros(4, 8 * world)
        args = [(idx, all_idx, torch.int64, 1000), (val, all_val, torch.float32, 0)]
        for i, (x, out, dtype, offset) in enumerate(args):
            buf = pk.new_comm_tensor((2, world, 4, 8), dtype, f"buf{i}")
            pk.allgather_layer(
                pk.attach_input(x, f"x{i}"),
                buf,
                pk.attach_input(out, f"o{i}"),
                grid_dim=(1, 2, 1),
                block_dim=pk.block_dim,
                rank_offset=offset,
            )
        pk.compile()
        kernels.append(pk)
        outs.append((all_idx, all_val))
        parts.append((idx, val))
    mpk.run_emulated_ranks(kernels, seed=5)
    gather = references.find("allgather")
    for r in range(world):
        assert torch.equal(outs[r][0], gather([p[0] for p in parts], 1000))
        assert torch.equal(outs[r][1], gather([p[1] for p in parts]))


def test_allgather_offsets_only_integers():
    pk = rank_kernel(0, 2, emulate=False)
    x = pk.attach_input(torch.zeros(4, 8), "x")
    out = pk.attach_input(torch.zeros(4, 16), "out")
    buf = pk.new_comm_tensor((2, 2, 4, 8), torch.float32, "buf")
    with pytest.raises(mpk.DTypeError, match="rank_offset applies to integer tensors"):
        pk.allgather_layer(x, buf, out, grid_dim=(1, 1, 1), block_dim=pk.block_dim, rank_offset=8)
    with pytest.raises(mpk.ShapeError, match=r"output must be fp32 of shape \(4, 16\)"):
        pk.allgather_layer(x, buf, x, grid_dim=(1, 1, 1), block_dim=pk.block_dim)


def test_a_saved_multi_rank_graph_reads_back(tmp_path):
    """The all-reduce's buffer is picked at run time by grid y and x (each task sees the whole
    dimensions): its partition is valid in a saved graph, which replays and mpk-graph read back
    (they had refused it as a damaged file)."""
    _allreduce_rank(0, grid=(4, 2, 1), output_dir=tmp_path)
    out = artifacts.read(tmp_path, 0)
    (buf,) = (a for a in out.graph.layers[0].args if a.tensor == "buf")
    assert buf.partition == "dim 2 chosen at run time by grid y, dim 3 chosen at run time by grid x"
    plan = replay.plan(tmp_path, 0)
    assert plan.output.edited is None


def test_every_rank_of_a_saved_graph_replays_together(tmp_path):
    """Each rank's directory replays in its rank (PersistentKernel.from_artifacts(dir, tensors, rank)),
    its communication tensors allocated again, not asked of the caller; emulated together, the
    replayed ranks compute the all-reduce."""
    for r in range(2):
        _allreduce_rank(r, output_dir=tmp_path)
    xs = [torch.randn(4, 128, dtype=torch.bfloat16) for _ in range(2)]
    with pytest.raises(mpk.GraphError, match=r"unknown \['buf'\] \(\['buf'\]: communication memory, which the replay allocates"):
        mpk.PersistentKernel.from_artifacts(
            tmp_path, {"x": xs[0], "o": xs[0].clone(), "buf": torch.zeros(2, 2, 4, 128)}, 0, emulate=True
        )
    kernels = [
        mpk.PersistentKernel.from_artifacts(
            tmp_path, {"x": xs[r], "o": torch.zeros(4, 128, dtype=torch.bfloat16)}, r, emulate=True
        )
        for r in range(2)
    ]
    for pk in kernels:
        pk.compile()
    mpk.run_emulated_ranks(kernels)
    want = (xs[0].float() + xs[1].float()).bfloat16()
    for pk in kernels:
        torch.testing.assert_close(pk.tensor("o"), want, rtol=0, atol=0)
