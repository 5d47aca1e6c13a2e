"""A scene case that faults on the GPU loses its process's CUDA context for good. The case fails with
its own error; under pytest-xdist its worker is replaced and every other case still runs; without
xdist, the later GPU cases fail at once with the reason. Two real faults: a task reading address 0
(an illegal address inside the persistent kernel) and a device-side assert in a torch kernel."""

from __future__ import annotations

import glob

import pytest

SCENE = '''
import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test


class AtAddressZero:
    """A CUDA array whose data pointer is 0: a task that reads it faults."""

    def __init__(self, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0, False), "version": 3}


@scene_test(layer="rmsnorm")
class TestFaults(SceneTestCase):
    CASES = [Case(name, batch=2, fault=fault) for name, fault in CASES]

    def generate_args(self, params):
        return {"input": torch.randn(params["batch"], 256), "weight": torch.randn(256),
                "output": Out(torch.empty(params["batch"], 256))}

    def build(self, pk, t, params):
        x = t.input
        if params["fault"] == "kernel":
            x = pk.attach_input(torch.as_tensor(AtAddressZero((params["batch"], 256)), device="cuda"), "at_zero")
        if params["fault"] == "torch":
            torch.zeros(2, device="cuda")[torch.tensor([5], device="cuda")].sum().item()  # index out of range
        pk.rmsnorm_layer(input=x, weight=t.weight, output=t.output, grid_dim=(params["batch"], 1, 1),
                         block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        x = args.input.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * args.weight.float())
'''


def scene(cases: list[tuple[str, str]]) -> str:
    return f"CASES = {cases!r}\n" + SCENE


@pytest.fixture
def cold_cache(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty build cache for the inner run, so that its prebuild makes every case's graph, the
    faulting ones among them (a warm cache has no prebuild under xdist)."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(pytester.path / "build-cache"))


def test_under_xdist_the_worker_is_replaced_and_the_rest_runs(pytester: pytest.Pytester, cold_cache) -> None:
    """Each worker that finds the cache cold makes the graphs of its share of the cases after its first
    case: torch_fault's build, which faults the GPU when it runs, must not run there (the first session
    at a cold cache ended a third worker, which had run nothing wrong)."""
    cases = (
        [(f"ok{i}", "none") for i in range(3)]
        + [("kernel_fault", "kernel")]
        + [(f"ok{i}", "none") for i in range(3, 6)]
        + [("torch_fault", "torch")]
        + [("ok6", "none")]
    )
    pytester.makepyfile(test_faults=scene(cases))
    result = pytester.runpytest_subprocess("-p", "mpk", "-n", "2", "-rf", "--mpk-backend", "gpu")
    result.assert_outcomes(passed=7, failed=2)
    out = result.stdout.str()
    assert out.count("replacing crashed worker") == 2, out
    assert "crashed while running" not in out, out
    result.stdout.fnmatch_lines(
        ["*illegal memory access*", "*the CUDA context of this worker is lost: pytest-xdist replaces the worker*"]
    )
    result.stdout.fnmatch_lines(["*device-side assert*"])
    result.stdout.fnmatch_lines(["*mpk backends: 9 gpu*"])


def test_without_xdist_later_gpu_cases_fail_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_faults=scene([("ok0", "none"), ("kernel_fault", "kernel"), ("ok1", "none")]))
    result = pytester.runpytest_subprocess("-p", "mpk", "-rf", "--mpk-backend", "gpu")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*illegal memory access*",
            "*the CUDA context of this process is lost: later GPU cases of this run fail without running*",
            "*not run: the CUDA context of this process was lost in "
            + glob.escape("test_faults.py::TestFaults::kernel_fault[")
            + "*; with pytest-xdist (-n) that worker is replaced and this case runs elsewhere",
        ]
    )


def test_without_xdist_a_build_that_faults_fails_its_own_case_only(
    pytester: pytest.Pytester, cold_cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's prebuild makes every case's graph before the first case runs; a build that faults
    the GPU must fault in its own case, not there, where it lost the context before ok0 and ok1 ran.
    The inner run gets the machine's cores (not an outer xdist worker's share), so that it prebuilds."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    pytester.makepyfile(test_faults=scene([("ok0", "none"), ("ok1", "none"), ("torch_fault", "torch")]))
    result = pytester.runpytest_subprocess("-p", "mpk", "-rf", "--mpk-backend", "gpu")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*device-side assert*", "FAILED*torch_fault*"])
    result.stdout.no_fnmatch_line("*not run: the CUDA context*")
