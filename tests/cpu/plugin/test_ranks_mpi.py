"""Multi-rank scenes under a real MPI job, on the CPU (compile-only, one rank per process): a rank
that fails and a rank that hangs are reported by name within the rank timeout, the job is aborted
when a rank stops responding, and no rank process is left behind; both under ``mpirun -n 2 pytest``
and when the plugin starts the job itself. Skipped without mpirun and mpi4py (CI installs Open MPI:
apt-get install openmpi-bin libopenmpi-dev; pip install mpi4py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None, reason="needs mpirun and mpi4py"
)

SCENE = """
import time
import torch
from pytest_mpk import Case, Out, SceneTestCase, scene_test


@scene_test(layer="allreduce", world_size=2)
class TestTwo(SceneTestCase):
    CASES = [Case("ok", fail=-1, hang=-1), Case("fails_on_1", fail=1, hang=-1), Case("hangs_on_1", fail=-1, hang=1)]

    def kernel_params(self, params):
        return {"max_num_batched_tokens": 2, "max_seq_length": 2, "max_num_pages": 2}

    def generate_args(self, params):
        r, w = params["rank"], params["world_size"]
        return {"input": torch.randn(w, 2, 64)[r].clone(), "output": Out(torch.empty(2, 64))}

    def build(self, pk, t, params):
        assert params["rank"] != params["fail"], f"rank {params['rank']} refuses"
        if params["rank"] == params["hang"]:
            time.sleep(3600)
        buf = pk.new_comm_tensor((2, pk.world_size, 2, 64), torch.float32, "buf")
        pk.allreduce_layer(t.input, buf, t.output, grid_dim=(2, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return sum(a.input for a in args.ranks)
"""
OPTIONS = ["-p", "mpk", "-p", "no:cacheprovider", "--arch", "sm80", "--mpk-backend", "compile-only", "--mpk-rank-timeout", "3"]
MPIRUN = ["mpirun", "-n", "2", "--bind-to", "none", *(["--allow-run-as-root"] if os.geteuid() == 0 else [])]


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (the ranks of a job started there)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int(d.name) != os.getpid() and Path(os.readlink(d / "cwd")) == directory:
                found.append(int(d.name))
        except OSError:
            continue
    return found


def check(result: pytest.RunResult, pytester: pytest.Pytester) -> None:
    result.stdout.fnmatch_lines_random(
        [
            "rank 1: rank 1 refuses",
            "rank 1: did not reach 'built' within 3 s: failed or stopped responding",
            "backend: compiled (sm80), 2 ranks under MPI (this report: rank 0)",
            "*2 failed, 1 passed*",
        ]
    )
    assert processes_in(pytester.path) == []


def test_under_mpirun(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.run(*MPIRUN, sys.executable, "-m", "pytest", "test_scene.py", *OPTIONS, timeout=240)
    check(result, pytester)
    result.stderr.fnmatch_lines(
        ["*mpk: rank(s) 1 stopped responding in test_scene.py::TestTwo::hangs_on_1[[]sm80[]]; aborting the MPI job*"]
    )
    assert (pytester.path / ".mpk-artifacts" / "rank1.log").is_file()  # rank 1 is quiet; rank 0 reports for both


def test_the_plugin_starts_the_job(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_scene=SCENE)
    monkeypatch.setenv("MPK_LAUNCH_COMPILE_ONLY", "1")
    result = pytester.run(sys.executable, "-m", "pytest", "test_scene.py", *OPTIONS, "-rA", timeout=400)
    check(result, pytester)
    result.stdout.fnmatch_lines(["*2 ranks under *mpirun in *s (log: *.mpirun.log)*"])
