"""A hang is an error: the device watchdog stops a launch whose dependency can never be met, the
exception names the stuck task and its event, and the process (and the kernel) stay usable."""

from __future__ import annotations

import time

import pytest
import torch

import mpk_runtime as mpk


def test_unsatisfiable_dependency_raises_watchdog_error(make_pk, probe_chain):
    pk = make_pk(placement="round_robin", watchdog_timeout=0.5)
    ts = probe_chain(pk)
    blocked = 3  # its producer is task 2; ask for two increments per iteration instead of one
    pk._runner.device_graph.set_wait_count(blocked, 2)
    start = time.perf_counter()
    pk()
    with pytest.raises(mpk.WatchdogError) as info:
        pk.synchronize(timeout=30)
    elapsed = time.perf_counter() - start
    assert elapsed < 10
    msg = str(info.value)
    assert "noop_3[0]" in msg and "waits in task 3" in msg and "1 of 1 producers finished" in msg, msg
    assert info.value.record[0]["task"] == blocked
    # the tasks before the blocked one ran, the ones after did not
    assert [t.data.item() for t in ts[:4]] == [1, 2, 3, 4] and ts[4].data.item() == -7

    # the same kernel recovers once the dependency is satisfiable again
    pk._runner.device_graph.set_wait_count(blocked, 1)
    for t in ts[1:]:
        t.data.fill_(-7)
    pk()
    pk.synchronize(timeout=30)
    assert [t.data.item() for t in ts] == list(range(1, 8))


def test_process_still_builds_and_runs_after_a_watchdog_stop(make_pk):
    pk = make_pk(watchdog_timeout=0.5)
    x = torch.randn(4, 1024, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(1024, dtype=torch.bfloat16, device="cuda")
    out = torch.zeros_like(x)
    pk.rmsnorm_layer(
        input=pk.attach_input(x, "x"),
        weight=pk.attach_input(w, "w"),
        output=pk.attach_input(out, "out"),
        grid_dim=(4, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    pk()
    pk.synchronize()
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


def test_launches_after_a_stopped_one_are_skipped_and_reported(make_pk, probe_chain):
    pk = make_pk(placement="round_robin", watchdog_timeout=0.3)
    ts = probe_chain(pk, n=3)
    pk._runner.device_graph.set_wait_count(2, 5)
    pk()
    pk()  # queued behind the one that will be stopped
    with pytest.raises(mpk.WatchdogError, match="launch 1"):
        pk.synchronize(timeout=30)
    pk._runner.device_graph.set_wait_count(2, 1)
    pk()
    pk.synchronize(timeout=30)
    assert [t.data.item() for t in ts] == [1, 2, 3, 4]


def test_too_many_workers_is_an_error_before_launch(make_pk):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pk = make_pk(num_workers=2 * sms)  # with the large shared memory below, one CTA per SM at most
    x = torch.randn(16, 4096, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(12288, 4096, dtype=torch.bfloat16, device="cuda")
    pk.linear_layer(
        input=pk.attach_input(x, "x"),
        weight=pk.attach_input(w, "w"),
        output=pk.attach_input(torch.empty(16, 12288, dtype=torch.bfloat16, device="cuda"), "y"),
        grid_dim=(96, 1, 1),
        block_dim=pk.block_dim,
    )
    with pytest.raises(mpk.CoResidencyError, match=f"num_workers={2 * sms}"):
        pk.compile()


def test_an_error_of_a_finished_launch_is_raised_by_the_next_call_which_launches_nothing(make_pk, probe_chain):
    """pk() harvests the launches that finished in the same C call that launches (one call a launch);
    where one of them failed, that call launches nothing and pk() raises its error."""
    pk = make_pk(placement="round_robin", watchdog_timeout=0.3)
    ts = probe_chain(pk, n=3)
    pk._runner.device_graph.set_wait_count(2, 5)
    pk()
    torch.cuda.synchronize()  # the watchdog has stopped it; nothing has looked at its status yet
    with pytest.raises(mpk.WatchdogError, match="launch 1"):
        pk()
    assert pk._runner.launches == 1
    pk._runner.device_graph.set_wait_count(2, 1)
    for t in ts[1:]:
        t.data.fill_(-7)
    pk()
    pk.synchronize(timeout=30)
    assert [t.data.item() for t in ts] == [1, 2, 3, 4] and pk._runner.launches == 2
