"""A task of the user's own (declared outside mpk_runtime, as README's "Adding a task" says) run
through the plugin with a body of the test's choosing (cpu_helpers.patched_copy): the folder's spec,
reference and scene copied beside the pytester test, its header named by an environment variable the
spec reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from forked_pytest import runpytest_forked


def run_scene(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, folder: Path, scene: str, env: str, header: Path, *args: str
) -> pytest.RunResult:
    """``folder/<name>_scene.py`` as ``test_<name>.py`` beside the folder's other modules, built from
    ``header``, emulated, in a process of its own (forked_pytest): the task registry is the process's, and each test
    registers another body. ``args``: more pytest options."""
    for module in folder.glob("*.py"):
        if module.name != scene:
            shutil.copy(module, pytester.path / module.name)
    shutil.copy(folder / scene, pytester.path / f"test_{scene.removesuffix('_scene.py')}.py")
    monkeypatch.setenv(env, str(header))
    return runpytest_forked(pytester, "-p", "mpk", "--arch", "sm90", "--mpk-backend", "emulate", "-n", "0", "-rf", *args)


def run_variant(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, folder: Path, setting: tuple[str, str], *args: str
) -> pytest.RunResult:
    """The scene of a ``<name>_task`` folder (``<name>_scene.py``, its body ``<name>.cuh`` named by
    ``<NAME>_TASK_HEADER``) with the environment variable ``setting`` (name, value) that its spec
    reads to pick how the task is declared or which variant of the body runs."""
    name = folder.name.removesuffix("_task")
    monkeypatch.setenv(*setting)
    return run_scene(
        pytester, monkeypatch, folder, f"{name}_scene.py", f"{name.upper()}_TASK_HEADER", folder / f"{name}.cuh", *args
    )
