"""Running one scene case: generate inputs, poison outputs, build the kernel (or replay a saved
one), run it on the chosen backend, compute the golden, compare, and keep artifacts on failure."""

from __future__ import annotations

import re
import shlex
import shutil
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import mpk_runtime as mpk
from mpk_runtime import harness
from mpk_runtime.harness import shown

from . import compare, devices, guards, meta_args, relaunch, sanitize
from .goldens import compare_outputs, golden, golden_of
from .param_reads import check_all_read, copy_of
from .scene import Case, Expected, InOut, Out, SceneError, SceneTestCase, kernel_params_of

EMULATED_WORKERS = 8  # the emulator's worker count: enough to interleave, few enough to be quick
# Modules the session's prebuild (prebuild.py) built for its cases: entry name -> the cache's note
# on the build. The case that finds one in the cache reports it as built, with the note.
PREBUILT: dict[str, str | None] = {}


@dataclass
class Setup:
    """What a case runs with, decided by the plugin."""

    arch: str
    backend: str  # devices.GPU / EMULATED / COMPILED
    artifacts: Path  # this case's directory
    keep_artifacts: bool
    hang_timeout: float
    repro: str  # the command line that reruns this item
    replay: Path | None = None  # --mpk-replay: a compile output directory to run instead of build()
    profile: bool = False  # --mpk-profile: record a trace (gpu backend only)
    rank_timeout: float | None = None  # --mpk-rank-timeout: a multi-rank case's wait for the other ranks
    warp_jitter: bool = True  # off with --mpk-no-warp-jitter
    relaunch: bool = True  # a second launch on the same inputs (relaunch.py); off with --mpk-one-launch
    notes: list[str] = field(default_factory=list)  # lines for the item's report
    built_module: bool = False  # the case's own nvcc build missed the cache: it is cold for this case


class SceneFailure(AssertionError):
    """A case failed; the message is complete (report, artifacts, repro), no traceback needed."""


def seed_of(nodeid: str) -> int:
    return zlib.crc32(nodeid.encode())


def generate(scene: SceneTestCase, params: dict[str, Any], seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    args = scene.generate_args(copy_of(params))
    if not isinstance(args, dict) or not args:
        raise SceneError(
            f"{type(scene).__name__}.generate_args must return a dict of argument name -> tensor, got {type(args).__name__}"
        )
    where = f"{type(scene).__name__}.generate_args"
    for name, value in args.items():
        t = value.tensor if isinstance(value, Out) else value
        if not isinstance(t, torch.Tensor):
            raise SceneError(
                f"{where}: argument {name!r} is {shown(t)}, not a torch.Tensor; every argument is a tensor, outputs "
                f"wrapped in Out or InOut"
            )
        if t.is_meta:
            raise SceneError(
                f"{where}: argument {name!r} is a tensor on the meta device, which holds no data; generate real "
                f"tensors, on the CPU (the harness copies them to the case's device)"
            )
    meta_args.check_meta_outputs(where, args)
    return args


def outputs_of(args: dict[str, Any]) -> list[str]:
    return [name for name, v in args.items() if isinstance(v, Out)]


def base_params(arch: str, backend: str, hang_timeout: float, warp_jitter: bool = True) -> dict[str, Any]:
    """Init parameters of a test-mode kernel for ``arch`` on ``backend``: this GPU's workers and
    schedulers, or a few emulated workers; the plugin's scene cases and its ``pk`` fixture share them."""
    init = mpk.PersistentKernel.get_default_init_parameters()
    # One rank: under mpirun the defaults would be the job's (multi-rank cases set their own).
    # warp_jitter: a missing barrier changes the results on the GPU too; off the GPU the same source
    # is built, so nvcc checks the jittered barriers for the arch (--mpk-no-warp-jitter or a scene's
    # kernel_params turn it off).
    init.update(
        test_mode=True, target_cc=int(arch[2:]), watchdog_timeout=hang_timeout, world_size=1, mpi_rank=0, warp_jitter=warp_jitter
    )
    if backend == devices.GPU:
        workers, schedulers = mpk.get_configurations_from_gpu(torch.cuda.current_device())
        init.update(num_workers=workers, num_local_schedulers=schedulers)
    else:
        init.update(
            num_workers=EMULATED_WORKERS,
            emulate=devices.emulate_param(backend),
            emulate_check=backend == devices.EMULATED_CHECKED,
            compile_only=backend == devices.COMPILED,
        )
    return init


def kernel_params(scene: SceneTestCase, params: dict[str, Any], setup: Setup) -> dict[str, Any]:
    init = base_params(setup.arch, setup.backend, setup.hang_timeout, setup.warp_jitter)
    extra = dict(kernel_params_of(scene, params))
    meta_args.check_repeatable(type(scene).__name__, extra, kernel_params_of(scene, params))
    # Generated on the CPU, like the arguments; the kernel wants them where it runs, as a copy: the
    # run writes its meta tensors (step, tokens), and a tensor the scene keeps for its next case must
    # not change. What is not a dict of tensors is left to the runtime, which refuses it.
    if isinstance(extra.get("meta_tensors"), dict):
        device = "cuda" if setup.backend == devices.GPU else "cpu"
        meta_args.check_overrides(type(scene).__name__, extra["meta_tensors"])
        extra["meta_tensors"] = {
            k: v.detach().to(device, copy=True) if isinstance(v, torch.Tensor) else v for k, v in extra["meta_tensors"].items()
        }
    init.update(extra)
    return init


def run_case(
    scene: SceneTestCase, layer: str, case: Case | None, params: dict[str, Any], setup: Setup, seed: int, search: list[Path]
) -> None:
    """Run one case; raise SceneFailure (with the report, the artifacts and the repro line) on a
    mismatch or a kernel error. Other exceptions are mistakes in the scene or the runtime. A case that
    passes (compiled only, or failing as ``case.raises`` expects, too) leaves no artifacts unless kept."""
    _run_case(scene, layer, case, params, setup, seed, search)
    if not setup.keep_artifacts and not _holds_replay(setup):
        shutil.rmtree(setup.artifacts, ignore_errors=True)


def _run_case(
    scene: SceneTestCase, layer: str, case: Case | None, params: dict[str, Any], setup: Setup, seed: int, search: list[Path]
) -> None:
    args = generate(scene, params, seed)
    outs = outputs_of(args)
    if not outs:
        raise SceneError(
            f"{type(scene).__name__}.generate_args returned no Out or InOut tensor; wrap each output, "
            f"e.g. 'output': Out(torch.empty(...))"
        )
    device = torch.device("cuda", torch.cuda.current_device()) if setup.backend == devices.GPU else torch.device("cpu")
    inputs = {n: (v.tensor if isinstance(v, Out) else v).detach().clone() for n, v in args.items()}
    run_tensors, guarded = {}, {}
    for name, v in args.items():
        t, zones = guards.allocate(v.tensor if isinstance(v, Out) else v, device)
        if isinstance(v, Out) and not isinstance(v, InOut):
            compare.poison(t)
        run_tensors[name] = t
        if zones is not None:
            guarded[name] = zones

    if not _holds_replay(setup):  # never delete the directory a replay reads
        shutil.rmtree(setup.artifacts, ignore_errors=True)
    setup.artifacts.mkdir(parents=True, exist_ok=True)
    init = kernel_params(scene, params, setup)
    as_meta = {n: run_tensors[n] for n, v in args.items() if isinstance(v, Out) and v.meta}
    if as_meta:  # Out(..., meta=True): the kernel's own meta tensor of that name (an override)
        init["meta_tensors"] = {**init.get("meta_tensors", {}), **as_meta}
    if setup.profile and setup.backend == devices.GPU:
        init.update(
            profiler_tensor=torch.zeros(1 << 20, dtype=torch.uint64, device=device), trace_name=str(setup.artifacts / "trace")
        )
    pk = None
    module, launches = None, 0  # a module with __device__ variables and this case's launches of it (relaunch.counted)
    expected = None
    golden_from: str | None = None  # where the golden came from, once computed
    try:
        if setup.replay is not None:
            pk = mpk.PersistentKernel.from_artifacts(
                setup.replay,
                run_tensors,
                **{
                    k: init[k]
                    for k in (
                        "emulate",
                        "emulate_check",
                        "compile_only",
                        "num_workers",
                        "num_local_schedulers",
                        "watchdog_timeout",
                        "profiler_tensor",
                        "trace_name",
                    )
                    if k in init
                },
            )
            setup.notes.append(f"replayed {setup.replay}")
        else:
            pk = mpk.PersistentKernel(**init)
            t = types.SimpleNamespace(**{n: pk.attach_input(v, n) for n, v in run_tensors.items()})
            scene.build(pk, t, copy_of(params))
        pk.compile(output_dir=setup.artifacts)
        entry = pk.build_result.entry.name
        built_before = entry in PREBUILT
        cache_note = PREBUILT.pop(entry, None) if built_before else pk.build_result.note
        setup.notes.append(f"module {'from the cache' if pk.build_result.cached and not built_before else 'built'}: {entry}")
        setup.built_module = not pk.build_result.cached
        if pk.params.fitted:
            fitted = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in pk.params.fitted.items())
            setup.notes.append(f"kernel params fitted to the default prompt: {fitted}")
        if pk.host_build_result is not None:
            host = pk.host_build_result
            setup.notes.append(f"host module {'from the cache' if host.cached else 'built'}: {host.entry.name}")
            if host.note:  # a damaged host module rebuilt, as a damaged cubin entry is said below
                setup.notes.append(f"build cache: {host.note}")
        if cache_note:  # a damaged cache entry rebuilt, a lock holder built around
            setup.notes.append(f"build cache: {cache_note}")
        if setup.backend == devices.COMPILED:
            return
        module = relaunch.stateful_module(pk)

        def launch(expects: Case | None) -> bool:
            nonlocal launches
            launches += 1
            return _ran(pk, setup, expects)

        compare.poison_intermediates(pk)
        before = {n: run_tensors[n].detach().cpu().clone() for n in outs}  # poison, or an InOut's input
        meta_start = {k: v.detach().clone() for k, v in pk.meta_tensors.items()}
        meta_before = {k: v.cpu() for k, v in meta_start.items()} if setup.backend == devices.GPU else None
        if setup.backend == devices.GPU:
            sanitize.record_addresses(setup.artifacts, run_tensors)
        steps_before = pk.meta_tensors["step"].cpu().tolist()
        if not launch(case):
            return
        setup.notes.extend(meta_args.requests_not_run(pk, steps_before))
        if setup.profile and setup.backend == devices.GPU:
            setup.notes.extend(f"profile {k}: {p}" for k, p in _profile_files(pk, setup).items())

        def verify() -> None:  # what a launch left: the meta tensors, the guards, the outputs
            nonlocal expected, golden_from
            if meta_before is not None and pk.test_mode:  # emulated, prepare_next_batch is checked at every call
                harness.check_test_launch(pk, meta_before)
            actual = {n: run_tensors[n].cpu() for n in outs}
            meta_after = {k: v.detach().cpu().clone() for k, v in pk.meta_tensors.items()}
            if expected is None:  # the first launch's; the second is held to the same golden
                expected = golden(
                    scene,
                    layer,
                    {n: (type(v)(inputs[n]) if isinstance(v, Out) else inputs[n]) for n, v in args.items()},
                    params,
                    search,
                    outs,
                    {k: v.clone() for k, v in meta_after.items()},  # the golden may write its copy
                )
                golden_from = golden_of(scene, layer, search)
            untouched = {n: before[n] for n in outs if not args[n].meta}  # the runtime writes meta tensors too
            ins = {n: inputs[n] for n, v in args.items() if not isinstance(v, Out)}
            damage = guards.after_run(guarded, ins, run_tensors, untouched, pk.compiled_graph)
            guards.raise_with(
                damage,
                lambda: compare_outputs(
                    scene,
                    golden_from,
                    case,
                    outs,
                    actual,
                    expected,
                    before,
                    pk.compiled_graph,
                    meta_after if pk.test_mode else None,
                ),
            )

        verify()
        if setup.relaunch and relaunch.wanted(case, setup.profile, setup.backend, pk):
            relaunch.restore(pk, args, inputs, run_tensors, meta_start)
            relaunch.run_again(lambda: launch(None), verify, setup.backend)
        check_all_read(case, params)  # it passed, and every scene method that takes params has run
    except (AssertionError, mpk.KernelError, mpk.BuildError) as e:  # a build error: the source is kept to edit
        saved = _save_failure(setup, inputs, run_tensors if not isinstance(e, mpk.BuildError) else None, outs, expected)
        text = f"BuildError: {e}" if isinstance(e, mpk.BuildError) else str(e)
        if launches == 1 and (hint := relaunch.earlier(module)) is not None:  # state an earlier case left?
            text += f"\n{hint}"
        raise SceneFailure(_failure_text(text, setup, params, saved, golden_from)) from None
    finally:
        relaunch.counted(module, launches)
        if pk is not None:
            try:
                pk.finalize()
            except mpk.KernelError as e:
                setup.notes.append(f"finalize: {e}")


def _ran(pk, setup: Setup, case: Case | None) -> bool:
    """Run the kernel; False when it failed as ``case.raises`` expects (the case passes)."""
    try:
        pk()
        pk.synchronize(timeout=setup.hang_timeout + 60)
    except mpk.KernelError as e:
        if case is None or case.raises is None or not re.search(case.raises, str(e)):
            raise
        setup.notes.append(f"failed as expected: {str(e).splitlines()[0]}")
        return False
    if case is not None and case.raises is not None:
        raise AssertionError(f"the kernel ran to the end, but the case expects it to fail with an error matching {case.raises!r}")
    return True


def _holds_replay(setup: Setup) -> bool:
    """Whether the case's artifacts directory is, holds, or lies in the --mpk-replay directory (as when
    a case kept with --mpk-keep-artifacts is replayed from where it was kept)."""
    if setup.replay is None:
        return False
    a, r = setup.artifacts.resolve(), setup.replay.resolve()
    return a == r or a in r.parents or r in a.parents


def _profile_files(pk, setup: Setup) -> dict[str, Path]:
    files = dict(pk.profile_paths)
    png = setup.artifacts / "swimlane.png"
    harness.draw_swimlane(files["csv"], png, f"{shlex.split(setup.repro)[1]} ({setup.arch})")  # the node id
    files["png"] = png
    return files


FAILURE_FILES = ("inputs.pt", "actual.pt", "expected.pt", "test_rank0.cu", "task_graph_rank0.json", "signature_rank0.json")


def _save_failure(setup: Setup, inputs: dict, run_tensors: dict | None, outs: list[str], expected: dict | None) -> list[str]:
    """Save what a failing case leaves for its author; returns the names of the files its artifacts
    directory holds (the compile outputs included), in FAILURE_FILES order. ``run_tensors`` None: the
    kernel never ran (a build error), so there are no outputs to save (only their poison)."""
    torch.save(inputs, setup.artifacts / "inputs.pt")
    try:
        actual = {n: run_tensors[n].detach().cpu() for n in outs} if run_tensors is not None else None
    except RuntimeError:  # the kernel faulted: the CUDA context, and the outputs with it, are gone
        actual = None
    if actual is not None:
        torch.save(actual, setup.artifacts / "actual.pt")
    if expected is not None:  # what the golden gave that is a tensor (a wrong one is what the report is about)
        values = {n: (v.value if isinstance(v, Expected) else v) for n, v in expected.items()}
        torch.save(
            {n: v.detach().cpu() for n, v in values.items() if isinstance(v, torch.Tensor)}, setup.artifacts / "expected.pt"
        )
    (setup.artifacts / "repro.txt").write_text(setup.repro + "\n")
    return [name for name in FAILURE_FILES if (setup.artifacts / name).exists()]


def _failure_text(
    e: BaseException | str, setup: Setup, params: dict[str, Any], saved: list[str], golden_from: str | None = None
) -> str:
    """The report of a failed case; ``golden_from`` (golden_of) once there is a golden to compare with."""
    return "\n".join(
        [
            str(e),
            f"params: {params}",
            f"backend: {setup.backend} ({setup.arch})",
            *([f"golden: {golden_from}"] if golden_from else []),
            f"artifacts: {setup.artifacts} ({', '.join(saved)})",
            f"repro: {setup.repro}",
        ]
    )
