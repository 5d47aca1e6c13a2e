"""Running a multi-rank scene case (``@scene_test(..., world_size=N)``).

Two ways, chosen by the item (items.py):

- ``run_in_process``: every rank's kernel in this process. Emulated, the ranks run together on the
  CPU emulator (``mpk_runtime.run_emulated_ranks``); compile-only, each rank's kernel is built.
- ``run_this_rank``: this process is one rank of an MPI job of N processes (``mpirun -n N pytest``,
  or the job the plugin started itself, launcher.py), each with its own GPU. Every rank runs the
  same items in the same order; within a case the ranks meet at four points (built, compiled, ran,
  outcome) through keyed, timed messages (mpk_runtime's MPI channel). A rank that fails says so at
  once, which ends the others' waits (also inside compile()) and makes them skip what would wait
  for it; one that hangs makes them fail with its number once the timeout passes. A rank that
  stopped responding fails every later multi-rank case at once, and the session ends by aborting
  the MPI job (the plugin's pytest_unconfigure), so that no rank process is left behind.

``generate_args`` runs with the same seed on every rank, so each rank can regenerate every other
rank's inputs for the golden, and only outcomes travel between the processes.
"""

from __future__ import annotations

import shutil
import traceback
import types
from pathlib import Path
from typing import Any

import torch

import mpk_runtime as mpk

from . import devices, guards, relaunch
from .compare import GoldenError, poison, poison_intermediates
from .frames import is_scene_code
from .goldens import as_outputs, compare_outputs, golden_of
from .param_reads import check_all_read, copy_of
from .runner import SceneFailure, Setup, generate, kernel_params
from .scene import Case, InOut, Out, PerRank, SceneError, SceneTestCase, scene_info

_stopped: list[str] = []  # why the MPI job cannot go on: a rank stopped responding


def must_abort() -> str | None:
    """Why this process must abort the MPI job at the end of the session, if it must."""
    return _stopped[0] if _stopped else None


def rank_params(params: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    return copy_of(params, rank=rank, world_size=world_size)


class _Rank:
    """One rank's arguments, the copies its kernel runs on, and its kernel."""

    def __init__(self, scene: SceneTestCase, params: dict[str, Any], seed: int, device: torch.device):
        self.args = generate(scene, params, seed)
        self.outs = [n for n, v in self.args.items() if isinstance(v, Out)]
        if not self.outs:
            raise SceneError(
                f"{type(scene).__name__}.generate_args returned no Out or InOut tensor; wrap each output, "
                f"e.g. 'output': Out(torch.empty(...))"
            )
        meta = [n for n in self.outs if self.args[n].meta]
        if meta:  # the one-rank run hands them to the kernel as its meta tensors; the ranks' run does not
            raise SceneError(
                f"{type(scene).__name__}.generate_args: Out(..., meta=True) for {meta}, which a scene on "
                f"{params.get('world_size', '?')} ranks does not pass to the kernel as its meta tensors; set them "
                f"in kernel_params' meta_tensors, or test them in a one-rank scene"
            )
        self.inputs = {n: (v.tensor if isinstance(v, Out) else v).detach().clone() for n, v in self.args.items()}
        self.tensors, self.guarded = {}, {}
        for name, v in self.args.items():  # as a one-rank case has them: between guard zones, strides kept
            t, zones = guards.allocate(v.tensor if isinstance(v, Out) else v, device)
            if isinstance(v, Out) and not isinstance(v, InOut):
                poison(t)
            self.tensors[name] = t
            if zones is not None:
                self.guarded[name] = zones
        self.before = {n: self.tensors[n].detach().cpu().clone() for n in self.outs}
        self.pk: Any = None
        self.meta_start: dict[str, torch.Tensor] = {}

    def build(self, scene: SceneTestCase, params: dict[str, Any], init: dict[str, Any]) -> None:
        self.pk = mpk.PersistentKernel(**init)
        t = types.SimpleNamespace(**{n: self.pk.attach_input(v, n) for n, v in self.tensors.items()})
        scene.build(self.pk, t, copy_of(params))

    def keep_meta(self) -> None:
        """The meta tensors before the first launch, for the second (relaunch.py)."""
        self.meta_start = {k: v.detach().clone() for k, v in self.pk.meta_tensors.items()}

    def restore(self) -> None:
        relaunch.restore(self.pk, self.args, self.inputs, self.tensors, self.meta_start)

    def plain_args(self) -> types.SimpleNamespace:
        ns = types.SimpleNamespace(**self.inputs)
        if "meta" not in self.inputs:
            meta = {k: v.detach().cpu().clone() for k, v in self.pk.meta_tensors.items()} if self.pk is not None else {}
            ns.meta = types.SimpleNamespace(**meta)
        return ns


def _init(scene: SceneTestCase, params: dict[str, Any], setup: Setup, rank: int, world: int) -> dict[str, Any]:
    init = kernel_params(scene, params, setup)
    init.update(world_size=world, mpi_rank=rank, comm_timeout=setup.hang_timeout + 60)
    return init


def goldens(scene: SceneTestCase, ranks: list[types.SimpleNamespace], params: dict[str, Any], outs: list[str]) -> list[dict]:
    """Every rank's golden, from ``compute_golden`` seeing every rank's arguments."""
    compute = getattr(scene, "compute_golden", None)
    if compute is None:
        raise TypeError(f"{type(scene).__name__} runs on {len(ranks)} ranks and must define compute_golden(self, args, params)")
    result = compute(types.SimpleNamespace(ranks=ranks, world_size=len(ranks)), copy_of(params))
    where = f"{type(scene).__name__}.compute_golden"
    if isinstance(result, PerRank):
        if len(result.values) != len(ranks):
            raise GoldenError(
                f"{where}: returned PerRank of {len(result.values)} values for {len(ranks)} ranks; give one per rank, "
                f"in rank order"
            )
        return [as_outputs(v, outs, f"rank {r}: {where}") for r, v in enumerate(result.values)]
    if isinstance(result, list) and len(result) == len(ranks) != len(outs):
        raise GoldenError(
            f"{where}: returned a list of {len(result)} values for the {len(outs)} output(s) {outs}; for one golden per "
            f"rank return PerRank([...]) (a list is the outputs in order)"
        )
    return [as_outputs(result, outs, where)] * len(ranks)


def _check(scene: SceneTestCase, case: Case | None, rk: _Rank, expected: dict) -> str | None:
    """One rank's outputs against its golden, and what a one-rank case checks beside them: the guard
    zones, the inputs bit for bit, the output elements no task writes."""
    actual = {n: rk.tensors[n].detach().cpu() for n in rk.outs}
    graph = rk.pk.compiled_graph
    inputs = {n: rk.inputs[n] for n, v in rk.args.items() if not isinstance(v, Out)}
    try:
        where = golden_of(scene, scene_info(type(scene)).layer, [])  # compute_golden: a multi-rank scene defines it
        damage = guards.after_run(rk.guarded, inputs, rk.tensors, rk.before, graph)
        guards.raise_with(damage, lambda: compare_outputs(scene, where, case, rk.outs, actual, expected, rk.before, graph))
    except AssertionError as e:
        return str(e)
    return None


def _failure(
    failures: dict[int, str],
    setup: Setup,
    params: dict[str, Any],
    world: int,
    how: str,
    head: str | None = None,
    golden_from: str | None = None,
) -> SceneFailure:
    """The report of a failed case, as a one-rank case's (runner._failure_text) with a line per
    failing rank; the artifacts line lists what the directory holds (each failing rank's tensors in
    rank<r>/), and repro.txt is written there."""
    lines = ([head] if head else []) + [f"rank {r}: {text}" for r, text in sorted(failures.items())]
    saved = ""
    if setup.artifacts.is_dir():
        (setup.artifacts / "repro.txt").write_text(setup.repro + "\n")
        files = sorted(str(f.relative_to(setup.artifacts)) for f in setup.artifacts.rglob("*") if f.is_file())
        saved = f" ({', '.join(files)})"
    lines += [
        f"params: {params}",
        f"backend: {setup.backend} ({setup.arch}), {world} ranks {how}",
        *([f"golden: {golden_from}"] if golden_from else []),
        f"artifacts: {setup.artifacts}{saved}",
        f"repro: {setup.repro}",
    ]
    return SceneFailure("\n".join(lines))


def run_in_process(
    scene: SceneTestCase, case: Case | None, params: dict[str, Any], setup: Setup, seed: int, world: int, mine: int | None = None
) -> None:
    """Every rank in this process (emulated or compile-only). ``mine``: compare only that rank's
    outputs (one rank of an MPI job running emulated: every rank emulates all of them)."""
    shutil.rmtree(setup.artifacts, ignore_errors=True)
    setup.artifacts.mkdir(parents=True, exist_ok=True)
    ranks: list[_Rank] = []
    failures: dict[int, str] = {}
    for r in range(world):
        p = rank_params(params, r, world)
        try:
            rk = _Rank(scene, p, seed, torch.device("cpu"))
            rk.build(scene, p, _init(scene, p, setup, r, world))
            rk.pk.compile(output_dir=setup.artifacts)
            poison_intermediates(rk.pk)
            ranks.append(rk)
        except (AssertionError, mpk.MpkError, SceneError) as e:
            failures[r] = f"{type(e).__name__}: {e}{_scene_frame(e)}"
    if failures:
        raise _failure(failures, setup, params, world, "in one process")
    _check_reproducible(scene, params, seed, world, ranks[0])
    notes = {
        f"module {'from the cache' if rk.pk.build_result.cached else 'built'}: {rk.pk.build_result.entry.name}" for rk in ranks
    }
    setup.notes.extend(sorted(notes))
    if setup.backend != devices.COMPILED:
        _emulate_and_check(scene, case, params, setup, seed, ranks, mine)
    if not setup.keep_artifacts:  # passed: compiled only, too
        shutil.rmtree(setup.artifacts, ignore_errors=True)


def _check_reproducible(scene: SceneTestCase, params: dict[str, Any], seed: int, world: int, rk: _Rank) -> None:
    """Under MPI each rank regenerates the other ranks' inputs from the seed for the golden, so
    generate_args must give the same tensors for the same seed: SceneError naming the first input
    that differs when rank 0's, drawn again, do not (drawn from a generator the harness does not
    seed, they would pass emulated and compare against other data under MPI)."""
    again = generate(scene, rank_params(params, 0, world), seed)
    for name, v in again.items():
        if isinstance(v, Out) and not isinstance(v, InOut):
            continue  # an output's initial data is the harness's (poisoned)
        t = v.tensor if isinstance(v, Out) else v
        before = rk.inputs[name]
        if (
            t.shape != before.shape
            or t.dtype != before.dtype
            or not torch.equal(t.view(-1).view(torch.uint8), before.view(-1).view(torch.uint8))
        ):
            raise SceneError(
                f"{type(scene).__name__}.generate_args gave another {name!r} for the same seed (rank 0, drawn twice); "
                f"every rank regenerates the others' inputs from the seed: draw from torch's global generator, which "
                f"the harness seeds, or from a torch.Generator seeded from params"
            )


def _emulate_and_check(
    scene: SceneTestCase, case: Case | None, params: dict[str, Any], setup: Setup, seed: int, ranks: list[_Rank], mine: int | None
) -> None:
    """Run the built ranks on the emulator and compare their outputs (``mine``'s only, if given)."""
    world = len(ranks)
    try:
        mpk.run_emulated_ranks([rk.pk for rk in ranks], seed=seed)
    except mpk.MpkError as e:
        raise _failure({}, setup, params, world, "in one process", f"{type(e).__name__}: {e}") from None
    try:
        expected = goldens(scene, [rk.plain_args() for rk in ranks], params, ranks[0].outs)
    except AssertionError as e:  # a GoldenError: a golden of the wrong form
        raise _failure({}, setup, params, world, "in one process", f"{type(e).__name__}: {e}") from None
    failures: dict[int, str] = {}
    for r, rk in enumerate(ranks):
        if mine is None or r == mine:
            text = _check(scene, case, rk, expected[r])
            if text:
                failures[r] = text
    if failures:
        for r in failures:
            _save(setup.artifacts / f"rank{r}", ranks[r], expected[r])
        golden_from = golden_of(scene, scene_info(type(scene)).layer, [])
        raise _failure(failures, setup, params, world, "in one process", golden_from=golden_from)
    if mine is None:  # it passed, and every rank ran here, with every read noted
        check_all_read(case, params)


def run_this_rank(
    scene: SceneTestCase, case: Case | None, params: dict[str, Any], setup: Setup, seed: int, world: Any, key: str
) -> None:
    """This process's rank of the case, meeting the other ranks (see the module docstring)."""
    if _stopped:
        raise SceneFailure(f"not run: {_stopped[0]}")
    world.set_context(key)
    rank, size = world.rank, world.size
    wait = setup.rank_timeout or setup.hang_timeout + 60  # a rank may be building a module meanwhile
    if rank == 0:
        shutil.rmtree(setup.artifacts, ignore_errors=True)
    setup.artifacts.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda", torch.cuda.current_device()) if setup.backend == devices.GPU else torch.device("cpu")
    p = rank_params(params, rank, size)
    rk: _Rank | None = None
    failure: str | None = None
    peer_failures: dict[int, str] = {}

    def step(what: str, fn) -> bool:
        """Run ``fn`` (unless this rank failed already), then meet the others; False once any failed."""
        nonlocal failure
        if failure is None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - every failure must reach the other ranks
                failure = _describe(e)
                world.fail(failure)
        try:
            statuses = world.exchange(what, failure, wait)
        except mpk.RankError as e:
            if e.failures:  # they said they failed: their outcome tells the rest
                return False
            _stopped.append(f"rank(s) {', '.join(map(str, e.ranks))} stopped responding in {key}")
            for q in e.ranks:
                peer_failures[q] = f"did not reach {what!r} within {wait:g} s: failed or stopped responding"
            return False
        peer_failures.update({q: s for q, s in enumerate(statuses) if s and q != rank})
        return failure is None and not peer_failures

    def prepare() -> None:
        nonlocal rk
        rk = _Rank(scene, p, seed, device)
        rk.build(scene, p, _init(scene, p, setup, rank, size))

    def compile() -> None:
        assert rk is not None
        rk.pk.compile(output_dir=setup.artifacts)
        poison_intermediates(rk.pk)

    expected: dict | None = None

    def run() -> None:
        nonlocal expected
        assert rk is not None
        if setup.backend != devices.GPU:
            return
        rk.keep_meta()
        rk.pk()
        rk.pk.synchronize(timeout=setup.hang_timeout + 60)
        others = [_Rank(scene, rank_params(params, q, size), seed, torch.device("cpu")) for q in range(size) if q != rank]
        others.insert(rank, rk)
        expected = goldens(scene, [o.plain_args() for o in others], params, rk.outs)[rank]
        check()

    def check() -> None:
        assert rk is not None and expected is not None
        text = _check(scene, case, rk, expected)
        if text:
            _save(setup.artifacts / f"rank{rank}", rk, expected)
            raise AssertionError(text)

    def run_again() -> None:  # every rank launches again together (relaunch.py)
        assert rk is not None
        if setup.backend != devices.GPU or not (setup.relaunch and relaunch.wanted(case, setup.profile, setup.backend, rk.pk)):
            return
        rk.restore()

        def launch() -> None:
            rk.pk()
            rk.pk.synchronize(timeout=setup.hang_timeout + 60)

        relaunch.run_again(launch, check, setup.backend)

    try:
        if step("built", prepare) and step("compiled", compile) and step("ran", run):
            step("ran again", run_again)
    finally:
        if rk is not None and rk.pk is not None:
            try:
                rk.pk.finalize()
            except mpk.MpkError as e:
                setup.notes.append(f"rank {rank} finalize: {e}")
    if not _stopped:
        try:
            outcomes = world.exchange("outcome", failure, wait, abandon=False)
            peer_failures.update({q: s for q, s in enumerate(outcomes) if s and q != rank})
        except mpk.RankError as e:
            _stopped.append(f"rank(s) {', '.join(map(str, e.ranks))} stopped responding in {key}")
            peer_failures.update({q: "did not report its outcome: failed or stopped responding" for q in e.ranks})
    failures = {**peer_failures, **({rank: failure} if failure else {})}
    if failures:
        raise _failure(failures, setup, params, size, f"under MPI (this report: rank {rank})")
    if rank == 0 and not setup.keep_artifacts:
        shutil.rmtree(setup.artifacts, ignore_errors=True)


def _scene_frame(e: BaseException) -> str:
    """Where in the scene's own code (its build(), say) ``e`` was raised: a line ``at file:line, in
    name`` and the statement, as a one-rank case's report shows it; nothing when it was not."""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if is_scene_code(frame.filename):
            return f"\n  at {Path(frame.filename).name}:{frame.lineno}, in {frame.name}:\n    {(frame.line or '').strip()}"
    return ""


def _describe(e: BaseException) -> str:
    if isinstance(e, mpk.MpkError):
        return f"{type(e).__name__}: {e}{_scene_frame(e)}"
    if isinstance(e, AssertionError):
        return f"{type(e).__name__}: {e}" if not str(e) else str(e)
    frames = traceback.extract_tb(e.__traceback__)[-3:]
    where = "; ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames)
    return f"{type(e).__name__}: {e} ({where})"


def _save(directory: Path, rk: _Rank, expected: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(rk.inputs, directory / "inputs.pt")
    torch.save({n: rk.tensors[n].detach().cpu() for n in rk.outs}, directory / "actual.pt")
    torch.save({n: getattr(v, "value", v) for n, v in expected.items()}, directory / "expected.pt")
