"""``pytest -n auto`` on a host with several GPUs: one xdist worker per visible GPU, each pinned to
its own GPU before CUDA starts, and a CUDA_VISIBLE_DEVICES set by the user is respected."""

from __future__ import annotations

import re

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")

WHERE = """
import os

import pytest
import torch


@pytest.mark.parametrize("i", range(24))
def test_where(i, worker_id):
    uuid = torch.cuda.get_device_properties(0).uuid
    print(f"WHERE {worker_id} {os.environ['CUDA_VISIBLE_DEVICES']} {torch.cuda.device_count()} {uuid}")
"""


def workers_and_gpus(pytester: pytest.Pytester) -> dict[str, set[tuple[str, str, str]]]:
    """Run the probe file with -n auto; worker id -> the (visible, count, uuid) its tests saw."""
    pytester.makepyfile(test_where=WHERE)
    result = pytester.runpytest_subprocess("-p", "mpk", "-n", "auto", "-rA")
    result.assert_outcomes(passed=24)
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for worker, visible, count, uuid in re.findall(r"^WHERE (gw\d+) (\S+) (\d+) (\S+)$", result.stdout.str(), re.M):
        seen.setdefault(worker, set()).add((visible, count, uuid))
    return seen


def uuid_of(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def test_one_pinned_worker_per_gpu(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen = workers_and_gpus(pytester)
    n = torch.cuda.device_count()
    assert sorted(seen) == [f"gw{i}" for i in range(n)], seen
    # Each worker saw one GPU, always the same; together they cover every GPU once.
    assert all(len(views) == 1 for views in seen.values()), seen
    views = {worker: next(iter(v)) for worker, v in seen.items()}
    assert {worker: (visible, count) for worker, (visible, count, _) in views.items()} == {
        f"gw{i}": (str(i), "1") for i in range(n)
    }
    assert {worker: uuid for worker, (_, _, uuid) in views.items()} == {f"gw{i}": uuid_of(i) for i in range(n)}


def test_a_visible_devices_list_is_respected(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES=1,0: two workers, gw0 on physical GPU 1 and gw1 on GPU 0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    seen = workers_and_gpus(pytester)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert seen == {"gw0": {("1", "1", uuid_of(1))}, "gw1": {("0", "1", uuid_of(0))}}, seen
