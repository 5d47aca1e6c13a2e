"""The build cache: what the key covers, where entries live and how they are named (full builds
and device-only ones), damaged entries, nvcc errors, and many processes asking for one key at once
(one build, all find it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from cpu_helpers import cubin_sm, race_for_module
from forked_pytest import torch_forkserver

from mpk_runtime import resources
from mpk_runtime.build import artifacts, cache_fs
from mpk_runtime.build import cache as build
from mpk_runtime.codegen import dispatcher as codegen
from mpk_runtime.errors import BuildError, ConfigError


def test_key_is_deterministic_and_changes_with_the_source(noop_source):
    key = build.cache_key(noop_source, "sm80")
    assert key == build.cache_key(noop_source, "sm80") and len(key) == 64
    assert build.cache_key(noop_source + "\n// another graph\n", "sm80") != key


def test_key_changes_with_the_arch(noop_source):
    keys = {arch: build.cache_key(noop_source, arch) for arch in ("sm80", "sm90", "sm100")}
    assert len(set(keys.values())) == 3


def test_a_device_only_build_has_a_key_of_its_own(noop_source):
    assert build.cache_key(noop_source, "sm80", device_only=True) != build.cache_key(noop_source, "sm80")


def test_key_covers_every_included_header_and_only_those(noop_source, tmp_path, monkeypatch):
    csrc = tmp_path.resolve() / "csrc"
    shutil.copytree(resources.CSRC, csrc)
    key = build.cache_key(noop_source, "sm80")
    monkeypatch.setattr(resources, "CSRC", csrc)
    assert build.cache_key(noop_source, "sm80") == key  # same content, same key
    with open(csrc / "tasks" / "common" / "rmsnorm.cuh", "a") as f:
        f.write("\n// not included by a noop-only graph\n")
    assert build.cache_key(noop_source, "sm80") == key
    with open(csrc / "primitives" / "memory_order.cuh", "a") as f:  # included through the runtime, transitively
        f.write("\n// changed\n")
    assert build.cache_key(noop_source, "sm80") != key


def test_a_header_beside_its_includer_is_in_the_key(noop_source, tmp_path):
    """A task header outside csrc (reached from csrc/tasks by a relative path, as a kernel engineer's
    own task is) that includes a helper beside it: the compiler finds the helper next to the header,
    so the key must hash it too. Editing the helper left the old module in the cache: a stale build
    that computed the helper's old arithmetic."""
    (tmp_path / "mytask.cuh").write_text('#pragma once\n#include "helper.cuh"\n')
    helper = tmp_path / "helper.cuh"
    helper.write_text("#pragma once\n// x * 2\n")
    source = noop_source + f'\n#include "tasks/{os.path.relpath(tmp_path / "mytask.cuh", resources.CSRC / "tasks")}"\n'
    assert helper.resolve() in build.included_headers(source)
    key = build.cache_key(source, "sm80")
    helper.write_text("#pragma once\n// x * 3\n")
    assert build.cache_key(source, "sm80") != key


def test_included_headers_are_found_transitively(noop_source):
    found = {str(p.relative_to(resources.CSRC)) for p in build.included_headers(noop_source)}
    assert {
        "runtime/task_api.cuh",
        "runtime/abi.h",
        "runtime/config.cuh",
        "primitives/memory_order.cuh",
        "runtime/host.cuh",
        "runtime/persistent_kernel.cuh",
        "tasks/common/noop.cuh",
        "primitives/block.cuh",
    } <= found
    assert "tasks/common/rmsnorm.cuh" not in found


@pytest.mark.parametrize(
    ("arch", "gencode"),
    [
        ("sm80", "-gencode=arch=compute_80,code=[compute_80,sm_80]"),  # PTX too: runs on newer GPUs
        ("sm90", "-gencode=arch=compute_90a,code=sm_90a"),
        ("sm100", "-gencode=arch=compute_100a,code=sm_100a"),
    ],
)
def test_flags_per_arch(arch, gencode):
    flags = build.flags_for(arch)
    assert gencode in flags and f"-DMPK_TARGET_SM={arch[2:]}" in flags
    assert f"-DMPK_WORKER_THREADS={128 if arch == 'sm80' else 256}" in flags  # from the arch table
    assert "-shared" in flags and f"-I{resources.CSRC}" in flags


@pytest.mark.parametrize(
    ("arch", "gencode"),
    [
        ("sm80", "-gencode=arch=compute_80,code=sm_80"),  # one code instance: nvcc -cubin takes no more
        ("sm90", "-gencode=arch=compute_90a,code=sm_90a"),
        ("sm100", "-gencode=arch=compute_100a,code=sm_100a"),
    ],
)
def test_device_only_flags_per_arch(arch, gencode):
    flags = build.flags_for(arch, device_only=True)
    assert "-cubin" in flags and gencode in flags and f"-DMPK_TARGET_SM={arch[2:]}" in flags
    assert not {"-shared", "-Xcompiler", "-fPIC"} & set(flags)
    assert [f for f in flags if f.startswith("-gencode")] == [gencode]


def test_unknown_arch():
    with pytest.raises(ConfigError, match=r"arch 'sm75' is not a build target; use one of sm80, sm90, sm100"):
        build.flags_for("sm75")


def test_entry_is_readable_and_recorded(noop_build, mpk_cache_dir):
    entry = noop_build.entry
    assert entry.parent == mpk_cache_dir / "modules"
    assert entry.name == f"noop-sm80-{noop_build.key[:16]}"
    assert noop_build.path == entry / build.MODULE and noop_build.path.is_file()
    assert (entry / build.SOURCE).is_file()
    record = json.loads((entry / build.RECORD).read_text())
    assert record["key"] == noop_build.key and record["arch"] == "sm80" and record["name"] == "noop"
    assert record["module_sha256"] == cache_fs.sha256(noop_build.path)
    assert build.entry_is_valid(entry)


def test_device_only_entry_is_marked_and_holds_a_cubin(noop_cubin, noop_build, mpk_cache_dir):
    entry = noop_cubin.entry
    assert entry.name == f"noop-sm80-cubin-{noop_cubin.key[:16]}" and entry.parent == mpk_cache_dir / "modules"
    assert noop_cubin.path == entry / build.CUBIN and cubin_sm(noop_cubin.path) == 80
    assert sorted(p.name for p in entry.iterdir()) == ["build.json", "module.cubin", "source.cu"]
    record = json.loads((entry / build.RECORD).read_text())
    assert record["module_sha256"] == cache_fs.sha256(noop_cubin.path) and "-cubin" in record["flags"]
    assert build.entry_is_valid(entry, filename=build.CUBIN) and noop_cubin.key != noop_build.key


def test_cachedir_tag_at_the_root(noop_build, mpk_cache_dir):
    tag = (mpk_cache_dir / "CACHEDIR.TAG").read_text()
    assert tag.startswith("Signature: 8a477f597d28d172789f06886806bc55\n")


def test_mpk_cache_dir_is_honoured(monkeypatch, tmp_path):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "mine"))
    assert build.cache_root() == tmp_path / "mine"
    assert (tmp_path / "mine" / "modules").is_dir() and (tmp_path / "mine" / "CACHEDIR.TAG").is_file()


def test_xdg_cache_home_is_the_fallback(monkeypatch, tmp_path):
    monkeypatch.delenv("MPK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / "mpk"


def test_second_request_is_a_cache_hit(noop_source, noop_build):
    again = build.build_module(noop_source, "sm80", "noop")
    assert again.cached and again.path == noop_build.path and again.key == noop_build.key


def private_copy(result: build.BuildResult, monkeypatch, tmp_path) -> Path:
    """A private cache holding a copy of the entry of ``result``, so damaging it disturbs no other test."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    entry = build.cache_root() / "modules" / result.entry.name
    shutil.copytree(result.entry, entry)
    return entry


def damage_module(entry: Path) -> None:
    data = bytearray((entry / build.CUBIN).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (entry / build.CUBIN).write_bytes(bytes(data))


def delete_record(entry: Path) -> None:
    (entry / build.RECORD).unlink()


@pytest.mark.parametrize("damage", [damage_module, delete_record])
def test_damaged_entry_is_detected_and_rebuilt(noop_source, noop_cubin, monkeypatch, tmp_path, damage):
    """With real nvcc, on a device-only entry (the cheaper build; test_cache_faults.py goes through
    every kind of damage with a stand-in compiler)."""
    entry = private_copy(noop_cubin, monkeypatch, tmp_path)
    assert build.build_module(noop_source, "sm80", "noop", device_only=True).cached  # the copy is a valid entry
    damage(entry)
    assert not build.entry_is_valid(entry, filename=build.CUBIN)
    rebuilt = build.build_module(noop_source, "sm80", "noop", device_only=True)
    assert not rebuilt.cached and rebuilt.entry == entry
    assert build.entry_is_valid(entry, filename=build.CUBIN)
    seconds = json.loads((entry / build.RECORD).read_text())["build_seconds"]  # the compile alone
    assert 0 < seconds <= rebuilt.seconds
    assert cubin_sm(rebuilt.path) == 80
    assert [p.name for p in (tmp_path / "modules").iterdir() if p.name.startswith(".tmp")] == []


def test_nvcc_error_raises_build_error_with_the_compiler_output(monkeypatch, tmp_path):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    source = '#include "runtime/task_api.cuh"\nstatic_assert(false, "mpk test: a deliberate compile error");\n'
    with pytest.raises(
        BuildError,
        match=r"(?s)nvcc failed \(\d+\) building .*\.cu for sm80:\n.*"
        r"mpk test: a deliberate compile error.*\ncommand: .*nvcc",
    ):
        build.build_module(source, "sm80", "broken")
    assert [p.name for p in (tmp_path / "modules").iterdir() if not p.name.endswith(".lock")] == []  # nothing published


def test_an_nvcc_error_names_a_copy_of_the_source_that_stays(monkeypatch, tmp_path):
    """nvcc's file:line references point at the build's own directory, which is removed: the error
    names a copy kept under the cache's failed/ instead, which holds the source as built."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    source = '#include "runtime/task_api.cuh"\nstatic_assert(false, "mpk test: a deliberate compile error");\n'
    with pytest.raises(BuildError) as e:
        build.build_module(source, "sm80", "broken")
    (kept,) = (tmp_path / "failed").glob("broken-sm80-*.cu")
    assert kept.read_text() == source
    assert f"{kept}(2)" in str(e.value) and ".tmp" not in str(e.value).split("\ncommand:")[0]


def test_inline_ptx_in_a_host_build_says_what_to_do(mpk_cache_dir):
    """The emulator builds bodies with g++, whose assembler refuses PTX: the error says why and how
    to guard it, and its file:line points at a copy of the source that stays (the build's own
    directory is removed). In the session's cache, whose emulation runtime a fresh one would build
    first (5 s)."""
    from mpk_runtime.build import host

    source = (
        '#include "runtime/task_api.cuh"\nnamespace mpk {\nconstexpr unsigned kDynamicSmemBytes = 0u;\n'
        "inline char const *task_type_name(int) { return nullptr; }\n"
        "__device__ __forceinline__ void execute_task(uint32_t, TaskDesc const &task, Runtime const &rt) {\n"
        '  unsigned lane;\n  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));\n  task.output<unsigned>(0)[0] = lane;\n'
        '}\n}  // namespace mpk\n#include "runtime/persistent_kernel.cuh"\n'
    )
    with pytest.raises(BuildError) as e:
        host.build_host_module(source, "sm80", "ptx_probe")
    kept = max((mpk_cache_dir / "failed").glob("ptx_probe-host-sm80-*.cpp"), key=lambda p: p.stat().st_mtime)
    assert kept.read_text() == source
    said = str(e.value)
    assert f"{kept}:7: Error: no such instruction" in said and ".tmp" not in said.split("\ncommand:")[0], said
    assert "inline PTX (asm) cannot assemble: put the asm under #ifndef MPK_HOST_EMULATION" in said


def test_missing_nvcc_is_a_build_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(BuildError, match=r"nvcc not found on PATH or in \$CUDA_HOME/bin; install the CUDA toolkit"):
        build.nvcc()


def fake_compile(source_path: Path, out: Path, *_args, **_kwargs) -> None:
    """Stands in for nvcc where only the cache's bookkeeping is under test."""
    out.write_bytes(b"not a real module: " + source_path.read_bytes())


def test_entry_stays_in_the_cache_whatever_the_name(monkeypatch, tmp_path):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "compile_to", fake_compile)
    source = "// module: ../../escaped\n"
    result = build.build_module(source, "sm80", codegen.module_name_of(source))
    assert result.entry.resolve().parent == (tmp_path / "cache" / "modules").resolve()


def test_write_if_changed_keeps_unchanged_files(tmp_path):
    path = tmp_path / "sub" / "f.cu"
    assert artifacts.write_if_changed(path, "a")
    os.utime(path, (1, 1))
    assert not artifacts.write_if_changed(path, "a") and path.stat().st_mtime == 1
    assert artifacts.write_if_changed(path, "b") and path.read_text() == "b"


def test_processes_racing_for_one_key_build_it_once(noop_source, mpk_cache_dir):
    source = noop_source + f"\n// race {uuid.uuid4().hex}\n"  # a key nobody built yet
    ctx = torch_forkserver()  # race_for_module's module imports torch: the server did, once
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=race_for_module, args=(source, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(cached for cached, _, _ in got) == [False, True, True, True]  # exactly one built it
    assert len({path for _, path, _ in got}) == 1
    entry = Path(got[0][1]).parent
    builder = next(pid for cached, _, pid in got if not cached)
    assert json.loads((entry / build.RECORD).read_text())["built_by_pid"] == builder
    assert entry.parent == mpk_cache_dir / "modules"


def test_a_device_only_build_refuses_more_shared_memory_than_the_arch_has(noop_source, monkeypatch, tmp_path):
    """An sm80 block has 163 KB of dynamic shared memory at most, an sm90 one 227 KB: a kernel
    past that would only fail at launch, so a compile-only or emulated build says so."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    greedy = re.sub(r"kDynamicSmemBytes = [^;]*;", f"kDynamicSmemBytes = {200 << 10}u;", noop_source)
    assert greedy != noop_source
    with pytest.raises(BuildError, match=r"more dynamic shared memory than a block of this arch can have"):
        build.build_module(greedy, "sm80", "greedy", device_only=True)
    assert cubin_sm(build.build_module(greedy, "sm90", "greedy", device_only=True).path) == 90


def test_device_only_builds_check_the_scheduler_once_per_arch(noop_source, monkeypatch, tmp_path):
    """A cubin module leaves the scheduler out (it does not depend on the graph); the first
    device-only build of an arch in a cache compiles it alone, as ``scheduler-check``."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    compiled: list[tuple[str, str]] = []

    def counting_compile(source_path: Path, out: Path, arch: str, *args, **kwargs) -> None:
        compiled.append(("scheduler" if "scheduler_kernel" in source_path.read_text() else "module", arch))
        fake_compile(source_path, out)

    monkeypatch.setattr(build, "compile_to", counting_compile)
    build.build_module(noop_source, "sm80", "first", device_only=True)
    build.build_module(noop_source + "// another\n", "sm80", "second", device_only=True)
    build.build_module(noop_source, "sm90", "third", device_only=True)
    assert compiled == [("scheduler", "sm80"), ("module", "sm80"), ("module", "sm80"), ("scheduler", "sm90"), ("module", "sm90")]
    modules = sorted(p.name.split("-cubin-")[0] for p in (tmp_path / "modules").iterdir() if not p.name.endswith(".lock"))
    assert modules == ["first-sm80", "scheduler-check-sm80", "scheduler-check-sm90", "second-sm80", "third-sm90"]


def test_a_scheduler_that_does_not_build_fails_the_device_only_build(noop_source, monkeypatch, tmp_path):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    broken = tmp_path / "scheduler_check.cu"
    broken.write_text('#include "runtime/scheduler.cuh"\nstatic_assert(false, "mpk test: a scheduler that does not build");\n')
    monkeypatch.setattr(build, "SCHEDULER_CHECK", broken)
    for _ in range(2):  # a failed check is not remembered as done
        with pytest.raises(BuildError, match=r"(?s)nvcc failed .* for sm80:.*mpk test: a scheduler that does not build"):
            build.build_module(noop_source, "sm80", "noop", device_only=True)


def test_one_precompiled_shim_serves_every_include_directory(mpk_cache_dir, tmp_path):
    """GCC does not ask a precompiled header's include directories to match, only the headers it
    resolved (which the key covers): tests with include directories of their own share one."""
    from mpk_runtime import archs
    from mpk_runtime.build import host

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pchs = {host.shim_pch([*host.base_flags([d]), "-O1", *archs.ARCHS["sm90"].host_flags], [d, resources.CSRC]) for d in (a, b)}
    if pchs == {None}:
        pytest.skip("the compiler is not GCC: no precompiled shim")
    assert len(pchs) == 1 and Path(f"{pchs.pop()}.gch").is_file()


def test_one_entry_common_object_serves_every_module_unless_a_header_stands_in(mpk_cache_dir, tmp_path):
    """The part of the emulator's C entry that is the same in every module (emulation/entry_common.cpp)
    is built once per set of flags, whatever a test's own include directory, unless that directory
    holds a header the object includes: then the object is built with it."""
    from mpk_runtime import archs
    from mpk_runtime.build import host

    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (c / "runtime").mkdir()
    planner = resources.CSRC / "runtime" / "prepare_next_batch.cuh"
    (c / "runtime" / planner.name).write_text(planner.read_text() + "\n// a test's own copy\n")

    def common(d: Path) -> Path:
        flags = [*host.base_flags([d]), "-O1", *archs.ARCHS["sm90"].host_flags]
        dirs = [d, resources.CSRC]
        return host.entry_common(flags, dirs, host.shim_pch(flags, dirs))

    assert common(a) == common(b) and common(a).is_file()
    assert common(c) != common(a) and common(c).is_file()
