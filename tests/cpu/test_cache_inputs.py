"""Bad values of the environment the build cache and the memory budget read, and cache entries or
modules damaged in ways test_cache_faults.py does not cover: each is a clear MpkError naming the
value and the fix (or, for a damaged entry, a rebuild saying why), never a raw exception."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import test_cache_faults
from test_cache_faults import SOURCE, first_build

from mpk_runtime import memory
from mpk_runtime.build import cache as build
from mpk_runtime.errors import BuildError, ConfigError
from mpk_runtime.run.launcher import Module

cache = test_cache_faults.cache  # the fixture: a private cache whose nvcc is a stand-in


def test_a_cache_dir_under_the_home_of_no_user(monkeypatch):
    monkeypatch.setenv("MPK_CACHE_DIR", "~no-such-user-of-mpk/cache")
    with pytest.raises(BuildError, match=r"^MPK_CACHE_DIR='~no-such-user-of-mpk/cache': its ~ names no home directory; set it"):
        build.cache_root()


def test_a_record_nested_too_deeply_is_damage(cache):
    entry = first_build(cache).entry
    (entry / build.RECORD).write_text("[" * 100_000 + "]" * 100_000)
    assert not build.entry_is_valid(entry)
    result = build.build_module(SOURCE, "sm80", "faulty")
    assert not result.cached and "build.json is not valid JSON (maximum recursion depth exceeded" in result.note
    assert json.loads((entry / build.RECORD).read_text())["key"] == result.key


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_a_bad_lock_timeout_is_refused_on_a_cache_hit_too(cache, monkeypatch, value):
    first_build(cache)
    monkeypatch.setenv("MPK_CACHE_LOCK_TIMEOUT", value)
    with pytest.raises(BuildError, match=rf"^MPK_CACHE_LOCK_TIMEOUT='{value}' must be a number of seconds >= 0"):
        build.build_module(SOURCE, "sm80", "faulty")


@pytest.mark.parametrize("text", ["1" * 5000, "1" * 31 + "G", "1." + "5" * 31])
def test_a_memory_limit_of_too_many_digits(monkeypatch, text):
    """float() of 5000 digits is inf, and int(inf) an OverflowError."""
    monkeypatch.setenv("MPK_MEMORY_LIMIT", text)
    with pytest.raises(ConfigError, match=rf"^MPK_MEMORY_LIMIT='{text[:40]}' must be a size in bytes, e.g. 8G"):
        memory.limit("cpu")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_module_without_the_runtimes_entry_points(tmp_path):
    (tmp_path / "empty.cpp").write_text("int unrelated() { return 0; }\n")
    so = tmp_path / "module.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "empty.cpp")], check=True)
    with pytest.raises(BuildError, match=rf"{so}: undefined symbol: mpk_abi_version: the module was built from a source"):
        Module(so)
