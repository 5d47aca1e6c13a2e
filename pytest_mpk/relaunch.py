"""The second launch of every case: the same kernel launched again on the same inputs.

A real run launches its kernel many times and iterates within a launch; a scene case launches it once.
So a task that counts or accumulates in memory it never resets (a layer's workspace, a ``__device__``
variable: both keep what the last launch left) gives the right answer in every case and a wrong one
from its second launch on. The harness launches each case twice: before the second launch the inputs
and InOut tensors get their values back, outputs and ``pk.new_tensor`` intermediates are poisoned
again and the meta tensors are restored; workspaces and device variables are left as they are. Both
launches are checked against the same golden. On the emulator the second launch also interleaves the
workers in another order (run.emulator seeds the order by launch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mpk_runtime import KernelError

from . import devices
from .compare import poison, poison_intermediates
from .scene import Case, InOut, Out

KEPT = "layer workspaces and __device__ variables keep what the first launch left"


class SecondLaunchError(AssertionError):
    """The first launch of a case passed and the second, on the same inputs, did not."""


def wanted(case: Case | None, profile: bool) -> bool:
    """A case that expects its kernel to fail stops at the first launch; a profiled one records the
    first launch's trace and stops there too."""
    return not profile and (case is None or case.raises is None)


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
        "(outputs and pk.new_tensor intermediates poisoned again, meta tensors as before the first launch; "
        f"{KEPT}) did not{order}. A task that counts or accumulates in memory it never resets is right only once: "
        "a real run launches the kernel many times and iterates within a launch. Reset such state in the task "
        "(or tag it with Runtime::launch_id and iteration)"
    )


def run_again(launch: Callable[[], object], verify: Callable[[], None], backend: str) -> None:
    """``launch`` the kernel a second time and ``verify`` what it left; a failure of either is a
    SecondLaunchError that says what the second launch kept from the first."""
    try:
        launch()
        verify()
    except (AssertionError, KernelError) as e:
        raise SecondLaunchError(f"{preface(backend)}.\n{e}") from None
