"""A tensor changed in place after attach_input (resize_, set_, as_strided_) is refused at
compile() and at every launch: the graph was cut, and the kernel holds pointers, for the tensor as
it was attached."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.errors import LayoutError


def rmsnorm(pk, rows: int = 4):
    x = pk.attach_input(torch.randn(rows, 256), "x")
    w = pk.attach_input(torch.ones(256), "w")
    y = pk.attach_input(torch.zeros(rows, 256), "y")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(rows, 1, 1), block_dim=pk.block_dim)
    return pk


def test_resized_before_compile(make_pk):
    pk = rmsnorm(make_pk(90, test_mode=True))
    pk.tensor("y").resize_(8, 256)  # 4 rows more, which no task writes
    with pytest.raises(
        LayoutError,
        match=r"^compile\(\): tensor 'y' changed after attach_input: it was \[4, 256\] with strides \[256, 1\] at 0x[0-9a-f]+ "
        r"\(storage 4096 bytes, torch.float32 on cpu\), now \[8, 256\] with strides \[256, 1\] at 0x[0-9a-f]+ \(storage 8192 "
        r"bytes, torch.float32 on cpu\); the kernel was built for the tensor as attached: attach tensors in their final shape "
        r"and do not resize_ / set_ them afterwards$",
    ):
        pk.compile()


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.resize_(2, 256),  # smaller: same storage, other shape
        lambda t: t.set_(torch.zeros(4, 256)),  # another storage
        lambda t: t.as_strided_((4, 128), (256, 1)),
        lambda t: t.t_(),
        lambda t: t.untyped_storage().resize_(64),  # the storage shrunk under an unchanged shape
        lambda t: setattr(t, "data", t.data.view(torch.int32)),  # same bytes, another dtype
    ],
    ids=["shrunk", "set_", "as_strided_", "transposed", "storage_shrunk", "dtype"],
)
def test_changed_between_compile_and_launch(make_pk, change):
    pk = rmsnorm(make_pk(90, test_mode=True, compile_only=False, emulate=True))
    pk.compile()
    pk()
    change(pk.tensor("x"))
    with pytest.raises(LayoutError, match=r"^launch: tensor 'x' changed after attach_input"):
        pk()
