"""Which backend ran each case, as the report says it: the verbose status ("PASSED [backend]"), the
terminal summary ("mpk backends: ..."), and the --mpk-backend choices on a machine without a GPU.
Nothing that did not run on a GPU is reported as run on one, and nothing that does not run on one
gets more than the device code built (a cubin), the prebuild included."""

from __future__ import annotations

import json
import types

import pytest
import torch

from mpk_runtime import harness
from mpk_runtime.errors import BuildError
from pytest_mpk import Out, SceneTestCase, devices
from pytest_mpk.prebuild import GpuUseInPrebuild, _NoGpu, _on_gpu, prebuild
from pytest_mpk.runner import Setup

CACHED = types.SimpleNamespace(cached=True, entry=None, note=None)  # a build result found in the cache

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("good", batch=2, hidden=256, off=0.0), Case("bad", batch=2, hidden=256, off=1.0),
             Case("other_arch", batch=2, hidden=256, off=0.0, archs=("sm100",))]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight) + params["off"]

def test_plain():
    pass
"""


@pytest.mark.parametrize("args", [[], ["--mpk-backend", "auto"], ["--mpk-backend", "emulate"]])
def test_without_a_gpu_cases_are_emulated(pytester: pytest.Pytester, scenes, args: list[str]) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-v", *args)
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::good[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestNorm::bad[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestNorm::other_arch[[]sm90[]] SKIPPED*",
            "test_scene.py::test_plain PASSED*",
            "backend: emulated (CUDA bodies on the CPU) (sm90)",
            "*- mpk backends: 2 emulated (CUDA bodies on the CPU) -*",
        ]
    )
    result.stdout.no_fnmatch_line("*test_plain PASSED [[]*")  # a test that ran no kernel has no backend
    result.stdout.no_fnmatch_line("*[[]gpu[]]*")


def test_emulate_ref_runs_the_slice_references(pytester: pytest.Pytester, scenes) -> None:
    """emulate-ref: the emulator computes each task with its PyTorch slice reference (no host build),
    and says so; with --mpk-emulate-check the CUDA bodies run checked, and the label says that too."""
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-v", "-rA", "--mpk-backend", "emulate-ref", "-k", "not plain")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::good[[]sm90[]] PASSED [[]emulated (PyTorch slice references)[]]*",
            "*- mpk backends: 2 emulated (PyTorch slice references) -*",
        ]
    )
    result.stdout.no_fnmatch_line("host module *")
    result = pytester.runpytest_inprocess("-v", "-rA", "--mpk-emulate-check", "-k", "good")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::good[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU, checked)[]]*",
            "host module * rmsnorm_fp32_1_256-host-sm90-race-*",
        ]
    )


def test_quiet_run_still_has_the_summary(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-q", "-k", "good")
    result.stdout.fnmatch_lines(["*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*", "1 passed, 3 deselected*"])


def test_compile_only_builds_and_runs_nothing(pytester: pytest.Pytester, scenes) -> None:
    """compile-only: every case is built for its arch (even sm100 here) and reported as "compiled";
    nothing runs, so there is nothing to compare and a wrong golden cannot fail it."""
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess(
        "-v", "--mpk-backend", "compile-only", "--arch", "sm90", "--arch", "sm100", "-k", "not plain", "--mpk-keep-artifacts"
    )
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::good[[]sm90[]] PASSED [[]compiled[]]*",
            "test_scene.py::TestNorm::bad[[]sm90[]] PASSED [[]compiled[]]*",
            "test_scene.py::TestNorm::good[[]sm100[]] PASSED [[]compiled[]]*",
            "test_scene.py::TestNorm::bad[[]sm100[]] PASSED [[]compiled[]]*",
            "test_scene.py::TestNorm::other_arch[[]sm100[]] PASSED [[]compiled[]]*",
            "*- mpk backends: 5 compiled -*",
        ]
    )
    kept = pytester.path / ".mpk-artifacts" / "test_scene.py_TestNorm_good_sm100"
    assert json.loads((kept / "signature_rank0.json").read_text())["arch"] == "sm100"


def test_compile_only_and_emulated_cases_share_one_device_only_build(pytester: pytest.Pytester, scenes) -> None:
    """Off the GPU a case's nvcc build is the device code alone (a cubin), the same entry for the
    compile-only and the emulated backends: a compile-only run fills the cache for an emulated one."""
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-rA", "--mpk-backend", "compile-only", "-k", "good")
    result.assert_outcomes(passed=1)
    line = next(line for line in result.stdout.lines if line.startswith("module ") and "-sm90-cubin-" in line)
    entry = line.split(": ")[1]
    result = pytester.runpytest_inprocess("-rA", "--mpk-backend", "emulate", "-k", "good")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"module from the cache: {entry}"])


@pytest.mark.parametrize(("backend", "on_gpu"), [(devices.GPU, True), (devices.EMULATED, False), (devices.COMPILED, False)])
def test_the_prebuild_builds_what_the_backend_loads(monkeypatch, tmp_path, backend: str, on_gpu: bool) -> None:
    """A session's prebuild makes each case's graph in a compile-only kernel (no GPU needed), but
    builds it as the case's backend will: the shared library for the GPU, the cubin elsewhere (the
    cubins of all the cases of an arch together, in batches: build/cubin_batch.py)."""

    class Norm(SceneTestCase):
        def generate_args(self, params):
            h = params["hidden"]
            return {"x": torch.randn(2, h), "w": torch.randn(h), "y": Out(torch.empty(2, h))}

        def build(self, pk, t, params):
            pk.rmsnorm_layer(input=t.x, weight=t.w, output=t.y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)

    asked = []
    monkeypatch.setattr(harness, "build_for", lambda pk, on_gpu: asked.append((pk.backend, pk.arch, on_gpu)) or CACHED)
    monkeypatch.setattr(harness, "build_cubins", lambda sources, arch: asked.append((arch, len(sources))) or [])
    setup = Setup(arch="sm90", backend=backend, artifacts=tmp_path, keep_artifacts=False, hang_timeout=5.0, repro="")
    assert prebuild([(Norm(), {"hidden": 256}, setup), (Norm(), {"hidden": 512}, setup)], jobs=1) == 0
    assert asked == ([("compile-only", "sm90", True)] * 2 if on_gpu else [("sm90", 2)])


@pytest.mark.parametrize(
    "gpu_call",
    [
        lambda: torch.zeros(2, device="cuda"),
        lambda: torch.as_tensor([1.0], device=torch.device("cuda", 0)),
        lambda: torch.ones(2).to("cuda:0"),
        lambda: torch.ones(2).cuda(),
        lambda: torch.empty(2, device="meta").to(device="cuda"),
    ],
)
def test_the_prebuild_lets_no_torch_call_reach_the_gpu(gpu_call) -> None:
    """Each call raises before it runs (here without CUDA torch would raise its own error instead)."""
    with pytest.raises(GpuUseInPrebuild, match="would run on the GPU"), _NoGpu():
        gpu_call()


def test_the_prebuild_lets_cpu_and_meta_calls_run() -> None:
    with _NoGpu():
        x = torch.randn(3, generator=torch.Generator().manual_seed(0)).to(torch.float16).to("cpu")
        m = torch.empty(2, device="meta") + 1
        assert (x.device.type, m.device.type, str(torch.as_tensor([2]).sum().item())) == ("cpu", "meta", "2")
        assert torch.zeros(1).new_tensor([1.0]).add(1, alpha=2).tolist() == [3.0]
    assert [_on_gpu(v) for v in ("cuda", "cuda:1", "cuda_weights.pt", "cpu", 0)] == [True, True, False, False, False]


def test_a_case_whose_code_touches_the_gpu_is_left_to_its_own_run(monkeypatch, tmp_path) -> None:
    """A build that indexes a CUDA tensor out of range faults the GPU when it runs. The prebuild, which
    makes the graphs of cases other than the one running (an xdist worker's share), must not run it:
    the process's CUDA context would be lost for every case after it. The others are built. (Without
    CUDA, as here, torch would refuse the call anyway; tests/gpu/test_context_loss_gpu.py has the fault.)"""

    class Norm(SceneTestCase):
        def generate_args(self, params):
            return {"x": torch.randn(2, 256), "w": torch.randn(256), "y": Out(torch.empty(2, 256))}

        def build(self, pk, t, params):
            if params["fault"]:
                torch.zeros(2, device="cuda")[torch.tensor([5], device="cuda")].sum().item()
            pk.rmsnorm_layer(input=t.x, weight=t.w, output=t.y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)

    class FromTheGpu(Norm):
        def generate_args(self, params):
            return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in super().generate_args(params).items()}

    asked = []
    monkeypatch.setattr(harness, "build_for", lambda pk, on_gpu: asked.append(pk.arch) or CACHED)
    setup = Setup(arch="sm90", backend=devices.GPU, artifacts=tmp_path, keep_artifacts=False, hang_timeout=5.0, repro="")
    work = [(Norm(), {"fault": True}, setup), (FromTheGpu(), {"fault": False}, setup), (Norm(), {"fault": False}, setup)]
    assert prebuild(work, jobs=1) == 0
    assert asked == ["sm90"]


def test_a_batch_that_fails_in_the_prebuild_is_left_to_the_cases(monkeypatch, tmp_path) -> None:
    """A batch that cannot be built (a full disk, say) does not stop the session: each case builds its
    own module and reports what went wrong with it."""

    class Norm(SceneTestCase):
        def generate_args(self, params):
            return {"x": torch.randn(2, 256), "w": torch.randn(256), "y": Out(torch.empty(2, 256))}

        def build(self, pk, t, params):
            pk.rmsnorm_layer(input=t.x, weight=t.w, output=t.y, grid_dim=(2, 1, 1), block_dim=pk.block_dim)

    def full_disk(sources, arch):
        raise BuildError("build cache: cannot write ...: No space left on device (ENOSPC)")

    monkeypatch.setattr(harness, "build_cubins", full_disk)
    setup = Setup(arch="sm90", backend=devices.EMULATED, artifacts=tmp_path, keep_artifacts=False, hang_timeout=5.0, repro="")
    assert prebuild([(Norm(), {}, setup)], jobs=2) == 0


def test_a_worker_that_finds_the_cache_cold_builds_its_share_then_the_others_cubins(monkeypatch) -> None:
    """Under pytest-xdist the first case that built its module has the worker build its share of the
    session's cases (every n-th: the GPU ones too, with the worker's share of the cores), then the
    cubins of the other workers' share; their GPU modules are left to them (each would cost this
    worker the case's graph). Once a session; never for a replay."""
    from pytest_mpk import items
    from pytest_mpk import prebuild as prebuild_module

    cases = ["gpu0", "gpu1", "emu2", "emu3", "gpu4", "emu5"]
    backend = {c: devices.GPU if c.startswith("gpu") else devices.EMULATED for c in cases}
    monkeypatch.setattr(items, "_selected_cases", lambda item: cases)
    monkeypatch.setattr(items, "_work", lambda mpk, chosen: [(c, {}, types.SimpleNamespace(backend=backend[c])) for c in chosen])
    asked = []
    monkeypatch.setattr(prebuild_module, "prebuild", lambda work, jobs: asked.append(([w[0] for w in work], jobs)) or 3)
    mpk = types.SimpleNamespace(replay=None, cases_prebuilt=False, build_jobs=lambda: 16)
    item = types.SimpleNamespace(config=types.SimpleNamespace(workerinput={"workerid": "gw1", "workercount": 2}), _notes={})
    items._prebuild_when_cold(item, mpk)
    assert asked == [(["gpu1", "emu3", "emu5", "emu2"], 16)]
    assert list(item._notes) == ["3 modules of the session's cases built together after the cache was found cold"]
    items._prebuild_when_cold(item, mpk)  # the session's second cold case: nothing more
    mpk.cases_prebuilt, mpk.replay = False, "replay.cu"
    items._prebuild_when_cold(item, mpk)
    assert len(asked) == 1


def test_ini_sets_the_default_backend(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    pytester.makeini("[pytest]\nmpk_backend = compile-only\n")
    result = pytester.runpytest_inprocess("-q", "-k", "good")
    result.stdout.fnmatch_lines(["*- mpk backends: 1 compiled -*"])
    result = pytester.runpytest_inprocess("-q", "-k", "good", "--mpk-backend", "emulate")
    result.stdout.fnmatch_lines(["*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*"])


@pytest.mark.parametrize(
    ("args", "where"),
    [(["--mpk-backend", "gpu"], "--mpk-backend gpu"), (["-o", "mpk_backend=gpu"], "ini option mpk_backend = 'gpu'")],
)
def test_gpu_backend_without_a_gpu_is_a_usage_error(pytester: pytest.Pytester, scenes, args: list[str], where: str) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-k", "good", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {where}: no GPU is visible (CUDA_VISIBLE_DEVICES / nvidia-smi); use --mpk-backend auto or emulate to "
            f"run the cases on the CPU emulator"
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--mpk-backend", "cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --mpk-backend: invalid choice: 'cpu' (choose from *auto*gpu*emulate*compile-only*)"])
