"""The injected bugs of the bug campaign (bench/bug_campaign.py): realistic mistakes in the CUDA task
bodies, the primitives and the runtime, each one text replacement in one csrc header, with the scene
files of the layers that run the mutated code.

Written from reading the code as a reviewer imagines mistakes (off-by-one bounds, strides, dropped
barriers, wrong reductions or shuffle widths, eps placement, inactive rows, event counts, batching
arithmetic), not picked for being caught. tests/cpu/test_bug_campaign_list.py keeps the list in step
with csrc: every ``old`` must occur exactly once in its file.
"""

from __future__ import annotations

from dataclasses import dataclass

# Scene selections (paths relative to the repository root; FILE::Class narrows a file to a class).
RMSNORM = ("tests/scenes/rmsnorm/test_rmsnorm.py",)
LINEAR = ("tests/scenes/linear/test_linear.py",)
LINEAR_RES = ("tests/scenes/linear/test_linear.py", "tests/scenes/linear_with_residual/test_linear_with_residual.py")
EMBED = ("tests/scenes/embed/test_embed.py",)
SILU_MUL = ("tests/scenes/silu_mul/test_silu_mul.py",)
LINEAR_SILU = ("tests/scenes/rmsnorm_linear_silu_mul/test_rmsnorm_linear_silu_mul.py",)
ARGMAX = ("tests/scenes/argmax/test_argmax.py",)
ROUTING = ("tests/scenes/moe/test_moe_routing.py",)
GROUP_ROUTING = ("tests/scenes/moe/test_moe_group_routing.py",)
GROUP_W13 = ("tests/scenes/moe/test_moe_experts.py::TestMoeGroupW13",)
EXPERTS = ("tests/scenes/moe/test_moe_experts.py",)
TOPK_W13 = ("tests/scenes/moe/test_moe_experts.py::TestMoeTopkW13",)
MOE_ELEMENTWISE = ("tests/scenes/moe/test_moe_elementwise.py",)
MOE_SILU = ("tests/scenes/moe/test_moe_elementwise.py::TestMoeSiluMul",)
MOE_SUM = ("tests/scenes/moe/test_moe_elementwise.py::TestMoeMulSumAdd",)
W2_SUM = ("tests/scenes/moe/test_moe_experts.py::TestMoeW2MulSumAdd",)
ATTENTION = ("tests/scenes/paged_attention/test_paged_attention.py",)
# Code every layer runs (the runtime): the scenes of the runtime's own edges (a straggler that
# END_OF_TASK_GRAPH must wait for, a one-task graph), rmsnorm (one request, pages of one token) and
# the attention scenes that read the page table at its edges, leave batch slots unused, or run
# many iterations.
RUNTIME = (
    "tests/scenes/pipelines/test_runtime_edges.py",
    "tests/scenes/rmsnorm/test_rmsnorm.py",
    "tests/scenes/paged_attention/test_paged_attention.py::TestPageBoundaries",
    "tests/scenes/paged_attention/test_paged_attention.py::TestMixed",
    "tests/scenes/paged_attention/test_paged_attention.py::TestOffline",
)


@dataclass(frozen=True)
class Mutation:
    id: str
    kind: str
    description: str
    file: str  # relative to csrc/
    old: str  # must occur exactly once in the file
    new: str
    selection: tuple[str, ...]
    gpu_only: bool = False  # code the emulator does not run (csrc/runtime/scheduler.cuh, worker.cuh)


M = Mutation
MUTATIONS: list[Mutation] = [
    # --- tasks/common/rmsnorm.cuh ---------------------------------------------------------------
    M(
        "rmsnorm-eps-outside-rsqrt",
        "eps placement",
        "rsqrt(mean) + eps instead of rsqrt(mean + eps) (16-byte path)",
        "tasks/common/rmsnorm.cuh",
        "float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN + eps);\n#pragma unroll",
        "float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN) + eps;\n#pragma unroll",
        RMSNORM,
    ),
    M(
        "rmsnorm-inactive-rows",
        "inactive tokens",
        "every task normalizes all ROWS rows, also those past the active tokens",
        "tasks/common/rmsnorm.cuh",
        "int const live = min(ROWS, rt.active_rows(task.scalar_i(1)) - task.grid_idx[0] * ROWS);",
        "int const live = ROWS;",
        RMSNORM,
    ),
    M(
        "rmsnorm-scalar-store-past-row",
        "write past slice",
        "scalar path stores c <= HIDDEN: one element past each row",
        "tasks/common/rmsnorm.cuh",
        "for (int c = threadIdx.x; c < HIDDEN; c += kWorkerThreads)\n        yr[c]",
        "for (int c = threadIdx.x; c <= HIDDEN; c += kWorkerThreads)\n        yr[c]",
        RMSNORM,
    ),
    M(
        "rmsnorm-mean-over-hidden-minus-1",
        "wrong reduction",
        "scalar path divides the sum of squares by HIDDEN - 1",
        "tasks/common/rmsnorm.cuh",
        "float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN + eps);\n      for",
        "float const scale = rsqrtf(block_reduce(ss, SumOp()) / (HIDDEN - 1) + eps);\n      for",
        RMSNORM,
    ),
    # --- tasks/common/linear.cuh ------------------------------------------------------------------
    M(
        "linear-residual-stride",
        "stride",
        "residual read with the slice width N_SLICE as its row stride",
        "tasks/common/linear.cuh",
        "if constexpr (RESIDUAL) s += to_float(r[static_cast<size_t>(b) * OUT_STRIDE + col]);",
        "if constexpr (RESIDUAL) s += to_float(r[static_cast<size_t>(b) * N_SLICE + col]);",
        LINEAR_RES,
    ),
    M(
        "linear-x-without-warp-k-offset",
        "stride",
        "fast path: x fragments loaded without the warp's k_begin",
        "tasks/common/linear.cuh",
        "int const k = k_begin + (kb + u) * 32 + 8 * t;",
        "int const k = (kb + u) * 32 + 8 * t;",
        LINEAR,
    ),
    M(
        "linear-inactive-rows",
        "inactive tokens",
        "fast path writes BATCH rows instead of the active rows",
        "tasks/common/linear.cuh",
        "for (int i = threadIdx.x; i < rows * RC * 8; i += kWorkerThreads) {",
        "for (int i = threadIdx.x; i < BATCH * RC * 8; i += kWorkerThreads) {",
        LINEAR,
    ),
    M(
        "linear-drop-chunk-barrier",
        "dropped barrier",
        "fast path: no barrier before the next chunk rewrites `partial`",
        "tasks/common/linear.cuh",
        "      __syncthreads();  // partial is free for the next chunk\n",
        "",
        LINEAR,
    ),
    M(
        "linear-silu-mul-gate-for-up",
        "wrong operand",
        "rmsnorm_linear_silu_mul: silu(gate) * gate (the up half never read)",
        "tasks/common/linear.cuh",
        "silu(pre[b * N_SLICE + c]) * pre[b * N_SLICE + HALF + c]",
        "silu(pre[b * N_SLICE + c]) * pre[b * N_SLICE + c]",
        LINEAR_SILU,
    ),
    M(
        "linear-silu-mul-inactive-rows",
        "inactive tokens",
        "rmsnorm_linear_silu_mul writes BATCH rows instead of the active rows",
        "tasks/common/linear.cuh",
        "for (int i = threadIdx.x; i < rows * HALF; i += kWorkerThreads) {",
        "for (int i = threadIdx.x; i < BATCH * HALF; i += kWorkerThreads) {",
        LINEAR_SILU,
    ),
    M(
        "linear-plain-k-off-by-one",
        "off-by-one bound",
        "plain path sums k < K - 1: the last column is dropped",
        "tasks/common/linear.cuh",
        "for (int k = lane; k < K; k += kWarpSize)",
        "for (int k = lane; k < K - 1; k += kWarpSize)",
        LINEAR_RES,
    ),
    # --- tasks/common/embed.cuh -------------------------------------------------------------------
    M(
        "embed-accepts-id-vocab",
        "invalid meta data",
        "token id == VOCAB accepted (tok > VOCAB): reads past the table",
        "tasks/common/embed.cuh",
        "tok >= VOCAB",
        "tok > VOCAB",
        EMBED,
    ),
    M(
        "embed-accepts-negative-id",
        "invalid meta data",
        "negative token ids not rejected: reads before the table",
        "tasks/common/embed.cuh",
        "if (tok < 0 || tok >= VOCAB) {",
        "if (tok >= VOCAB) {",
        EMBED,
    ),
    M(
        "embed-inactive-rows",
        "inactive tokens",
        "copies BATCH rows instead of the active rows",
        "tasks/common/embed.cuh",
        "int const rows = rt.active_rows(BATCH);",
        "int const rows = BATCH;",
        EMBED,
    ),
    M(
        "embed-out-stride-cols",
        "stride",
        "output rows COLS apart instead of OUT_STRIDE",
        "tasks/common/embed.cuh",
        "T *dst = out + static_cast<size_t>(b) * OUT_STRIDE;",
        "T *dst = out + static_cast<size_t>(b) * COLS;",
        EMBED,
    ),
    # --- tasks/common/silu_mul.cuh ----------------------------------------------------------------
    M(
        "silu-sign",
        "wrong formula",
        "silu(g) = g / (1 + exp(g)) (sign of the exponent)",
        "tasks/common/silu_mul.cuh",
        "return g / (1.f + __expf(-g));",
        "return g / (1.f + __expf(g));",
        SILU_MUL + MOE_SILU,
    ),
    M(
        "silu-mul-scalar-one-past",
        "write past slice",
        "scalar path loops i <= rows * COLS: one element past the slice",
        "tasks/common/silu_mul.cuh",
        "for (int i = threadIdx.x; i < rows * COLS; i += kWorkerThreads) {",
        "for (int i = threadIdx.x; i <= rows * COLS; i += kWorkerThreads) {",
        SILU_MUL,
    ),
    M(
        "silu-mul-inactive-rows",
        "inactive tokens",
        "computes BATCH rows instead of the active rows",
        "tasks/common/silu_mul.cuh",
        "int const rows = rt.active_rows(BATCH);",
        "int const rows = BATCH;",
        SILU_MUL,
    ),
    # --- tasks/common/argmax.cuh ------------------------------------------------------------------
    M(
        "argmax-ties-highest-index",
        "wrong reduction",
        "equal values resolve to the higher index",
        "tasks/common/argmax.cuh",
        "if (vn || v == bv) return i < bi;",
        "if (vn || v == bv) return i > bi;",
        ARGMAX,
    ),
    M(
        "argmax-warp-best-half-width",
        "shuffle width",
        "warp_best starts at xor 8: lanes 16..31 never compared",
        "tasks/common/argmax.cuh",
        "for (int o = kWarpSize / 2; o > 0; o /= 2) {\n    float const ov",
        "for (int o = kWarpSize / 4; o > 0; o /= 2) {\n    float const ov",
        ARGMAX,
    ),
    M(
        "argmax-nan-loses",
        "wrong reduction",
        "a number beats NaN (torch.argmax picks the NaN)",
        "tasks/common/argmax.cuh",
        "if (vn != bn) return vn;",
        "if (vn != bn) return bn;",
        ARGMAX,
    ),
    M(
        "argmax-partial-column-twice",
        "stride",
        "argmax_partial adds its part index to an already offset slice",
        "tasks/common/argmax.cuh",
        "values[static_cast<size_t>(b) * PARTS] = v;",
        "values[static_cast<size_t>(b) * PARTS + task.grid_idx[0]] = v;",
        ARGMAX,
    ),
    M(
        "argmax-reduce-inactive-rows",
        "inactive tokens",
        "argmax_reduce writes all ROWS rows",
        "tasks/common/argmax.cuh",
        "int const rows = min(ROWS, rt.active_rows(BATCH) - task.grid_idx[0] * ROWS);",
        "int const rows = ROWS;",
        ARGMAX,
    ),
    # --- tasks/common/moe_routing.cuh -------------------------------------------------------------
    M(
        "routing-softmax-extra-lane",
        "off-by-one bound",
        "softmax over lanes <= TOPK: one lane too many in the sum",
        "tasks/common/moe_routing.cuh",
        "float const p = lane < TOPK ? expf(kept - top) : 0.f;",
        "float const p = lane <= TOPK ? expf(kept - top) : 0.f;",
        ROUTING,
    ),
    M(
        "routing-mask-inclusive",
        "wrong reduction",
        "expert mask as an inclusive prefix count",
        "tasks/common/moe_routing.cuh",
        "if (e < E) mask[e] = offset + before;",
        "if (e < E) mask[e] = offset + before + n;",
        ROUTING + TOPK_W13,  # write_expert_mask: both layers build their mask with it
    ),
    M(
        "routing-drop-staging-barrier",
        "dropped barrier",
        "no barrier before the next chunk rewrites the staging area",
        "tasks/common/moe_routing.cuh",
        "    __syncthreads();  // the staging area is rewritten by the next chunk\n",
        "",
        ROUTING,
    ),
    M(
        "routing-last-slot-dropped",
        "off-by-one bound",
        "a picked key read back as its slot only below TOPK: the last choice's routing entry is lost",
        "tasks/common/moe_routing.cuh",
        "key[i] <= TOPK ? static_cast<int>(key[i]) : 0",
        "key[i] < TOPK ? static_cast<int>(key[i]) : 0",
        ROUTING + TOPK_W13,  # topk_of_keys: both layers route with it
    ),
    M(
        "routing-negative-zero",
        "wrong comparison",
        "-0 and +0 keys differ: ties between zero logits break by sign",
        "tasks/common/moe_routing.cuh",
        "if (v == 0.f) v = 0.f; ",
        "",
        ROUTING,
    ),
    # --- tasks/common/moe_group_routing.cuh ------------------------------------------------------
    M(
        "group-routing-best-one",
        "wrong reduction",
        "a group scored by its best expert alone, not its best two",
        "tasks/common/moe_group_routing.cuh",
        "group_score[g] = top1[g] + top2[g];",
        "group_score[g] = top1[g];",
        GROUP_ROUTING,
    ),
    M(
        "group-routing-weight-with-bias",
        "wrong operand",
        "the weights from the biased choice scores, not the sigmoid scores",
        "tasks/common/moe_group_routing.cuh",
        "mine = score[i];",
        "mine = choice[i];",
        GROUP_ROUTING,
    ),
    M(
        "group-routing-group-of-lane",
        "stride",
        "an expert's group taken as e % n_group (interleaved), not e / group size (consecutive)",
        "tasks/common/moe_group_routing.cuh",
        "(kept_groups >> (e / kGroupSize)) & 1u",
        "(kept_groups >> (e % NG)) & 1u",
        GROUP_ROUTING,
    ),
    M(
        "group-routing-unchecked-bias",
        "missing check",
        "a NaN or infinite score_bias is used, not reported: the choices come from comparisons that are all false",
        "tasks/common/moe_group_routing.cuh",
        "  check_score_bias<E>(task, rt, bias);\n  route_tokens<E>(",
        "  route_tokens<E>(",
        GROUP_ROUTING,
    ),
    M(
        "group-routing-pair-merge",
        "wrong reduction",
        "merging two lanes' best two drops the second-best candidate min(first, b): a group whose best two sit on two lanes",
        "tasks/common/moe_group_routing.cuh",
        "second = fmaxf(fminf(first, b), fmaxf(second, c));",
        "second = fmaxf(second, c);",
        GROUP_ROUTING,
    ),
    M(
        "group-routing-group-ties",
        "wrong comparison",
        "groups of equal score kept higher index first",
        "tasks/common/moe_group_routing.cuh",
        "(group_score[h] == group_score[g] && h < g)",
        "(group_score[h] == group_score[g] && h > g)",
        GROUP_ROUTING,
    ),
    # --- tasks/common/moe_linear.cuh --------------------------------------------------------------
    M(
        "moe-linear-w13-row-index",
        "stride",
        "W13 x row of the lo half indexed by output row, not token",
        "tasks/common/moe_linear.cuh",
        "xlo[m] = lo < n ? x + static_cast<size_t>(W13 ? list[lo] / TOPK : list[lo])",
        "xlo[m] = lo < n ? x + static_cast<size_t>(W13 ? list[lo] : list[lo])",
        EXPERTS,
    ),
    M(
        "moe-linear-inactive-tokens",
        "inactive tokens",
        "token lists built over all B columns of the routing rows",
        "tasks/common/moe_linear.cuh",
        "int const tokens = rt.active_rows(B);",
        "int const tokens = B;",
        EXPERTS,
    ),
    M(
        # Not the barrier before the next segments rewrite the token lists: the block_exclusive_sum that
        # precedes those writes already orders them after every warp's reads (an equivalent mutant).
        "moe-linear-drop-active-barrier",
        "dropped barrier",
        "no barrier between writing the list of experts with tokens and reading it",
        "tasks/common/moe_linear.cuh",
        "  __syncthreads();  // active[] complete\n",
        "",
        EXPERTS,
    ),
    M(
        "moe-linear-fused-column",
        "stride",
        "fused SiLU output column 8 * unit + t instead of + 2 * t",
        "tasks/common/moe_linear.cuh",
        "yr[8 * unit + 2 * t + c] = from_float<T>(silu(a) * v);",
        "yr[8 * unit + t + c] = from_float<T>(silu(a) * v);",
        EXPERTS,
    ),
    M(
        "moe-linear-unit-split-off-by-one",
        "batching arithmetic",
        "a task's last unit dropped (hi - 1)",
        "tasks/common/moe_linear.cuh",
        "int const hi = static_cast<int>(units * (me + 1) / num_tasks);",
        "int const hi = static_cast<int>(units * (me + 1) / num_tasks) - (me + 1 == num_tasks);",
        EXPERTS,
    ),
    # --- tasks/common/moe_topk_w13_linear.cuh -----------------------------------------------------
    M(
        "topk-w13-drop-slots-barrier",
        "dropped barrier",
        "the expert counts read the slots before every warp has written its tokens'",
        "tasks/common/moe_topk_w13_linear.cuh",
        "  __syncthreads();  // every token's slots\n",
        "",
        TOPK_W13,
    ),
    M(
        "topk-w13-slot-row-stride",
        "stride",
        "the expert rows of the slots read B apart, written B | 1 apart",
        "tasks/common/moe_topk_w13_linear.cuh",
        "slots, RS, mask, task.output<T>(0)",
        "slots, B, mask, task.output<T>(0)",
        TOPK_W13,
    ),
    # --- tasks/common/moe_group_w13_linear.cuh ----------------------------------------------------
    M(
        "group-w13-every-group-kept",
        "wrong operand",
        "gate / up chooses among all n_group groups (topk_group passed as n_group): its experts are not the routing layer's",
        "tasks/common/moe_group_w13_linear.cuh",
        "group_choices_of_token<TL, E, TOPK, NG, TG>",
        "group_choices_of_token<TL, E, TOPK, NG, NG>",
        GROUP_W13,
    ),
    # --- tasks/common/moe_silu_mul.cuh, moe_mul_sum_add.cuh ---------------------------------------
    M(
        "moe-silu-row-stride",
        "stride",
        "up half read with row stride INTER instead of 2 * INTER",
        "tasks/common/moe_silu_mul.cuh",
        "load16(in + static_cast<size_t>(r) * 2 * INTER + INTER + c, u);",
        "load16(in + static_cast<size_t>(r) * INTER + INTER + c, u);",
        MOE_SILU,
    ),
    M(
        "moe-silu-rows-without-topk",
        "batching arithmetic",
        "(token, slot) rows counted without the factor TOPK",
        "tasks/common/moe_silu_mul.cuh",
        "int const rows = rt.active_rows(task.scalar_i(0)) * TOPK;",
        "int const rows = rt.active_rows(task.scalar_i(0));",
        MOE_SILU,
    ),
    M(
        "moe-sum-weight-index",
        "stride",
        "weights[b + j] instead of weights[b * TOPK + j] (16-byte path)",
        "tasks/common/moe_mul_sum_add.cuh",
        "float const wj = weights[b * TOPK + j];",
        "float const wj = weights[b + j];",
        MOE_SUM,
    ),
    M(
        "moe-sum-scalar-topk-off-by-one",
        "off-by-one bound",
        "scalar path sums j < TOPK - 1 experts",
        "tasks/common/moe_mul_sum_add.cuh",
        "for (int j = 0; j < TOPK; ++j)\n        acc +=",
        "for (int j = 0; j < TOPK - 1; ++j)\n        acc +=",
        MOE_SUM,
    ),
    # --- tasks/common/moe_w2_mul_sum_add.cuh ------------------------------------------------------
    M(
        "w2-sum-drop-sums-barrier",
        "dropped barrier",
        "the epilogue adds the warps' sums before every warp has finished its units",
        "tasks/common/moe_w2_mul_sum_add.cuh",
        "  __syncthreads();  // every warp's sums\n",
        "",
        W2_SUM,
    ),
    M(
        "w2-sum-epilogue-row-stride",
        "stride",
        "the epilogue reads a token's sums C apart, written AS = C + 1 apart",
        "tasks/common/moe_w2_mul_sum_add.cuh",
        "wp * w2sum_detail::warp_words<B, C>() + tok * AS + c;",
        "wp * w2sum_detail::warp_words<B, C>() + tok * C + c;",
        W2_SUM,
    ),
    M(
        "w2-sum-slot-weight-index",
        "stride",
        "every expert of a token weighted by its first slot's weight (topk_weights[tok * TOPK])",
        "tasks/common/moe_w2_mul_sum_add.cuh",
        "my_weights[count + upto - 1] = topk_weights[tok * TOPK + slot - 1];",
        "my_weights[count + upto - 1] = topk_weights[tok * TOPK];",
        W2_SUM,
    ),
    # --- tasks/common/paged_attention.cuh ---------------------------------------------------------
    M(
        "attn-eps-outside-rsqrt",
        "eps placement",
        "q/k RMSNorm: rsqrt(mean) + eps",
        "tasks/common/paged_attention.cuh",
        "float const scale = rsqrtf(warp_sum(ss) / D + eps);",
        "float const scale = rsqrtf(warp_sum(ss) / D) + eps;",
        ATTENTION,
    ),
    M(
        "attn-rope-sign",
        "wrong formula",
        "rotate_half with the sign on the wrong half",
        "tasks/common/paged_attention.cuh",
        "(lane < 16 ? -partner : partner)",
        "(lane < 16 ? partner : -partner)",
        ATTENTION,
    ),
    M(
        "attn-causal-excludes-self",
        "off-by-one bound",
        "causal mask key < pos: a token does not see its own key",
        "tasks/common/paged_attention.cuh",
        "key < ke && key <= pos_row[h]",
        "key < ke && key < pos_row[h]",
        ATTENTION,
    ),
    M(
        "attn-kv-split-chunk-floor",
        "batching arithmetic",
        "key split chunk from kv_len / Z rounded down",
        "tasks/common/paged_attention.cuh",
        "int const chunk = ((p.kv_len + Z - 1) / Z + 15) / 16 * 16;",
        "int const chunk = (p.kv_len / Z + 15) / 16 * 16;",
        ATTENTION,
    ),
    M(
        "attn-merge-weight-inverted",
        "wrong reduction",
        "split merge weights exp2(m - lse) instead of exp2(lse - m)",
        "tasks/common/paged_attention.cuh",
        "exp2f(lse[u] - m_new);",
        "exp2f(m_new - lse[u]);",
        ATTENTION,
    ),
    M(
        "attn-kv-len-full-pages",
        "off-by-one bound",
        "kv_len counts the last page as full",
        "tasks/common/paged_attention.cuh",
        "p.kv_len = (num_pages - 1) * p.page_size + rt.meta.paged_kv_last_page_len[x];",
        "p.kv_len = num_pages * p.page_size;",
        ATTENTION,
    ),
    M(
        "attn-cp-async-wait-one-less",
        "dropped barrier",
        "waits for kStages groups: the current tile may be in flight",
        "tasks/common/paged_attention.cuh",
        "cp_async_wait_group<kStages - 1>();",
        "cp_async_wait_group<kStages>();",
        ATTENTION,
    ),
    # --- primitives -------------------------------------------------------------------------------
    M(
        "block-reduce-count-warp0-twice",
        "wrong reduction",
        "block_reduce folds from w = 0: warp 0 counted twice",
        "primitives/block.cuh",
        "for (int w = 1; w < kWorkerWarps; ++w) r = op(r, partial[w]);",
        "for (int w = 0; w < kWorkerWarps; ++w) r = op(r, partial[w]);",
        RMSNORM,
    ),
    M(
        "block-reduce-drop-second-barrier",
        "dropped barrier",
        "block_reduce without its trailing barrier",
        "primitives/block.cuh",
        "  for (int w = 1; w < kWorkerWarps; ++w) r = op(r, partial[w]);\n  __syncthreads();\n",
        "  for (int w = 1; w < kWorkerWarps; ++w) r = op(r, partial[w]);\n",
        RMSNORM,
    ),
    M(
        "warp-reduce-skip-xor1",
        "shuffle width",
        "warp_reduce stops at o > 1: pairs of lanes never combined",
        "primitives/warp.cuh",
        "for (int o = kWarpSize / 2; o > 0; o /= 2)",
        "for (int o = kWarpSize / 2; o > 1; o /= 2)",
        RMSNORM + ROUTING,
    ),
    M(
        "warp-max-low-of-any-lane",
        "wrong reduction",
        "warp_max takes the largest low half of every lane, not only of the lanes holding the largest high half",
        "primitives/warp.cuh",
        "static_cast<unsigned>(v >> 32) == hi ? static_cast<unsigned>(v) : 0u",
        "static_cast<unsigned>(v)",
        ROUTING + GROUP_ROUTING,
    ),
    M(
        "scan-inclusive",
        "wrong reduction",
        "block_exclusive_sum returns the inclusive sum",
        "primitives/scan.cuh",
        "return before + inclusive - v;",
        "return before + inclusive;",
        ROUTING + EXPERTS,
    ),
    M(
        "scan-lane-off-by-one",
        "off-by-one bound",
        "warp_inclusive_sum adds when lane > o (not >=)",
        "primitives/scan.cuh",
        "if (lane >= o) v += u;",
        "if (lane > o) v += u;",
        ROUTING,
    ),
    M(
        "vec-bf16-truncates",
        "rounding",
        "fp32 -> bf16 rounds toward zero instead of to nearest even",
        "primitives/vec.cuh",
        "return __float2bfloat16_rn(v);",
        "return __float2bfloat16_rz(v);",
        RMSNORM + SILU_MUL,
    ),
    # --- runtime ----------------------------------------------------------------------------------
    M(
        "active-rows-plus-one",
        "inactive tokens",
        "active_rows counts one token more than the iteration has",
        "runtime/task_api.cuh",
        "min(rows, num_active_tokens())",
        "min(rows, num_active_tokens() + 1)",
        LINEAR + MOE_ELEMENTWISE,
    ),
    M(
        "pnb-last-page-len-modulo",
        "batching arithmetic",
        "last page length kv_len % page_size (0 for a full page)",
        "runtime/prepare_next_batch.cuh",
        "m.paged_kv_last_page_len[slot] = kv_len - (need - 1) * cfg.page_size;",
        "m.paged_kv_last_page_len[slot] = kv_len % cfg.page_size;",
        RUNTIME,
    ),
    M(
        "pnb-pages-for-extra-page",
        "batching arithmetic",
        "pages_for(n) = n / page_size + 1: an extra page when full",
        "runtime/prepare_next_batch.cuh",
        "return (tokens + cfg.page_size - 1) / cfg.page_size;",
        "return tokens / cfg.page_size + 1;",
        RUNTIME,
    ),
    M(
        "pnb-unused-slot-stale",
        "batching arithmetic",
        "the last unused batch slot keeps a stale indptr",
        "runtime/prepare_next_batch.cuh",
        "for (int32_t j = slot; j < cfg.max_num_batched_requests; ++j) {",
        "for (int32_t j = slot; j + 1 < cfg.max_num_batched_requests; ++j) {",
        RUNTIME,
    ),
    M(
        "scheduler-end-one-early",
        "event count",
        "END_OF_TASK_GRAPH fires when all but one worker finished",
        "runtime/scheduler.cuh",
        "static_cast<unsigned long long>(p.end_trigger_count) * (base + iter + 1);",
        "static_cast<unsigned long long>(p.end_trigger_count) * (base + iter + 1) - 1;",
        RUNTIME,
        gpu_only=True,
    ),
    M(
        "worker-wait-one-producer-short",
        "event count",
        "a task waits for wait_count - 1 producers",
        "runtime/worker.cuh",
        "static_cast<unsigned long long>(d.wait_count) * (absolute_iter + 1);",
        "static_cast<unsigned long long>(d.wait_count) * (absolute_iter + 1) - 1;",
        RUNTIME,
        gpu_only=True,
    ),
    M(
        "worker-publish-before-body-done",
        "dropped barrier",
        "no barrier between the body and thread 0's publish",
        "runtime/worker.cuh",
        "      execute_task(variant, d, rt);\n      __syncthreads();\n",
        "      execute_task(variant, d, rt);\n",
        RUNTIME,
        gpu_only=True,
    ),
]
