"""Replaying a damaged directory with the plugin: a signature that is not JSON is a short collection
error naming the file, line and column; a directory that fails its checks, or is too large for the
machine, fails its item with the error's message alone, not pages of pytest internals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from replay_scene import kept_case


@pytest.fixture
def saved(pytester: pytest.Pytester, scenes) -> Path:
    """A kept compile output directory, with neither the scene file nor its helpers left beside it."""
    saved = shutil.copytree(kept_case(pytester), pytester.path / "saved")
    for scene_file in ("test_scene.py", "scenes.py"):
        (pytester.path / scene_file).unlink()
    return saved


def test_a_signature_that_is_not_json_fails_its_item_only(pytester: pytest.Pytester, saved: Path) -> None:
    """As a damaged task graph does; it had been a collection error, which stopped every other
    directory of the run too."""
    shutil.copytree(saved, pytester.path / "sound")
    (saved / "signature_rank0.json").write_text('{"format": "mpk-signature", "arch": }')
    result = pytester.runpytest_inprocess("-p", "mpk", "saved", "sound")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "saved/signature_rank0.json F*",
            "GraphError: *saved/signature_rank0.json: not valid JSON: Expecting value (line 1, column 37)",
        ]
    )


def test_a_damaged_graph_fails_with_its_message_only(pytester: pytest.Pytester, saved: Path) -> None:
    graph = json.loads((saved / "task_graph_rank0.json").read_text())
    graph["tasks"][1]["outputs"][0]["hi"] = [4, 256]  # rows 1..3 of a 2-row tensor
    (saved / "task_graph_rank0.json").write_text(json.dumps(graph))
    result = pytester.runpytest_inprocess("-p", "mpk", "saved")
    result.assert_outcomes(failed=1)
    lines = result.stdout.str().splitlines()
    start = next(i for i, line in enumerate(lines) if "_ replay of" in line)
    end = next(i for i, line in enumerate(lines) if "short test summary info" in line)
    assert (
        lines[start + 1].startswith("GraphError: ")
        and "task_graph_rank0.json: tasks[1].outputs[0]: lo=[1, 0] hi=[4, 256]" in lines[start + 1]
    )
    assert end - start < 8, lines[start:end]  # the message and the report's own lines, no traceback
    assert "_pytest" not in result.stdout.str()


def test_signature_and_graph_that_disagree(pytester: pytest.Pytester, saved: Path) -> None:
    signature = json.loads((saved / "signature_rank0.json").read_text())
    signature["tensors"][0]["shape"] = [8, 256]  # 8 rows, where the graph has 2
    (saved / "signature_rank0.json").write_text(json.dumps(signature))
    result = pytester.runpytest_inprocess("-p", "mpk", "saved")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["GraphError: *saved: tensor 'input' is fp32 [[]8, 256[]] in the signature but fp32 [[]2, 256[]] in the task graph; *"]
    )


def test_a_directory_too_large_for_the_machine(pytester: pytest.Pytester, saved: Path, monkeypatch) -> None:
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "4K")  # the tensors are 2 KiB, 1 KiB and 2 KiB, three copies each
    result = pytester.runpytest_inprocess("-p", "mpk", "saved")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "MemoryBudgetError: replay of *saved: tensor 'input' (fp32 [[]2, 256[]]) x 3 copies needs 6 KiB (15 KiB in all "
            "with 2 more) of host memory, more than the 4 KiB set by MPK_MEMORY_LIMIT; the shapes are too large for this "
            "machine, or set MPK_MEMORY_LIMIT (bytes, e.g. 64G)"
        ]
    )


def test_a_directory_without_a_signature(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene="from scenes import NormScene")
    empty = pytester.mkdir("empty")
    (empty / "test_rank0.cu").write_text("// a source alone\n")
    result = pytester.runpytest_inprocess("--mpk-replay", str(empty), "-p", "mpk", "empty")
    result.assert_outcomes()  # nothing to replay: no item, no error
    result.stdout.fnmatch_lines(["*no tests ran*"])


def test_a_task_graph_without_its_signature_fails(pytester: pytest.Pytester, saved: Path) -> None:
    """The directory had collected nothing and said nothing (exit 5)."""
    (saved / "signature_rank0.json").unlink()
    result = pytester.runpytest_inprocess("-p", "mpk", "saved")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["GraphError: *saved/signature_rank0.json is missing beside task_graph_rank0.json; a replay*"])
