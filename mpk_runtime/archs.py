"""The one table of build targets: every fact about an arch that Python or the build needs.

The plugin's ``--arch`` choices, the task registry, the nvcc flags, the worker thread count the C++
side is compiled with (``-DMPK_WORKER_THREADS``), and the GPU checks all read this table; nothing
else lists archs. Torch-free, so that the plugin can import it before CUDA starts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    name: str  # "sm90": what users and the plugin say
    cc: int  # 90: PersistentKernel(target_cc=...)
    gencode: str  # nvcc -gencode value
    worker_threads: int  # threads of every worker CTA (block_dim[0])
    native: tuple[tuple[int, int], ...]  # device capabilities that run it natively (empty: any >= 8.0, via PTX)
    emulated: bool = True  # the CPU emulator can run a module built for it

    @property
    def defines(self) -> list[str]:
        """What csrc/runtime/config.cuh needs of the build, on the device and on the host alike."""
        return [f"-DMPK_TARGET_SM={self.cc}", f"-DMPK_WORKER_THREADS={self.worker_threads}"]

    @property
    def nvcc_flags(self) -> list[str]:
        return [f"-gencode={self.gencode}", *self.defines]

    @property
    def cubin_flags(self) -> list[str]:
        """nvcc flags of a device-only build (``-cubin``), which takes one code instance: the SASS of
        ``gencode`` alone (sm80's PTX matters only to a module that runs on a newer GPU)."""
        virtual, codes = self.gencode.split(",code=")
        sass = next(c for c in codes.strip("[]").split(",") if c.startswith("sm_"))
        return [f"-gencode={virtual},code={sass}", *self.defines]

    @property
    def host_flags(self) -> list[str]:
        """g++ flags of a host-emulation build of this arch's bodies (mpk_runtime/build/host.py)."""
        return ["-DMPK_HOST_EMULATION", *self.defines]


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        # PTX + SASS for compute_80: Ampere-path kernels also run on newer GPUs through the PTX JIT.
        Arch("sm80", 80, "arch=compute_80,code=[compute_80,sm_80]", 128, ()),
        Arch("sm90", 90, "arch=compute_90a,code=sm_90a", 256, ((9, 0),)),
        Arch("sm100", 100, "arch=compute_100a,code=sm_100a", 256, ((10, 0),)),
    )
}
NAMES: tuple[str, ...] = tuple(ARCHS)
TARGET_CCS: tuple[int, ...] = tuple(a.cc for a in ARCHS.values())
MIN_CAPABILITY = (8, 0)
TARGET_CCS_TEXT = ", ".join(map(str, TARGET_CCS[:-1])) + f" or {TARGET_CCS[-1]}"  # "80, 90 or 100", for messages


def by_name(name: str) -> Arch:
    try:
        return ARCHS[name]
    except KeyError:
        raise ValueError(f"arch {name!r} is not a build target; use one of {', '.join(NAMES)}") from None


def by_cc(cc: int) -> Arch:
    for a in ARCHS.values():
        if a.cc == cc:
            return a
    raise ValueError(f"target_cc={cc!r} is not a build target; use one of {TARGET_CCS}")


def native_for(capability: tuple[int, int]) -> Arch:
    """The arch whose code runs natively on a device of ``capability``: an arch-specific target
    where one matches exactly, else the portable sm80 path (PTX, JIT-compiled by the driver)."""
    for a in ARCHS.values():
        if capability in a.native:
            return a
    return ARCHS["sm80"]
