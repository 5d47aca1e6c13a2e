"""pytest_mpk.active_tokens: the kernel_params of a batch with fewer active tokens than rows, and a
clear error for counts that cannot be."""

from __future__ import annotations

import re

import pytest
import torch

from mpk_runtime import ConfigError, MetaTensorError
from pytest_mpk import active_tokens, first_batch_meta, model_batches


def test_the_first_batch_has_the_active_tokens_only() -> None:
    meta = first_batch_meta(active_tokens(8, 3))
    assert int(meta.num_new_tokens[0]) == 3
    assert meta.qo_indptr_buffer[:2].tolist() == [0, 3]


@pytest.mark.parametrize(
    ("rows", "active", "message"),
    [
        (8, 9, "active_tokens: active=9 tokens do not fit rows=8; give at most 8 active tokens, or more rows"),
        (8, 0, "active_tokens: active=0 must be an int >= 1"),
        (0, 1, "active_tokens: rows=0 must be an int >= 1"),
        (8, 2.5, "active_tokens: active=2.5 must be an int >= 1"),
        (True, 1, "active_tokens: rows=True must be an int >= 1"),
    ],
)
def test_counts_that_cannot_be_are_refused(rows, active, message) -> None:
    with pytest.raises(ValueError) as e:
        active_tokens(rows, active)
    assert str(e.value) == message


BASE = {"max_num_batched_tokens": 8, "max_seq_length": 8, "max_num_pages": 8}


@pytest.mark.parametrize("helper", [first_batch_meta, model_batches], ids=["first_batch_meta", "model_batches"])
@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        (
            {**BASE, "meta_tensors": {"prompt_lengths": [5]}},
            MetaTensorError,
            "meta tensor 'prompt_lengths' must be a torch.Tensor, got [5] (list)",
        ),
        ({**BASE, "meta_tensors": [("step", None)]}, ConfigError, "meta_tensors must be a dict of name -> tensor, got list"),
        (
            {**BASE, "meta_tensors": {"step": torch.zeros(1, dtype=torch.int32, device="meta")}},
            MetaTensorError,
            "meta tensor 'step' is a tensor on the meta device, which holds no data; make it on cpu",
        ),
        (
            {**BASE, "max_num_batched_token": 4},
            ConfigError,
            "parameter 'max_num_batched_token'; did you mean 'max_num_batched_tokens'?",
        ),
        ([("max_seq_length", 8)], ConfigError, "is no dict of PersistentKernel init parameters"),
    ],
    ids=["list_value", "meta_not_a_dict", "meta_device", "misspelt", "params_not_a_dict"],
)
def test_the_models_check_what_the_kernel_checks(helper, given, error, message) -> None:
    """They had raised AttributeError / NotImplementedError for these, and dropped a misspelt
    parameter, so the batches they gave were not the kernel's."""
    with pytest.raises(error, match=re.escape(message)):
        helper(given)
