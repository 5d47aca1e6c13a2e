"""The build lock of one cache key: a ``filelock.FileLock`` on ``<entry>.lock``, held by the one
process that builds the entry. The holder writes who it is (pid, host, since) into
``<entry>.lock.holder``, so that the others can say whom they wait for.

Waiting is bounded. A holder that is stopped (SIGSTOP, a debugger, a suspended job: state T in
/proc on this host) or that holds the lock longer than ``MPK_CACHE_LOCK_TIMEOUT`` seconds (default
300) is not waited for any longer: the waiter says so in one line and builds the entry itself, in
its own temporary directory, and publishes it with an atomic rename. That is safe because the
cache is content-addressed (any build of a key is as good as any other, and the first rename
wins); the cost is one duplicate build. Failing instead would leave every process stuck behind a
job someone forgot in the background, until a person finds and kills it. A holder that dies
releases the lock with its file descriptor, so it is never waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import BuildError
from .cache_fs import fs_error, pid_namespace

DEFAULT_TIMEOUT = 300.0  # seconds: longer than any build of ours
STOPPED_GRACE = 2.0  # seconds a holder must be seen stopped before it is not waited for
ANNOUNCE_AFTER = 10.0  # seconds of waiting after which one line says for whom
POLL = 0.1  # seconds between looks at the holder while waiting


@dataclass(frozen=True)
class Holder:
    pid: int | None
    host: str | None
    since: float | None
    pid_namespace: str | None = None  # pids of other namespaces (containers) are not ours to look up

    def describe(self) -> str:
        if self.pid is None:
            return "an unknown process"
        where = "" if self.host in (None, socket.gethostname()) else f" on {self.host}"
        age = f" for {time.time() - self.since:.0f} s" if self.since else ""
        return f"pid {self.pid}{where}{age}"


def lock_timeout() -> float:
    text = os.environ.get("MPK_CACHE_LOCK_TIMEOUT", "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise BuildError(f"MPK_CACHE_LOCK_TIMEOUT={text!r} must be a number of seconds >= 0 (default {DEFAULT_TIMEOUT:g})")
    return value


def read_holder(path: Path) -> Holder:
    try:
        data = json.loads(path.read_text() or "{}")
        return Holder(int(data["pid"]), str(data["host"]), float(data["since"]), data.get("pid_namespace"))
    except (OSError, ValueError, KeyError, TypeError):
        return Holder(None, None, None)


def is_stopped(holder: Holder) -> bool:
    """Whether the holder is a stopped process of this host (state T or t in /proc/PID/stat)."""
    if holder.pid is None or holder.host != socket.gethostname() or holder.pid_namespace != pid_namespace():
        return False
    try:
        stat = Path(f"/proc/{holder.pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] in ("T", "t")


@dataclass
class Outcome:
    held: bool  # False: the lock was not taken (its holder is stopped or too slow)
    note: str | None = None  # what the wait was, in one line, when it was not an ordinary one


@contextlib.contextmanager
def build_lock(path: Path, timeout: float, announce: Callable[[str], object]) -> Iterator[Outcome]:
    """Hold the lock at ``path`` for the ``with`` body, or give up on a stopped or slow holder
    (``Outcome.held`` False, ``note`` says why). ``announce(line)`` is told once if the wait is long."""
    lock = FileLock(str(path), is_singleton=False)
    holder_file = path.with_name(path.name + ".holder")
    outcome = _acquire(lock, path, holder_file, timeout, announce)
    if outcome.held:
        _write_holder(holder_file)
    try:
        yield outcome
    finally:
        if outcome.held:
            _forget_holder(holder_file)  # before the release: the next holder writes its own after acquiring
            lock.release()


@contextlib.contextmanager
def free_locks(paths: list[Path]) -> Iterator[list[Path]]:
    """The locks of ``paths`` that no process holds now, taken at once (no waiting) and held for the
    ``with`` body: a batch build takes the entries nobody else is building and leaves the others to
    their holders."""
    with contextlib.ExitStack() as stack:
        held = []
        for path in paths:
            lock = FileLock(str(path), is_singleton=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            except OSError as e:
                raise fs_error(e, "open the build lock", path) from None
            holder_file = path.with_name(path.name + ".holder")
            _write_holder(holder_file)
            stack.callback(lock.release)
            stack.callback(_forget_holder, holder_file)  # runs first: before the release, as in build_lock
            held.append(path)
        yield held


def _forget_holder(holder_file: Path) -> None:
    with contextlib.suppress(OSError):
        holder_file.unlink()


def _acquire(lock: FileLock, path: Path, holder_file: Path, timeout: float, announce: Callable[[str], object]) -> Outcome:
    start = time.monotonic()
    stopped_since: float | None = None
    announced = False
    while True:
        try:
            lock.acquire(timeout=POLL, poll_interval=0.02)
            return Outcome(True)
        except Timeout:
            pass
        except OSError as e:
            raise fs_error(e, "open the build lock", path) from None
        now = time.monotonic()
        holder = read_holder(holder_file)
        if is_stopped(holder):
            stopped_since = stopped_since if stopped_since is not None else now
            if now - stopped_since >= STOPPED_GRACE:
                return Outcome(False, f"{path.name} is held by {holder.describe()}, which is stopped (SIGSTOP?)")
        else:
            stopped_since = None
        if now - start >= timeout:
            return Outcome(
                False, f"{path.name} is held by {holder.describe()}, still building after {timeout:g} s (MPK_CACHE_LOCK_TIMEOUT)"
            )
        if not announced and now - start >= ANNOUNCE_AFTER:
            announce(f"mpk build cache: waiting for {path.name}, held by {holder.describe()}")
            announced = True


def _write_holder(holder_file: Path) -> None:
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "pid_namespace": pid_namespace()}
    with contextlib.suppress(OSError):  # who holds it is for messages only
        holder_file.write_text(json.dumps(me))
