"""The generated dispatcher source: only the used task headers, the opcode enum from the registry,
one case per distinct variant, the shared-memory constant, the runtime included last; readable
module names; and no pointers or task counts, so such graphs share one module."""

from __future__ import annotations

import re

import pytest
import torch
from cpu_helpers import GraphBuilder

from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.errors import ConfigError
from mpk_runtime.graph import collect_variants
from mpk_runtime.tasks import registry

NOOP, RMSNORM = registry.get("noop"), registry.get("rmsnorm")


def rmsnorm_chain(
    layers: int = 1, batch: int = 16, hidden: int = 4096, grid: int = 16, dtype: torch.dtype = torch.bfloat16
) -> GraphBuilder:
    g = GraphBuilder()
    w = g.tensor("w", rows=hidden, dtype=dtype)
    ts = [g.tensor(f"x{i}", rows=batch, cols=hidden, dtype=dtype) for i in range(layers + 1)]
    for i in range(layers):
        g.rmsnorm(ts[i], w, ts[i + 1], grid=grid)
    return g


def noop_graph(width: int = 2, rows: int = 8) -> GraphBuilder:
    g = GraphBuilder()
    a, b = g.tensor("a", rows=rows), g.tensor("b", rows=rows)
    g.noop([a], [b], width)
    return g


def source_of(g: GraphBuilder, arch: str = "sm80") -> str:
    variants, _ = collect_variants(g.graph)
    return codegen.generate(variants, arch)


def includes(source: str) -> list[str]:
    return re.findall(r'^#include "([^"]+)"', source, re.M)


def dispatcher_cases(source: str) -> list[str]:
    body = source[source.index("execute_task(") :]
    return re.findall(r"^    case (\d+):", body, re.M)


def test_only_the_used_task_headers_are_included():
    assert includes(source_of(noop_graph())) == ["runtime/task_api.cuh", "tasks/common/noop.cuh", "runtime/persistent_kernel.cuh"]
    g = rmsnorm_chain()
    a, b = g.tensor("a"), g.tensor("b")
    g.noop([a], [b], 1)
    assert sorted(includes(source_of(g))[1:-1]) == ["tasks/common/noop.cuh", "tasks/common/rmsnorm.cuh"]


def test_warp_jitter_is_defined_before_the_first_include_and_only_when_asked():
    variants, _ = collect_variants(rmsnorm_chain().graph)
    plain, jittered = codegen.generate(variants, "sm90"), codegen.generate(variants, "sm90", warp_jitter=True)
    assert "MPK_WARP_JITTER" not in plain
    lines = jittered.splitlines()
    assert lines.index(codegen.JITTER) < lines.index('#include "runtime/task_api.cuh"')
    assert jittered.replace(codegen.JITTER + "\n", "") == plain  # nothing else differs


def test_source_ends_by_including_the_runtime():
    lines = [line for line in source_of(rmsnorm_chain()).splitlines() if line.strip()]
    assert lines[-1] == '#include "runtime/persistent_kernel.cuh"'


def test_no_torch_headers():
    assert not any("torch" in h or "ATen" in h for h in includes(source_of(rmsnorm_chain())))


def test_registry_opcodes_are_distinct_and_follow_the_names():
    specs = registry.all_specs()
    assert [s.name for s in specs] == sorted(s.name for s in specs)
    assert [s.opcode for s in specs] == list(range(1, len(specs) + 1))


def test_enum_and_name_table_hold_the_used_tasks_with_registry_opcodes():
    g = rmsnorm_chain()
    a, b = g.tensor("a"), g.tensor("b")
    g.noop([a], [b], 1)
    src = source_of(g)
    assert f"MPK_TASK_NOOP = {NOOP.opcode}," in src
    assert f"MPK_TASK_RMSNORM = {RMSNORM.opcode}," in src
    assert 'case MPK_TASK_NOOP: return "noop";' in src and 'case MPK_TASK_RMSNORM: return "rmsnorm";' in src
    assert "MPK_TASK_RMSNORM" not in source_of(noop_graph())


def test_identical_layers_share_one_dispatcher_case():
    g = rmsnorm_chain(layers=3)
    variants, of_layer = collect_variants(g.graph)
    assert len(variants) == 1 and of_layer == {0: 0, 1: 0, 2: 0}
    assert variants[0].layers == ["rmsnorm_0", "rmsnorm_1", "rmsnorm_2"]
    src = codegen.generate(variants, "sm90")
    assert dispatcher_cases(src) == ["0"]
    assert len(re.findall(r"mpk::tasks::rmsnorm<__nv_bfloat16, 1, 4096\b[^>]*>\(task, rt\);", src)) == 1
    assert "case 0:  // rmsnorm_0, rmsnorm_1, rmsnorm_2" in src


def test_one_case_per_distinct_variant():
    g = rmsnorm_chain(layers=2)  # one variant
    fp16 = {"dtype": torch.float16}
    g.rmsnorm(
        g.tensor("xh", 16, 1024, **fp16), g.tensor("wh", 1024, **fp16), g.tensor("yh", 16, 1024, **fp16), grid=4
    )  # another: fp16, 4 rows of 1024
    a, b = g.tensor("a"), g.tensor("b")
    g.noop([a], [b], 2)  # a third
    variants, of_layer = collect_variants(g.graph)
    calls = [v.call for v in variants]
    assert calls[0].startswith("mpk::tasks::rmsnorm<__nv_bfloat16, 1, 4096")
    assert calls[1].startswith("mpk::tasks::rmsnorm<__half, 4, 1024")
    assert calls[2] == "mpk::tasks::noop<1, 0, 1, 0, false>(task, rt);"
    assert of_layer == {0: 0, 1: 0, 2: 1, 3: 2}
    assert dispatcher_cases(codegen.generate(variants, "sm80")) == ["0", "1", "2"]


def test_many_layers_of_one_variant_are_summarised_in_the_comment():
    variants, _ = collect_variants(rmsnorm_chain(layers=6).graph)
    assert "case 0:  // rmsnorm_0, rmsnorm_1, rmsnorm_2, rmsnorm_3 ..." in codegen.generate(variants, "sm80")


def test_dynamic_shared_memory_constant_is_defined():
    for g in (rmsnorm_chain(), noop_graph()):
        assert len(re.findall(r"^constexpr unsigned kDynamicSmemBytes = ", source_of(g), re.M)) == 1


def test_arch_is_recorded_and_unsupported_arch_is_a_config_error():
    assert "// target: sm100" in source_of(noop_graph(), "sm100")
    with pytest.raises(ConfigError, match=r"task 'noop' has no body for sm75; it supports sm80, sm90, sm100"):
        source_of(noop_graph(), "sm75")


def test_generation_is_deterministic():
    assert source_of(rmsnorm_chain(layers=2)) == source_of(rmsnorm_chain(layers=2))


def test_no_pointers_or_task_counts_in_the_source():
    """Graphs that differ only in their tensors or in task counts with the same slices (no-op tasks
    of 4 rows: 2 of them or 8) build the same module; a different slice shape does not."""
    assert source_of(noop_graph(width=2, rows=8)) == source_of(noop_graph(width=8, rows=32))
    assert source_of(rmsnorm_chain(layers=1)) == source_of(rmsnorm_chain(layers=1))
    assert source_of(rmsnorm_chain(batch=16, grid=16)) != source_of(rmsnorm_chain(batch=16, grid=8))


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: rmsnorm_chain(batch=16, grid=1), "rmsnorm_bf16_16_4096"),
        (lambda: rmsnorm_chain(batch=16, grid=16), "rmsnorm_bf16_1_4096"),
        (lambda: rmsnorm_chain(hidden=1024, dtype=torch.float32), "rmsnorm_fp32_1_1024"),
        (lambda: rmsnorm_chain(hidden=1024, dtype=torch.float16), "rmsnorm_fp16_1_1024"),
    ],
)
def test_module_name_is_readable(build, name):
    """Task, dtype and slice shape first (more template arguments may follow)."""
    variants, _ = collect_variants(build().graph)
    assert re.fullmatch(rf"{name}(_\w+)?", codegen.module_name(variants))


def test_module_name_of_a_noop_graph():
    assert codegen.module_name(collect_variants(noop_graph().graph)[0]) == "noop"


def test_module_name_of_mixed_and_many_variants():
    g = GraphBuilder()
    a, b = g.tensor("a"), g.tensor("b")
    g.noop([a], [b], 1)
    for hidden in [64, 128, 256, 512]:
        bf16 = {"dtype": torch.bfloat16}
        g.rmsnorm(
            g.tensor(f"x{hidden}", 2, hidden, **bf16),
            g.tensor(f"w{hidden}", hidden, **bf16),
            g.tensor(f"y{hidden}", 2, hidden, **bf16),
            grid=2,
        )
    variants, _ = collect_variants(g.graph)
    name = codegen.module_name(variants)
    assert re.fullmatch(r"noop\+rmsnorm_bf16_1_64(_\w+)?\+rmsnorm_bf16_1_128(_\w+)?\+2more", name)
    assert re.fullmatch(r"[A-Za-z0-9_+.-]{1,80}", name)


def test_noop_variants_collapse_in_the_module_name():
    g = GraphBuilder()
    a, b, c = g.tensor("a"), g.tensor("b"), g.tensor("c")
    g.noop([a], [b], 1)
    g.noop([a, b], [c], 2)  # another variant (two inputs), same name part
    variants, _ = collect_variants(g.graph)
    assert len(variants) == 2 and codegen.module_name(variants) == "noop"
