"""Cubins of several modules in one nvcc run (codegen/batch.py, build/cubin_batch.py): which sources
are batched, the batch's translation unit, each member's own entry that its case then finds, and
what is left to a member's own build (a batch nvcc refuses, entries another process is building)."""

from __future__ import annotations

import errno
import json
import os
import re
import uuid
from pathlib import Path

import pytest
from cpu_helpers import cubin_sm
from filelock import FileLock

from mpk_runtime.build import cache as build
from mpk_runtime.build.cubin_batch import build_cubins
from mpk_runtime.build.lock import free_locks
from mpk_runtime.codegen import batch
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.errors import BuildError

ARCH = "sm80"


def unique(source: str, body: str = "") -> str:
    """``source`` with a key of its own (a comment after the banner), and ``body`` added inside its
    ``namespace mpk``: a module no run has built, still in the form generate() writes."""
    lines = source.splitlines()
    lines.insert(1, f"// test {uuid.uuid4().hex}")
    if body:
        lines.insert(lines.index(batch.OPEN) + 1, body)
    return "\n".join(lines) + "\n"


def entry_of(source: str) -> Path:
    return build.entry_path(codegen.module_name_of(source), ARCH, build.cache_key(source, ARCH, device_only=True), True)


def test_parse_reads_back_what_generate_wrote(noop_source: str) -> None:
    part = batch.parse(noop_source)
    assert part is not None and part.headers == ('#include "tasks/common/noop.cuh"',) and not part.jitter
    assert "execute_task" in part.body and "persistent_kernel" not in part.body
    jittered = batch.parse(noop_source.replace(f"{codegen.BANNER}\n", f"{codegen.BANNER}\n{codegen.JITTER}\n", 1))
    assert jittered is not None and jittered.jitter and jittered.body == part.body


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s.replace(codegen.BANNER, "// my own kernel"),  # not generated
        lambda s: s.replace('#include "runtime/task_api.cuh"', '#include "runtime/task_api.cuh"\n#define N 4'),  # code before
        lambda s: s + "\nint after_the_runtime;\n",  # code after the runtime
        lambda s: s.replace('#include "tasks/common/noop.cuh"', '#include "my_helpers.cuh"'),  # not a task header
        lambda s: s.replace("}  // namespace mpk", "}"),  # its namespace rewritten
    ],
)
def test_parse_leaves_other_sources_to_their_own_build(noop_source: str, edit) -> None:
    assert batch.parse(edit(noop_source)) is None


def test_a_batch_holds_every_module_in_a_namespace_and_a_kernel_of_its_own(noop_source: str) -> None:
    part = batch.parse(noop_source)
    assert part is not None
    text = batch.batch_source([part, part, part], ARCH)
    assert text.count('#include "tasks/common/noop.cuh"') == 1 and text.count('#include "runtime/persistent_kernel.cuh"') == 1
    for i in range(3):
        assert f"namespace module_{i} {{" in text and f"module_{i}_tasks(" in text and f"module_{i}::kDynamicSmemBytes" in text
    jittered = batch.Dispatcher(part.headers, True, part.body)
    with pytest.raises(ValueError, match="with and without warp jitter"):
        batch.batch_source([part, jittered], ARCH)


def test_each_member_gets_an_entry_that_its_own_build_then_finds(noop_source: str, mpk_cache_dir: Path) -> None:
    sources = [unique(noop_source) for _ in range(3)]
    built = build_cubins([*sources, sources[0]], ARCH)  # a source twice is one member
    assert sorted(built) == sorted(entry_of(s).name for s in sources)
    for source in sources:
        result = build.build_module(source, ARCH, codegen.module_name_of(source), device_only=True)
        assert result.cached and result.entry == entry_of(source) and cubin_sm(result.path) == 80
        assert (result.entry / "source.cu").read_text() == source  # its own source, not the batch's
        record = json.loads((result.entry / "build.json").read_text())
        assert record["batch"] == 3 and record["key"] == result.key and 0 < record["build_seconds"]
    assert build_cubins(sources, ARCH) == []  # all in the cache now


def test_a_batch_nvcc_refuses_leaves_each_member_to_its_own_build(noop_source: str, mpk_cache_dir: Path) -> None:
    good = unique(noop_source)
    bad = unique(noop_source, 'static_assert(sizeof(int) == 0, "a module that does not compile");')
    assert build_cubins([good, bad], ARCH) == []
    assert not build.build_module(good, ARCH, codegen.module_name_of(good), device_only=True).cached
    with pytest.raises(BuildError, match="a module that does not compile") as raised:
        build.build_module(bad, ARCH, codegen.module_name_of(bad), device_only=True)
    kept = re.search(r"(/\S+/failed/\S+\.cu)\b", str(raised.value))
    assert kept and Path(kept[1]).read_text() == bad  # the error names the member's own source


def test_entries_another_process_is_building_are_left_to_it(noop_source: str, mpk_cache_dir: Path) -> None:
    sources = [unique(noop_source) for _ in range(3)]
    with FileLock(f"{entry_of(sources[0])}.lock", is_singleton=False):
        built = build_cubins(sources, ARCH)
    assert sorted(built) == sorted(entry_of(s).name for s in sources[1:])
    assert not build.entry_is_valid(entry_of(sources[0]))


def test_one_module_is_not_a_batch_and_others_are_not_batched(noop_source: str, mpk_cache_dir: Path) -> None:
    assert build_cubins([unique(noop_source)], ARCH) == []
    not_generated = [unique(noop_source).replace(codegen.BANNER, "// my own kernel") for _ in range(2)]
    assert build_cubins(not_generated, ARCH) == []


def test_free_locks_takes_the_locks_nobody_holds_and_releases_them(tmp_path: Path) -> None:
    paths = [tmp_path / f"{n}.lock" for n in "abc"]
    with FileLock(str(paths[1]), is_singleton=False):
        with free_locks(paths) as held:
            assert held == [paths[0], paths[2]]
            assert json.loads(paths[0].with_name("a.lock.holder").read_text())["pid"] > 0  # who holds it, for waiters
            with pytest.raises(TimeoutError):
                FileLock(str(paths[0]), is_singleton=False).acquire(timeout=0)
        assert not paths[0].with_name("a.lock.holder").exists()
    with free_locks(paths) as held:
        assert held == paths


def test_a_cache_that_cannot_link_gets_copies(noop_source: str, mpk_cache_dir: Path, monkeypatch) -> None:
    """Members share the batch's cubin by hard links; where the file system has none, each gets a copy."""

    def no_links(src, dst):
        raise OSError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    sources = [unique(noop_source) for _ in range(2)]
    assert len(build_cubins(sources, ARCH)) == 2
    cubins = [entry_of(s) / "module.cubin" for s in sources]
    assert cubins[0].read_bytes() == cubins[1].read_bytes() and cubins[0].stat().st_ino != cubins[1].stat().st_ino


def test_a_lock_that_cannot_be_opened_is_a_build_error(tmp_path: Path) -> None:
    (tmp_path / "a file").write_text("")
    where = tmp_path / "a file" / "a.lock"  # under a file: no lock file can be made there
    with pytest.raises(BuildError, match=r"cannot open the build lock .*a file/a\.lock"):
        with free_locks([where]):
            pass
