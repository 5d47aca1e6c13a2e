"""Tensor maps (graph/tensor_maps.py) off the GPU: the emulator's description a CPU graph gets, every refusal of a
tensor or box the TMA unit cannot copy, the driver missing, the paged_attention layer's maps as a
derived tensor with its recipe, and that recipe read back from a signature and replayed. The driver's
encoding runs in tests/gpu (the attention body reads its tiles through it)."""

from __future__ import annotations

import ctypes

import pytest
import torch
from test_paged_attention_layer import PARAMS, layer

from mpk_runtime.build import replay
from mpk_runtime.errors import ConfigError, GraphError, ShapeError
from mpk_runtime.graph import tensor_maps as maps_module
from mpk_runtime.graph.tensor_maps import EMULATION_MAGIC, EMULATION_MAP, tensor_maps
from mpk_runtime.tasks.paged_attention import tma_box_rows

CACHE = (4, 64, 2, 128)  # pages, page size, kv heads, head dim
BOX = [64, 1, 64, 1]


def test_a_cpu_tensor_gets_the_emulators_description_one_row_a_tensor():
    k, v = torch.ones(CACHE, dtype=torch.bfloat16), torch.ones((2, 64, 2, 64), dtype=torch.bfloat16)
    maps = tensor_maps([k, v], BOX, 128)
    assert maps.shape == (2, 128) and maps.dtype == torch.uint8
    fields = [EMULATION_MAP.unpack(bytes(m[: EMULATION_MAP.size].tolist())) for m in maps]
    assert fields[0] == (EMULATION_MAGIC, 4, 2, 128, 0, 128, 2, 64, 4, 0, 256, 512, 32768, 0, 64, 1, 64, 1, 0)
    assert fields[1][5:14] == (64, 2, 64, 2, 0, 128, 256, 16384, 0)
    assert not maps[:, EMULATION_MAP.size :].any()


@pytest.mark.parametrize(
    "tensors, box, swizzle, message",
    [
        ([], BOX, 128, r"give at least one tensor"),
        ([torch.zeros(CACHE)], BOX, 96, r"swizzle=96 must be one of \[0, 32, 64, 128\]"),
        (
            [torch.zeros(CACHE, dtype=torch.bfloat16), torch.zeros(CACHE, device="meta")],
            BOX,
            128,
            r"tensors\[1\] is on meta but tensors\[0\] on cpu",
        ),
        ([torch.zeros(CACHE).transpose(0, 1)], BOX, 128, r"tensors\[0\]: a map needs a contiguous tensor"),
        ([torch.zeros(2, 2, 2, 2, 2, 2)], [1] * 6, 0, r"a contiguous tensor of 1 to 5 dims"),
        ([torch.zeros(CACHE, dtype=torch.complex128)], BOX, 128, r"elements of 16 bytes; the TMA copies 1, 2, 4 or 8"),
        ([torch.zeros(CACHE)], [64, 1, 64], 128, r"box \[64, 1, 64\] \(innermost first\) must give each of the 4 dims"),
        ([torch.zeros(CACHE)], [64, 1, 65, 1], 128, r"must give each of the 4 dims \[128, 2, 64, 4\] 1 to min\(dim, 256\)"),
        ([torch.zeros(CACHE, dtype=torch.bfloat16)], [128, 1, 64, 1], 128, r"innermost 128 elements are 256 bytes; .* at most"),
        (
            [torch.zeros(CACHE, dtype=torch.bfloat16)],
            [4, 1, 64, 1],
            0,
            r"innermost 4 elements are 8 bytes; they must be a multiple of 16",
        ),
        ([torch.zeros(4, 12, dtype=torch.bfloat16)], [8, 4], 0, r"byte strides \[24\] of the outer dims must be multiples of 16"),
    ],
    ids=[
        "none",
        "swizzle",
        "devices",
        "strided",
        "six dims",
        "element size",
        "box rank",
        "box too big",
        "box row",
        "box row 16",
        "stride",
    ],
)
def test_what_the_tma_cannot_copy_is_refused(tensors, box, swizzle, message):
    with pytest.raises(ShapeError, match=message):
        tensor_maps(tensors, box, swizzle)


def test_a_machine_without_the_driver_says_so(monkeypatch):
    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    maps_module._driver.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    with pytest.raises(ConfigError, match=r"cannot load the CUDA driver \(libcuda.so.1\) to encode a tensor map"):
        maps_module._driver()
    maps_module._driver.cache_clear()


@pytest.mark.parametrize("page_size, rows", [(16, 16), (32, 32), (48, 16), (64, 64), (96, 32), (128, 64), (8, 0), (24, 0)])
def test_box_rows_divide_the_page_and_the_tile(page_size, rows):
    assert tma_box_rows(page_size) == rows


def test_the_attention_layer_maps_its_caches(make_pk):
    pk = make_pk(90, **{**PARAMS, "page_size": 16})
    layer(pk)
    t = pk._graph.tensors["paged_attention_0.kv_maps"]
    assert t.kind == "derived" and t.shape == (2, 128) and bytes(t.data[0, :8].tolist()) == EMULATION_MAGIC
    assert t.derived_from == {"op": "tensor_maps", "inputs": ["k_cache", "v_cache"], "box": [64, 1, 16, 1], "swizzle": 128}


def test_no_maps_where_a_page_holds_no_box(make_pk):
    shapes = {"k_cache": (16, 8, 2, 128), "v_cache": (16, 8, 2, 128)}
    pk = make_pk(90, **{**PARAMS, "page_size": 8})
    layer(pk, **shapes)
    assert not any(name.endswith("kv_maps") for name in pk._graph.tensors)


@pytest.mark.parametrize(
    "seq, splits, pairs, rows",
    [(64, 1, 1, 16), (2048, 16, 1, 16), (2032, 16, 1, 0), (1024, 16, 2, 16), (1008, 16, 2, 0)],
    ids=["one split", "splits of a tile", "splits under a tile", "a pair's splits of its tile", "a pair's under"],
)
def test_a_layer_whose_splits_never_hold_a_tile_has_no_maps(make_pk, seq, splits, pairs, rows):
    pk = make_pk(90, **{**PARAMS, "max_seq_length": seq})
    layer(pk, grid=(2, 2 // pairs, splits), cos_pos_embed=(seq, 128), sin_pos_embed=(seq, 128))
    maps = pk._graph.tensors.get("paged_attention_0.kv_maps")
    assert (maps.derived_from["box"][2] if maps is not None else 0) == rows


def test_a_replay_makes_the_maps_of_the_tensors_it_binds():
    recipe = {"op": "tensor_maps", "inputs": ["k_cache", "v_cache"], "box": BOX, "swizzle": 128}
    made = replay._derive(recipe, [torch.zeros(CACHE, dtype=torch.bfloat16)] * 2)
    assert made.shape == (2, 128) and made.dtype == torch.uint8


def test_maps_of_a_tensor_without_memory_are_refused(make_pk):
    pk = make_pk(90, **PARAMS)
    meta = {n: torch.empty((16, 16, 2, 128), dtype=torch.bfloat16, device="meta") for n in ("k_cache", "v_cache")}
    with pytest.raises(GraphError, match=r"paged_attention_0.kv_maps: tensor 'k_cache' has no memory \(a meta tensor"):
        layer(pk, **meta)
