"""After a test-mode launch on the GPU the harness compares the meta tensors the device's
prepare_next_batch left with its Python model (mpk_runtime/run/meta_check.py): here the device is
stood in for by the model itself, then by a planner with one bug."""

from __future__ import annotations

import pytest
import torch
from test_batching import setup

from mpk_runtime.errors import KernelError
from mpk_runtime.run.batching import BatchPlanner
from mpk_runtime.run.meta_check import check_test_launch


def launch(cfg, before: dict[str, torch.Tensor], sampled: int) -> dict[str, torch.Tensor]:
    """A correct test-mode launch: plan, a sampling layer writes output_tokens, finalize."""
    after = {k: v.clone() for k, v in before.items()}
    planner = BatchPlanner(cfg, after)
    assert planner.prepare_next_batch(0)
    after["output_tokens"].fill_(sampled)
    assert not planner.prepare_next_batch(1)
    return after


def test_a_correct_launch_passes_and_the_sampled_tokens_come_from_the_device() -> None:
    cfg, before = setup(test_mode=True, max_num_batched_tokens=8, max_seq_length=16, page_size=4, max_num_pages=4)
    after = launch(cfg, before, sampled=77)
    check_test_launch(cfg, before, after, written={"output_tokens"})
    # Were output_tokens not written by a task, the model's (untouched) ones would be appended.
    with pytest.raises(KernelError, match=r"disagree on tokens\[0, 8\]: the device wrote 77, the model 0"):
        check_test_launch(cfg, before, after, written=set())


def test_a_last_page_length_of_zero_for_a_full_page_is_named() -> None:
    cfg, before = setup(test_mode=True, max_num_batched_tokens=8, max_seq_length=16, page_size=4, max_num_pages=4)
    after = launch(cfg, before, sampled=5)
    assert after["paged_kv_last_page_len_buffer"][0] == 4  # 8 tokens: two full pages
    after["paged_kv_last_page_len_buffer"][0] = 8 % 4  # the bug: kv_len % page_size
    with pytest.raises(KernelError) as e:
        check_test_launch(cfg, before, after, written={"output_tokens"})
    assert str(e.value).startswith(
        "after the test-mode launch, prepare_next_batch on the GPU (csrc/runtime/prepare_next_batch.cuh) and its "
        "Python model (mpk_runtime/run/batching.py) disagree on paged_kv_last_page_len[0]: the device wrote 0, the model 4"
    )


def test_a_meta_tensor_a_task_wrote_is_named_as_possibly_the_task_s() -> None:
    """A task that uses paged_kv_last_page_len as scratch leaves the same trace as a planner bug: the
    report says both, since no layer declares the tensor as an output."""
    cfg, before = setup(test_mode=True, max_num_batched_tokens=8, max_seq_length=16, page_size=4, max_num_pages=4)
    after = launch(cfg, before, sampled=5)
    after["paged_kv_last_page_len_buffer"][0] = -1
    with pytest.raises(KernelError) as e:
        check_test_launch(cfg, before, after, written={"output_tokens"})
    assert str(e.value).endswith(
        "; no layer writes paged_kv_last_page_len, so a task that should only read it may have written this value "
        "instead: the emulated run (--mpk-backend emulate) checks what each task writes"
    )


def test_the_check_models_only_test_mode() -> None:
    cfg, before = setup(test_mode=False)
    with pytest.raises(ValueError, match="test-mode launch"):
        check_test_launch(cfg, before, before, written=set())


def test_the_harness_check_takes_what_a_sampling_layer_wrote_from_the_kernel() -> None:
    """harness.check_test_launch on a run kernel (emulated here; the plugin calls it after GPU runs):
    output_tokens, attached as an argmax layer's output, is recognised as written by the graph."""
    import mpk_runtime as mpk
    from mpk_runtime import harness

    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, emulate="reference", target_cc=90, max_num_batched_tokens=2, max_seq_length=3)
    pk = mpk.PersistentKernel(**params)
    logits = torch.randn(2, 256, dtype=torch.bfloat16)
    logits[:, 7] = 9.0
    x = pk.attach_input(logits, "logits")
    out = pk.attach_input(pk.meta_tensors["output_tokens"], "output_tokens")
    values = pk.new_tensor((2, 2), torch.float32, "values")
    indices = pk.new_tensor((2, 2), torch.int64, "indices")
    pk.argmax_partial_layer(input=x, values=values, indices=indices, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.argmax_reduce_layer(values=values, indices=indices, output=out, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    before = {k: v.clone() for k, v in pk.meta_tensors.items()}
    pk()
    pk.synchronize()
    harness.check_test_launch(pk, before)
    pk.meta_tensors["paged_kv_indices_buffer"][0] += 1
    with pytest.raises(KernelError, match=r"disagree on paged_kv_indices\[0\]"):
        harness.check_test_launch(pk, before)
    pk.finalize()


def test_a_launch_the_model_finds_no_pages_for_is_named() -> None:
    import dataclasses

    cfg, before = setup(test_mode=True, max_num_batched_tokens=8, max_seq_length=16, page_size=4, max_num_pages=4)
    after = launch(cfg, before, sampled=5)
    starved = dataclasses.replace(cfg, max_num_pages=1)  # the model's queue: one page for 8 tokens of 4 a page
    with pytest.raises(
        KernelError, match=r"the test-mode launch ran, but the Python model of prepare_next_batch .* found no pages"
    ):
        check_test_launch(starved, before, after, written={"output_tokens"})
