"""Compile-only builds of an RMSNorm graph for sm80, sm90 and sm100 (real nvcc, no GPU): the device
code builds (a cubin for the target: a kernel that does not run on a GPU gets no host module; the
full build is loaded and checked in test_abi.py), the artifacts describe the graph, the cache serves
a second build and the emulated kernel of the same graph, and the kernel's life cycle and layer
arguments are validated before anything is built."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from cpu_helpers import cubin_sm, graph_of, rmsnorm_tensors

import mpk_runtime as mpk
from mpk_runtime import harness
from mpk_runtime.build import cache
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.errors import BlockDimError, ConfigError, DeviceError, DTypeError, ShapeError, StateError
from mpk_runtime.graph import collect_variants
from mpk_runtime.tasks import registry

BLOCK = {80: (128, 1, 1), 90: (256, 1, 1), 100: (256, 1, 1)}
# warp_jitter as the test harness builds: the jittered barriers must build for every target too.
PARAMS = dict(test_mode=True, num_workers=4, max_num_batched_tokens=16, max_seq_length=32, max_num_pages=16, warp_jitter=True)


def rmsnorm_kernel(make_pk, cc: int) -> mpk.PersistentKernel:
    pk = make_pk(cc, **PARAMS)
    add_rmsnorm(pk)
    return pk


def add_rmsnorm(pk: mpk.PersistentKernel) -> None:
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=4096)
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


@pytest.fixture(scope="module", params=[80, 90, 100], ids=lambda cc: f"sm{cc}")
def compiled(request, tmp_path_factory) -> tuple[mpk.PersistentKernel, Path]:
    """The RMSNorm kernel compiled for one target, with its artifacts; built once per module."""
    cc = request.param
    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(PARAMS, compile_only=True, target_cc=cc)
    pk = mpk.PersistentKernel(**params)
    add_rmsnorm(pk)
    out = tmp_path_factory.mktemp(f"sm{cc}")
    pk.compile(output_dir=out)
    return pk, out


def test_device_code_is_built_for_the_target(compiled):
    pk, _ = compiled
    cubin = pk.build_result.path
    assert cubin.name == "module.cubin" and sorted(p.name for p in cubin.parent.iterdir()) == [
        "build.json",
        "module.cubin",
        "source.cu",
    ]
    assert cubin_sm(cubin) == pk.target_cc
    sass = {80: "sm_80", 90: "sm_90a", 100: "sm_100a"}[pk.target_cc]
    data = cubin.read_bytes()
    assert f"-arch {sass} ".encode() in data  # ptxas's command line, in the cubin's notes: the arch-specific target
    assert b"worker_kernel" in data  # the workers, with every task body inlined
    # the scheduler, the same in every module, once per arch and cache in an entry of its own
    key = cache.cache_key(cache.SCHEDULER_CHECK.read_text(), pk.arch, device_only=True)
    scheduler = pk.build_result.entry.parent / f"scheduler-check-{pk.arch}-cubin-{key[:16]}"
    assert cubin_sm(scheduler / "module.cubin") == pk.target_cc
    assert b"scheduler_kernel" in (scheduler / "module.cubin").read_bytes()
    assert re.fullmatch(rf"rmsnorm_bf16_1_4096(_\w+)?-{pk.arch}-cubin-[0-9a-f]{{16}}", pk.build_result.entry.name)


def test_block_dim_follows_the_target(compiled):
    pk, _ = compiled
    assert pk.block_dim == BLOCK[pk.target_cc]
    assert pk.arch == f"sm{pk.target_cc}" and pk.test_mode


def test_artifacts_are_written(compiled):
    pk, out = compiled
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".cu", ".json")) == [
        "signature_rank0.json",
        "task_graph_rank0.json",
        "test_rank0.cu",
    ]
    source = (out / "test_rank0.cu").read_text()
    assert source == (pk.build_result.entry / "source.cu").read_text()  # the very source that was built
    assert '#include "tasks/common/rmsnorm.cuh"' in source and f"// target: {pk.arch}" in source
    assert codegen.JITTER in source  # warp_jitter=True, kept for a replay of the saved source


def test_task_graph_json(compiled):
    pk, out = compiled
    graph = json.loads((out / "task_graph_rank0.json").read_text())
    assert graph["arch"] == pk.arch and graph["rank"] == 0
    assert len(graph["tasks"]) == 16
    task = graph["tasks"][5]
    assert task["label"] == "rmsnorm_0[5]" and task["deps"] == [] and task["wait_event"] is None
    assert task["inputs"][0] == {"tensor": "x", "lo": [5, 0], "hi": [6, 4096], "byte_offset": 5 * 4096 * 2}
    assert task["outputs"][0]["tensor"] == "y"
    assert graph["schedule"]["events"] == []  # independent rows: no task waits
    text = (out / "task_graph_rank0.json").read_text()
    assert sum('"label":"rmsnorm_0[' in line for line in text.splitlines()) == 16  # one task per line
    assert graph["schedule"]["num_workers"] == 4 and sorted(sum(graph["schedule"]["queues"], [])) == list(range(16))
    (variant,) = graph["variants"]
    assert (variant["id"], variant["task"], variant["layers"]) == (0, "rmsnorm", ["rmsnorm_0"])
    assert variant["call"].startswith("mpk::tasks::rmsnorm<__nv_bfloat16, 1, 4096")


def test_signature_json(compiled):
    pk, out = compiled
    sig = json.loads((out / "signature_rank0.json").read_text())
    assert sig["arch"] == pk.arch
    assert [{k: t[k] for k in ("name", "shape", "dtype", "direction")} for t in sig["tensors"]] == [
        {"name": "x", "shape": [16, 4096], "dtype": "bf16", "direction": "IN"},
        {"name": "w", "shape": [4096], "dtype": "bf16", "direction": "IN"},
        {"name": "y", "shape": [16, 4096], "dtype": "bf16", "direction": "OUT"},
    ]
    assert sig["params"]["test_mode"] is True and sig["params"]["num_workers"] == 4


def test_second_identical_build_is_a_cache_hit(compiled, make_pk):
    pk, _ = compiled
    again = rmsnorm_kernel(make_pk, pk.target_cc)
    again.compile()
    assert again.build_result.cached and again.build_result.path == pk.build_result.path


def test_emulated_kernel_finds_the_compile_only_build(make_pk):
    """Emulated and compile-only kernels of one graph need one build, the cubin: the plugin prebuilds
    compile-only kernels (harness.build_for) and the emulated cases then find their module in the cache."""

    def kernel(**overrides) -> mpk.PersistentKernel:
        pk = make_pk(90, test_mode=True, **overrides)
        x, w, y = (pk.attach_input(torch.zeros(shape), name=n) for n, shape in [("x", (4, 256)), ("w", (256,)), ("y", (4, 256))])
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
        return pk

    compile_only = kernel()
    prebuilt = harness.build_for(compile_only, on_gpu=False)
    assert prebuilt.path.name == "module.cubin" and re.fullmatch(
        r"rmsnorm_fp32_1_256-sm90-cubin-[0-9a-f]{16}", prebuilt.entry.name
    )
    compile_only.compile()
    assert compile_only.build_result.cached and compile_only.build_result.entry == prebuilt.entry
    for emulate in (True, "reference"):
        emulated = kernel(compile_only=False, emulate=emulate)
        emulated.compile()
        assert emulated.build_result.cached and emulated.build_result.entry == prebuilt.entry, emulate
        emulated.finalize()


def test_compile_only_kernel_cannot_run(compiled):
    pk, _ = compiled
    with pytest.raises(StateError, match=rf"built with compile_only=True for {pk.arch}; it cannot run"):
        pk()


def test_inout_direction_in_the_signature(make_pk, tmp_path):
    pk = make_pk(80)
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=4096)
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.rmsnorm_layer(input=y, weight=w, output=x, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.compile(output_dir=tmp_path)
    sig = json.loads((tmp_path / "signature_rank0.json").read_text())
    assert {t["name"]: t["direction"] for t in sig["tensors"]} == {"x": "INOUT", "w": "IN", "y": "INOUT"}


@pytest.mark.parametrize(("cc", "threads"), [(90, 256), (100, 256)])
def test_block_dim_mismatch_names_the_fix(make_pk, cc, threads):
    pk = make_pk(cc)
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(
        BlockDimError,
        match=rf"rmsnorm_layer\(\): block_dim=\(128, 1, 1\) does not match the {threads} "
        rf"worker threads of sm{cc}; pass block_dim=pk\.block_dim",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=(128, 1, 1))


def test_block_dim_must_be_the_full_triple(make_pk):
    pk = make_pk(80)
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(BlockDimError, match=r"block_dim=128 does not match the 128 worker threads of sm80"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=128)


def test_layer_after_compile(make_pk):
    pk = make_pk(80)
    x, w, y = rmsnorm_tensors(pk, batch=16, hidden=4096)
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    with pytest.raises(StateError, match=r"rmsnorm_layer\(\): the kernel is already compiled; build a new PersistentKernel"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_compile_twice(make_pk):
    pk = rmsnorm_kernel(make_pk, 80)
    pk.compile()
    with pytest.raises(StateError, match=r"compile\(\) was already called on this kernel"):
        pk.compile()


def test_run_before_compile(make_pk):
    with pytest.raises(StateError, match=r"call compile\(\) before running the kernel"):
        rmsnorm_kernel(make_pk, 80)()


@pytest.mark.parametrize(
    "use",
    [
        lambda pk: pk.attach_input(torch.zeros(4), name="late"),
        lambda pk: pk.new_tensor((4,), torch.float32, name="late"),
        lambda pk: pk.rmsnorm_layer(input=None, weight=None, output=None, grid_dim=(1, 1, 1), block_dim=pk.block_dim),
        lambda pk: pk.compile(),
        lambda pk: pk(),
    ],
)
def test_use_after_finalize(make_pk, use):
    pk = rmsnorm_kernel(make_pk, 80)
    pk.finalize()
    pk.finalize()  # idempotent
    with pytest.raises(StateError, match=r"the kernel was finalized; build a new PersistentKernel"):
        use(pk)


def test_weight_of_the_wrong_shape(make_pk):
    pk = make_pk(90)
    x = pk.attach_input(torch.zeros(16, 4096, dtype=torch.bfloat16), name="x")
    w = pk.attach_input(torch.zeros(2048, dtype=torch.bfloat16), name="w")
    y = pk.attach_input(torch.zeros(16, 4096, dtype=torch.bfloat16), name="y")
    with pytest.raises(ShapeError, match=r"rmsnorm: weight must have shape \(4096,\) to match input \(16, 4096\), got \(2048,\)"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


@pytest.mark.parametrize(
    ("x_shape", "y_shape", "message"),
    [
        ((16, 4096), (16, 2048), r"output must have input's shape \(16, 4096\), got \(16, 2048\)"),
        ((2, 8, 4096), (2, 8, 4096), r"input must be \(batch, hidden\), got shape \(2, 8, 4096\)"),
    ],
)
def test_input_and_output_shapes(make_pk, x_shape, y_shape, message):
    pk = make_pk(90)
    x = pk.attach_input(torch.zeros(x_shape, dtype=torch.bfloat16), name="x")
    w = pk.attach_input(torch.zeros(4096, dtype=torch.bfloat16), name="w")
    y = pk.attach_input(torch.zeros(y_shape, dtype=torch.bfloat16), name="y")
    with pytest.raises(ShapeError, match=message):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)


def test_mixed_dtypes(make_pk):
    pk = make_pk(90)
    x = pk.attach_input(torch.zeros(16, 4096, dtype=torch.bfloat16), name="x")
    w = pk.attach_input(torch.zeros(4096, dtype=torch.float32), name="w")
    y = pk.attach_input(torch.zeros(16, 4096, dtype=torch.bfloat16), name="y")
    with pytest.raises(DTypeError, match=r"rmsnorm: weight is fp32 but input is bf16; use one dtype"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_integer_dtype(make_pk):
    pk = make_pk(90)
    x, w, y = rmsnorm_tensors(pk, dtype=torch.int32)
    with pytest.raises(DTypeError, match=r"rmsnorm: input \(DTensor\('x', .*i32\)\) must be bfloat16, float16 or float32"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


@pytest.mark.parametrize("eps", [0, -1e-6, 0.0, True, "1e-6", None])
def test_eps_must_be_positive(make_pk, eps):
    pk = make_pk(90)
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(ConfigError, match=rf"rmsnorm: eps={eps!r} must be a positive number, e\.g\. 1e-6"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim, eps=eps)


def test_eps_must_be_finite(make_pk):
    pk = make_pk(90)
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(ConfigError, match=r"eps=inf"):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim, eps=float("inf"))


def test_task_without_a_body_for_the_arch(make_pk, monkeypatch):
    monkeypatch.setattr(registry.get("rmsnorm"), "headers", {"sm80": "common/rmsnorm.cuh"})
    pk = make_pk(90)
    x, w, y = rmsnorm_tensors(pk)
    with pytest.raises(
        ConfigError,
        match=r"task 'rmsnorm' has no body for sm90; it supports sm80\. Build for one of "
        r"those \(target_cc\) or add csrc/tasks/sm90/rmsnorm\.cuh",
    ):
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(16, 1, 1), block_dim=pk.block_dim)


def test_module_name_of_the_rmsnorm_graph(make_pk):
    pk = make_pk(90)
    x, w, y = rmsnorm_tensors(pk)
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    assert re.fullmatch(r"rmsnorm_bf16_16_4096(_\w+)?", codegen.module_name(collect_variants(graph_of(pk))[0]))


def test_running_kernel_needs_a_gpu():
    with pytest.raises(
        DeviceError,
        match=r"PersistentKernel needs a CUDA GPU and torch sees none .*to run on the CPU emulator pass emulate=True, "
        r"target_cc=80, 90 or 100, num_workers=N and CPU tensors; to build without running, compile_only=True",
    ):
        mpk.PersistentKernel(**mpk.PersistentKernel.get_default_init_parameters())


def test_gpu_configuration_needs_a_gpu():
    with pytest.raises(DeviceError, match=r"get_configurations_from_gpu needs a CUDA GPU"):
        mpk.get_configurations_from_gpu(0)


def test_graph_of_several_variants_builds(make_pk):
    """Two RMSNorm variants (one of them on the scalar path: 1000 fp32 is no multiple of the vector
    width) and a no-op in one module: every used task is in its name table, no other."""
    pk = make_pk(80)
    x = pk.attach_input(torch.zeros(4, 1000), name="x")
    w = pk.attach_input(torch.ones(1000), name="w")
    y = pk.attach_input(torch.zeros(4, 1000), name="y")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.rmsnorm_layer(input=y, weight=w, output=x, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    a, b = (pk.attach_input(torch.zeros(8, dtype=torch.int32), name=n) for n in "ab")
    pk.noop_layer([a], [b], grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    assert cubin_sm(pk.build_result.path) == 80
    source = (pk.build_result.entry / "source.cu").read_text()
    named = set(re.findall(r'case MPK_TASK_\w+: return "(\w+)";', source))  # the name table the cubin was built from
    assert named == {"noop", "rmsnorm"}
    assert pk.build_result.entry.name.startswith("rmsnorm_fp32_1_1000")
