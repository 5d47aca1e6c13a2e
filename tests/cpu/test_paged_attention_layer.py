"""The paged_attention layer before anything runs: its argument checks (shapes, dtypes, grid, the
kernel's batch parameters), the workspace a split layer allocates for itself, its partitions in the
task graph, and compile-only builds of its body for sm80, sm90 and sm100 (real nvcc)."""

from __future__ import annotations

import json

import pytest
import torch

from mpk_runtime import harness
from mpk_runtime.errors import ConfigError, DTypeError, GridError, ShapeError
from mpk_runtime.tasks.paged_attention import splits, workspace_floats

T, R, P, PS, S = 8, 2, 16, 16, 64  # tokens, slots, pages, page size, max_seq_length
PARAMS = dict(
    test_mode=True, max_num_batched_tokens=T, max_num_batched_requests=R, max_num_pages=P, page_size=PS, max_seq_length=S
)


def layer(pk, heads=8, kv_heads=2, d=128, grid=None, dtype=torch.bfloat16, **changes):
    """Attach a paged_attention layer's tensors (``changes``: name -> a replacement shape or tensor) and add it."""
    shapes = {
        "input": (T, (heads + 2 * kv_heads) * d),
        "k_cache": (P, PS, kv_heads, d),
        "v_cache": (P, PS, kv_heads, d),
        "q_norm": (d,),
        "k_norm": (d,),
        "cos_pos_embed": (S, d),
        "sin_pos_embed": (S, d),
        "output": (T, heads * d),
    }
    tensors = {}
    for name, shape in shapes.items():
        t = changes.get(name, shape)
        t = torch.zeros(t, dtype=dtype) if isinstance(t, tuple) else t
        tensors[name] = pk.attach_input(t, name)
    pk.paged_attention_layer(**tensors, grid_dim=grid or (R, kv_heads, 1), block_dim=pk.block_dim)


def test_a_split_layer_allocates_its_workspace(make_pk):
    pk = make_pk(90, **PARAMS)
    layer(pk, grid=(R, 2, 4))
    ws = pk.tensor("paged_attention_0.splits")
    assert ws.dtype == torch.float32 and not ws.any()
    assert ws.numel() == workspace_floats(T, R, 8, 2, 128, 4) == 2 * R * 2 + T * 8 * 4 * (128 + 4)
    pk.compile()
    assert harness.launch_state(pk) == ["paged_attention_0.splits"]  # what a scene's second launch is for


def test_one_task_per_slot_and_kv_head_and_no_workspace_without_splits(make_pk, tmp_path):
    pk = make_pk(90, num_workers=4, **PARAMS)
    layer(pk)
    pk.compile(output_dir=tmp_path)
    graph = json.loads((tmp_path / "task_graph_rank0.json").read_text())
    assert len(graph["tasks"]) == R * 2
    assert not any(t["kind"] == "workspace" for t in graph["tensors"])
    assert harness.launch_state(pk) == []
    assert "paged_attention_bf16_128_4_2_1_1" in pk.build_result.entry.name


def test_grid_y_of_half_the_kv_heads_gives_a_task_two(make_pk, tmp_path):
    """grid y = num_kv_heads / 2: one task per slot and pair of kv heads, each task's boxes two heads
    wide (the cache's dim 2, the output's columns), the body instantiated with 2 heads a task."""
    pk = make_pk(90, num_workers=4, **PARAMS)
    layer(pk, heads=16, kv_heads=4, grid=(R, 2, 1))
    pk.compile(output_dir=tmp_path)
    graph = json.loads((tmp_path / "task_graph_rank0.json").read_text())
    assert len(graph["tasks"]) == R * 2
    assert "paged_attention_bf16_128_4_4_1_2" in pk.build_result.entry.name


@pytest.mark.parametrize("cc", [80, 90, 100])
def test_compile_only_builds(make_pk, cc):
    """The decode-split (grid z 2) variant, head_dim 64, GQA 8, for every target; sm80 with fp16. The
    sm90 build is the module of tests/scenes/paged_attention's b2_d64_g8 (the source depends on the
    variant only), which that scene runs: one nvcc build in the default suite, not two."""
    pk = make_pk(cc, num_workers=4, **PARAMS)
    layer(pk, heads=8, kv_heads=1, d=64, grid=(R, 1, 2), dtype=torch.float16 if cc == 80 else torch.bfloat16)
    pk.compile()
    assert pk.build_result.path.exists()


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        (dict(d=96), ShapeError, r"head_dim 96 .* not supported; use one of \(64, 128\)"),
        (dict(heads=6, kv_heads=2), ShapeError, r"holds 6 q heads for 2 kv heads; the q heads per kv head must be one of"),
        (dict(output=(T, 512)), ShapeError, r"output must be \(max_num_batched_tokens, num_heads \* head_dim\) = \(8, 1024\)"),
        (dict(v_cache=(P, PS, 2, 64)), ShapeError, r"k_cache and v_cache must both be"),
        (dict(cos_pos_embed=(S, 64)), ShapeError, r"cos_pos_embed and sin_pos_embed must be \(max_seq_length, 128\)"),
        (
            dict(grid=(R, 3, 1)),
            GridError,
            r"grid_dim y=3 must be num_kv_heads=2 \(one kv head a task\) or num_kv_heads / 2 = 1 \(two kv heads a task\)$",
        ),
        (dict(heads=3, kv_heads=3, grid=(R, 1, 1)), GridError, r"grid_dim y=1 must be num_kv_heads=3 \(one kv head a task\)$"),
        (dict(grid=(R, 2, 129)), GridError, r"grid_dim z=129 splits a request.s work; use 1 to 128"),
        (dict(grid=(R + 1, 2, 1)), ConfigError, r"grid_dim x = 3 must equal the kernel's max_num_batched_requests = 2"),
        (
            dict(k_cache=(P, 32, 2, 128), v_cache=(P, 32, 2, 128)),
            ConfigError,
            r"k_cache page size = 32 must equal .* page_size = 16",
        ),
        (
            dict(input=(4, 1536), output=(4, 1024)),
            ConfigError,
            r"input rows = 4 must equal the kernel's max_num_batched_tokens = 8",
        ),
        (dict(cos_pos_embed=(S - 1, 128), sin_pos_embed=(S - 1, 128)), ConfigError, r"give at least 64"),
        (dict(dtype=torch.float32), DTypeError, r"input is fp32; the layer runs in bfloat16 or float16"),
        (dict(q_norm=torch.zeros(128, dtype=torch.float16)), DTypeError, r"q_norm is fp16 but input is bf16"),
    ],
)
def test_argument_errors_name_the_fix(make_pk, changes, error, message):
    pk = make_pk(90, **PARAMS)
    with pytest.raises(error, match=message):
        layer(pk, **changes)


@pytest.mark.parametrize(
    ("kv_len", "qlen", "num_splits", "z", "want"),
    [
        (100, 1, 1, 0, ("all", 0, 1)),
        (100, 1, 4, 0, ("keys", 0, 32)),  # chunks of ceil(100 / 4) keys, rounded up to 16
        (100, 1, 3, 2, ("keys", 96, 100)),
        (40, 1, 4, 3, ("keys", 40, 40)),  # more splits than 16-key chunks: an empty one
        (100, 40, 2, 1, ("tokens", 20, 40)),  # a request of more than 16 new tokens splits its tokens
    ],
)
def test_how_grid_z_splits_a_request(kv_len, qlen, num_splits, z, want):
    assert splits(kv_len, qlen, num_splits, z) == want
