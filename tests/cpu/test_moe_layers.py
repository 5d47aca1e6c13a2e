"""The MoE layers without a GPU: the run-time split of the routed work (every unit of every expert
with tokens exactly once, evenly over the tasks), the dependencies of a block (expert linears are
unordered among their own tasks, ordered against the layers around them; gate / up with the routing
in it beside the routing layer; the down projection with the weighted sum after both), argument
validation, a bad routing slot reported by the down projections in emulation, and compile-only
builds of a whole block (plain, SiLU-mul fused, routing in gate / up from bf16 and from float32
logits, down projection and weighted sum in one layer) for sm80, sm90 and sm100."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime.errors import DTypeError, GridError, KernelError, ShapeError
from mpk_runtime.tasks.moe_experts import assigned_units
from mpk_runtime.tasks.moe_w2_mul_sum_add import column_slices

bf = torch.bfloat16
BATCH = dict(test_mode=True, max_num_batched_tokens=16, max_seq_length=16, max_num_pages=16)


@pytest.mark.parametrize("seed", range(6))
def test_every_routed_unit_goes_to_exactly_one_task_evenly(seed):
    g = torch.Generator().manual_seed(seed)
    experts = [8, 64, 128][seed % 3]
    counts = torch.randint(0, 3, (experts,), generator=g) * (torch.rand(experts, generator=g) < 0.3)
    mask = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).int()
    upe = [16, 96, 128][seed % 3]
    for tasks in (1, 3, 8, 131):
        seen, sizes = [], []
        for j in range(tasks):
            segs = assigned_units(mask, tasks, j, upe)
            sizes.append(sum(end - first for _, first, end in segs))
            seen += [(e, u) for e, first, end in segs for u in range(first, end)]
        want = [(e, u) for e in range(experts) if counts[e] > 0 for u in range(upe)]
        assert sorted(seen) == want  # each unit of each expert with tokens, once; none of the others
        assert max(sizes) - min(sizes) <= 1


def block(pk, experts=8, topk=2, rows=16, hidden=256, inter=128, tasks=4, fused=False, tag="", topk_w13=False, w2_sum=False):
    def t(name, *shape, dtype=bf):
        return pk.attach_input(torch.empty(*shape, dtype=dtype), name + tag)

    x, out, res = t("x", rows, hidden), t("out", rows, hidden), t("res", rows, hidden)
    wr, w13, w2 = t("wr", experts, hidden), t("w13", experts, 2 * inter, hidden), t("w2", experts, hidden, inter)
    logits, tw = t("logits", rows, experts), t("tw", rows, topk, dtype=torch.float32)
    route = dict(routing_indices=t("ri", experts, rows, dtype=torch.int32), expert_mask=t("em", experts + 1, dtype=torch.int32))
    act, bd = t("act", rows, topk, inter), pk.block_dim
    pk.linear_layer(input=x, weight=wr, output=logits, grid_dim=(experts // 8, 1, 1), block_dim=bd)
    pk.moe_topk_softmax_routing_layer(input=logits, topk_weights=tw, **route, grid_dim=(1, 1, 1), block_dim=bd)
    if topk_w13:
        pk.moe_topk_w13_linear_layer(input=x, weight=w13, router_logits=logits, output=act, grid_dim=(tasks, 1, 1), block_dim=bd)
    elif fused:
        pk.moe_w13_linear_layer(input=x, weight=w13, **route, output=act, grid_dim=(tasks, 1, 1), block_dim=bd)
    else:
        mid = t("mid", rows, topk, 2 * inter)
        pk.moe_w13_linear_layer(input=x, weight=w13, **route, output=mid, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.moe_silu_mul_layer(input=mid, output=act, grid_dim=(2, 1, 1), block_dim=bd)
    if w2_sum:  # the most 16-column slices of H up to `tasks`
        cut = column_slices(hidden, tasks)
        pk.moe_w2_mul_sum_add_layer(
            input=act, weight=w2, **route, topk_weights=tw, residual=res, output=out, grid_dim=(cut, 1, 1), block_dim=bd
        )
        return
    y = t("y", rows, topk, hidden)
    pk.moe_w2_linear_layer(input=act, weight=w2, **route, output=y, grid_dim=(tasks, 1, 1), block_dim=bd)
    pk.moe_mul_sum_add_layer(input=y, topk_weights=tw, residual=res, output=out, grid_dim=(4, 1, 1), block_dim=bd)


def test_expert_linear_tasks_are_unordered_among_themselves_and_after_their_producers(make_pk):
    pk = make_pk(90, num_workers=4, **BATCH)
    block(pk, tasks=4)
    g = pk._graph  # the declared task graph
    by_layer = {layer.name: list(range(layer.first_task, layer.first_task + layer.num_tasks)) for layer in g.layers}
    w13, w2, routing = by_layer["moe_w13_linear_0"], by_layer["moe_w2_linear_0"], by_layer["moe_topk_softmax_routing_0"]
    for tid in w13:
        assert set(g.tasks[tid].deps) == set(routing)  # not on each other
    for tid in w2:
        assert set(g.tasks[tid].deps) >= set(by_layer["moe_silu_mul_0"]) and not set(g.tasks[tid].deps) & set(w2)
    for tid in by_layer["moe_mul_sum_add_0"]:
        assert set(g.tasks[tid].deps) >= set(w2)


@pytest.mark.parametrize(
    "change,error,words",
    [
        (dict(w13_out=(16, 2, 100)), ShapeError, "output's last dim must be 256 ([gate | up]) or 128"),
        (dict(w13_weight=(8, 256, 250)), ShapeError, "in_features=256"),
        (dict(routing=(8, 15)), ShapeError, "routing_indices must be (experts, tokens) = (8, 16)"),
        (dict(w13_dtype=torch.float32), DTypeError, "must be bfloat16 or float16"),
    ],
)
def test_expert_linear_arguments_are_checked(make_pk, change, error, words):
    pk = make_pk(90, **BATCH)
    x = pk.attach_input(torch.empty(16, 256, dtype=change.get("w13_dtype", bf)), "x")
    w = pk.attach_input(torch.empty(*change.get("w13_weight", (8, 256, 256)), dtype=bf), "w")
    r = pk.attach_input(torch.empty(*change.get("routing", (8, 16)), dtype=torch.int32), "r")
    m = pk.attach_input(torch.empty(9, dtype=torch.int32), "m")
    y = pk.attach_input(torch.empty(*change.get("w13_out", (16, 2, 256)), dtype=bf), "y")
    with pytest.raises(error) as e:
        pk.moe_w13_linear_layer(
            input=x, weight=w, routing_indices=r, expert_mask=m, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim
        )
    assert words in str(e.value)


def test_routing_in_gate_up_runs_beside_the_routing_layer(make_pk):
    """moe_topk_w13_linear waits for the router logits only, not for the routing task; the down
    projection waits for both."""
    pk = make_pk(90, num_workers=4, **BATCH)
    block(pk, tasks=3, topk_w13=True)
    g = pk._graph
    by_layer = {layer.name: set(range(layer.first_task, layer.first_task + layer.num_tasks)) for layer in g.layers}
    w13, routing = by_layer["moe_topk_w13_linear_0"], by_layer["moe_topk_softmax_routing_0"]
    for tid in w13:
        assert set(g.tasks[tid].deps) == by_layer["linear_0"]
    for tid in by_layer["moe_w2_linear_0"]:
        assert set(g.tasks[tid].deps) >= w13 | routing


@pytest.mark.parametrize(
    "change,error,words",
    [
        (dict(logits=(16, 4)), ShapeError, "router_logits must be (tokens, experts) = (16, 8)"),
        (dict(logits_dtype=torch.int32), DTypeError, "dtype=i32)) must be float32, bfloat16 or float16"),
        (dict(k=9), ShapeError, "k=9 experts per token (output's dim 1) out of E=8"),
        (dict(experts=1024, rows=17), ShapeError, "1024 experts x 17 token rows need 17408 routing slots"),
        (dict(out_cols=100), ShapeError, "output's last dim must be 256 ([gate | up]) or 128"),
    ],
)
def test_routing_in_gate_up_arguments_are_checked(make_pk, change, error, words):
    rows, experts = change.get("rows", 16), change.get("experts", 8)
    pk = make_pk(90, **{**BATCH, "max_num_batched_tokens": rows})
    x = pk.attach_input(torch.empty(rows, 256, dtype=bf), "x")
    w = pk.attach_input(torch.empty(experts, 256, 256, dtype=bf), "w")
    logits = pk.attach_input(torch.empty(*change.get("logits", (rows, experts)), dtype=change.get("logits_dtype", bf)), "l")
    y = pk.attach_input(torch.empty(rows, change.get("k", 2), change.get("out_cols", 128), dtype=bf), "y")
    with pytest.raises(error) as e:
        pk.moe_topk_w13_linear_layer(
            input=x, weight=w, router_logits=logits, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim
        )
    assert words in str(e.value)


@pytest.mark.parametrize(
    "hidden,workers,slices",
    [(2048, 131, 128), (2048, 132, 128), (2048, 100, 64), (256, 8, 8), (48, 8, 3), (40, 8, None), (8, 8, None)],
)
def test_column_slices_are_whole_16_column_units_one_a_worker_at_most(hidden, workers, slices):
    assert column_slices(hidden, workers) == slices


@pytest.mark.parametrize("topk_w13", [False, True], ids=["w13", "topk_w13"])
def test_down_projection_with_the_sum_waits_for_gate_up_and_routing(make_pk, topk_w13):
    """moe_w2_mul_sum_add waits for every gate / up task (an edge of its own) and for the routing task
    (its routing_indices, expert_mask and topk_weights: through gate / up where that waits for the
    routing, an edge of its own where gate / up routes itself); its tasks, owning distinct columns,
    do not wait for each other, not even through other tasks."""
    pk = make_pk(90, num_workers=4, **BATCH)
    block(pk, tasks=4, fused=True, topk_w13=topk_w13, w2_sum=True)
    g = pk._graph
    by_layer = {layer.name: set(range(layer.first_task, layer.first_task + layer.num_tasks)) for layer in g.layers}
    w13 = by_layer["moe_topk_w13_linear_0" if topk_w13 else "moe_w13_linear_0"]
    routing, w2_sum = by_layer["moe_topk_softmax_routing_0"], by_layer["moe_w2_mul_sum_add_0"]
    assert len(w2_sum) == 4 and "moe_w2_linear_0" not in by_layer and "moe_mul_sum_add_0" not in by_layer

    def before(tid):  # every task that tid waits for, directly or through others
        seen, todo = set(), list(g.tasks[tid].deps)
        while todo:
            if (d := todo.pop()) not in seen:
                seen.add(d)
                todo += g.tasks[d].deps
        return seen

    for tid in w2_sum:
        deps = set(g.tasks[tid].deps)
        assert deps >= w13 and before(tid) >= w13 | routing and not before(tid) & w2_sum
        assert deps >= routing if topk_w13 else not deps & routing  # the edge the layer order implies is pruned


@pytest.mark.parametrize(
    "change,error,words",
    [
        (dict(input=(16, 256)), ShapeError, "input must be (tokens, k, I) and weight (experts, H, I) with the same I"),
        (dict(weight=(8, 256, 96)), ShapeError, "with the same I; got (16, 2, 128), (8, 256, 96)"),
        (dict(routing=(8, 15)), ShapeError, "routing_indices must be (experts, tokens) = (8, 16)"),
        (
            dict(mask=(8,)),
            ShapeError,
            "expert_mask (9,) and topk_weights (tokens, k) = (16, 2) (from moe_topk_softmax_routing); got (8, 16), (8,)",
        ),
        (
            dict(tw=(16, 3)),
            ShapeError,
            "topk_weights (tokens, k) = (16, 2) (from moe_topk_softmax_routing); got (8, 16), (9,), (16, 3)",
        ),
        (dict(residual=(16, 128)), ShapeError, "residual and output must be (tokens, H) = (16, 256); got (16, 128), (16, 256)"),
        (dict(output=(15, 256)), ShapeError, "residual and output must be (tokens, H) = (16, 256); got (16, 256), (15, 256)"),
        (dict(inter=48), ShapeError, "I = 48 must be a multiple of 32 (tensor-core k-blocks)"),
        (
            dict(grid=3),
            ShapeError,
            "grid x = 3 tasks must cut H = 256 into slices of a multiple of 16 columns; use a divisor of 16",
        ),
        (dict(grid=32), ShapeError, "grid x = 32 tasks must cut H = 256 into slices of a multiple of 16 columns"),
        (dict(input_dtype=torch.float32), DTypeError, "input (DTensor('x', shape=(16, 2, 128), dtype=fp32)) must be bfloat16 or"),
        (
            dict(weight_dtype=torch.float16),
            DTypeError,
            "weight (DTensor('w', shape=(8, 256, 128), dtype=fp16)) must be bfloat16 or float16, like input",
        ),
        (dict(residual_dtype=torch.float32), DTypeError, "residual (DTensor('res', shape=(16, 256), dtype=fp32)) must be"),
        (dict(output_dtype=torch.float16), DTypeError, "output (DTensor('y', shape=(16, 256), dtype=fp16)) must be bfloat16"),
        (dict(routing_dtype=torch.int64), DTypeError, "routing_indices (DTensor('r', shape=(8, 16), dtype=i64)) must be int32"),
        (dict(mask_dtype=torch.float32), DTypeError, "expert_mask (DTensor('m', shape=(9,), dtype=fp32)) must be int32"),
        (dict(tw_dtype=bf), DTypeError, "topk_weights (DTensor('tw', shape=(16, 2), dtype=bf16)) must be float32"),
        (
            dict(rows=64, grid=1),
            ShapeError,
            "64 token rows x 256 columns a task need 530464 bytes of sums in shared memory, more than 131072",
        ),
        (dict(rows=64, grid=2), ShapeError, "64 token rows x 128 columns a task need 268320 bytes"),
    ],
)
def test_down_projection_with_the_sum_arguments_are_checked(make_pk, change, error, words):
    rows, inter, k = change.get("rows", 16), change.get("inter", 128), 2
    pk = make_pk(90, **{**BATCH, "max_num_batched_tokens": rows})

    def t(arg, name, shape, dtype=bf):
        return pk.attach_input(torch.empty(*change.get(arg, shape), dtype=change.get(arg + "_dtype", dtype)), name)

    with pytest.raises(error) as e:
        pk.moe_w2_mul_sum_add_layer(
            input=t("input", "x", (rows, k, inter)),
            weight=t("weight", "w", (8, 256, inter)),
            routing_indices=t("routing", "r", (8, rows), torch.int32),
            expert_mask=t("mask", "m", (9,), torch.int32),
            topk_weights=t("tw", "tw", (rows, k), torch.float32),
            residual=t("residual", "res", (rows, 256)),
            output=t("output", "y", (rows, 256)),
            grid_dim=(change.get("grid", 4), 1, 1),
            block_dim=pk.block_dim,
        )
    assert words in str(e.value)


@pytest.mark.parametrize("emulate", [True, "reference"], ids=["cuda_bodies", "reference"])
@pytest.mark.parametrize("layer", ["moe_w2_linear", "moe_w2_mul_sum_add"])
def test_a_routing_slot_out_of_range_is_reported(make_pk, layer, emulate):
    """An active token's slot past k in the routing (here k + 1 for token 0 at expert 1) fails the
    task with the spec's words; an inactive token's column (a junk -1 for token 5) is not read."""
    experts, k, hidden, inter = 8, 2, 256, 128
    prompt = {"prompt_lengths": torch.tensor([1], dtype=torch.int32)}  # one active token
    pk = make_pk(90, compile_only=False, emulate=emulate, **BATCH, meta_tensors=prompt)
    ri = torch.zeros(experts, 16, dtype=torch.int32)
    ri[1, 0], ri[1, 5] = k + 1, -1
    em = torch.tensor([0, 0] + [1] * (experts - 1), dtype=torch.int32)  # expert 1 has the token

    def t(value, name):
        return pk.attach_input(value, name)

    x, w = t(torch.zeros(16, k, inter, dtype=bf), "x"), t(torch.zeros(experts, hidden, inter, dtype=bf), "w")
    route = dict(routing_indices=t(ri, "ri"), expert_mask=t(em, "em"))
    if layer == "moe_w2_linear":
        y = t(torch.zeros(16, k, hidden, dtype=bf), "y")
        pk.moe_w2_linear_layer(input=x, weight=w, **route, output=y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    else:
        tw, res, out = (
            t(torch.zeros(16, k), "tw"),
            t(torch.zeros(16, hidden, dtype=bf), "res"),
            t(torch.zeros(16, hidden, dtype=bf), "out"),
        )
        pk.moe_w2_mul_sum_add_layer(
            input=x, weight=w, **route, topk_weights=tw, residual=res, output=out, grid_dim=(2, 1, 1), block_dim=pk.block_dim
        )
    pk.compile()
    with pytest.raises(KernelError, match=rf"^emulated iteration 0: task \d {layer}_0\[\d\] failed: ") as e:
        pk()
    pk.finalize()
    assert str(e.value).endswith(f"routing_indices holds slot {k + 1}; slots are 0 (not routed) or 1..k")


def test_routing_arguments_are_checked(make_pk):
    pk = make_pk(90, **BATCH)
    x = pk.attach_input(torch.empty(4, 8, dtype=bf), "x")
    w = pk.attach_input(torch.empty(4, 9), "w")  # k = 9 > E = 8
    r = pk.attach_input(torch.empty(8, 4, dtype=torch.int32), "r")
    m = pk.attach_input(torch.empty(9, dtype=torch.int32), "m")
    with pytest.raises(ShapeError, match=r"k=9 experts per token out of E=8"):
        pk.moe_topk_softmax_routing_layer(
            input=x, topk_weights=w, routing_indices=r, expert_mask=m, grid_dim=(1, 1, 1), block_dim=pk.block_dim
        )
    ok = pk.attach_input(torch.empty(4, 2), "w_ok")
    with pytest.raises(GridError):  # one task sees every token
        pk.moe_topk_softmax_routing_layer(
            input=x, topk_weights=ok, routing_indices=r, expert_mask=m, grid_dim=(2, 1, 1), block_dim=pk.block_dim
        )


@pytest.mark.parametrize("cc", [80, 90, 100], ids=lambda cc: f"sm{cc}")
def test_moe_block_compiles(make_pk, cc):
    pk = make_pk(cc, num_workers=8, **BATCH)
    block(pk, experts=64, topk=8, tasks=8, fused=False)
    block(pk, experts=64, topk=8, tasks=8, fused=True, tag="_fused")
    block(pk, experts=64, topk=8, tasks=7, fused=True, tag="_topk_w13", topk_w13=True)
    block(pk, experts=64, topk=8, tasks=8, fused=True, tag="_w2_sum", topk_w13=True, w2_sum=True)
    x, w13 = (
        pk.attach_input(torch.empty(16, 256, dtype=bf), "x_fp32"),
        pk.attach_input(torch.empty(64, 256, 256, dtype=bf), "w13_fp32"),
    )
    logits, y = pk.attach_input(torch.empty(16, 64), "logits_fp32"), pk.attach_input(torch.empty(16, 8, 128, dtype=bf), "y_fp32")
    pk.moe_topk_w13_linear_layer(input=x, weight=w13, router_logits=logits, output=y, grid_dim=(7, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    assert "moe_w13_linear" in pk.build_result.entry.name or pk.build_result.path.exists()
