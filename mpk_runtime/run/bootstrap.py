"""The ranks' out-of-band channel: MPI (mpi4py) launches the processes and carries the few messages
they exchange on the host (communication heap handles at compile(), the test harness's outcomes).

Under ``mpirun`` every rank imports mpi4py; nothing else is needed. Messages are point-to-point and
keyed, never MPI collectives: a rank that hangs makes its peers' exchange time out with a RankError
naming it, and a rank that fails says so (``fail``), which ends its peers' waits at once, instead of
leaving a collective that can never complete. The key of an exchange is the channel's context (set
by the harness per test item, so that a message left over from an item a rank abandoned is never
taken for one of the next), its purpose, and how many exchanges of that purpose the context has had.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import time
from typing import Any

from ..errors import ConfigError, RankError

# (world size, rank, local rank) variables of the launchers we know: Open MPI, MPICH / Intel MPI (PMI).
_ENV = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"),
)
_TAG = 0x4D50  # "MP": every message of the channel
_POLL_S = 0.0005


def launched() -> tuple[int, int, int] | None:
    """(world size, rank, local rank) when this process was started by mpirun with mpi4py importable,
    else None. Reads the launcher's environment only: MPI is not initialised."""
    for size, rank, local in _ENV:
        if size in os.environ and rank in os.environ:
            if importlib.util.find_spec("mpi4py") is None:
                return None
            r = int(os.environ[rank])
            return int(os.environ[size]), r, int(os.environ.get(local, r))
    return None


class MpiWorld:
    """COMM_WORLD as a keyed message channel with timeouts (see the module docstring)."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self.context = ""
        self._counts: dict[str, int] = {}
        self._mailbox: dict[tuple[int, str], Any] = {}
        self._sending: list[Any] = []

    def set_context(self, context: str) -> None:
        """Start a new context (a test item): exchanges are counted from 0 again."""
        self.context, self._counts = context, {}

    def exchange(self, purpose: str, payload: Any, timeout: float, abandon: bool = True) -> list[Any]:
        """Every rank's ``payload`` for this exchange, by rank. RankError naming the ranks whose
        payload did not arrive within ``timeout`` seconds (0: send, and take only what is there), or,
        with ``abandon``, as soon as a rank it waits for has said it failed in this context."""
        n = self._counts.get(purpose, 0)
        self._counts[purpose] = n + 1
        key = f"{self.context}|{purpose}#{n}"
        self._send(key, payload)
        want = [q for q in range(self.size) if q != self.rank]
        deadline = time.monotonic() + timeout
        while any((q, key) not in self._mailbox for q in want):
            missing = [q for q in want if (q, key) not in self._mailbox]
            failed = {q: self._mailbox[(q, self._failed_key)] for q in missing if (q, self._failed_key) in self._mailbox}
            if abandon and failed:
                raise RankError(
                    f"rank {self.rank}: {'; '.join(f'rank {q} failed: {t}' for q, t in failed.items())}", list(failed), failed
                )
            if not self._receive() and time.monotonic() >= deadline:
                raise RankError(
                    f"rank {self.rank}: rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
                    f"reach {purpose!r} within {timeout:g} s (failed or stopped responding)",
                    missing,
                )
        self._sending = [r for r in self._sending if not r.Test()]
        return [payload if q == self.rank else self._mailbox.pop((q, key)) for q in range(self.size)]

    def fail(self, text: str) -> None:
        """Tell every other rank that this one failed in the current context (it ends their waits)."""
        self._send(self._failed_key, text)

    @property
    def _failed_key(self) -> str:
        return f"{self.context}|failed"

    def _send(self, key: str, payload: Any) -> None:
        data = pickle.dumps((key, payload))
        for q in range(self.size):
            if q != self.rank:
                self._sending.append(self.comm.isend(data, dest=q, tag=_TAG))

    def _receive(self) -> bool:
        status = self._mpi.Status()
        if not self.comm.iprobe(source=self._mpi.ANY_SOURCE, tag=_TAG, status=status):
            time.sleep(_POLL_S)
            return False
        key, payload = pickle.loads(self.comm.recv(source=status.Get_source(), tag=_TAG))
        self._mailbox[(status.Get_source(), key)] = payload
        return True

    def abort(self, code: int = 1) -> None:
        """End every rank of the job (mpirun kills them): for a rank that stopped responding."""
        self.comm.Abort(code)


_world: MpiWorld | None = None


def world() -> MpiWorld | None:
    """This process's channel to the other ranks (MPI initialised on first use), or None when it was
    not started by mpirun (or by an mpirun of one process)."""
    global _world
    env = launched()
    if env is None or env[0] < 2:
        return None
    if _world is None:
        _world = MpiWorld()
    return _world


def require_world(world_size: int, rank: int) -> MpiWorld:
    """The channel for a kernel of ``world_size`` ranks, checked against the MPI job."""
    w = world()
    if w is None:
        raise ConfigError(
            f"world_size={world_size} on the GPU needs one process per rank started by MPI, with mpi4py installed: "
            f"mpirun -n {world_size} python ... (pip install mpi4py); this process was not started so"
        )
    if (w.size, w.rank) != (world_size, rank):
        raise ConfigError(
            f"world_size={world_size}, mpi_rank={rank}, but this process is rank {w.rank} of an MPI job of {w.size}; "
            f"leave both at their defaults (they come from MPI.COMM_WORLD)"
        )
    return w
