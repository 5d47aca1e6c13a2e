"""Bugs injected into the device code make the emulated scenes fail, with a report as precise as the
GPU's (a mismatch of the outputs) or more (the task, the thread, the file:line). Each test patches a
copy of one csrc header (the tree is left alone), builds the host modules with that copy in front of
csrc, and runs a real scene file of tests/scenes with pytester."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from cpu_helpers import patched_copy

from mpk_runtime import resources
from mpk_runtime.build import host
from mpk_runtime.run import start

SCENES = Path(__file__).resolve().parents[2] / "scenes"  # tests/scenes


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch):
    """inject(header, old, new): host builds see csrc/<header> with ``old`` replaced by ``new``;
    returns the patched copy's path, as reports print it.

    The copy lies in a directory named for its content, outside the checkout, the same in every run:
    a host build's key holds the paths of its headers (its debug lines name them), so a copy at a new
    path each run would be built again each run; at a fixed path a later run finds it in the cache."""
    dirs: list[Path] = []

    def patch(header: str, old: str, new: str) -> str:
        copy = patched_copy(resources.CSRC / header, "mpk-injected", old, new, relative=header)
        dirs.append(copy.parents[len(Path(header).parts) - 1])
        monkeypatch.setattr(start, "build_host_module", functools.partial(host.build_host_module, include_dirs=list(dirs)))
        return str(copy)

    return patch


def run_scene(pytester: pytest.Pytester, scene: str, case: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_scene=(SCENES / scene).read_text())
    return pytester.runpytest_inprocess("--mpk-case", case, "--arch", "sm90", "--mpk-backend", "emulate", *args)


def test_rmsnorm_loop_bound_off_by_one(pytester, inject):
    """r <= live: every task also normalizes the next row (the next task's: the first task to run
    gives itself away), and the last task reads past the input."""
    at = inject("tasks/common/rmsnorm.cuh", "for (int r = 0; r < live; ++r)", "for (int r = 0; r <= live; ++r)")
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "emulated iteration 0, task * (layer rmsnorm_0, rmsnorm): write outside the task's part of an output in "
            "task *: output[[]*, 0[]] changed by task * (rmsnorm_0[[]*[]]), outside its output slice output[[]*:*, 0:1024[]], "
            "which is task *'s (rmsnorm_0[[]*[]]) (1024 element(s) outside it changed)*"
        ]
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b1")  # one task: no next row to write
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "emulated iteration 0, task 0 * (layer rmsnorm_0, rmsnorm): out-of-bounds access in task 0: thread * "
            f"reads past the end of tensor input at csrc/primitives/loads.cuh:* (inlined at csrc/primitives/vec.cuh:*, {at}:*"
        ]
    )
    # Checked, the first task to run already gives itself away.
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024", "--mpk-emulate-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "* read outside the task's slices in task *: thread * reads * bytes at input[[]*, *[]] at "
            f"csrc/primitives/loads.cuh:* (inlined at csrc/primitives/vec.cuh:*, {at}:*; the task * of layer rmsnorm_0 "
            "reads input[[]*[]], weight[[]0:1024[]] (and the meta tensors) and writes output[[]*[]]: "
            "no dependency orders this read *"
        ]
    )


def test_block_reduce_without_its_first_barrier(pytester, inject):
    """Warp 0 reads the other warps' partial sums before they are written: wrong norms."""
    inject(
        "primitives/block.cuh",
        "partial[threadIdx.x / kWarpSize] = v;\n  __syncthreads();",
        "partial[threadIdx.x / kWarpSize] = v;",
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["output 'output' (bfloat16, shape (8, 1024)) differs from the golden *"])
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024", "--mpk-emulate-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["data race in task *: thread * reads 4 bytes at shared mpk::block_reduce<float, mpk::SumOp>()::partial+* at *"]
    )


def test_warp_reduce_with_the_wrong_shuffle_width(pytester, inject):
    """Width 16: the xor-16 step gives each lane its own value back, so each half-warp sums twice."""
    inject("primitives/warp.cuh", "__shfl_xor_sync(0xffffffffu, v, o)", "__shfl_xor_sync(0xffffffffu, v, o, kWarpSize / 2)")
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["output 'output' (bfloat16, shape (8, 1024)) differs from the golden *"])


def test_linear_with_the_wrong_output_stride(pytester, inject):
    """Rows of a task's output slice written N_SLICE apart instead of the output's row length."""
    at = inject(
        "tasks/common/linear.cuh",
        "y[static_cast<size_t>(b) * OUT_STRIDE + col] = from_float<T>(s);",
        "y[static_cast<size_t>(b) * N_SLICE + col] = from_float<T>(s);",
    )
    result = run_scene(pytester, "linear/test_linear.py", "TestLinear::b4_k1024_n2048")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*write outside the task's part of an output in task *: output[[]*[]] changed by task *, outside its output slice *"]
    )
    result = run_scene(pytester, "linear/test_linear.py", "TestLinear::b4_k1024_n2048", "--mpk-emulate-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"* write outside the task's output slices in task *: thread * writes 2 bytes at output[[]0, *[]] at {at}:*; *"]
    )


def test_prepare_next_batch_with_a_wrong_last_page_length(pytester, inject):
    """kv_len % page_size: 0 for a page that is exactly full (every page, with page_size 1). The task
    bodies do not read it, so only the comparison with the batching model can see it."""
    inject(
        "runtime/prepare_next_batch.cuh",
        "m.paged_kv_last_page_len[slot] = kv_len - (need - 1) * cfg.page_size;",
        "m.paged_kv_last_page_len[slot] = kv_len % cfg.page_size;",
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "prepare_next_batch before iteration 0: the device code (csrc/runtime/prepare_next_batch.cuh, run on the "
            "host) and its Python model (mpk_runtime/run/batching.py) disagree on paged_kv_last_page_len[[]0[]]: the "
            "device wrote 0, the model 1 *"
        ]
    )


def test_rmsnorm_with_eps_outside_the_square_root(pytester, inject):
    """rsqrt(mean) + eps: invisible at unit magnitudes, wrong where eps outweighs mean(x^2)."""
    inject(
        "tasks/common/rmsnorm.cuh",
        "        }\n      }\n      float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN + eps);",
        "        }\n      }\n      float const scale = rsqrtf(block_reduce(ss, SumOp()) / HIDDEN) + eps;",
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024_tiny")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["output 'output' (bfloat16, shape (8, 1024)) differs from the golden *"])


def test_embed_accepting_a_token_id_equal_to_the_vocabulary_size(pytester, inject):
    """tok > VOCAB: id 50 of a 50-row table reads the row after the table instead of failing. The
    emulator's guard page stops the read; on the GPU the case fails as the kernel does not."""
    at = inject("tasks/common/embed.cuh", "tok >= VOCAB", "tok > VOCAB")
    result = run_scene(pytester, "embed/test_embed.py", "TestEmbed::b5_v50_h100_id_vocab")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "emulated iteration 0, task * (layer embed_0, embed): out-of-bounds access in task *: thread * reads past "
            f"the end of tensor weight at {at}:*"
        ]
    )


def test_a_layer_s_workspace_is_writable_by_its_own_tasks_under_the_check(pytester):
    """The split attention's tasks write their partial results into the layer's workspace (passed to
    them as an input, whole): --mpk-emulate-check allows it rather than reporting a write outside
    the task's output slices."""
    scene = SCENES / "paged_attention" / "test_paged_attention.py"
    result = pytester.runpytest_inprocess(
        str(scene), "-n", "0", "--import-mode=importlib", "-p", "no:cacheprovider",  # in this process: the patch holds
        "--mpk-case", "TestDecodeWithHistory::b4_split4", "--arch", "sm90", "--mpk-backend", "emulate", "--mpk-emulate-check",
    )  # fmt: skip
    result.assert_outcomes(passed=1)


def test_attention_waiting_for_one_cp_async_group_too_few(pytester, inject):
    """wait_group<kStages> where the body needs kStages - 1: the tile it reads next may still be in
    flight. The emulator lands only the groups a wait_group covers, as the device guarantees, so the
    body reads the stage's old contents."""
    inject("tasks/common/paged_attention.cuh", "cp_async_wait_group<kStages - 1>();", "cp_async_wait_group<kStages>();")
    scene = SCENES / "paged_attention" / "test_paged_attention.py"
    result = pytester.runpytest_inprocess(
        str(scene), "-n", "0", "--import-mode=importlib", "-p", "no:cacheprovider",  # in this process: the patch holds
        "--mpk-case", "TestPrefill::two_prompts_fp16", "--arch", "sm90", "--mpk-backend", "emulate",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*output 'output' (float16, shape (33, 1024)) differs from the golden *"])


def run_scene_file(pytester: pytest.Pytester, scene: str, case: str, *args: str) -> pytest.RunResult:
    """run_scene for a scene file that imports its neighbours (moe_scenes, ...): run in place."""
    return pytester.runpytest_inprocess(
        str(SCENES / scene), "-n", "0", "--import-mode=importlib", "-p", "no:cacheprovider",  # in this process: the patch holds
        "--mpk-case", case, "--arch", "sm90", "--mpk-backend", "emulate", *args,
    )  # fmt: skip


# Dropped barriers whose race only a lagging warp shows: without the barrier, the warps that run
# ahead overwrite shared memory a slower warp has yet to read. Rounds of fibers alone would hide
# them (each fiber reaches its next warp collective before any moves on); the default emulation
# lets a warp lag, so these fail without --mpk-emulate-check, as the device may.
@pytest.mark.parametrize(
    "header, old, scene, case",
    [
        pytest.param(
            "tasks/common/linear.cuh",
            "      __syncthreads();  // partial is free for the next chunk\n",
            "linear/test_linear.py",
            "TestLinear::b1_k1024_n2048",
            id="linear-next-chunk",
        ),
        pytest.param(
            "primitives/block.cuh",
            "  for (int w = 1; w < kWorkerWarps; ++w) r = op(r, partial[w]);\n  __syncthreads();\n",
            "rmsnorm/test_rmsnorm.py",
            "TestRMSNormFp16::b4_rows2",
            id="block-reduce-trailing",
        ),
        pytest.param(
            "tasks/common/moe_routing.cuh",
            "    __syncthreads();  // the staging area is rewritten by the next chunk\n",
            "moe/test_moe_routing.py",
            "TestMoeRouting::e8_k2_uniform_a64",
            id="routing-staging",
        ),
    ],
)
def test_a_dropped_barrier_changes_the_results(pytester, inject, header, old, scene, case):
    new = old.replace("  __syncthreads();\n", "\n") if "for (int w" in old else ""
    inject(header, old, new)
    result = run_scene_file(pytester, scene, case)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*output '*' (*) differs from the golden *"])


def test_rmsnorm_writing_into_its_input(pytester, inject):
    """A body that overwrites the input it read: the emulator copies a changed input back, as the
    write would stand on the GPU, so the harness's check of the inputs bit for bit names it (without
    --mpk-emulate-check too; the emulator had copied back only the tensors some layer writes)."""
    inject(
        "tasks/common/rmsnorm.cuh",
        "    T const *xr = x + static_cast<size_t>(r) * HIDDEN;",
        "    T const *xr = x + static_cast<size_t>(r) * HIDDEN;\n    if (threadIdx.x == 0) const_cast<T *>(xr)[1] = T{};",
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["input 'input' changed: 8 elements (first at (0, 1)), but no task writes an input; the element lies in the *"]
    )


def test_rmsnorm_that_never_ends(pytester, inject, monkeypatch):
    """A body that loops forever fails its emulated case with the stuck thread and line, once the task
    has run past the emulator's limit (start.task_time_limit, a second here); it had hung the process."""
    at = inject(
        "tasks/common/rmsnorm.cuh",
        "    T const *xr = x + static_cast<size_t>(r) * HIDDEN;",
        "    T const *xr = x + static_cast<size_t>(r) * HIDDEN;\n"
        "    if (threadIdx.x == 0)\n      for (int volatile spin = 1; spin;) {\n      }",
    )
    monkeypatch.setattr(start, "task_time_limit", lambda watchdog_timeout: 1)
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hang in task *: the block has run past the emulator's limit of 1 s, and thread 0 (warp 0, lane 0) was "
            f"still running at {at}:*"
        ]
    )


def test_a_store_one_past_the_last_row_lands_in_the_alignment_pad(pytester, inject):
    """c <= HIDDEN: the last row's extra element goes into the bytes after the output that the
    emulator's page guard cannot cover: reported with the tensor, the side and the distance."""
    inject(
        "tasks/common/rmsnorm.cuh",
        "for (int c = threadIdx.x; c < HIDDEN; c += kWorkerThreads)\n        yr[c]",
        "for (int c = threadIdx.x; c <= HIDDEN; c += kWorkerThreads)\n        yr[c]",
    )
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import Case, Out, SceneTestCase, scene_test

        @scene_test(layer="rmsnorm")
        class TestOneOddRow(SceneTestCase):
            CASES = [Case("b1_h1001", hidden=1001)]  # one task, 2002 bytes: 14 short of 2016

            def generate_args(self, params):
                h = params["hidden"]
                x = torch.randn(1, h, dtype=torch.bfloat16)
                return {"input": x, "weight": torch.randn(h, dtype=torch.bfloat16), "output": Out(torch.empty_like(x))}

            def build(self, pk, t, params):
                pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
        """
    )
    result = pytester.runpytest_inprocess("--arch", "sm90", "--mpk-backend", "emulate")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "emulated iteration 0, task * (layer rmsnorm_0, rmsnorm): *: a write 0 bytes after the last byte of tensor "
            "output, inside the 16-byte alignment *"
        ]
    )


def test_a_body_that_writes_a_meta_tensor_it_only_reads(pytester, inject):
    """The tasks of an iteration only read the page table and the other meta tensors prepare_next_batch
    fills (a sampling layer's output tokens aside): a body that uses one as scratch is named at once,
    before the next call of prepare_next_batch plans from what it left."""
    inject(
        "tasks/common/rmsnorm.cuh",
        "  for (int r = 0; r < live; ++r) {\n",
        "  if (threadIdx.x == 0) rt.meta.paged_kv_last_page_len[0] = -1;\n  for (int r = 0; r < live; ++r) {\n",
    )
    result = run_scene(pytester, "rmsnorm/test_rmsnorm.py", "TestRMSNorm::b8_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "emulated iteration 0, task * (layer rmsnorm_0, rmsnorm): write into a meta tensor in task *: "
            "paged_kv_last_page_len[[]0[]] holds -1 where prepare_next_batch left *, and no layer of the graph writes "
            "paged_kv_last_page_len *"
        ]
    )


def test_a_body_that_adds_into_an_intermediate_it_never_cleared(pytester, inject, monkeypatch):
    """rmsnorm adds its result to what its output held: pk.new_tensor memory is poisoned before the
    run, so the consumer's output fails whatever the allocation held. Here it holds zeros, which had
    let the bug pass (torch.empty's memory often does)."""
    from mpk_runtime.graph.task_graph import TaskGraph

    allocate = TaskGraph.add_intermediate

    def zeroed(self, *args, **kwargs):
        t = allocate(self, *args, **kwargs)
        t.data.zero_()
        return t

    monkeypatch.setattr(TaskGraph, "add_intermediate", zeroed)
    inject(
        "tasks/common/rmsnorm.cuh",
        "          store16(yr + c * V, o);",
        "          float was[V];\n          load16(yr + c * V, was);\n"
        "          for (int k = 0; k < V; ++k) o[k] += was[k];\n          store16(yr + c * V, o);",
    )
    result = run_scene_file(pytester, "pipelines/test_diamond.py", "TestDiamond::b4_h1024")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NaN in the output: 4096 computed by the kernel (*pk.new_tensor read before a task wrote it*"])
