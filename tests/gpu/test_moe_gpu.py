"""The MoE block on the GPU (router linear -> routing -> w13 -> SiLU-mul, fused or not -> w2 ->
combine + residual; with SiLU-mul fused, w2 and the combine are one layer, moe_w2_mul_sum_add, as
in the decode benchmark and the models), sm80 and sm90 builds, every stage against its reference applied to the
kernel's own upstream outputs (so a near-tie in the router logits cannot cascade), routing
exactly; rows of inactive tokens stay poisoned. Routing cases: uniform, one expert for every token
(64 tokens: four m16 tiles), all tokens alike, ties, few experts with tokens; E = 8, 64, 128;
k = 1, 2, 8; 1 to 64 active tokens of 64 rows; the Qwen3-30B-A3B shapes at 1 and 64 tokens."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime import harness
from mpk_runtime.harness import find_reference as find
from mpk_runtime.tasks.moe_w2_mul_sum_add import column_slices

bf = torch.bfloat16
ROWS = 64  # max_num_batched_tokens: one build per shape serves every active count
SHAPES = {  # name: (experts, topk, hidden, inter, fused: SiLU-mul in w13, and w2 with the combine)
    "e8_k2": (8, 2, 256, 128, False),
    "e64_k8": (64, 8, 256, 128, False),
    "e64_k1": (64, 1, 256, 128, False),
    "e128_k8_fused": (128, 8, 512, 256, True),
    "qwen3_30b_a3b": (128, 8, 2048, 768, True),
}
CASES = [  # shape, routing pattern, active tokens
    ("e8_k2", "uniform", 64),
    ("e8_k2", "ties", 5),
    ("e64_k8", "uniform", 1),
    ("e64_k8", "all_same", 40),
    ("e64_k8", "few_experts", 23),
    ("e64_k1", "one_expert", 64),
    ("e128_k8_fused", "uniform", 64),
    ("e128_k8_fused", "ties", 17),
    ("qwen3_30b_a3b", "uniform", 1),
    ("qwen3_30b_a3b", "uniform", 64),
]


def params(target_cc: int, active: int, **extra) -> dict:
    p = mpk.PersistentKernel.get_default_init_parameters()
    workers, schedulers = mpk.get_configurations_from_gpu(torch.cuda.current_device())
    p.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers, target_cc=target_cc)
    p.update(max_num_batched_tokens=ROWS, max_seq_length=ROWS, max_num_pages=ROWS)
    p.update(meta_tensors={"prompt_lengths": torch.tensor([active], dtype=torch.int32, device="cuda")}, **extra)
    return p


def router(pattern: str, experts: int, hidden: int, x: torch.Tensor) -> torch.Tensor:
    w = torch.randn(experts, hidden, device="cuda") / hidden**0.5
    w[:, 0] = 0
    if pattern == "one_expert":
        w[3, 0] = 64  # x[:, 0] == 1: expert 3 first for every token
    elif pattern == "all_same":
        x[:] = x[0]
    elif pattern == "ties":
        w[1::2] = w[0::2]  # experts 2i and 2i+1 tie on every token: the lower index wins
    elif pattern == "few_experts":
        w[5:, 0] = -64
    return w.to(bf)


def build_block(pk, shape: str, pattern: str, device: str = "cuda") -> dict[str, torch.Tensor]:
    """Attach one MoE block's tensors to pk and add its layers; returns the tensors by name."""
    e, k, h, i, fused = SHAPES[shape]
    x = torch.randn(ROWS, h, device=device)
    x[:, 0] = 1
    router_weight = router(pattern, e, h, x) if device == "cuda" else torch.empty(e, h, dtype=bf, device=device)
    nan = float("nan")
    t = {
        "x": x.to(bf),
        "router": router_weight,
        "w13": (torch.randn(e, 2 * i, h, device=device) / h**0.5).to(bf),
        "w2": (torch.randn(e, h, i, device=device) / i**0.5).to(bf),
        "residual": torch.randn(ROWS, h, device=device).to(bf),
        "logits": torch.full((ROWS, e), nan, dtype=bf, device=device),
        "topk_weights": torch.full((ROWS, k), nan, device=device),
        "routing_indices": torch.full((e, ROWS), -1, dtype=torch.int32, device=device),
        "expert_mask": torch.full((e + 1,), -1, dtype=torch.int32, device=device),
        "act": torch.full((ROWS, k, i), nan, dtype=bf, device=device),
        "output": torch.full((ROWS, h), nan, dtype=bf, device=device),
    }
    if not fused:
        t["mid"] = torch.full((ROWS, k, 2 * i), nan, dtype=bf, device=device)
        t["y"] = torch.full((ROWS, k, h), nan, dtype=bf, device=device)
    a = {n: pk.attach_input(v, n) for n, v in t.items()}
    tasks, bd = pk.params.num_workers, pk.block_dim
    route = dict(routing_indices=a["routing_indices"], expert_mask=a["expert_mask"])
    pk.linear_layer(input=a["x"], weight=a["router"], output=a["logits"], grid_dim=(e // 8, 1, 1), block_dim=bd)
    pk.moe_topk_softmax_routing_layer(
        input=a["logits"], topk_weights=a["topk_weights"], **route, grid_dim=(1, 1, 1), block_dim=bd
    )
    w13_out = a["act"] if fused else a["mid"]
    pk.moe_w13_linear_layer(input=a["x"], weight=a["w13"], **route, output=w13_out, grid_dim=(tasks, 1, 1), block_dim=bd)
    if not fused:
        pk.moe_silu_mul_layer(input=a["mid"], output=a["act"], grid_dim=(i // 64, 1, 1), block_dim=bd)
    if fused:  # one 16-column slice of h per worker, at most
        slices = column_slices(h, tasks)
        pk.moe_w2_mul_sum_add_layer(
            input=a["act"], weight=a["w2"], **route, topk_weights=a["topk_weights"], residual=a["residual"],
            output=a["output"], grid_dim=(slices, 1, 1), block_dim=bd,
        )  # fmt: skip
        return t
    pk.moe_w2_linear_layer(input=a["act"], weight=a["w2"], **route, output=a["y"], grid_dim=(tasks, 1, 1), block_dim=bd)
    pk.moe_mul_sum_add_layer(
        input=a["y"],
        topk_weights=a["topk_weights"],
        residual=a["residual"],
        output=a["output"],
        grid_dim=(h // 64, 1, 1),
        block_dim=bd,
    )
    return t


@pytest.fixture(scope="module", autouse=True)
def prebuilt():
    """Every module of this file built up front, in parallel (later compiles hit the cache): each graph
    in a compile-only kernel, built as the GPU needs it (its compile() would build a cubin)."""

    def one(job):
        cc, shape = job
        pk = mpk.PersistentKernel(**params(cc, 1, compile_only=True))
        build_block(pk, shape, "uniform", device="meta")
        harness.build_for(pk, on_gpu=True)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, [(cc, s) for cc in (80, 90) for s in SHAPES]))


def unwritten(t: torch.Tensor, active: int, dim: int = 0) -> bool:
    rest = t.narrow(dim, active, t.shape[dim] - active)
    return bool(rest.isnan().all()) if t.is_floating_point() else bool((rest == -1).all())


@pytest.mark.parametrize("target_cc", [80, 90])
@pytest.mark.parametrize("shape,pattern,active", CASES, ids=[f"{s}-{p}-a{a}" for s, p, a in CASES])
def test_moe_block_matches_references(target_cc, shape, pattern, active):
    torch.manual_seed(active)
    e, k, h, i, fused = SHAPES[shape]
    pk = mpk.PersistentKernel(**params(target_cc, active))
    t = build_block(pk, shape, pattern)
    pk.compile()
    pk()
    pk.synchronize()
    pk.finalize()
    a = active
    c = {n: v.cpu() for n, v in t.items()}  # the kernel's outputs, and its inputs
    tol = dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(c["logits"][:a], find("linear")(c["x"][:a], c["router"]), **tol)
    w, r, m = find("moe_topk_softmax_routing")(c["logits"][:a], k)  # routing of the kernel's own logits
    torch.testing.assert_close(c["topk_weights"][:a], w, rtol=1e-5, atol=1e-6)
    assert torch.equal(c["routing_indices"][:, :a], r), "routing_indices"
    assert torch.equal(c["expert_mask"], m), "expert_mask"
    ri = c["routing_indices"][:, :a]
    if fused:
        act = find("moe_w13_linear")(c["x"][:a], c["w13"], ri, k, fuse_silu_mul=True)
    else:
        torch.testing.assert_close(c["mid"][:a], find("moe_w13_linear")(c["x"][:a], c["w13"], ri, k), **tol)
        act = find("moe_silu_mul")(c["mid"][:a])
    torch.testing.assert_close(c["act"][:a], act, **tol)
    if fused:
        route = (ri, c["expert_mask"], c["topk_weights"][:a])
        want = find("moe_w2_mul_sum_add")(c["act"][:a], c["w2"], *route, c["residual"][:a])
    else:
        torch.testing.assert_close(c["y"][:a], find("moe_w2_linear")(c["act"][:a], c["w2"], ri), **tol)
        want = find("moe_mul_sum_add")(c["y"][:a], c["topk_weights"][:a], c["residual"][:a])
    torch.testing.assert_close(c["output"][:a], want, **tol)
    for name in ("logits", "topk_weights", "act", "output", *(() if fused else ("mid", "y"))):
        assert unwritten(c[name], a), f"{name}: rows of inactive tokens were written"
    assert unwritten(c["routing_indices"], a, dim=1), "routing_indices: columns of inactive tokens were written"


@pytest.mark.parametrize("target_cc", [80, 90])
def test_routing_nan_inf_and_ties_fp32(make_pk, target_cc):
    """fp32 logits with NaN (counts as -inf), -inf and exact ties, 40 of 64 tokens, E = 64, k = 8."""
    logits = torch.randn(ROWS, 64, device="cuda")
    logits[torch.rand(ROWS, 64, device="cuda") < 0.1] = float("nan")
    logits[torch.rand(ROWS, 64, device="cuda") < 0.1] = float("-inf")
    logits[3] = 0.5  # every expert ties
    logits[4, ::2] = logits[4, 1::2]
    pk = make_pk(
        target_cc=target_cc,
        max_num_batched_tokens=ROWS,
        max_seq_length=ROWS,
        max_num_pages=ROWS,
        meta_tensors={"prompt_lengths": torch.tensor([40], dtype=torch.int32, device="cuda")},
    )
    out = {
        "topk_weights": torch.full((ROWS, 8), float("nan"), device="cuda"),
        "routing_indices": torch.full((64, ROWS), -1, dtype=torch.int32, device="cuda"),
        "expert_mask": torch.full((65,), -1, dtype=torch.int32, device="cuda"),
    }
    pk.moe_topk_softmax_routing_layer(
        input=pk.attach_input(logits, "logits"),
        **{n: pk.attach_input(v, n) for n, v in out.items()},
        grid_dim=(1, 1, 1),
        block_dim=pk.block_dim,
    )
    pk.compile()
    pk()
    pk.synchronize()
    w, r, m = find("moe_topk_softmax_routing")(logits[:40].cpu(), 8)
    torch.testing.assert_close(out["topk_weights"][:40].cpu(), w, rtol=1e-5, atol=1e-6)
    assert torch.equal(out["routing_indices"][:, :40].cpu(), r)
    assert torch.equal(out["expert_mask"].cpu(), m)
    assert unwritten(out["topk_weights"], 40) and unwritten(out["routing_indices"], 40, dim=1)
