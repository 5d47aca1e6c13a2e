"""The build cache's file system: what makes an entry sound, temporary directories (named for
the process that builds in them, so that leftovers of a killed build can be told from a live
one's), the permissions of a cache shared by a group, and OSErrors turned into BuildErrors that
name the path and the fix."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

from ..errors import BuildError

MODULE = "module.so"
CUBIN = "module.cubin"  # a device-only build (nvcc.py)
SOURCE = "source.cu"
RECORD = "build.json"
RECORD_FIELDS = {"key": str, "arch": str, "module_sha256": str}
STALE_AGE = 24 * 3600.0  # seconds after which any leftover temporary directory is removed
SHARED_CACHE = 'README, "A shared build cache"'


def fs_error(e: OSError, action: str, path: Path | str) -> BuildError:
    """A BuildError for an OSError met while using the cache: the path, the cause and the fix."""
    code = e.errno or 0
    if code in (errno.EACCES, errno.EPERM):
        fix = (
            f"no permission: the cache (or this entry) may belong to another user, with private modes; set "
            f"MPK_CACHE_DIR to a directory of your own, or share the cache as {SHARED_CACHE} says"
        )
    elif code in (errno.ENOSPC, errno.EDQUOT):
        fix = "the disk (or your quota) is full: free space, or set MPK_CACHE_DIR to a directory on another disk"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        fix = "a file is where the cache needs a directory: remove it, or set MPK_CACHE_DIR to another directory"
    elif code == errno.EROFS:
        fix = "the file system is read-only: set MPK_CACHE_DIR to a writable directory"
    else:
        fix = "set MPK_CACHE_DIR to another directory if the problem stays"
    name = errno.errorcode.get(code, "")
    return BuildError(f"build cache: cannot {action} {path}: {e.strerror or e}{f' ({name})' if name else ''}; {fix}")


@contextlib.contextmanager
def fs_errors(action: str, path: Path | str):
    try:
        yield
    except OSError as e:
        raise fs_error(e, action, getattr(e, "filename", None) or path) from None


# A file's digest, remembered for this process while its identity, size and times stay the same: a
# module is checked at every load, and hashing its 5 MB took 13 s of the default suite's test time.
_digests: dict[tuple[str, int, int, int, int, int], str] = {}
# A file changed within this time of its hashing is hashed again at every check, as git does for a
# "racily clean" file: a write in the same tick of the kernel's coarse clock leaves its times as they
# were. A later write gives it a ctime of its own, which nothing can set back.
RACY_NS = 1_000_000_000


def sha256(path: Path) -> str:
    st = os.stat(path)
    key = (os.fspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    digest = _digests.get(key)
    if digest is None:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS:
            _digests[key] = digest
    return digest


def entry_problem(entry: Path, key: str, filename: str = MODULE) -> str | None:
    """What is wrong with cache entry ``entry`` of ``key``, in a few words; None if it is sound;
    "missing" if there is none. ``filename`` is the built file the record's sha256 is of. BuildError
    when it cannot be read (that is no damage)."""
    try:
        st = os.lstat(entry)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        raise fs_error(e, "look at", entry) from None
    if stat.S_ISLNK(st.st_mode):
        return f"it is a symbolic link to {os.readlink(entry)}{'' if entry.exists() else ' (dangling)'}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is a file, not a directory"
    try:
        text = (entry / RECORD).read_text()
    except FileNotFoundError:
        return f"it has no {RECORD} (a build that was interrupted?)"
    except (OSError, UnicodeDecodeError) as e:
        if isinstance(e, PermissionError):
            raise fs_error(e, "read", entry / RECORD) from None
        return f"{RECORD} cannot be read ({e})"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as e:
        return f"{RECORD} is not valid JSON ({e})"
    if not isinstance(record, dict):
        return f"{RECORD} holds {json.dumps(record)[:20]}, not an object"
    for field, kind in RECORD_FIELDS.items():
        if not isinstance(record.get(field), kind):
            got = "nothing" if field not in record else f"{type(record[field]).__name__} {record[field]!r:.40}"
            return f"{RECORD}'s {field} is {got}, not a {kind.__name__}"
    if record["key"] != key:
        return f"{RECORD} is for key {record['key'][:16]}..., not {key[:16]}..."
    module = entry / filename
    try:
        if not stat.S_ISREG(os.lstat(module).st_mode):
            return f"{filename} is not a regular file"
        if sha256(module) != record["module_sha256"]:
            return f"{filename} does not match the sha256 in {RECORD} (changed or truncated)"
    except FileNotFoundError:
        return f"it has no {filename}"
    except OSError as e:
        raise fs_error(e, "read", module) from None
    return None


def discard(path: Path, modules: Path) -> None:
    """Remove a damaged entry: out of sight first (a rename), then deleted."""
    with fs_errors("remove the damaged entry", path):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
            return
        trash = Path(tempfile.mkdtemp(prefix=f".trash-{owner_tag()}-", dir=modules))
        os.rename(path, trash / "entry")
    shutil.rmtree(trash, ignore_errors=True)


def pid_namespace() -> str:
    """This process's pid namespace ("0" where it cannot be told)."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "0"


def owner_tag() -> str:
    """``<host>.<pid namespace>-<pid>``: whose temporary directory this is (the namespace tells the
    processes of containers that share a host name and a cache apart)."""
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:32] or "host"
    return f"{host}.{pid_namespace()}-{os.getpid()}"


def link_or_copy(src: Path | str, dst: Path | str) -> None:
    """``dst`` as a hard link to ``src`` (one copy of the bytes on disk), or a copy where the file
    system has no hard links (with its mode, as a link would have it)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def temp_dir(modules: Path, entry_name: str) -> Path:
    with fs_errors("create a temporary directory in", modules):
        return Path(tempfile.mkdtemp(prefix=f".tmp-{owner_tag()}-{entry_name}-", dir=modules))


def clean_leftovers(modules: Path) -> list[str]:
    """Remove the temporary directories of builds that were killed (their process is gone) and any
    older than a day; leave those of live processes. Returns the names removed."""
    here = owner_tag().rsplit("-", 1)[0]
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(modules) if n.startswith((".tmp-", ".trash-"))]
    except OSError:
        return removed
    for name in names:  # .tmp-<host>.<pid namespace>-<pid>-..., see owner_tag
        path = modules / name
        parts = name.split("-")
        pid = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        try:
            age = time.time() - os.lstat(path).st_mtime
        except OSError:
            continue
        dead = parts[1] == here and pid is not None and not _alive(pid)
        if dead or age > STALE_AGE:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)  # no other way to read it; set back at once
    os.umask(old)
    return old


def share(directory: Path) -> None:
    """Give a finished build the modes the umask allows (mkdtemp made it private), so that a cache
    shared by a group (umask 002, a setgid cache directory) is readable and usable by all of it."""
    mask = umask()
    with fs_errors("set the permissions of", directory):
        parent_setgid = os.stat(directory.parent).st_mode & stat.S_ISGID
        os.chmod(directory, (0o777 & ~mask) | parent_setgid)
        for child in directory.iterdir():
            os.chmod(child, (0o777 if child.name == MODULE else 0o666) & ~mask)
