"""Replaying a compile output directory with no scene at all: ``pytest -p mpk DIR``.

Every ``signature_rank{r}.json`` under DIR becomes one item. Inputs come from the signature (IN and
INOUT tensors random, seeded; OUT tensors poisoned); the saved ``test_rank{r}.cu`` is built as it is
now (edited: rebuilt; unchanged: from the cache) and run on the GPU, or as CUDA bodies on the CPU
emulator. The golden is the emulator running the same task graph JSON on the same inputs with each
task's PyTorch slice reference, so an edited body that computes something else fails. With
``--mpk-backend emulate-ref`` (references on both sides) two runs with different task interleavings
must agree (a missing dependency makes them differ); no line of the source runs then.

With a scene (``--mpk-replay DIR`` plus a scene file or ``--mpk-case``), the scene's inputs and
golden are used instead; see runner.run_case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from . import devices
from .session import BACKEND_PROPERTY, SESSION_KEY

SIGNATURE = re.compile(r"^signature_rank(\d+)\.json$")
TASK_GRAPH = re.compile(r"^task_graph_rank(\d+)\.json$")


def is_signature(path: Path) -> bool:
    return SIGNATURE.match(path.name) is not None


def lacks_its_signature(path: Path) -> bool:
    """A rank's task graph with no signature beside it: a damaged compile output directory, which
    would otherwise collect nothing and say nothing."""
    m = TASK_GRAPH.match(path.name)
    return m is not None and not (path.parent / f"signature_rank{m.group(1)}.json").exists()


class MissingSignature(pytest.File):
    def collect(self):
        rank = int(TASK_GRAPH.match(self.path.name).group(1))
        missing = f"GraphError: {self.path.parent / f'signature_rank{rank}.json'} is missing beside {self.path.name}"
        fix = "; a replay needs every file compile(output_dir=...) writes: compile the directory again"
        yield ReplayItem.from_parent(self, name="replay[?]", rank=rank, arch="?", broken=missing + fix)


class ReplayFile(pytest.File):
    def collect(self):
        from mpk_runtime import MpkError, harness

        rank = int(SIGNATURE.match(self.path.name).group(1))
        try:
            arch = harness.signature_arch(self.path)
        except MpkError as e:  # one failed item, as a damaged task graph is: other directories still run
            yield ReplayItem.from_parent(self, name="replay[?]", rank=rank, arch="?", broken=f"{type(e).__name__}: {e}")
            return
        yield ReplayItem.from_parent(self, name=f"replay[{arch}]", rank=rank, arch=arch)


def refuse_emulation(error: Exception, requested_backend: str) -> None:
    """The emulator cannot run an edited source (mpk_runtime.EmulationError). Where the plugin chose
    it (--mpk-backend auto: no GPU for the arch) the case is skipped, as a GPU-only test is on a
    machine without one: it could not be checked here, and it did not pass. Where the user asked
    for the emulator, the error stands and the case fails."""
    if requested_backend == "auto":
        raise pytest.skip.Exception(f"not run: {error}", _use_item_location=True)  # reported at the case


class DamagedDirectory(Exception):
    """A compile output directory whose signature cannot be read: the item fails with its message."""


class ReplayItem(pytest.Item):
    def __init__(self, *, rank: int, arch: str, broken: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.rank, self.arch, self.broken = rank, arch, broken

    def runtest(self) -> None:
        import torch

        if self.broken is not None:
            raise DamagedDirectory(self.broken)

        import mpk_runtime as mpk
        from mpk_runtime import harness

        from . import compare
        from .runner import seed_of

        session = self.config.stash[SESSION_KEY]
        directory = self.path.parent
        signature = harness.read_compile_output(directory, self.rank).signature
        backend = devices.backend_for(self.arch, session.backend, session.local_arch(), session.emulate_check)
        self.user_properties.append((BACKEND_PROPERTY, backend))
        self._ran_on = (backend, session.backend)
        shapes = [(t.name, t.shape, t.dtype) for t in signature.tensors]
        # Host: the inputs, the run's tensors (or their copy back) and the golden run's; the GPU: the run's.
        harness.check_memory(shapes, "cpu", f"replay of {directory}", copies=3)
        if backend == devices.GPU:
            harness.check_memory(shapes, torch.device("cuda", torch.cuda.current_device()), f"replay of {directory}")
        torch.manual_seed(seed_of(self.nodeid))
        inputs, outs = {}, []
        for t in signature.tensors:
            dtype = harness.torch_dtype(t.dtype)
            if t.direction == "OUT":
                outs.append(t.name)
                inputs[t.name] = compare.poison(torch.empty(t.shape, dtype=dtype))
            else:
                if t.direction == "INOUT":
                    outs.append(t.name)
                inputs[t.name] = (
                    torch.randn(t.shape).to(dtype) if dtype.is_floating_point else torch.randint(1, 64, t.shape, dtype=dtype)
                )

        def kernel(backend: str, tensors: dict, reference: bool = False):
            if backend in devices.EMULATED_BACKENDS:
                emulate, check = devices.emulate_param(backend), backend == devices.EMULATED_CHECKED
                return mpk.PersistentKernel.from_artifacts(
                    directory, tensors, self.rank, reference=reference, emulate=emulate, emulate_check=check
                )
            if backend == devices.COMPILED:
                return mpk.PersistentKernel.from_artifacts(directory, tensors, self.rank, compile_only=True)
            return mpk.PersistentKernel.from_artifacts(directory, tensors, self.rank)

        def launch(pk, tensors: dict) -> dict:
            for n, v in inputs.items():
                tensors[n].copy_(v)
            pk()
            pk.synchronize()
            return {n: tensors[n].cpu().clone() for n in outs}

        device = "cuda" if backend == devices.GPU else "cpu"
        tensors = {n: v.to(device).clone() for n, v in inputs.items()}
        pk = kernel(backend, tensors)
        try:
            try:
                pk.compile()
            except mpk.EmulationError as e:
                refuse_emulation(e, session.backend)
                raise
            result = pk.build_result
            notes = [f"module {'from the cache' if result.cached else 'built'}: {result.entry.name}"]
            self.add_report_section("call", "mpk", "\n".join(notes + ([f"build cache: {result.note}"] if result.note else [])))
            if backend == devices.COMPILED:
                return
            actual = launch(pk, tensors)
            if backend == devices.EMULATED_REF:
                expected = launch(pk, tensors)  # the emulator's second launch interleaves tasks differently
            else:
                cpu = {n: v.clone() for n, v in inputs.items()}
                reference = kernel(devices.EMULATED_REF, cpu, reference=True)
                try:
                    reference.compile()
                    expected = launch(reference, cpu)
                finally:
                    reference.finalize()
        finally:
            pk.finalize()
        for name in outs:
            compare.check(name, actual[name], expected[name])

    def repr_failure(self, excinfo, style=None):
        """Our errors and mismatches say what is wrong in their message: no traceback of the plugin."""
        from mpk_runtime import MpkError

        from .compare import MismatchError

        if isinstance(excinfo.value, DamagedDirectory):
            return str(excinfo.value)
        if isinstance(excinfo.value, MismatchError):
            return f"{excinfo.value}\n{self._where()}"
        if isinstance(excinfo.value, MpkError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}\n{self._where()}"
        return super().repr_failure(excinfo, style)

    def _where(self) -> str:
        """The lines a scene case's report ends with: what ran, against what, and how to run it again."""
        import shlex

        backend, asked = getattr(self, "_ran_on", (None, None))
        golden = (
            "a second emulated launch (another task interleaving)"
            if backend == devices.EMULATED_REF
            else "the emulator running the same task graph with each task's slice reference, on the same inputs"
        )
        repro = ["pytest", "-p", "mpk", str(self.path.parent), "--arch", self.arch]
        if asked and asked != "auto":
            repro += ["--mpk-backend", asked]
        return "\n".join(
            [f"backend: {backend} ({self.arch})", f"golden: {golden}", f"repro: {' '.join(map(shlex.quote, repro))}"]
        )

    def reportinfo(self):
        return self.path, 0, f"replay of {self.path.parent}"  # a line: skips are reported here
