"""Multi-rank scenes on the GPUs of one host, started by the plugin itself (plain pytest, no
mpirun on the command line): a passing case, a rank that fails, a rank that hangs; each reported
by name within the timeouts, and no rank process left behind. At world sizes 2, 4 and 8, each where
the host has that many GPUs; needs mpirun and mpi4py. Run it outside MPI (the plugin starts the ranks):

    python -m pytest tests/gpu/test_ranks_gpu.py -p mpk
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from mpk_runtime.harness import mpi_job
from pytest_mpk import devices

SUMS = """
import torch
from pytest_mpk import Out, SceneTestCase


class Sum(SceneTestCase):
    \"\"\"allreduce of (8, 4096) bf16: rank r's input is row r of one draw.\"\"\"

    def kernel_params(self, params):
        return {"max_num_batched_tokens": 8, "max_seq_length": 8, "max_num_pages": 8}

    def generate_args(self, params):
        r, w = params["rank"], params["world_size"]
        x = torch.randn(w, 8, 4096, dtype=torch.bfloat16)[r].clone()
        return {"input": x, "output": Out(torch.empty(8, 4096, dtype=torch.bfloat16))}

    def build(self, pk, t, params):
        buf = pk.new_comm_tensor((2, pk.world_size, 8, 4096), torch.bfloat16, "buf")
        pk.allreduce_layer(t.input, buf, t.output, grid_dim=(16, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return sum(a.input.float() for a in args.ranks).to(torch.bfloat16)
"""

SCENE = """
import time
from pytest_mpk import Case, scene_test
from sums import Sum


@scene_test(layer="allreduce", world_size=WORLD)
class TestRanks(Sum):
    CASES = [Case("ok", fail=-1, hang=-1), Case("fails_on_1", fail=1, hang=-1), Case("hangs_on_1", fail=-1, hang=1)]

    def build(self, pk, t, params):
        assert params["rank"] != params["fail"], f"rank {params['rank']} refuses"
        if params["rank"] == params["hang"]:
            time.sleep(3600)
        super().build(pk, t, params)
"""


@pytest.mark.parametrize("world", [2, 4, 8])
def test_plugin_starts_the_ranks_and_names_the_failing_ones(pytester: pytest.Pytester, world: int) -> None:
    if mpi_job() is not None:
        pytest.skip("starts its own MPI job: run it outside mpirun")
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun")
    if len(devices.session_gpus()) < world:  # the session's GPUs: under xdist this worker sees only its own
        pytest.skip(f"needs {world} GPUs, {len(devices.session_gpus())} in the session")
    pytester.makepyfile(sums=SUMS, test_scene=SCENE.replace("WORLD", str(world)))
    result = pytester.run(
        sys.executable,
        "-m",
        "pytest",
        "test_scene.py",
        "-p",
        "mpk",
        "-p",
        "no:cacheprovider",
        "--mpk-hang-timeout",
        "2",
        "--mpk-rank-timeout",
        "20",
        "-rA",
        timeout=500,
    )
    result.stdout.fnmatch_lines_random(
        [
            "*PASSED*TestRanks::ok*",
            "rank 1: rank 1 refuses",
            "rank 1: did not reach 'built' within 20 s: failed or stopped responding",
            f"backend: gpu (sm90), {world} ranks under MPI (this report: rank 0)",
            "*2 failed, 1 passed*",
        ]
    )
    leftover = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int(d.name) != os.getpid() and Path(os.readlink(d / "cwd")) == pytester.path:
                leftover.append(int(d.name))
        except OSError:
            continue
    assert leftover == []


CHECKED_SCENE = """
import torch
from pytest_mpk import Case, scene_test
from sums import Sum


@scene_test(layer="allreduce", world_size=2)
class TestGuards(Sum):
    CASES = [Case("clean"), Case("stray_on_1")]


@scene_test(layer="allreduce", world_size=2)
class TestInputWritten(Sum):
    CASES = [Case("twice")]

    def build(self, pk, t, params):
        super().build(pk, t, params)
        again = pk.new_comm_tensor((2, pk.world_size, 8, 4096), torch.bfloat16, "again")
        pk.allreduce_layer(t.output, again, t.input, grid_dim=(16, 1, 1), block_dim=pk.block_dim)
"""

# Loaded by every rank's pytest: on rank 1, in a case named stray_*, one bf16 past the end of the
# output is written after the run (on the GPU), where only the guard zone can see it.
STRAY_CONFTEST = """
import os
import torch
import mpk_runtime as mpk
from mpk_runtime.harness import mpi_job

_synchronize = mpk.PersistentKernel.synchronize


def _stray(self, *args, **kwargs):
    _synchronize(self, *args, **kwargs)
    if "stray_on_1" in os.environ.get("PYTEST_CURRENT_TEST", "") and mpi_job()[1] == 1:
        t = self.tensor("output")
        torch.as_strided(t, (1,), (1,), t.storage_offset() + t.numel()).fill_(1.0)
        torch.cuda.synchronize()


mpk.PersistentKernel.synchronize = _stray
"""


def test_every_gpu_rank_gets_guard_zones_and_the_input_checks(pytester: pytest.Pytester) -> None:
    """On GPU ranks as on one: a write past an output's end on one rank fails the case and names
    that rank and the slice beside it; a kernel that writes its input fails on every rank; a clean
    case passes with the guards in place."""
    if mpi_job() is not None:
        pytest.skip("starts its own MPI job: run it outside mpirun")
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun")
    if len(devices.session_gpus()) < 2:
        pytest.skip(f"needs 2 GPUs, {len(devices.session_gpus())} in the session")
    pytester.makepyfile(sums=SUMS, test_scene=CHECKED_SCENE)
    pytester.makeconftest(STRAY_CONFTEST)
    result = pytester.run(
        sys.executable, "-m", "pytest", "test_scene.py", "-p", "mpk", "-p", "no:cacheprovider", "-rA", timeout=500
    )
    result.stdout.fnmatch_lines_random(
        [
            "*PASSED*TestGuards::clean*",
            "*FAILED*TestGuards::stray_on_1*",
            "*rank 1: *tensor 'output': 2 guard bytes written at bytes 0..1 past its end*",
            "*FAILED*TestInputWritten::twice*",
            "*rank 0: input 'input' changed: *",
            "*rank 1: input 'input' changed: *",
            "*2 failed, 1 passed*",
        ]
    )
    result.stdout.no_fnmatch_line("*rank 0: *guard bytes*")
