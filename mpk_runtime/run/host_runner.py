"""A host-emulation module (``build/host.py``) loaded with ctypes: one task as one block of fibers
(``run_task``), the device's ``prepare_next_batch`` (``prepare_next_batch``), and guarded memory
for tensors (``guarded_alloc``). The C side is ``csrc/emulation/entry.h``.

    from mpk_runtime.codegen import abi, dispatcher
    from mpk_runtime.run import host_runner

    module = host_runner.load(dispatcher.generate(variants, "sm90"), "sm90", "rmsnorm", race_check=True)
    desc = host_runner.task_desc(0, [x.data_ptr(), w.data_ptr()], [y.data_ptr()], [{"f": 1e-6}, {"i": 4}])
    run = module.run_task(0, desc, abi.MpkMeta(...), abi.MpkBatchConfig(...), order="shuffled", seed=3)
    run.status, run.report  # "ok" | "task_error" (Runtime::fail, run.task_error) | "detected" | "invalid"
"""

from __future__ import annotations

import ctypes as C
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import contract
from ..build import host
from ..build.host import build_host_module
from ..codegen import abi
from ..errors import BuildError, ConfigError
from .device_variables import variable_memory
from .emu_options import Memory, Options
from .launcher import entry_points

ORDERS = {"in_order": 0, "reversed": 1, "shuffled": 2}
STATUS = {0: "ok", 1: "task_error", 2: "detected", 3: "invalid"}
REPORT_BYTES = 16384


# A source path in a report that climbs out of a directory: a user's task header included as
# tasks/<path relative to csrc/tasks>, which the build names from the checkout (csrc/tasks/../../x.cuh).
CLIMBING_PATH = re.compile(r"[\w.+\-/]*/\.\./[\w.+\-/]*")


def tidy_paths(report: str) -> str:
    """The report with each climbing path as a reader would write it: relative to the checkout when
    it lies inside it, else absolute."""

    def tidy(m: re.Match[str]) -> str:
        path = Path(os.path.normpath(host.REPO / m.group(0)))
        return str(path.relative_to(host.REPO)) if path.is_relative_to(host.REPO) else str(path)

    return CLIMBING_PATH.sub(tidy, report)


@dataclass(frozen=True)
class TaskRun:
    status: str  # "ok", "task_error" (Runtime::fail), "detected" (see report), "invalid"
    report: str
    task_error: tuple[int, int] | None = None  # (code, value) with "task_error"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def task_desc(
    variant: int,
    inputs: Sequence[int],
    outputs: Sequence[int],
    scalars: Sequence[dict] = (),
    task_id: int = 0,
    grid_idx: Sequence[int] = (0, 0, 0),
    task_type: int = 0,
) -> bytes:
    """A 128-byte MpkTaskDesc from raw addresses (e.g. ``t.data_ptr()``), scalars as in the task graph
    JSON (``{"f": 1e-6}`` or ``{"i": 4}``), for tests; the emulator packs graph tasks with abi.pack_task."""
    if len(inputs) > contract.MAX_INPUTS or len(outputs) > contract.MAX_OUTPUTS or len(scalars) > 2:
        raise ConfigError(
            f"a task descriptor holds 7 inputs, 3 outputs and 2 scalars; got {len(inputs)}, {len(outputs)} and {len(scalars)}"
        )
    words = [abi.scalar_word(s["i"] if "i" in s else s["f"], "i" in s) for s in scalars] + [0] * (2 - len(scalars))
    return abi.TASK_DESC.pack(
        variant,
        task_type,
        0,
        0,
        contract.NO_EVENT,
        0,
        0,
        0,
        task_id,
        0,
        *grid_idx,
        0,
        *words,
        *inputs,
        *[0] * (contract.MAX_INPUTS - len(inputs)),
        *outputs,
        *[0] * (contract.MAX_OUTPUTS - len(outputs)),
    )


class HostModule:
    """A loaded host module."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            lib = self._lib = C.CDLL(str(path), mode=C.RTLD_LOCAL)
        except OSError as e:
            raise BuildError(f"cannot load the host module {path}: {e}") from e
        with entry_points():
            lib.mpk_emu_run_task.argtypes = [
                C.c_uint32,
                C.c_char_p,
                C.c_void_p,
                C.c_void_p,
                C.c_uint32,
                C.POINTER(Options),
                C.c_char_p,
                C.c_int,
                C.c_void_p,
            ]
            lib.mpk_emu_prepare_next_batch.argtypes = [
                C.c_void_p,
                C.c_void_p,
                C.c_void_p,
                C.c_void_p,
                C.c_uint32,
                C.c_int,
                C.POINTER(C.c_int),
                C.c_char_p,
                C.c_int,
            ]
            lib.mpk_emu_guarded_alloc.restype = C.c_void_p
            lib.mpk_emu_guarded_alloc.argtypes = [C.c_size_t]
            lib.mpk_emu_guarded_free.argtypes = [C.c_void_p, C.c_size_t]
            lib.mpk_emu_switch_ns.restype = C.c_double
            lib.mpk_emu_release_stacks.restype = None
            lib.mpk_dynamic_smem_bytes.restype = C.c_uint
            lib.mpk_emu_atomic_words.argtypes = [C.c_void_p, C.c_void_p, C.c_int]
            buf = C.create_string_buffer(1024)
            lib.mpk_emu_layout(buf, len(buf))
            abi.check_layout(buf.value.decode(), str(path))
            self.worker_threads = lib.mpk_worker_threads()
            self.target_sm = lib.mpk_target_sm()
            self.dynamic_smem_bytes = lib.mpk_dynamic_smem_bytes()
        self.race_check = bool(lib.mpk_emu_race_check_built())
        self._report = C.create_string_buffer(REPORT_BYTES)
        self._error = (C.c_longlong * 2)()

    def run_task(
        self,
        variant: int,
        desc: bytes,
        meta: abi.MpkMeta,
        batch: abi.MpkBatchConfig,
        *,
        dynamic_smem: int | None = None,
        order: str = "in_order",
        seed: int = 0,
        race_check: bool | None = None,
        num_threads: int = 0,
        memory: Memory | None = None,
        check_slices: bool = False,
        time_limit_s: int = 0,
        runtime: tuple[int, int, int] = (1, 0, 0),
    ) -> TaskRun:
        """Run the task ``desc`` with dispatcher case ``variant``. ``order``: which runnable thread goes
        first between synchronization points ("in_order", "reversed", "shuffled" by ``seed``);
        ``race_check`` defaults to what the module was built with; ``memory`` names the tensors, and
        with ``check_slices`` (race checking) bounds every global access by its slices; ``time_limit_s``
        > 0 stops a task still running after that many seconds and reports it as a hang; ``runtime``: the
        Runtime's launch id, iteration and absolute iteration."""
        if order not in ORDERS:
            raise ConfigError(f"order={order!r}; use one of {', '.join(ORDERS)}")
        if len(desc) != abi.TASK_DESC.size:
            raise ConfigError(f"a task descriptor is {abi.TASK_DESC.size} bytes, got {len(desc)}")
        check = self.race_check if race_check is None else race_check
        opts = Options(
            order=ORDERS[order], race_check=int(check), seed=seed, num_threads=num_threads, time_limit_s=max(0, int(time_limit_s))
        )
        opts.launch_id, opts.iteration, opts.absolute_iteration = runtime
        if memory is not None:
            memory.fill(opts, check_slices)
        smem = self.dynamic_smem_bytes if dynamic_smem is None else dynamic_smem
        status = self._lib.mpk_emu_run_task(
            variant, desc, C.byref(meta), C.byref(batch), smem, C.byref(opts), self._report, REPORT_BYTES, self._error
        )
        report = tidy_paths(self._report.value.decode(errors="replace")) if status else ""
        return TaskRun(STATUS[status], report, (self._error[0], self._error[1]) if status == 1 else None)

    def atomic_words(self) -> list[tuple[int, int]]:
        """The (address, bytes) of every word the last ``run_task`` wrote with an atomic (the
        shim's atomics and the primitives' atomic stores and reductions), in no order."""
        n = self._lib.mpk_emu_atomic_words(None, None, 0)
        addrs, sizes = (C.c_uint64 * n)(), (C.c_uint32 * n)()
        self._lib.mpk_emu_atomic_words(addrs, sizes, n)
        return list(zip(addrs, sizes))

    def prepare_next_batch(
        self,
        meta: abi.MpkMeta,
        batch: abi.MpkBatchConfig,
        state: abi.MpkBatchState,
        status: abi.MpkStatus,
        iteration: int,
        init: bool,
    ) -> tuple[int, TaskRun]:
        """The device's prepare_next_batch (runtime/prepare_next_batch.cuh) on host memory, run by a
        warp of fibers as the controller runs it; ``init`` first resets the batching state. Returns
        its result (1: a batch, 0: stop, -1: error, see ``status``) and how the run went."""
        result = C.c_int(0)
        st = self._lib.mpk_emu_prepare_next_batch(
            C.byref(meta),
            C.byref(batch),
            C.byref(state),
            C.byref(status),
            iteration,
            int(init),
            C.byref(result),
            self._report,
            REPORT_BYTES,
        )
        report = tidy_paths(self._report.value.decode(errors="replace")) if st else ""
        return result.value, TaskRun(STATUS[st], report)

    def guarded_alloc(self, nbytes: int) -> int:
        """Host memory for ``nbytes`` whose (16-byte aligned) end lies against an inaccessible page,
        with one before it too: an access past it faults and is reported (faults.cpp)."""
        p = self._lib.mpk_emu_guarded_alloc(max(1, nbytes))
        if not p:
            raise MemoryError(f"host emulation: could not map {nbytes} bytes of guarded memory")
        return p

    def guarded_free(self, address: int, nbytes: int) -> None:
        self._lib.mpk_emu_guarded_free(address, max(1, nbytes))

    def device_variables(self) -> list[tuple[str, int, int]]:
        """(name, address, bytes) of the module's ``__device__`` variables (run/device_variables.py)."""
        return variable_memory(self.path, self._lib)

    def release_stacks(self) -> None:
        """Unmap this thread's fiber stacks of this module (the next task maps them again): a
        module's stacks are 2 n + 1 memory mappings, and a process that kept those of every module it
        ran would reach vm.max_map_count (csrc/emulation/block_runner.h)."""
        self._lib.mpk_emu_release_stacks()

    def switch_ns(self, n: int = 100_000) -> float:
        """One fiber switch, in ns (the mean over n round trips)."""
        return self._lib.mpk_emu_switch_ns(n)


_loaded: dict[Path, HostModule] = {}


def load_module(path: Path) -> HostModule:
    """The host module at ``path``, loaded once per process."""
    if path not in _loaded:
        _loaded[path] = HostModule(path)
    return _loaded[path]


def load(source: str, arch: str, name: str, race_check: bool = False, include_dirs: Sequence[Path] = ()) -> HostModule:
    """Build (or find in the cache) and load the host module of ``source``."""
    return load_module(build_host_module(source, arch, name, race_check, include_dirs).path)
