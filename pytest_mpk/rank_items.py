"""Where a multi-rank scene item runs: which of ranks.py's two ways, or a job of its own
(launcher.py), and when it is skipped instead.

- Emulated (no GPU, or ``--mpk-backend emulate``), or compile-only outside an MPI job: every rank in
  this process.
- Inside an MPI job of the scene's world size (``mpirun -n N pytest``, or a job the plugin started):
  this process runs its rank. A job of another size skips the item, saying so.
- On the GPU outside a job: the plugin starts ``mpirun -n N`` for the item, if the session has N
  GPUs and mpirun and mpi4py are there; else the item is skipped with the reason. (With
  ``MPK_LAUNCH_COMPILE_ONLY=1`` compile-only items are started so too, which lets the CPU tests run
  the whole path: tests/cpu/plugin/test_ranks_mpi.py.)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from . import devices
from .launcher import can_launch, run, write_report
from .param_reads import ReadParams
from .ranks import run_in_process, run_this_rank
from .runner import SceneFailure, Setup, seed_of
from .scene import Case
from .session import BACKEND_PROPERTY, SESSION_KEY

LAUNCH_COMPILE_ONLY = "MPK_LAUNCH_COMPILE_ONLY"


def run_ranks(item: Any, params: dict[str, Any], case: Case | None, setup: Setup, world_size: int) -> None:
    from mpk_runtime import harness

    job = harness.mpi_job()
    in_job = job is not None and job[0] > 1
    if setup.replay is not None:  # not ignored: the case would run its scene as if it had been replayed
        raise SceneFailure(
            f"--mpk-replay {setup.replay}: a scene on {world_size} ranks is not replayed by the plugin (each rank's "
            f"directory holds its own graph, and the ranks run together); run the case without --mpk-replay, or "
            f"replay each rank's graph in that rank's process with PersistentKernel.from_artifacts(directory, tensors, rank)"
        )
    scene = item.scene_class.cls()
    seed = seed_of(item.nodeid)
    if setup.backend in devices.EMULATED_BACKENDS:
        # Ranks emulated together run each task's slice reference: the host emulator of CUDA bodies
        # runs one graph at a time, and its peer memory is not emulated.
        setup = dataclasses.replace(setup, backend=devices.EMULATED_REF)
    launches = setup.backend == devices.GPU or (setup.backend == devices.COMPILED and os.environ.get(LAUNCH_COMPILE_ONLY) == "1")
    per_rank = setup.backend != devices.EMULATED_REF and (in_job or launches)
    if in_job and job is not None and job[0] != world_size:
        _skip(job, f"needs {world_size} ranks; this MPI job has {job[0]}")
    if case is None and per_rank:
        _skip(job, f"a sweep of a {world_size}-rank scene runs emulated, all ranks in one process (--mpk-backend emulate)")
    backend = f"{setup.backend} x{world_size}"
    if (BACKEND_PROPERTY, backend) not in item.user_properties:
        item.user_properties.append((BACKEND_PROPERTY, backend))
    if not per_rank:
        run_in_process(scene, case, ReadParams(params), setup, seed, world_size)
    elif in_job and job is not None:
        _in_job(job, lambda: run_this_rank(scene, case, params, setup, seed, harness.mpi_world(), item.nodeid), setup)
    else:
        _launch(item, setup, world_size)


def _skip(job: tuple[int, int, int] | None, reason: str) -> None:
    if job is not None and job[1] == 0:
        write_report("skipped", reason, [])
    _skip_at_scene(reason)


def _skip_at_scene(reason: str) -> None:
    raise pytest.skip.Exception(reason, _use_item_location=True)  # reported at the scene, not in this file


def _in_job(job: tuple[int, int, int], run: Any, setup: Setup) -> None:
    reporter = job[1] == 0
    try:
        run()
    except SceneFailure as e:
        if reporter:
            write_report("failed", str(e), setup.notes)
        raise
    except BaseException as e:
        if reporter:
            write_report("failed", f"{type(e).__name__}: {e}", setup.notes)
        raise
    if reporter:
        write_report("passed", "", setup.notes)


def _launch(item: Any, setup: Setup, world_size: int) -> None:
    gpus = devices.session_gpus()
    if setup.backend == devices.GPU and len(gpus) < world_size:
        _skip_at_scene(f"needs {world_size} GPUs, {len(gpus)} visible")
    why = can_launch()
    if why is not None:
        _skip_at_scene(f"needs {world_size} ranks under MPI: {why}")
    config = item.config
    mpk = config.stash[SESSION_KEY]
    args = [
        item.nodeid,
        *("-p", "mpk", "-p", "no:cacheprovider", "-q", "--rootdir", str(config.rootpath)),
        *("--arch", setup.arch, "--mpk-backend", mpk.backend, "--mpk-hang-timeout", str(setup.hang_timeout)),
        *("--mpk-artifacts-dir", str(mpk.artifacts_dir)),
    ]
    if config.inipath is not None:
        args += ["-c", str(config.inipath)]
    if mpk.keep_artifacts:
        args.append("--mpk-keep-artifacts")
    if setup.rank_timeout:
        args += ["--mpk-rank-timeout", str(setup.rank_timeout)]
    if getattr(getattr(item, "case", None), "manual", False):
        args += ["--mpk-case", item.selector]
    result = run(world_size, args, config.rootpath, setup.artifacts.with_name(setup.artifacts.name + ".mpirun.log"))
    setup.notes.extend(result.get("notes", []))
    if result["outcome"] == "skipped":
        _skip_at_scene(result["message"])
    if result["outcome"] != "passed":
        raise SceneFailure(result["message"])
