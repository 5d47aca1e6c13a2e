"""The exception hierarchy: every public error is an MpkError and, where one fits, the builtin that
describes it, so callers can catch either."""

from __future__ import annotations

import pytest

import mpk_runtime as mpk

BUILTIN_OF = {
    "ConfigError": ValueError,
    "BlockDimError": ValueError,
    "GridError": ValueError,
    "ShapeError": ValueError,
    "DTypeError": TypeError,
    "LayoutError": ValueError,
    "DeviceError": RuntimeError,
    "NameConflictError": ValueError,
    "ArityError": ValueError,
    "GraphError": ValueError,
    "MetaTensorError": ValueError,
    "StateError": RuntimeError,
    "BuildError": RuntimeError,
    "CoResidencyError": RuntimeError,
    "KernelError": RuntimeError,
    "WatchdogError": RuntimeError,
    "MemoryBudgetError": MemoryError,
    "EmulationError": RuntimeError,
}


PUBLIC_ERRORS = sorted(n for n in mpk.__all__ if n.endswith("Error") and n != "MpkError")


def test_the_core_errors_are_exported():
    assert set(BUILTIN_OF) <= set(PUBLIC_ERRORS) and "MpkError" in mpk.__all__


@pytest.mark.parametrize("name", sorted(BUILTIN_OF))
def test_error_is_an_mpk_error_and_the_fitting_builtin(name):
    cls = getattr(mpk, name)
    assert issubclass(cls, mpk.MpkError)
    assert issubclass(cls, BUILTIN_OF[name])


@pytest.mark.parametrize("name", PUBLIC_ERRORS)
def test_every_public_error_is_an_mpk_error_and_a_builtin(name):
    cls = getattr(mpk, name)
    assert issubclass(cls, mpk.MpkError)
    assert any(issubclass(cls, b) for b in (ValueError, TypeError, RuntimeError, OSError, LookupError, MemoryError))


def test_watchdog_error_is_a_kernel_error_carrying_its_record():
    err = mpk.WatchdogError("stuck", [{"worker": 0}])
    assert isinstance(err, mpk.KernelError)
    assert err.record == [{"worker": 0}]
    assert mpk.WatchdogError("stuck").record == []
