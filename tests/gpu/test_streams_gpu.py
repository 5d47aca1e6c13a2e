"""pk() launches on the stream it is given, else on torch's current stream (a ``with torch.cuda.stream(s)``
block's too): the launch runs after what that stream holds, and another stream does not wait for it."""

from __future__ import annotations

import pytest
import torch

SPIN_CYCLES = 400_000_000  # about 0.2 s: far longer than the host's steps below


def chain(pk, n=3):
    ts = [pk.attach_input(torch.full((1,), -7, dtype=torch.int32, device="cuda"), f"t{i}") for i in range(n + 1)]
    ts[0].data.fill_(1)
    for i in range(n):
        pk.noop_layer([ts[i]], [ts[i + 1]], grid_dim=(1, 1, 1), block_dim=pk.block_dim, probe=True)
    pk.compile()
    return ts


@pytest.mark.parametrize("how", ["given", "current"])
def test_a_launch_goes_to_its_stream(make_pk, how):
    pk = make_pk()
    ts = chain(pk)
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
