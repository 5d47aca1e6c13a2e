"""The memory budget: sizes from the user are checked before anything is allocated, with a message
that names what is too large, its size and the limit (mpk_runtime.memory)."""

from __future__ import annotations

import pytest
import torch

from mpk_runtime import memory
from mpk_runtime.errors import ConfigError, MemoryBudgetError


@pytest.fixture(autouse=True)
def limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host limit of 1 GiB, whatever this machine has free: the messages are the same everywhere."""
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "1G")


def test_max_seq_length_is_not_allocated_in_init(make_pk):
    with pytest.raises(
        MemoryBudgetError,
        match=r"^PersistentKernel: meta tensor 'tokens' \(i64 \[1, 2147483647\]: total_num_requests x max_seq_length\) needs "
        r"16 GiB of host memory, more than the 1 GiB set by MPK_MEMORY_LIMIT; lower the init parameters that size it, or set "
        r"MPK_MEMORY_LIMIT \(bytes, e.g. 64G\)$",
    ):
        make_pk(90, test_mode=True, max_seq_length=2**31 - 1)


def test_num_workers_is_not_a_bare_memory_error(make_pk):
    with pytest.raises(MemoryBudgetError, match=r"^PersistentKernel: the schedule of num_workers=2147483647 needs 512 GiB"):
        make_pk(90, num_workers=2**31 - 1)


def test_the_emulators_page_queue(make_pk):
    with pytest.raises(MemoryBudgetError, match=r"the page queue of max_num_pages=2147483647 needs 80 GiB"):
        make_pk(90, compile_only=False, emulate=True, max_num_pages=2**31 - 1)


def test_new_tensor(make_pk):
    pk = make_pk(90)
    with pytest.raises(
        MemoryBudgetError,
        match=r"^new_tensor: new_tensor 'huge' \(bf16 \[1048576, 4096\]\) needs 8 GiB of host memory, more than the 1 GiB set by "
        r"MPK_MEMORY_LIMIT; use smaller dims, or set MPK_MEMORY_LIMIT",
    ):
        pk.new_tensor((1048576, 4096), torch.bfloat16, "huge")
    pk.new_tensor((1024, 4096), torch.bfloat16, "fine")


def test_a_bad_limit_is_a_config_error(monkeypatch, make_pk):
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match=r"MPK_MEMORY_LIMIT='lots' must be a size in bytes, e.g. 8G, 512M or 1073741824"):
        make_pk(90)


@pytest.mark.parametrize(
    ("text", "size"), [("1073741824", 2**30), ("8G", 8 * 2**30), ("512M", 2**29), ("1.5T", 3 * 2**39), ("2 GiB", 2**31)]
)
def test_sizes(text, size):
    assert memory.parse_size("X", text) == size


def test_without_a_configured_limit_half_the_available_memory(monkeypatch):
    monkeypatch.delenv("MPK_MEMORY_LIMIT")
    monkeypatch.setattr(memory, "host_available", lambda: 10 * 2**30)
    assert memory.limit(torch.device("cpu")) == (5 * 2**30, "budget (half the host memory available now)")
    assert memory.limit(torch.device("meta")) == (None, "no limit")
    memory.check([memory.Need("anything", 2**50)], torch.device("meta"), "here")  # the meta device needs no memory


def test_the_available_host_memory_is_known_here():
    assert memory.host_available() > 0


def test_a_bad_gpu_limit_is_reported_without_a_gpu_too(monkeypatch, make_pk):
    """Read wherever a budget is checked: a typo would otherwise wait for the first GPU run."""
    monkeypatch.setenv("MPK_GPU_MEMORY_LIMIT", "abc")
    with pytest.raises(ConfigError, match=r"MPK_GPU_MEMORY_LIMIT='abc' must be a size in bytes"):
        make_pk(90)


@pytest.mark.parametrize("text", ["0", "0.1", "0.5B", "0K"])
def test_a_limit_below_one_byte(text):
    with pytest.raises(ConfigError, match=rf"X={text!r} is less than one byte, a budget nothing fits"):
        memory.parse_size("X", text)
