"""Guard zones and untouched data: a write past either end of a tensor, into an input, or into an
output element that no task's slice covers fails the case, and the report names the tensor, the
position and the task whose slice lies next to it. The stray writes are made after the run, by a
wrapped ``synchronize`` (the inner runs share this process), so that each report is exact; the
bodies' own overruns are in test_injected_bugs.py."""

from __future__ import annotations

import types

import pytest
import torch

import mpk_runtime as mpk
from pytest_mpk import guards

SCENE = """
from pytest_mpk import Case, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [Case("b2", batch=2, hidden=256)]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight)
"""


@pytest.fixture
def stray_write(monkeypatch: pytest.MonkeyPatch):
    """stray_write(tensor, flat element, value): after the run, that element of the attached tensor's
    storage (beyond its ends too: the guard zones) is overwritten."""

    def arrange(name: str, element: int, value: float) -> None:
        synchronize = mpk.PersistentKernel.synchronize

        def wrapped(self, *args, **kwargs):
            synchronize(self, *args, **kwargs)
            t = self.tensor(name)
            torch.as_strided(t, (1,), (1,), t.storage_offset() + element).fill_(value)

        monkeypatch.setattr(mpk.PersistentKernel, "synchronize", wrapped)

    return arrange


def test_a_write_past_the_end_hits_the_guard_and_names_the_last_slice(pytester, scenes, stray_write) -> None:
    pytester.makepyfile(test_scene=SCENE)
    stray_write("output", 512, 1.0)  # one float32 past the (2, 256) output
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "tensor 'output': 4 guard bytes written at bytes 0..3 past its end (element 512 of a flat float32 view); "
            "the last slice of 'output': task 1 (*, layer rmsnorm_0, rmsnorm) writes output[[]1:2, 0:256[]]",
        ]
    )


def test_a_write_before_the_start_hits_the_guard(pytester, scenes, stray_write) -> None:
    pytester.makepyfile(test_scene=SCENE)
    stray_write("output", -1, 1.0)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "tensor 'output': 4 guard bytes written at bytes 1..4 before its start (element -1); "
            "the first slice of 'output': task 0 (*, layer rmsnorm_0, rmsnorm) writes output[[]0:1, 0:256[]]",
        ]
    )


def test_a_changed_input_fails_with_the_slice_it_lies_in(pytester, scenes, stray_write) -> None:
    pytester.makepyfile(test_scene=SCENE)
    stray_write("input", 256 + 3, 1234.0)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "input 'input' changed: 1 elements (first at (1, 3)), but no task writes an input; the element lies in the "
            "input slice of task 1 (*, layer rmsnorm_0, rmsnorm) reads input[[]1:2, 0:256[]]",
        ]
    )


def test_a_clean_run_passes_with_guards(pytester, scenes) -> None:
    pytester.makepyfile(test_scene=SCENE)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def graph(*outputs: tuple[int, tuple[int, ...], tuple[int, ...]], shape=(4, 2)):
    """A stand-in compiled graph: tasks writing slices (id, lo, hi) of tensor 'y' of ``shape``."""
    tasks = [
        types.SimpleNamespace(id=i, label=f"t{i}", layer=0, inputs=(), outputs=(types.SimpleNamespace(tensor="y", lo=lo, hi=hi),))
        for i, lo, hi in outputs
    ]
    layer = types.SimpleNamespace(name="probe_0", task="noop")
    return types.SimpleNamespace(tasks=tasks, layers=[layer], tensor=lambda name: types.SimpleNamespace(shape=shape))


def test_a_written_element_that_no_slice_covers_names_the_slice_before_it() -> None:
    g = graph((0, (0, 0), (1, 2)), (1, (1, 0), (2, 2)))  # rows 2 and 3 belong to no task
    before = torch.full((4, 2), float("nan"))
    after = before.clone()
    after[2, 0] = 1.0
    (line,) = guards.check_uncovered({"y": after}, {"y": before}, g)
    assert line == (
        "output 'y': 1 elements that no task's output slice covers were written (first at (2, 0)); the output slice "
        "just before it is y[1:2, 0:2] of task 1 (t1, layer probe_0, noop)"
    )
    assert guards.check_uncovered({"y": before.clone()}, {"y": before}, g) == []


def test_an_uncovered_element_before_every_slice() -> None:
    g = graph((0, (2, 0), (4, 2)))
    before = torch.zeros(4, 2, dtype=torch.int32)
    after = before.clone()
    after[0, 1] = 7
    (line,) = guards.check_uncovered({"y": after}, {"y": before}, g)
    assert line.endswith("it comes before every task's output slice")


def test_a_guard_hit_on_a_tensor_no_task_touches_is_a_stray_pointer() -> None:
    t, zones = guards.allocate(torch.zeros(3, dtype=torch.float16), torch.device("cpu"))
    assert zones is not None and t.is_contiguous() and t.dtype == torch.float16
    zones.buffer[guards.GUARD_BYTES + 6] = 0
    (line,) = guards.check({"z": zones}, graph())
    assert line == (
        "tensor 'z': 1 guard bytes written at bytes 0..0 past its end (element 3 of a flat float16 view); "
        "no task of the graph touches 'z''s last element: a stray pointer"
    )


def test_a_non_contiguous_tensor_keeps_its_strides_and_gets_no_guards() -> None:
    t, zones = guards.allocate(torch.zeros(4, 2).t(), torch.device("cpu"))
    assert zones is None and not t.is_contiguous()


def test_a_row_written_against_expected_names_the_task_whose_slice_holds_it(pytester, scenes) -> None:
    """Row 1 stands for an inactive token's row: the golden says nothing may write it."""
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import Case, Expected, scene_test
        from scenes import NormScene, rmsnorm

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def compute_golden(self, args, params):
                return Expected(rmsnorm(args.input, args.weight), written=torch.tensor([True, False]))
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "output 'output': 256 elements that no task should write were changed (first at (1, 0), *); the golden "
            "marks them unwritten (Expected(written=...)); its output slice: task 1 (*, layer rmsnorm_0, rmsnorm) "
            "writes output[[]1:2, 0:256[]]",
        ]
    )
    # 2 rows where max_num_batched_tokens is 1: not a token batch (every row is computed), no request named.
    result.stdout.no_fnmatch_line("*row 1 is past the iteration's*")


def test_tasks_that_share_one_slice_are_named_in_one_line() -> None:
    """A paged cache: every task's slice is the whole tensor (its rows are picked at run time), so the
    owner is the layer, not a list of every task."""
    from mpk_runtime.graph.compiled import SliceRef

    whole = SliceRef("k_cache", (0, 0), (6, 16), 0)
    layer = types.SimpleNamespace(name="paged_attention_0", task="paged_attention")
    tasks = [types.SimpleNamespace(id=i, label=f"paged_attention_0[{i}]", layer=0, outputs=(whole,)) for i in range(3)]
    graph = types.SimpleNamespace(layers=[layer], tasks=tasks)
    assert guards.owner_of(graph, "k_cache")((2, 5)) == (
        "its output slice: all 3 tasks of layer paged_attention_0 (paged_attention) write k_cache[0:6, 0:16]"
    )
    assert guards.owner_of(graph, "k_cache")((7, 0)) == "no task's output slice holds k_cache[7, 0]"


def test_a_task_this_process_never_registered_has_no_token_rows() -> None:
    from mpk_runtime import harness

    assert harness.token_dim("rmsnorm", "output") == 0
    assert harness.token_dim("no_such_task", "output") is None
