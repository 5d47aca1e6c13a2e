"""The transport between the ranks of one host: CUDA peer memory.

Each rank (one process, one GPU) allocates a heap of device memory through the module's C ABI
(csrc/runtime/peer_memory.cuh: cudaMalloc), exports it as a CUDA IPC handle, sends the handle to
every other rank (bootstrap.py: MPI), maps every peer's heap into its own address space
(cudaIpcOpenMemHandle, which enables peer access), and gives the kernel every heap's address
(MpkComm). Every rank builds the same graph, so the heaps have the same layout (``plan``): the
communication tensors, then the signal words (one per task and rank). Tasks then store into a
peer's heap directly, over NVLink, and signal with system-scope releases (csrc/runtime/comm.cuh).

This module is the whole transport (allocation, handle exchange, peer mapping, release): another
one, e.g. NVSHMEM's symmetric heap for ranks on several hosts, would replace it and nothing else.
"""

from __future__ import annotations

import ctypes as C
import hashlib
import json
import socket
from dataclasses import dataclass

import torch

from ..codegen import abi
from ..errors import ConfigError, KernelError, RankError
from ..graph.compiled import CompiledGraph
from .bootstrap import MpiWorld
from .launcher import Module
from .rank_match import matching_parts

ALIGN = 256  # bytes: every tensor of the heap starts on a 256-byte boundary
_ERR = 512


@dataclass(frozen=True)
class HeapLayout:
    """Where everything lies in a rank's heap (the same on every rank)."""

    offsets: dict[str, int]  # communication tensor -> byte offset
    signals: int  # byte offset of the signal words: [num_tasks * world_size] uint64
    num_signals: int
    nbytes: int


def plan(tensors: list[tuple[str, int]], num_tasks: int, world_size: int) -> HeapLayout:
    """The heap of ``tensors`` ((name, bytes) in graph order) and the signals of ``num_tasks`` tasks."""
    offsets, at = {}, 0
    for name, nbytes in tensors:
        offsets[name] = at
        at += -(-nbytes // ALIGN) * ALIGN
    num_signals = num_tasks * world_size
    return HeapLayout(offsets, at, num_signals, at + 8 * max(1, num_signals))


def fingerprint(graph: CompiledGraph, layout: HeapLayout) -> dict[str, str]:
    """Digests of what must be equal on every rank: the layers, the schedule and the heap."""

    def digest(value: object) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    parts = matching_parts(graph)
    return {
        "layers": digest([parts["tensors"], parts["layers"]]),
        "schedule": digest([parts["tasks"], parts["schedule"]]),
        "heap": digest([layout.offsets, layout.signals, layout.nbytes]),
    }


def _bind(lib: C.CDLL) -> None:
    lib.mpk_comm_alloc.argtypes = [C.c_int, C.c_ulonglong, C.POINTER(C.c_void_p), C.c_void_p, C.c_char_p, C.c_int]
    lib.mpk_comm_open.argtypes = [C.c_int, C.c_void_p, C.POINTER(C.c_void_p), C.c_char_p, C.c_int]
    lib.mpk_comm_release.argtypes = [C.c_int, C.c_void_p, C.c_int, C.c_char_p, C.c_int]


class _Memory:
    """Raw device memory as torch sees it (``__cuda_array_interface__``), without a copy."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class PeerHeap:
    """This rank's heap and its peers', mapped; ``views`` gives each communication tensor's memory."""

    def __init__(
        self,
        module: Module,
        device: torch.device,
        layout: HeapLayout,
        rank: int,
        world_size: int,
        world: MpiWorld | None,
        fingerprint: dict[str, str],
        timeout: float,
    ):
        self.lib, self.device, self.layout = module.lib, device, layout
        self.rank, self.world_size, self.world, self.timeout = rank, world_size, world, timeout
        _bind(self.lib)
        handle = C.create_string_buffer(64) if world_size > 1 else None
        ptr = C.c_void_p()
        self._call("mpk_comm_alloc", device.index, layout.nbytes, C.byref(ptr), handle)
        self.ptr: int = ptr.value or 0
        self._opened: list[int] = []
        try:
            peers = self._map_peers(handle, fingerprint) if handle is not None else [self.ptr]
        except BaseException:
            self.close(synchronize=False)
            raise
        self.peers = torch.tensor(peers, dtype=torch.int64).to(device)
        self.memory = torch.as_tensor(_Memory(self.ptr, layout.nbytes), device=device)
        self.signals = self.memory[layout.signals : layout.signals + 8 * layout.num_signals].view(torch.int64)
        torch.cuda.synchronize(device)

    def view(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The memory of communication tensor ``name`` in this rank's heap."""
        at = self.layout.offsets[name]
        nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        return self.memory[at : at + nbytes].view(dtype).view(shape)

    def struct(self) -> abi.MpkComm:
        return abi.MpkComm(
            heap=self.ptr,
            peers=self.peers.data_ptr(),
            signals=self.ptr + self.layout.signals,
            rank=self.rank,
            world_size=self.world_size,
        )

    def last_signal(self, task: int, sender: int) -> int:
        """The epoch (absolute iteration + 1) of the last signal ``sender`` gave ``task``; 0: none yet."""
        return int(self.signals[task * self.world_size + sender].item())

    def _map_peers(self, handle: C.Array, fingerprint: dict[str, str]) -> list[int]:
        assert self.world is not None
        props = torch.cuda.get_device_properties(self.device)
        mine = {"handle": handle.raw, "host": socket.gethostname(), "gpu": str(getattr(props, "uuid", self.device.index))}
        infos = self.world.exchange("the communication heaps (compile)", {**mine, "fingerprint": fingerprint}, self.timeout)
        for q, info in enumerate(infos):
            if info["host"] != mine["host"]:
                raise ConfigError(
                    f"rank {q} runs on host {info['host']!r} and rank {self.rank} on {mine['host']!r}: CUDA peer memory "
                    f"connects the GPUs of one host only"
                )
            if q != self.rank and info["gpu"] == mine["gpu"]:
                raise ConfigError(
                    f"ranks {min(q, self.rank)} and {max(q, self.rank)} both run on GPU {mine['gpu']}: give every rank its "
                    f"own GPU (torch.cuda.set_device(local_rank) before building the kernel)"
                )
            differ = [k for k, v in fingerprint.items() if info["fingerprint"].get(k) != v]
            if differ:
                raise RankError(
                    f"rank {q} built a different {' and '.join(differ)} than rank {self.rank}: every rank must build the "
                    f"same layers, with the same shapes, names, grids and num_workers",
                    [q],
                )
        peers = []
        for q, info in enumerate(infos):
            if q == self.rank:
                peers.append(self.ptr)
                continue
            ptr = C.c_void_p()
            self._call("mpk_comm_open", self.device.index, C.create_string_buffer(info["handle"], 64), C.byref(ptr))
            self._opened.append(ptr.value or 0)
            peers.append(ptr.value or 0)
        return peers

    def close(self, synchronize: bool = True) -> None:
        """Unmap the peers' heaps once every rank's kernel is done, and free this rank's once every
        rank has unmapped it (bounded waits: a rank that does not come is one that failed, and no longer
        uses the heaps). Without ``synchronize`` (a failed compile) it only tells the others."""
        self._meet("the kernels are done (finalize)", synchronize)
        for p in self._opened:
            self._call("mpk_comm_release", self.device.index, p, 0)
        self._opened = []
        self._meet("the heaps are unmapped (finalize)", synchronize)
        if self.ptr:
            self._call("mpk_comm_release", self.device.index, self.ptr, 1)
            self.ptr = 0

    def _meet(self, purpose: str, wait: bool) -> None:
        if self.world is not None:
            try:
                self.world.exchange(purpose, None, self.timeout if wait else 0, abandon=False)
            except RankError:
                pass

    def _call(self, fn: str, *args: object) -> None:
        err = C.create_string_buffer(_ERR)
        if getattr(self.lib, fn)(*args, err, _ERR) != 0:
            raise KernelError(f"rank {self.rank}: {err.value.decode()}")
