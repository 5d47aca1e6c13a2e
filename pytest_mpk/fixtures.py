"""The plugin's fixtures: ``pk`` (a test-mode PersistentKernel for this worker's GPU and arch),
``mpk_params`` (its init parameters), ``mpk_device`` and ``mpk_arch``."""

from __future__ import annotations

from typing import Any

import pytest

from . import devices
from .session import BACKEND_PROPERTY, SESSION_KEY


class _Params(dict):
    """mpk_params: a dict that refuses changes once pk was built from it (they would do nothing)."""

    sealed = False

    def _check(self) -> None:
        if self.sealed:
            from mpk_runtime import StateError

            raise StateError(
                "mpk_params changed after the pk fixture was built from it; adjust parameters with "
                "@pytest.mark.mpk_params(...) or by overriding the mpk_params fixture"
            )

    def __setitem__(self, key: str, value: Any) -> None:
        self._check()
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._check()
        super().update(*args, **kwargs)


@pytest.fixture
def mpk_arch(request: pytest.FixtureRequest) -> str:
    """The arch this test runs for ("sm80", "sm90" or "sm100"); tests using the mpk fixtures run
    once per ``--arch`` (limit them with ``@pytest.mark.mpk_arch(...)``)."""
    arch = request.param
    if "-not-in-" in arch:
        marked = ", ".join(map(repr, request.node.get_closest_marker("mpk_arch").args))
        reason = f"marked mpk_arch({marked}); this run targets {arch.split('-not-in-')[0]}"
        raise pytest.skip.Exception(reason, _use_item_location=True)  # reported at the test, not in this file
    return arch


@pytest.fixture
def _mpk_backend(request: pytest.FixtureRequest, mpk_arch: str) -> str:
    mpk = request.config.stash[SESSION_KEY]
    backend = devices.backend_for(mpk_arch, mpk.backend, mpk.local_arch(), mpk.emulate_check)
    request.node.user_properties.append((BACKEND_PROPERTY, backend))
    return backend


@pytest.fixture
def mpk_device(_mpk_backend: str):
    """The torch device to create tensors on: this worker's GPU, or the CPU when the case is
    emulated or only compiled."""
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if _mpk_backend == devices.GPU else torch.device("cpu")


@pytest.fixture
def mpk_params(request: pytest.FixtureRequest, mpk_arch: str, _mpk_backend: str) -> dict[str, Any]:
    """PersistentKernel init parameters for ``pk``: test mode, this arch, this GPU's workers and
    schedulers (or emulation), the session's hang timeout, then ``@pytest.mark.mpk_params(...)``."""
    from .runner import base_params

    session = request.config.stash[SESSION_KEY]
    params = _Params(base_params(mpk_arch, _mpk_backend, session.hang_timeout, session.warp_jitter))
    for marker in reversed(list(request.node.iter_markers("mpk_params"))):
        params.update(marker.kwargs)
    return params


@pytest.fixture
def pk(mpk_params: dict[str, Any]):
    """A test-mode PersistentKernel built from ``mpk_params``, finalized at teardown."""
    import mpk_runtime as mpk

    kernel = mpk.PersistentKernel(**mpk_params)
    mpk_params.sealed = True
    yield kernel
    kernel.finalize()
