"""The real MoE task bodies (csrc/tasks/common/moe_*.cuh), built for the host and run on the CPU
task by task against their PyTorch references: routing (ties, NaN, -inf), the expert linears with
1 to 8 tasks sharing the routed work (one expert with 80 tokens: four m16 tiles and a second pass),
SiLU-mul fused and not, and the combine; rows of inactive tokens stay untouched; a race-checking
build finds nothing. Needs host versions of the mma and streaming-load primitives (issue 16)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.codegen import abi
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.graph.variants import Variant
from mpk_runtime.harness import find_reference as find
from mpk_runtime.resources import CSRC
from mpk_runtime.run import host_runner
from mpk_runtime.tasks import registry

if not all("MPK_HOST_EMULATION" in (CSRC / "primitives" / f).read_text() for f in ("mma.cuh", "loads.cuh")):
    pytest.skip("the mma and ld_stream primitives have no host versions yet", allow_module_level=True)

ARCH = "sm90"
B, E, K, H, I = 80, 8, 2, 256, 128  # 80 token rows: one expert can hold more than 64 tokens
bf = torch.bfloat16
VARIANTS = [
    ("moe_topk_softmax_routing", ["__nv_bfloat16", E, K]),
    ("moe_topk_softmax_routing", ["float", 64, 8]),
    ("moe_w13_linear", ["__nv_bfloat16", B, E, K, H, 2 * I, 2 * I, "true"]),
    ("moe_w13_linear", ["__nv_bfloat16", B, E, K, H, 2 * I, I, "true"]),  # SiLU-mul fused
    ("moe_w2_linear", ["__nv_bfloat16", B, E, K, I, H, H, "false"]),
    ("moe_silu_mul", ["__nv_bfloat16", K, 64, I]),
    ("moe_mul_sum_add", ["__nv_bfloat16", K, 64, H]),
]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "race_check"])
def run(request):
    """run(variant, inputs(j), outputs(j), scalars, tasks, active): every task j of a layer, shuffled thread order."""
    variants = [Variant(i, registry.get(name), args) for i, (name, args) in enumerate(VARIANTS)]
    module = host_runner.load(codegen.generate(variants, ARCH), ARCH, "moe_bodies", race_check=request.param)

    def go(v, inputs, outputs, scalars, tasks=1, active=B, ok=True):
        num_new_tokens = torch.tensor([active], dtype=torch.int32)
        meta, batch = abi.MpkMeta(num_new_tokens=num_new_tokens.data_ptr()), abi.MpkBatchConfig(max_num_batched_tokens=B)
        for j in range(tasks):
            ins, outs = inputs(j), outputs(j)
            desc = host_runner.task_desc(
                v, [t.data_ptr() for t in ins], [t.data_ptr() for t in outs], scalars, task_id=j, grid_idx=(j, 0, 0)
            )
            result = module.run_task(v, desc, meta, batch, order="shuffled", seed=j)
            assert result.ok or not ok, result.report
        return result

    return go


def routing_of(logits: torch.Tensor, topk: int, active: int):
    w, r, m = find("moe_topk_softmax_routing")(logits[:active], topk)
    ri = torch.full((logits.shape[1], logits.shape[0]), 1, dtype=torch.int32)  # junk in inactive columns
    ri[:, :active] = r
    return w, ri, m


def test_routing(run):
    torch.manual_seed(0)
    logits = torch.randn(B, E).to(bf)
    logits[3] = 0  # all tie: experts 0 and 1
    w, ri, em = torch.full((B, K), float("nan")), torch.full((E, B), -7, dtype=torch.int32), torch.zeros(E + 1, dtype=torch.int32)
    run(0, lambda j: [logits], lambda j: [w, ri, em], [{"i": B}], active=37)
    want = find("moe_topk_softmax_routing")(logits[:37], K)
    torch.testing.assert_close(w[:37], want[0])
    assert torch.equal(ri[:, :37], want[1]) and torch.equal(em, want[2])
    assert w[37:].isnan().all() and (ri[:, 37:] == -7).all()


def test_routing_nan_and_inf_fp32(run):
    torch.manual_seed(1)
    logits = torch.randn(B, 64)
    logits[5, 10], logits[7], logits[9] = float("nan"), 1.0, float("-inf")
    w, ri, em = torch.empty(B, 8), torch.empty(64, B, dtype=torch.int32), torch.empty(65, dtype=torch.int32)
    run(1, lambda j: [logits], lambda j: [w, ri, em], [{"i": B}], active=40)
    want = find("moe_topk_softmax_routing")(logits[:40], 8)
    torch.testing.assert_close(w[:40], want[0], equal_nan=True)
    assert torch.equal(ri[:, :40], want[1]) and torch.equal(em, want[2])


@pytest.mark.parametrize("tasks,active,one_expert", [(1, 11, False), (3, 80, False), (8, 5, False), (3, 80, True), (2, 70, True)])
def test_expert_linears(run, tasks, active, one_expert):
    torch.manual_seed(tasks + active)
    logits = torch.randn(B, E)
    if one_expert:  # experts 6 and 2 get every token (80 > 64: two passes of four m16 tiles)
        logits[:, 6] += 100
        logits[:, 2] += 50
    tw, ri, em = routing_of(logits, K, active)
    x = torch.randn(B, H).to(bf)
    w13 = (torch.randn(E, 2 * I, H) / H**0.5).to(bf)
    w2 = (torch.randn(E, H, I) / I**0.5).to(bf)
    tol = dict(rtol=1.6e-2, atol=1e-2)
    mid, act, fused = (torch.full((B, K, c), float("nan")).to(bf) for c in (2 * I, I, I))
    y = torch.full((B, K, H), float("nan")).to(bf)
    run(2, lambda j: [x, w13, ri, em], lambda j: [mid], [{"i": tasks}], tasks, active)
    run(3, lambda j: [x, w13, ri, em], lambda j: [fused], [{"i": tasks}], tasks, active)
    run(5, lambda j: [mid], lambda j: [act[..., 64 * j :]], [{"i": B}], 2, active)
    run(4, lambda j: [act, w2, ri, em], lambda j: [y], [{"i": tasks}], tasks, active)
    r = ri[:, :active]
    torch.testing.assert_close(mid[:active], find("moe_w13_linear")(x[:active], w13, r, K), **tol)
    torch.testing.assert_close(fused[:active], find("moe_w13_linear")(x[:active], w13, r, K, fuse_silu_mul=True), **tol)
    torch.testing.assert_close(act[:active], find("moe_silu_mul")(mid[:active]))
    torch.testing.assert_close(y[:active], find("moe_w2_linear")(act[:active], w2, r), **tol)
    for t in (mid, fused, act, y):
        assert t[active:].isnan().all()
    res, out = torch.randn(B, H).to(bf), torch.full((B, H), float("nan")).to(bf)
    tw_full = torch.zeros(B, K)
    tw_full[:active] = tw
    run(6, lambda j: [y[..., 64 * j :], tw_full, res[:, 64 * j :]], lambda j: [out[:, 64 * j :]], [{"i": B}], 4, active)
    torch.testing.assert_close(out[:active], find("moe_mul_sum_add")(y[:active], tw, res[:active]))
    assert out[active:].isnan().all()


def test_a_slot_out_of_range_is_a_task_error(run):
    ri = torch.zeros(E, B, dtype=torch.int32)
    ri[1, 0] = K + 1
    em = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1], dtype=torch.int32)
    x, w13, mid = torch.zeros(B, H).to(bf), torch.zeros(E, 2 * I, H).to(bf), torch.zeros(B, K, 2 * I).to(bf)
    result = run(2, lambda j: [x, w13, ri, em], lambda j: [mid], [{"i": 1}], 1, 1, ok=False)
    assert result.status == "task_error" and result.task_error == (1, K + 1)
