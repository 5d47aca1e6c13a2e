"""pk() launches on the stream it is given, else on torch's current stream (a ``with torch.cuda.stream(s)``
block's too): the launch runs after what that stream holds, and another stream does not wait for it."""

from __future__ import annotations

import pytest
import torch

SPIN_CYCLES = 400_000_000  # about 0.2 s: far longer than the host's steps below


@pytest.mark.parametrize("how", ["given", "current"])
def test_a_launch_goes_to_its_stream(make_pk, probe_chain, how):
    pk = make_pk()
    ts = probe_chain(pk, n=3)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()  # torch's pool streams do not wait for the default stream, nor it for them
    with torch.cuda.stream(side):
        torch.cuda._sleep(SPIN_CYCLES)
        if how == "current":
            pk()
    if how == "given":
        pk(side)
    torch.cuda.default_stream().synchronize()
    assert not side.query(), "the spin on the side stream ended before the checks: make it longer"
    assert ts[-1].data.cpu().item() == -7, "the launch ran on the default stream, not behind the side stream's spin"
    side.synchronize()
    pk.synchronize(timeout=30)
    assert [t.data.item() for t in ts] == [1, 2, 3, 4]


def test_launches_past_the_status_ring_wait_for_the_oldest_and_all_run(make_pk, probe_chain):
    """The module keeps 64 launches' statuses; behind a spin the host issues more than that, so a launch
    waits for the oldest to finish (csrc/runtime/host.cuh) and every one still runs and is harvested."""
    pk = make_pk()
    ts = probe_chain(pk, n=3)
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN_CYCLES // 8)
    for _ in range(150):
        pk()
    pk.synchronize(timeout=60)
    assert pk._runner.launches == 150 and [t.data.item() for t in ts] == [1, 2, 3, 4]
