"""devices.py: which GPUs are visible (without starting CUDA), how xdist workers are pinned to them,
which archs a session targets, and which backend runs a case of an arch."""

from __future__ import annotations

import itertools
import os
import subprocess

import pytest
import torch

from mpk_runtime.harness import ARCH_NAMES
from pytest_mpk import devices
from pytest_mpk.devices import COMPILED, EMULATED, EMULATED_CHECKED, EMULATED_REF, GPU

LOCAL_ARCH = devices.local_arch  # the conftest hides the GPU from the other tests


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ("0,1", ["0", "1"]),
        (" 2, 3 ", ["2", "3"]),
        ("3", ["3"]),
        ("GPU-8f1c2a, MIG-4b5d", ["GPU-8f1c2a", "MIG-4b5d"]),
        ("0,,1,", ["0", "1"]),
        ("", []),
        ("-1", []),
        ("0,2,-1,1", ["0", "2"]),  # CUDA stops at -1: device 1 is hidden
    ],
)
def test_visible_gpus_from_the_environment(monkeypatch: pytest.MonkeyPatch, env: str, gpus: list[str]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    monkeypatch.setattr(subprocess, "run", _no_nvidia_smi)
    assert devices.visible_gpus() == gpus


def _no_nvidia_smi(*args, **kwargs):
    raise AssertionError("nvidia-smi must not be asked when CUDA_VISIBLE_DEVICES is set")


@pytest.mark.parametrize(
    ("outcome", "gpus"),
    [
        (subprocess.CompletedProcess([], 0, stdout="0\n1\n\n2\n"), ["0", "1", "2"]),
        (subprocess.CompletedProcess([], 0, stdout="No devices were found\n"), []),
        (subprocess.CompletedProcess([], 9, stdout="0\n"), []),  # nvidia-smi failed: trust nothing it said
        (FileNotFoundError("nvidia-smi"), []),
        (subprocess.TimeoutExpired("nvidia-smi", 20), []),
    ],
)
def test_visible_gpus_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch, outcome, gpus: list[str]) -> None:
    def run(cmd, **kwargs):
        assert cmd[0] == "nvidia-smi"
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(subprocess, "run", run)
    assert devices.visible_gpus() == gpus


@pytest.mark.parametrize(("worker", "gpu"), [("gw0", "4"), ("gw1", "6"), ("gw2", "7"), ("gw3", "4"), ("gw5", "7")])
def test_pin_worker_deals_the_visible_gpus_round_robin(monkeypatch: pytest.MonkeyPatch, worker: str, gpu: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    assert devices.pin_worker(worker) == gpu
    assert os.environ["CUDA_VISIBLE_DEVICES"] == gpu


@pytest.mark.parametrize(("worker", "visible"), [("gw0", ""), ("gw1", "-1"), ("master", "0,1")])
def test_pin_worker_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch, worker: str, visible: str) -> None:
    """No GPU to give, or not an xdist worker: nothing changes."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert devices.pin_worker(worker) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == visible


@pytest.mark.parametrize(
    ("local", "requested", "archs"),
    [
        (None, ["auto"], ["sm90"]),
        (None, [], ["sm90"]),
        (None, ["sm80", "auto", "sm80", "sm100"], ["sm80", "sm90", "sm100"]),
        ("sm100", ["auto"], ["sm100"]),
        ("sm80", ["sm90", "auto", "sm80"], ["sm90", "sm80"]),
    ],
)
def test_resolve_archs(monkeypatch: pytest.MonkeyPatch, local: str | None, requested: list[str], archs: list[str]) -> None:
    monkeypatch.setattr(devices, "local_arch", lambda: local)
    assert devices.resolve_archs(requested) == archs


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_local_arch_without_a_gpu() -> None:
    assert LOCAL_ARCH() is None
    assert devices.context_lost() is False


# What runs natively where: sm80 code (PTX + SASS for compute_80) on every supported GPU through the
# PTX JIT; sm90a and sm100a code only on their own arch.
RUNS_ON = {("sm80", "sm80"), ("sm80", "sm90"), ("sm80", "sm100"), ("sm90", "sm90"), ("sm100", "sm100")}
LOCALS = [None, "sm80", "sm90", "sm100"]
COMBINATIONS = list(itertools.product(ARCH_NAMES, LOCALS))


@pytest.mark.parametrize(("arch", "local"), COMBINATIONS)
def test_backend_for_every_combination(arch: str, local: str | None) -> None:
    native = (arch, local) in RUNS_ON
    assert devices.backend_for(arch, "auto", local) == (GPU if native else EMULATED)
    assert devices.backend_for(arch, "emulate", local) == EMULATED
    assert devices.backend_for(arch, "emulate", local, check=True) == EMULATED_CHECKED
    assert devices.backend_for(arch, "auto", local, check=True) == (GPU if native else EMULATED_CHECKED)
    assert devices.backend_for(arch, "emulate-ref", local) == EMULATED_REF
    assert devices.backend_for(arch, "compile-only", local) == COMPILED
    if native:
        assert devices.backend_for(arch, "gpu", local) == GPU
    else:
        with pytest.raises(RuntimeError, match=f"^--mpk-backend gpu cannot run {arch} here "):
            devices.backend_for(arch, "gpu", local)


def test_emulated_backends_map_to_the_emulate_parameter() -> None:
    assert [devices.emulate_param(b) for b in (GPU, EMULATED, EMULATED_CHECKED, EMULATED_REF, COMPILED)] == [
        False,
        True,
        True,
        "reference",
        False,
    ]


@pytest.mark.parametrize(
    ("arch", "local", "message"),
    [
        ("sm100", "sm90", "--mpk-backend gpu cannot run sm100 here (this GPU is sm90); use --mpk-backend auto or emulate"),
        ("sm90", None, "--mpk-backend gpu cannot run sm90 here (no GPU is visible); use --mpk-backend auto or emulate"),
    ],
)
def test_the_gpu_error_says_why_and_what_to_use(arch: str, local: str | None, message: str) -> None:
    with pytest.raises(RuntimeError) as e:
        devices.backend_for(arch, "gpu", local)
    assert str(e.value) == message
