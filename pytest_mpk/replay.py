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

import json
import re
from pathlib import Path

import pytest

from . import devices
from .session import BACKEND_PROPERTY, SESSION_KEY

SIGNATURE = re.compile(r"^signature_rank(\d+)\.json$")


def is_signature(path: Path) -> bool:
    return SIGNATURE.match(path.name) is not None


class ReplayFile(pytest.File):
    def collect(self):
        rank = int(SIGNATURE.match(self.path.name).group(1))
        arch = json.loads(self.path.read_text()).get("arch", "sm90")
        yield ReplayItem.from_parent(self, name=f"replay[{arch}]", rank=rank, arch=arch)


class ReplayItem(pytest.Item):
    def __init__(self, *, rank: int, arch: str, **kwargs):
        super().__init__(**kwargs)
        self.rank, self.arch = rank, arch

    def runtest(self) -> None:
        import torch

        import mpk_runtime as mpk
        from mpk_runtime import harness

        from . import compare
        from .runner import seed_of

        session = self.config.stash[SESSION_KEY]
        directory = self.path.parent
        signature = harness.read_compile_output(directory, self.rank).signature
        backend = devices.backend_for(self.arch, session.backend, session.local_arch(), session.emulate_check)
        self.user_properties.append((BACKEND_PROPERTY, backend))
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

        def kernel(backend: str, tensors: dict):
            if backend in devices.EMULATED_BACKENDS:
                emulate, check = devices.emulate_param(backend), backend == devices.EMULATED_CHECKED
                return mpk.PersistentKernel.from_artifacts(directory, tensors, self.rank, emulate=emulate, emulate_check=check)
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
            pk.compile()
            self.add_report_section(
                "call", "mpk", f"module {'from the cache' if pk.build_result.cached else 'built'}: {pk.build_result.entry.name}"
            )
            if backend == devices.COMPILED:
                return
            actual = launch(pk, tensors)
            if backend == devices.EMULATED_REF:
                expected = launch(pk, tensors)  # the emulator's second launch interleaves tasks differently
            else:
                cpu = {n: v.clone() for n, v in inputs.items()}
                reference = kernel(devices.EMULATED_REF, cpu)
                try:
                    reference.compile()
                    expected = launch(reference, cpu)
                finally:
                    reference.finalize()
        finally:
            pk.finalize()
        for name in outs:
            compare.check(name, actual[name], expected[name])

    def reportinfo(self):
        return self.path, None, f"replay of {self.path.parent}"
