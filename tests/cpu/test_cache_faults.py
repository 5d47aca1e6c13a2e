"""The build cache under faults: damaged entries of every detectable kind are rebuilt with one line
saying why, leftovers of killed builds are removed (a live build's are not), a stopped or slow
lock holder is built around, and file system problems are BuildErrors naming the path and the fix.
nvcc is replaced by a stand-in here: only the cache's bookkeeping is under test."""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpk_runtime.build import cache as build
from mpk_runtime.build import cache_fs, lock
from mpk_runtime.errors import BuildError

SOURCE = "// module: faulty\n// a source only these tests build\n"


def fake_compile(source_path: Path, out: Path, *_args, **_kwargs) -> None:
    out.write_bytes(b"not a real module: " + source_path.read_bytes())


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private cache (its modules directory) with nvcc replaced by ``fake_compile``."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "compile_to", fake_compile)
    monkeypatch.setattr(build, "_cleaned", set())
    return build.cache_root() / "modules"


def first_build(cache: Path) -> build.BuildResult:
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert not result.cached and result.note is None and build.entry_is_valid(result.entry)
    return result


def record_of(entry: Path) -> dict:
    return json.loads((entry / build.RECORD).read_text())


def write_record(value) -> callable:
    return lambda entry: (entry / build.RECORD).write_text(json.dumps(value))


def without(field: str):
    return lambda entry: write_record({k: v for k, v in record_of(entry).items() if k != field})(entry)


def retyped(field: str, value):
    return lambda entry: write_record({**record_of(entry), field: value})(entry)


def replace_with_file(entry: Path) -> None:
    for child in entry.iterdir():
        child.unlink()
    entry.rmdir()
    entry.write_text("not an entry")


def dangling_link(entry: Path) -> None:
    replace_with_file(entry)
    entry.unlink()
    entry.symlink_to(entry.parent / "nowhere")


DAMAGE = {
    "null": (write_record(None), "build.json holds null, not an object"),
    "list": (write_record([1, 2]), "build.json holds [1, 2], not an object"),
    "empty object": (write_record({}), "build.json's key is nothing, not a str"),
    "no module_sha256": (without("module_sha256"), "build.json's module_sha256 is nothing, not a str"),
    "int sha": (retyped("module_sha256", 5), "build.json's module_sha256 is int 5, not a str"),
    "other key": (retyped("key", "f" * 64), "build.json is for key ffffffffffffffff..., not "),
    "not json": (lambda e: (e / build.RECORD).write_text('{"key": '), "build.json is not valid JSON (Expecting value"),
    "no record": (lambda e: (e / build.RECORD).unlink(), "it has no build.json (a build that was interrupted?)"),
    "no module": (lambda e: (e / build.MODULE).unlink(), "it has no module.so"),
    "changed module": (lambda e: (e / build.MODULE).write_bytes(b"changed"), "module.so does not match the sha256"),
    "a file": (replace_with_file, "it is a file, not a directory"),
    "dangling link": (dangling_link, "it is a symbolic link to "),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_damaged_entry_is_rebuilt_with_one_line_saying_why(cache, caplog, damage):
    entry = first_build(cache).entry
    hurt, reason = DAMAGE[damage]
    hurt(entry)
    caplog.set_level(logging.WARNING, logger="mpk_runtime.build")
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert not result.cached and result.entry == entry and build.entry_is_valid(entry)
    assert result.note.startswith(f"rebuilt {entry.name}: {reason}")
    assert [r.getMessage() for r in caplog.records] == [f"mpk build cache: {result.note}"]
    assert build.build_module(SOURCE, "sm80", "faulty").cached  # healed for good
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []  # nothing left behind


CUBIN_DAMAGE = {
    "no cubin": (lambda e: (e / build.CUBIN).unlink(), "it has no module.cubin"),
    "changed cubin": (lambda e: (e / build.CUBIN).write_bytes(b"changed"), "module.cubin does not match the sha256"),
}


@pytest.mark.parametrize("damage", CUBIN_DAMAGE, ids=list(CUBIN_DAMAGE))
def test_a_damaged_device_only_entry_is_rebuilt(cache, damage):
    """A device-only build's file is module.cubin, in an entry of its own: its damage is seen as
    module.so's is, and the full build's entry of the same source is left alone."""
    full = first_build(cache)
    entry = build.build_module(SOURCE, "sm80", "faulty", device_only=True).entry
    assert entry.name.startswith("faulty-sm80-cubin-") and entry != full.entry
    hurt, reason = CUBIN_DAMAGE[damage]
    hurt(entry)
    result = build.build_module(SOURCE, "sm80", "faulty", device_only=True)
    assert not result.cached and result.entry == entry and result.note.startswith(f"rebuilt {entry.name}: {reason}")
    assert build.entry_is_valid(entry, filename=build.CUBIN) and build.build_module(SOURCE, "sm80", "faulty").cached


def test_a_module_s_digest_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    """Every load checks the module's sha256. A file changed in the last second (RACY_NS) is hashed at
    every check; an older one once a process, until a write gives it a new ctime (the same size
    here, so only its times tell)."""
    module = tmp_path / "module.so"
    module.write_bytes(b"a" * 64)
    hashed = []
    real = cache_fs.hashlib.sha256
    monkeypatch.setattr(cache_fs.hashlib, "sha256", lambda data: hashed.append(len(data)) or real(data))
    first = cache_fs.sha256(module)
    assert cache_fs.sha256(module) == first == real(b"a" * 64).hexdigest() and hashed == [64, 64]
    monkeypatch.setattr(cache_fs, "RACY_NS", -(10**12))  # as if its last write were long ago
    assert cache_fs.sha256(module) == first and cache_fs.sha256(module) == first and hashed == [64, 64, 64]
    before = os.stat(module).st_ctime_ns
    while os.stat(module).st_ctime_ns == before:  # a write in a later tick of the file system's clock
        time.sleep(0.01)
        module.write_bytes(b"b" * 64)
    assert cache_fs.sha256(module) == real(b"b" * 64).hexdigest() and hashed == [64, 64, 64, 64]


def test_a_link_to_a_sound_entry_is_not_trusted(cache, tmp_path):
    entry = first_build(cache).entry
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert result.note == f"rebuilt {entry.name}: it is a symbolic link to {elsewhere}" and not entry.is_symlink()


def test_entries_get_the_modes_the_umask_allows(cache):
    old = os.umask(0o002)  # a group-shared cache
    try:
        entry = build.build_module(SOURCE + "// group\n", "sm80", "faulty").entry
    finally:
        os.umask(old)
    assert entry.stat().st_mode & 0o777 == 0o775
    assert (entry / build.RECORD).stat().st_mode & 0o777 == 0o664
    assert (entry / build.MODULE).stat().st_mode & 0o777 == 0o775


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_builds_are_removed_and_live_ones_kept(cache):
    here = cache_fs.owner_tag().rsplit("-", 1)[0]
    killed = cache / f".tmp-{here}-{dead_pid()}-faulty-sm80-0123-abc"
    live = cache / f".tmp-{here}-{os.getpid()}-faulty-sm80-0123-def"
    elsewhere = cache / f".tmp-otherhost.1-{dead_pid()}-faulty-sm80-0123-ghi"  # another host: by age only
    old = cache / ".tmp-faulty-sm80-0123-jkl"  # an older version's name, two days old
    for d in (killed, live, elsewhere, old):
        (d / "sub").mkdir(parents=True)
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    build.build_module(SOURCE, "sm80", "faulty")
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".tmp")) == sorted([live.name, elsewhere.name])


def test_a_build_published_meanwhile_by_another_process_is_used(cache, monkeypatch):
    """The rename that publishes a build fails when another process published first (a holder of the
    lock that was waited out, say): the published entry is used and this build dropped."""
    entry = first_build(cache).entry
    saved = cache.parent / "saved"
    entry.rename(saved)

    def racing_compile(source_path: Path, out: Path, *a, **k) -> None:
        fake_compile(source_path, out)
        saved.rename(entry)  # the other process's publication lands during our build

    monkeypatch.setattr(build, "compile_to", racing_compile)
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert result.cached and build.entry_is_valid(entry)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []


HOLDER = """
import os, signal, sys, time
from pathlib import Path
from mpk_runtime.build.lock import build_lock
with build_lock(Path(sys.argv[1]), 0, print) as outcome:
    assert outcome.held
    print("held", flush=True)
    if sys.argv[2] == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)
"""


@pytest.fixture
def holder(cache):
    """Start a process that holds the build lock of SOURCE's entry: holder("run") or holder("stop")."""
    procs = []

    def start(how: str) -> subprocess.Popen:
        key = build.cache_key(SOURCE, "sm80")
        path = cache / f"faulty-sm80-{key[:16]}.lock"
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), how], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_stopped_lock_holder_is_built_around(cache, holder, monkeypatch, caplog):
    monkeypatch.setattr(lock, "STOPPED_GRACE", 0.2)
    proc = holder("stop")
    caplog.set_level(logging.WARNING, logger="mpk_runtime.build")
    start = time.monotonic()
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert time.monotonic() - start < 30
    assert not result.cached and build.entry_is_valid(result.entry)
    assert result.note.startswith(f"built without the lock: faulty-sm80-{result.key[:16]}.lock is held by pid {proc.pid} for ")
    assert result.note.endswith(", which is stopped (SIGSTOP?)")
    assert [r.getMessage() for r in caplog.records] == [f"mpk build cache: {result.note}"]


def test_a_slow_lock_holder_is_waited_for_a_bounded_time(cache, holder, monkeypatch, caplog):
    monkeypatch.setenv("MPK_CACHE_LOCK_TIMEOUT", "1")
    monkeypatch.setattr(lock, "ANNOUNCE_AFTER", 0.3)
    proc = holder("run")
    caplog.set_level(logging.WARNING, logger="mpk_runtime.build")
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert not result.cached and result.note.endswith(", still building after 1 s (MPK_CACHE_LOCK_TIMEOUT)")
    assert f"held by pid {proc.pid} for " in result.note
    waiting, built = [r.getMessage() for r in caplog.records]
    assert waiting.startswith(f"mpk build cache: waiting for faulty-sm80-{result.key[:16]}.lock, held by pid {proc.pid}")
    assert built == f"mpk build cache: {result.note}"


def test_lock_timeout_must_be_a_number(monkeypatch):
    monkeypatch.setenv("MPK_CACHE_LOCK_TIMEOUT", "soon")
    with pytest.raises(BuildError, match=r"MPK_CACHE_LOCK_TIMEOUT='soon' must be a number of seconds >= 0 \(default 300\)"):
        lock.lock_timeout()


def test_a_file_where_the_cache_directory_should_be(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(
        BuildError,
        match=rf"build cache: cannot create the cache directory {tmp_path}/file/modules: .* \((ENOTDIR|EEXIST)\); "
        r"a file is where the cache needs a directory: remove it, or set MPK_CACHE_DIR to another directory",
    ):
        build.cache_root()


def test_an_empty_mpk_cache_dir_means_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("MPK_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / "mpk"


@pytest.mark.parametrize("variable", ["MPK_CACHE_DIR", "XDG_CACHE_HOME"])
def test_a_relative_cache_directory_is_taken_from_where_the_process_runs(monkeypatch, tmp_path, variable):
    """The compilers run in the repository: a relative path had named a directory there, and every
    host build failed with "can't create relcache/modules/...: No such file or directory"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MPK_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, "relcache")
    root = build.cache_root()
    assert root.is_absolute() and root.is_relative_to(tmp_path / "relcache") and (root / "modules").is_dir()


def test_a_full_disk(cache, monkeypatch):
    """A temporary directory whose source.cu is /dev/full: writing it fails as on a full disk."""

    def full_disk_dir(modules: Path, name: str) -> Path:
        tmp = modules / f".tmp-{cache_fs.owner_tag()}-full"
        tmp.mkdir()
        (tmp / build.SOURCE).symlink_to("/dev/full")
        return tmp

    monkeypatch.setattr(cache_fs, "temp_dir", full_disk_dir)
    with pytest.raises(
        BuildError,
        match=r"build cache: cannot write the build.s files in .*/\.tmp-.*-full: No space left on device "
        r"\(ENOSPC\); the disk \(or your quota\) is full: free space, or set MPK_CACHE_DIR to a directory on another disk",
    ):
        build.build_module(SOURCE, "sm80", "faulty")
    assert [p.name for p in cache.iterdir() if p.name.startswith(".tmp")] == []


def test_an_entry_of_another_user_that_we_cannot_read(cache, monkeypatch):
    """A cache shared without the group modes: another user's entry is private (0700). Root reads
    everything, so the refusal is simulated where the entry is read."""
    entry = first_build(cache).entry
    real = pathlib.Path.read_text

    def private(self, *a, **k):
        if self.parent == entry:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "read_text", private)
    with pytest.raises(
        BuildError,
        match=rf"build cache: cannot read {entry}/build.json: Permission denied \(EACCES\); no permission: the cache "
        r"\(or this entry\) may belong to another user, with private modes; set MPK_CACHE_DIR to a directory of your "
        r'own, or share the cache as README, "A shared build cache" says',
    ):
        build.build_module(SOURCE, "sm80", "faulty")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_cache_directory_without_write_permission(cache):
    cache.chmod(0o555)
    try:
        with pytest.raises(BuildError, match=rf"build cache: cannot .* {cache}.*: Permission denied \(EACCES\); no permission"):
            build.build_module(SOURCE, "sm80", "faulty")
    finally:
        cache.chmod(0o755)


def test_stopped_process_is_recognised():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = lock.Holder(proc.pid, lock.socket.gethostname(), time.time(), cache_fs.pid_namespace())
        assert not lock.is_stopped(me)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not lock.is_stopped(me) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock.is_stopped(me)
    finally:
        proc.kill()
        proc.wait()
