"""The second launch of every case: the same kernel launched again on the same inputs.

A real run launches its kernel many times and iterates within a launch; a scene case launches it once.
So a task that counts or accumulates in memory it never resets (a layer's workspace, a ``__device__``
variable: both keep what the last launch left) gives the right answer in every case and a wrong one
from its second launch on. The harness launches each case twice: before the second launch the inputs
and InOut tensors get their values back, outputs and ``pk.new_tensor`` intermediates are poisoned
again and the meta tensors are restored; workspaces and device variables are left as they are. Both
launches are checked against the same golden. Emulated, the second launch runs only where a launch
leaves such state (a workspace, a device variable), and interleaves the workers in another order too
(run.emulator seeds the order by launch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mpk_runtime import KernelError, harness

from . import devices
from .compare import poison, poison_intermediates
from .scene import Case, InOut, Out

# Launches of each loaded module by the earlier cases of this process (a module is loaded once per
# process): its __device__ variables keep what they left, so a later case's first launch sees them.
_LAUNCHED: dict[str, int] = {}


class SecondLaunchError(AssertionError):
    """The first launch of a case passed and the second, on the same inputs, did not."""


def wanted(case: Case | None, profile: bool, backend: str, pk: Any) -> bool:
    """A case that expects its kernel to fail stops at the first launch; a profiled one records the
    first launch's trace and stops there too. Emulated, a second launch costs what the first did, so it
    runs only where a launch leaves state (harness.launch_state); on the GPU it costs microseconds."""
    if profile or (case is not None and case.raises is not None):
        return False
    return backend == devices.GPU or bool(harness.launch_state(pk))


def restore(pk: Any, args: dict[str, Any], inputs: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Back to the state before the first launch, except what a real run carries between launches."""
    for name, v in args.items():
        if isinstance(v, Out) and not isinstance(v, InOut):
            poison(tensors[name])
        else:
            tensors[name].copy_(inputs[name])
    poison_intermediates(pk)
    for name, t in pk.meta_tensors.items():
        t.copy_(meta[name])


def preface(backend: str) -> str:
    order = (
        "; the emulator also ran the workers in another order, so a missing dependency shows this way too"
        if backend in devices.EMULATED_BACKENDS
        else ""
    )
    return (
        "second launch: the first launch of this case passed; the same kernel launched again on the same inputs "
        "(outputs and pk.new_tensor intermediates poisoned again, meta tensors as before the first launch; layer "
        f"workspaces and __device__ variables keep what the first launch left) did not{order}. A task that counts "
        "or accumulates in memory it never resets is right only once: a real run launches the kernel many times "
        "and iterates within a launch. Reset such state in the task (or tag it with Runtime::launch_id and "
        "iteration)"
    )


def run_again(launch: Callable[[], object], verify: Callable[[], None], backend: str) -> None:
    """``launch`` the kernel a second time and ``verify`` what it left; a failure of either is a
    SecondLaunchError that says what the second launch kept from the first."""
    try:
        launch()
        verify()
    except (AssertionError, KernelError) as e:
        raise SecondLaunchError(f"{preface(backend)}.\n{e}") from None


def stateful_module(pk: Any) -> str | None:
    """The emulated host module ``pk`` runs, when it defines __device__ variables (a GPU module's are
    not listed): what a later case of this process finds them holding is what this one left."""
    return pk.host_build_result.entry.name if harness.module_variables(pk) else None


def counted(module: str | None, launches: int) -> None:
    if module is not None:
        _LAUNCHED[module] = _LAUNCHED.get(module, 0) + launches


def earlier(module: str | None) -> str | None:
    """What to add to a failure at a case's first launch when earlier cases launched its module (one
    that defines __device__ variables)."""
    n = _LAUNCHED.get(module, 0) if module is not None else 0
    if not n:
        return None
    return (
        f"module {module} ran {n} launch(es) of earlier cases in this process, and its __device__ variables keep "
        "what they left: if this case passes alone (the repro line), a task keeps state between launches"
    )
