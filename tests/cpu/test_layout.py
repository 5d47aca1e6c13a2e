"""The layout is the pipeline: mpk_runtime's subpackages import only their own stage, the stages
before it and the foundation modules (no import runs back up the pipeline), pytest_mpk uses only
the public API and mpk_runtime.harness, and no module grows past 300 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mpk_runtime
import pytest_mpk

RUNTIME = Path(mpk_runtime.__file__).parent
PLUGIN = Path(pytest_mpk.__file__).parent
FOUNDATION = {"errors", "archs", "contract", "dtypes", "resources", "memory"}
# The pipeline, in order: a stage may import itself and every stage before it. The front end is
# the facade that drives the stages, so it comes after all of them; models are built on the facade;
# the CLI presents their results.
STAGES = ["tasks", "graph", "codegen", "build", "run", "profile", "frontend", "models", "cli"]
TOP = {"__init__", "harness"}  # the public API and the plugin's entry points may import any stage
MAX_LINES = 300


def module_name(path: Path) -> str:
    rel = path.relative_to(RUNTIME.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported mpk_runtime module) of every import outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    type_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "mpk_runtime"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mpk_runtime":
                continue
            if node.module is None or target in ("mpk_runtime",):  # from . import x: each name is a module
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return found


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


RUNTIME_FILES = sorted(RUNTIME.rglob("*.py"))


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_no_import_runs_back_up_the_pipeline(path: Path) -> None:
    here = stage_of(module_name(path))
    if here in TOP:
        return
    allowed = FOUNDATION | ({here} if here in FOUNDATION else set(STAGES[: STAGES.index(here) + 1]))
    wrong = [f"line {line}: {target}" for line, target in runtime_imports(path) if stage_of(target) not in allowed]
    assert not wrong, f"{path.relative_to(RUNTIME)} ({here}) imports from a later stage: {'; '.join(wrong)}"


def test_every_runtime_module_belongs_to_a_stage() -> None:
    known = FOUNDATION | set(STAGES) | TOP
    assert {stage_of(module_name(p)) for p in RUNTIME_FILES} <= known


@pytest.mark.parametrize("path", sorted(PLUGIN.rglob("*.py")), ids=lambda p: p.name)
def test_the_plugin_uses_only_the_public_api_and_the_harness(path: Path) -> None:
    wrong = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpk_runtime."):
            if node.module != "mpk_runtime.harness":
                wrong.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            wrong += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("mpk_runtime.")]
    assert not wrong, f"pytest_mpk/{path.name} reaches into mpk_runtime's internals: {'; '.join(wrong)}"


def test_no_runtime_module_is_over_300_lines() -> None:
    long = {str(p.relative_to(RUNTIME)): n for p in RUNTIME_FILES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (one concept per file): {long}"
