"""The emulator's interleaving of the workers: seeded by the graph's tensor shapes and the launch, so
a run repeats exactly while graphs of other shapes (a scene's cases) see other orders, and a write
that a later task's write hides shows in some of them."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.run import emulator


def orders_of(batch: int, hidden: int, launches: int = 1, monkeypatch: pytest.MonkeyPatch | None = None) -> list[list[int]]:
    seen: list[list[int]] = []
    real = emulator.run

    def recording(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(list(result.order))
        return result

    assert monkeypatch is not None
    monkeypatch.setattr(emulator, "run", recording)
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(
        test_mode=True,
        emulate="reference",
        target_cc=90,
        num_workers=4,
        max_num_batched_tokens=batch,
        max_seq_length=batch,
        max_num_pages=batch,
    )
    pk = mpk.PersistentKernel(**p)
    x = pk.attach_input(torch.randn(batch, hidden, dtype=torch.bfloat16), "x")
    w = pk.attach_input(torch.ones(hidden, dtype=torch.bfloat16), "w")
    y = pk.attach_input(torch.zeros(batch, hidden, dtype=torch.bfloat16), "y")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(batch, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    for _ in range(launches):
        pk()
    pk.finalize()
    return seen


def test_a_run_repeats_and_other_shapes_see_other_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    first = orders_of(16, 256, launches=2, monkeypatch=monkeypatch)
    again = orders_of(16, 256, monkeypatch=monkeypatch)
    other = orders_of(16, 512, monkeypatch=monkeypatch)
    assert again[0] == first[0]  # a new kernel of the same graph: the same order
    assert first[1] != first[0]  # the next launch: another
    assert other[0] != first[0]  # another shape: another (it had been seed 1 for every first launch)


def test_a_task_runs_as_soon_as_its_declared_dependencies_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deepest ready task goes first: once a second-layer task's producers are done, no task of
    the first layer runs before it (unless it waits behind one in its own worker's queue), so a body
    that reads more than its declared slices reads it before it is written."""
    seen: list = []
    real = emulator.run

    def recording(graph, *args, **kwargs):
        result = real(graph, *args, **kwargs)
        seen.append((graph, list(result.order)))
        return result

    monkeypatch.setattr(emulator, "run", recording)
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(test_mode=True, emulate="reference", target_cc=90, num_workers=4, max_num_batched_tokens=16)
    pk = mpk.PersistentKernel(**p)
    x = pk.attach_input(torch.randn(16, 64, dtype=torch.bfloat16), "x")
    w = pk.attach_input(torch.ones(64, dtype=torch.bfloat16), "w")
    y = pk.attach_input(torch.zeros(16, 64, dtype=torch.bfloat16), "y")
    z = pk.attach_input(torch.zeros(16, 64, dtype=torch.bfloat16), "z")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.rmsnorm_layer(input=y, weight=w, output=z, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    pk()
    pk.finalize()
    graph, order = seen[0]
    done: set[int] = set()
    for i, tid in enumerate(order):
        t = graph.tasks[tid]
        if t.layer == 0:  # no second-layer task was ready on its worker, at the head of its queue
            for c in graph.tasks:
                pending = [q for q in graph.schedule.queues[c.worker] if q not in done]
                ready = bool(pending) and pending[0] == c.id and all(d in done for d, _ in c.deps)
                assert not (c.layer == 1 and ready), (order[: i + 1], c.id)
        done.add(tid)
