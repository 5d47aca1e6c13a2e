"""pytest_mpk.active_tokens: the kernel_params of a batch with fewer active tokens than rows, and a
clear error for counts that cannot be."""

from __future__ import annotations

import pytest

from pytest_mpk import active_tokens, first_batch_meta


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
