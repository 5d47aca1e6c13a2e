"""--mpk-sanitize: refused clearly where compute-sanitizer cannot run; on a GPU, each GPU case reruns
under it in a subprocess, and its findings fail the case mapped to source lines, workers, tasks and
tensors. The GPU runs are stood in for by a fake compute-sanitizer (a script printing what the real
one prints); tests/gpu/test_sanitize_demos_gpu.py runs the real one."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from mpk_runtime.harness import CSRC
from pytest_mpk import devices, sanitize

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]
"""

MEMCHECK = f"""========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at void mpk::tasks::rmsnorm<float, 256>(...)+0x1f0 in {CSRC}/tasks/common/rmsnorm.cuh:42
=========     by thread (3,0,0) in block (1,0,0)
=========     Address 0x7f0000000a00 is out of bounds
=========     and is 512 bytes after the nearest allocation at 0x7f0000000600 of size 1024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f0c] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""

GRAPH = {
    "layers": [{"name": "rmsnorm_0", "task": "rmsnorm"}],
    "tasks": [{"id": 0, "label": "rmsnorm_0[0]"}, {"id": 1, "label": "rmsnorm_0[1]"}],
    "schedule": {"queues": [[0], [1]]},
}


def test_parse_keeps_findings_and_leaves_out_banners_summaries_and_host_frames() -> None:
    (f,) = sanitize.parse(MEMCHECK)
    assert f.headline == "Invalid __global__ write of size 4 bytes"
    assert f.details[1:3] == ["by thread (3,0,0) in block (1,0,0)", "Address 0x7f0000000a00 is out of bounds"]
    assert not any("Host Frame" in d for d in f.details)


def test_explain_maps_the_line_the_worker_and_the_address() -> None:
    (f,) = sanitize.parse(MEMCHECK)
    text = sanitize.explain(f, GRAPH, {"output": [0x7F0000000600, 1024]}, str(CSRC))
    assert text.splitlines() == [
        "Invalid __global__ write of size 4 bytes",
        "  at csrc/tasks/common/rmsnorm.cuh:42 (the body of task rmsnorm: layers rmsnorm_0)",
        "  block 1 is worker 1, which runs rmsnorm_0[1] (task 1)",
        "  0x7f0000000a00: not in any attached tensor; offset 1024 from tensor 'output' of 1024 bytes: past its end",
    ]
    inside = sanitize.explain(f, None, {"output": [0x7F0000000900, 0x200]}, str(CSRC))
    assert "0x7f0000000a00: byte 256 of tensor 'output'" in inside


def test_a_location_without_an_absolute_path_is_still_shown() -> None:
    text = (
        "========= Barrier error detected. Divergent thread(s) in warp.\n"
        "=========     at void mpk::demos::divergent_sync<64>(...)+0x90 in sanitize_demos.cuh:47\n"
        "=========     by thread (1,0,0) in block (2,0,0)\n"
        "========= Invalid __global__ read of size 4 bytes\n"
        "=========     at mpk::persistent_kernel<false>(MpkKernelParams)+0x3f0\n"
    )
    first, second = sanitize.parse(text)
    assert sanitize.explain(first, GRAPH, {}, str(CSRC)).splitlines()[1] == "  at sanitize_demos.cuh:47"
    assert sanitize.explain(second, GRAPH, {}, str(CSRC)).splitlines() == [
        "Invalid __global__ read of size 4 bytes",
        "  at mpk::persistent_kernel<false>(MpkKernelParams)+0x3f0",
    ]


def test_a_racecheck_finding_names_both_accesses() -> None:
    out = f"""========= Error: Race reported between Write access at mpk::demo+0x90 in {CSRC}/tasks/common/demo.cuh:20
=========     and Read access at mpk::demo+0xb0 in {CSRC}/tasks/common/demo.cuh:21 [128 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
    (f,) = sanitize.parse(out)
    lines = sanitize.explain(f, GRAPH, {}, str(CSRC)).splitlines()
    assert lines[1:] == ["  at csrc/tasks/common/demo.cuh:20", "  at csrc/tasks/common/demo.cuh:21"]


def test_a_worker_index_past_the_workers_is_a_scheduler_block() -> None:
    f = sanitize.Finding("Barrier error detected. Divergent thread(s) in warp", ["by thread (0,0,0) in block (5,0,0)"])
    assert "block 5: not a worker (a scheduler block of the runtime)" in sanitize.explain(f, GRAPH, {}, "")


def test_an_unknown_tool_is_a_usage_error(pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-sanitize", "leakcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mpk-sanitize: expected one of memcheck, racecheck, synccheck, initcheck, got 'leakcheck'"])


def test_without_compute_sanitizer_the_option_is_a_usage_error(pytester, scenes, monkeypatch) -> None:
    monkeypatch.setattr(sanitize, "find_tool", lambda: None)
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-sanitize", "memcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mpk-sanitize memcheck: compute-sanitizer not found on PATH, in $CUDA_HOME/bin *"])


def test_without_a_gpu_the_option_is_a_usage_error(pytester, scenes, monkeypatch) -> None:
    monkeypatch.setattr(sanitize, "find_tool", lambda: "/opt/cuda/bin/compute-sanitizer")
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-sanitize", "racecheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mpk-sanitize racecheck: no GPU is visible *--mpk-emulate-check instead"])


def fake_sanitizer(tmp: Path, output: str, status: int) -> tuple[Path, Path]:
    """A compute-sanitizer stand-in: records its arguments and environment, prints ``output``."""
    tmp.mkdir(parents=True, exist_ok=True)
    script, called = tmp / "compute-sanitizer", tmp / "called.json"
    (tmp / "output.txt").write_text(output)
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(called)!r}, 'w'))\n"
        f"sys.stdout.write(open({str(tmp / 'output.txt')!r}).read())\nsys.exit({status})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, called


@pytest.fixture
def a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process believes it has an sm90 GPU (the case is never run here: only the fake sanitizer's child)."""
    monkeypatch.setattr(devices, "local_arch", lambda: "sm90")
    monkeypatch.setattr(devices, "visible_gpus", lambda: ["0"])


def test_findings_fail_the_case(pytester, scenes, monkeypatch, tmp_path, a_gpu) -> None:
    script, called = fake_sanitizer(tmp_path / "bin", MEMCHECK, sanitize.ERROR_EXIT)
    monkeypatch.setattr(sanitize, "find_tool", lambda: str(script))
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-sanitize", "memcheck", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "compute-sanitizer memcheck: 1 finding(s)",
            "Invalid __global__ write of size 4 bytes",
            "  at csrc/tasks/common/rmsnorm.cuh:42",
            "artifacts: */test_scene.py_TestNorm_b2_sm90 (the tool's output: compute-sanitizer-memcheck.log)",
            "command: */compute-sanitizer --tool memcheck --error-exitcode 86 *",
        ]
    )
    seen = json.loads(called.read_text())
    assert seen["argv"][:2] == ["--tool", "memcheck"]
    assert "test_scene.py::TestNorm::b2[sm90]" in seen["argv"]
    last = len(seen["argv"]) - 1 - seen["argv"][::-1].index("--mpk-backend")
    assert seen["argv"][last + 1] == "gpu"  # after the repro's own --mpk-backend: the last one wins
    assert seen["env"][sanitize.CHILD] == "memcheck" and seen["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    (raw,) = pytester.path.rglob("compute-sanitizer-memcheck.log")  # in the case's artifacts, kept on failure
    assert raw.read_text() == MEMCHECK


def test_a_clean_sanitized_run_passes_and_a_failing_child_fails(pytester, scenes, monkeypatch, tmp_path, a_gpu) -> None:
    script, _ = fake_sanitizer(tmp_path / "ok", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n", 0)
    monkeypatch.setattr(sanitize, "find_tool", lambda: str(script))
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess("--mpk-sanitize", "initcheck", "--arch", "sm90").assert_outcomes(passed=1)
    script, _ = fake_sanitizer(tmp_path / "bad", "E   output 'output' differs from the golden\n1 failed\n", 1)
    monkeypatch.setattr(sanitize, "find_tool", lambda: str(script))
    result = pytester.runpytest_inprocess("--mpk-sanitize", "initcheck", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["under compute-sanitizer initcheck the case failed (exit 1):", "*differs from the golden"])


@pytest.mark.long_running
def test_the_child_command_runs_in_a_project_whose_addopts_start_xdist(pytester, scenes, monkeypatch, tmp_path, a_gpu) -> None:
    """A project with "-n auto" in its addopts (ours has): the child's own options must still parse,
    and it must run the case in one process. The stand-in sanitizer runs the real child command,
    collecting only (no GPU here)."""
    script = tmp_path / "compute-sanitizer"
    script.write_text(
        "#!/usr/bin/env python3\nimport os, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "while args[0].startswith('--'):\n    args = args[2:]  # --tool X --error-exitcode N --print-limit N\n"
        "env = {**os.environ, 'PYTEST_ADDOPTS': '-n auto'}\n"
        "sys.exit(subprocess.run([*args, '--collect-only', '--mpk-backend', 'compile-only'], env=env).returncode)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sanitize, "find_tool", lambda: str(script))
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("--mpk-sanitize", "memcheck", "--arch", "sm90")
    result.assert_outcomes(passed=1)
    assert "-n 0" in " ".join(sanitize.child_command("cs", "memcheck", "pytest x.py::T::c", 10.0))


def test_the_child_builds_without_warp_jitter() -> None:
    """The tools see races and barriers directly; jittered barriers only slowed them (synccheck's demo
    ran past 170 s with them on an H100, 20 s without)."""
    assert "--mpk-no-warp-jitter" in sanitize.child_command("cs", "synccheck", "pytest x.py::T::c", 10.0)


def test_the_childs_hang_timeout_stays_within_the_watchdogs_limit() -> None:
    """50 times the session's timeout: past 3600 s the child's every case had failed on the option."""
    cmd = sanitize.child_command("cs", "memcheck", "pytest x.py::T::c", 100.0)
    assert cmd[cmd.index("--mpk-hang-timeout") + 1] == "3600"
