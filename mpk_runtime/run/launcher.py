"""Binding to a built module's C ABI (csrc/runtime/host.cuh) through ctypes."""

from __future__ import annotations

import contextlib
import ctypes as C
from collections.abc import Iterator
from pathlib import Path

from .. import archs, contract
from ..codegen import abi
from ..errors import BuildError, KernelError

_ERR = 512


@contextlib.contextmanager
def entry_points() -> Iterator[None]:
    """Turn ctypes' AttributeError for a symbol a loaded module lacks into a BuildError naming it."""
    try:
        yield
    except AttributeError as e:
        raise BuildError(
            f"{e}: the module was built from a source that lacks the runtime's entry points (an edited "
            f"test_rank{{r}}.cu that lost its generated code?); restore the generated source, or recompile"
        ) from None


class Module:
    """A loaded persistent-kernel module (the full build, which only the GPU backend makes). Loading
    needs no GPU (the CUDA runtime is linked statically and starts on first use), so the CPU tests
    load and check one too."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            lib = C.CDLL(str(self.path), mode=C.RTLD_LOCAL)
        except OSError as e:
            raise BuildError(f"cannot load {self.path}: {e}") from e
        self.lib = lib
        with entry_points():
            lib.mpk_abi_version.restype = C.c_int
            lib.mpk_worker_threads.restype = C.c_int
            lib.mpk_target_sm.restype = C.c_int
            lib.mpk_dynamic_smem_bytes.restype = C.c_uint
            lib.mpk_task_type_name.restype = C.c_char_p
            lib.mpk_task_type_name.argtypes = [C.c_int]
            lib.mpk_abi_layout.argtypes = [C.c_char_p, C.c_int]
            lib.mpk_occupancy.argtypes = [C.c_int, C.POINTER(C.c_int), C.POINTER(C.c_int), C.c_char_p, C.c_int]
            lib.mpk_create.restype = C.c_void_p
            lib.mpk_create.argtypes = [C.c_int, C.c_char_p, C.c_int]
            lib.mpk_launch.argtypes = [C.c_void_p, C.POINTER(abi.MpkKernelParams), C.c_int, C.c_void_p, C.c_char_p, C.c_int]
            lib.mpk_poll.argtypes = [C.c_void_p, C.c_int, C.POINTER(abi.MpkStatus), C.c_char_p, C.c_int]
            lib.mpk_take_error.argtypes = [C.c_void_p, C.POINTER(abi.MpkStatus), C.POINTER(C.c_uint64)]
            lib.mpk_last_status.argtypes = [C.c_void_p, C.POINTER(abi.MpkStatus)]
            lib.mpk_destroy.argtypes = [C.c_void_p, C.c_int]
            version = lib.mpk_abi_version()
            if version != contract.ABI_VERSION:
                raise BuildError(f"{self.path}: ABI version {version}, expected {contract.ABI_VERSION}; rebuild it")
            buf = C.create_string_buffer(8192)
            lib.mpk_abi_layout(buf, len(buf))
            abi.check_layout(buf.value.decode(), str(self.path))
            self.worker_threads = lib.mpk_worker_threads()
            self.target_sm = lib.mpk_target_sm()
            self.dynamic_smem_bytes = lib.mpk_dynamic_smem_bytes()
        want = archs.by_cc(self.target_sm).worker_threads
        if self.worker_threads != want:
            raise BuildError(
                f"{self.path}: built with {self.worker_threads} worker threads, but mpk_runtime/archs.py says "
                f"{want} for sm{self.target_sm}; rebuild it"
            )

    def task_type_name(self, opcode: int) -> str | None:
        name = self.lib.mpk_task_type_name(opcode)
        return name.decode() if name else None

    def occupancy(self, device: int) -> tuple[int, int]:
        """(CTAs of the kernel that fit on one SM, number of SMs) on ``device``."""
        per_sm, sms, err = C.c_int(), C.c_int(), C.create_string_buffer(_ERR)
        if self.lib.mpk_occupancy(device, C.byref(per_sm), C.byref(sms), err, _ERR) != 0:
            raise KernelError(f"occupancy query failed: {err.value.decode()}")
        return per_sm.value, sms.value

    def create(self, device: int) -> int:
        err = C.create_string_buffer(_ERR)
        handle = self.lib.mpk_create(device, err, _ERR)
        if not handle:
            raise KernelError(err.value.decode())
        return handle

    def launch(self, handle: int, params: abi.MpkKernelParams, grid: int, stream: int) -> bool:
        """Harvest the launches that finished, then launch: True. False where one of them ended with an
        error: nothing was launched, and take_error has the error."""
        err = C.create_string_buffer(_ERR)
        rc = self.lib.mpk_launch(handle, C.byref(params), grid, stream, err, _ERR)
        if rc == 0:
            return True
        if rc == 1:
            return False
        if rc == -2:
            raise _context_lost(err)
        raise KernelError(f"launch failed: {err.value.decode()}")

    def poll(self, handle: int, timeout_ms: int) -> abi.MpkStatus | None:
        """None when every launch finished; the live status of the oldest running one otherwise."""
        running, err = abi.MpkStatus(), C.create_string_buffer(_ERR)
        rc = self.lib.mpk_poll(handle, timeout_ms, C.byref(running), err, _ERR)
        if rc < 0:
            raise _context_lost(err)
        return running if rc == 1 else None

    def take_error(self, handle: int) -> tuple[abi.MpkStatus, int] | None:
        st, launch = abi.MpkStatus(), C.c_uint64()
        if self.lib.mpk_take_error(handle, C.byref(st), C.byref(launch)):
            return st, launch.value
        return None

    def last_status(self, handle: int) -> abi.MpkStatus | None:
        """The status of the last launch harvested, None before the first."""
        st = abi.MpkStatus()
        return st if self.lib.mpk_last_status(handle, C.byref(st)) else None

    def destroy(self, handle: int, timeout_ms: int) -> bool:
        """True when freed; False when a launch is still running (nothing is freed then)."""
        return self.lib.mpk_destroy(handle, timeout_ms) == 0


def _context_lost(err) -> KernelError:
    return KernelError(
        f"{err.value.decode()}; the CUDA context is no longer usable: restart the process "
        f"(a task body faulted: run it under compute-sanitizer to find where)"
    )
