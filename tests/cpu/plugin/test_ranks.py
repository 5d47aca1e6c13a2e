"""Multi-rank scenes without a GPU: every rank emulated in one process, each rank's outputs
compared, and a failure that names the rank (an assert on one rank, a wrong output on one rank)."""

from __future__ import annotations

import pytest

SCENE = '''
import torch
from pytest_mpk import Case, Out, PerRank, SceneTestCase, scene_test


def total(args):
    return sum(a.input for a in args.ranks)


class SumScene(SceneTestCase):
    """allreduce over (2, 64) float32: rank r's input is row r of one draw."""

    CASES = [Case("b2", batch=2)]

    def kernel_params(self, params):
        b = params["batch"]
        return {"max_num_batched_tokens": b, "max_seq_length": b, "max_num_pages": b}

    def generate_args(self, params):
        r, w, b = params["rank"], params["world_size"], params["batch"]
        return {"input": torch.randn(w, b, 64)[r].clone(), "output": Out(torch.empty(b, 64))}

    def build(self, pk, t, params):
        buf = pk.new_comm_tensor((2, pk.world_size, params["batch"], 64), torch.float32, "buf")
        pk.allreduce_layer(t.input, buf, t.output, grid_dim=(2, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return total(args)
'''


@pytest.fixture
def sums(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(sums=SCENE)


def test_ranks_run_emulated_in_one_process(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        import pytest
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            pass

        @pytest.mark.mpk_world_size(4)
        @scene_test(layer="allreduce")
        class TestFour(SumScene):
            pass
    """
    )
    result = pytester.runpytest_inprocess("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*TestTwo::b2[[]sm90[]] PASSED [[]emulated (PyTorch slice references) x2[]]*", "*TestFour::b2*x4*"]
    )


@pytest.mark.parametrize("backend", ["emulate", "compile-only"])
def test_a_passing_multi_rank_case_leaves_no_artifacts(pytester: pytest.Pytester, scenes, sums, backend: str) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            pass
    """
    )
    pytester.runpytest_inprocess("--mpk-backend", backend).assert_outcomes(passed=1)
    assert not any(pytester.path.glob(".mpk-artifacts/*"))


def test_an_assert_on_one_rank_names_it(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def build(self, pk, t, params):
                assert params["rank"] != 1, "rank 1 is unhappy"
                super().build(pk, t, params)
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 1: AssertionError: rank 1 is unhappy*",
            "  at test_scene.py:*, in build:",
            '    assert params["rank"] != 1, "rank 1 is unhappy"',
            "params: {'batch': 2}",
            "backend: emulated (PyTorch slice references) (sm90), 2 ranks in one process",
        ]
    )
    result.stdout.no_fnmatch_line("rank 0:*")


def test_a_wrong_output_on_one_rank_names_it(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import PerRank, scene_test
        from sums import SumScene, total

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def compute_golden(self, args, params):
                good = total(args)
                return PerRank([good, {"output": good + 1}])
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    kept = pytester.path / ".mpk-artifacts" / "test_scene.py_TestTwo_b2_sm90"
    result.stdout.fnmatch_lines(
        [
            "rank 1: output 'output' (float32, shape (2, 64)) differs from the golden*: 128 of 128*",
            "golden: TestTwo.compute_golden",
            f"artifacts: {kept} (rank1/actual.pt, rank1/expected.pt, rank1/inputs.pt, repro.txt, signature_rank0.json, *)",
            "repro: pytest 'test_scene.py::TestTwo::b2[[]sm90[]]' -p mpk *",
        ]
    )
    result.stdout.no_fnmatch_line("rank 0:*")
    assert (kept / "rank1" / "actual.pt").is_file()
    assert (kept / "repro.txt").read_text().startswith("pytest 'test_scene.py::TestTwo::b2[sm90]' -p mpk")


def test_a_multi_rank_scene_needs_its_golden(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            compute_golden = None
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestTwo: runs on 2 ranks, so it needs compute_golden(self, args, params)*"])


def test_a_multi_rank_case_cannot_expect_a_failure(pytester: pytest.Pytester, scenes, sums) -> None:
    """The ranks' run does not check raises=, so such a case would pass whatever the kernel did."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            CASES = [Case("b2", batch=2, raises="bad token")]
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*TestTwo: Case 'b2' expects the kernel to fail (raises='bad token'), which a scene on 2 ranks does not check*"]
    )


def test_a_multi_rank_scene_cannot_pass_meta_outputs(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import Out, scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def generate_args(self, params):
                args = super().generate_args(params)
                return {**args, "output_tokens": Out(torch.zeros(2, dtype=torch.int64), meta=True)}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*Out(..., meta=True) for *'output_tokens'*, which a scene on 2 ranks does not pass to the kernel*"]
    )


def test_scene_world_size_is_validated() -> None:
    from pytest_mpk import scene_test

    with pytest.raises(ValueError, match=r"world_size=0.*an integer in \[1, 32\]"):
        scene_test(layer="allreduce", world_size=0)


def test_under_mpirun_xdist_is_off_so_every_rank_runs_every_item_in_step(pytester: pytest.Pytester, monkeypatch) -> None:
    """Our addopts say "-n auto": under mpirun each rank would otherwise hand its items to xdist
    workers pinned to GPUs of their own (both ranks' gw0 on GPU 0, seen on 2 x H200)."""
    from mpk_runtime.run import bootstrap

    monkeypatch.setattr(bootstrap, "launched", lambda: (2, 0, 0))  # rank 0 of 2, as mpirun's environment says
    pytester.makepyfile(
        test_plain="import os\n\ndef test_in_this_process():\n    assert 'PYTEST_XDIST_WORKER' not in os.environ\n"
    )
    result = pytester.runpytest_inprocess("-n", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["mpk: 2 ranks under MPI: pytest-xdist is off (each rank runs every item in step)"])
    result.stdout.no_fnmatch_line("*created: 2/2 workers*")


def test_every_rank_gets_the_one_rank_checks_of_inputs(pytester: pytest.Pytester, scenes, sums) -> None:
    """A kernel that overwrites an input fails on every rank it does it on, as a one-rank case does,
    even when the outputs match the golden (here, an all-reduce of the all-reduce's own result)."""
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import scene_test
        from sums import SumScene, total

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def build(self, pk, t, params):
                buf = pk.new_comm_tensor((2, pk.world_size, 2, 64), torch.float32, "buf")
                pk.allreduce_layer(t.input, buf, t.output, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
                again = pk.new_comm_tensor((2, pk.world_size, 2, 64), torch.float32, "again")
                pk.allreduce_layer(t.output, again, t.input, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 0: input 'input' changed: * elements (first at (0, 0)), but no task writes an input;*",
            "rank 1: input 'input' changed: *",
        ]
    )


def test_a_non_contiguous_input_is_refused_on_every_rank(pytester: pytest.Pytester, scenes, sums) -> None:
    """The harness attaches what generate_args made, as a one-rank case does: never made contiguous
    behind the scene's back."""
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def generate_args(self, params):
                args = super().generate_args(params)
                args["input"] = args["input"].t().contiguous().t()
                return args
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 0: LayoutError: tensor 'input' with shape (2, 64) and strides (1, 2) is not contiguous; "
            "pass tensor.contiguous()",
            "rank 1: LayoutError: *",
        ]
    )


GOLDEN_FORMS = {  # fnmatch patterns: [[] and []] stand for [ and ]
    "PerRank of 3 for 2 ranks": (
        "PerRank([total(args)] * 3)",
        "GoldenError: TestTwo.compute_golden: returned PerRank of 3 values for 2 ranks; give one per rank, in rank order",
    ),
    "a misspelt output": (
        "{'outptu': total(args)}",
        "GoldenError: TestTwo.compute_golden: returned [[]'outptu'[]], which is not an output*",
    ),
    "a list meant as PerRank": (
        "[total(args), total(args)]",
        "GoldenError: TestTwo.compute_golden: returned a list of 2 values for the 1 output(s) [[]'output'[]]; "
        "for one golden per rank return PerRank([[]...[]]) (a list is the outputs in order)",
    ),
    "a misspelt output on rank 1": (
        "PerRank([total(args), {'outptu': total(args)}])",
        "GoldenError: rank 1: TestTwo.compute_golden: returned [[]'outptu'[]], which is not an output*",
    ),
}


@pytest.mark.parametrize("form", GOLDEN_FORMS, ids=list(GOLDEN_FORMS))
def test_a_golden_of_the_wrong_form_names_the_scene_and_rank(pytester: pytest.Pytester, scenes, sums, form) -> None:
    """As a one-rank case reports it: the scene's compute_golden, the rank where one alone is wrong,
    and the case's params and repro line, not a traceback through pytest's internals."""
    golden, message = GOLDEN_FORMS[form]
    pytester.makepyfile(
        test_scene=f"""
        from pytest_mpk import PerRank, scene_test
        from sums import SumScene, total

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def compute_golden(self, args, params):
                return {golden}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message, "params: {'batch': 2}", "repro: pytest *"])
    result.stdout.no_fnmatch_line("*HookCallError*")


def test_a_rank_without_outputs_is_named(pytester: pytest.Pytester, scenes, sums) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def generate_args(self, params):
                args = super().generate_args(params)
                if params["rank"] == 1:
                    args["output"] = args["output"].tensor
                return args
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["rank 1: SceneError: TestTwo.generate_args returned no Out or InOut tensor; wrap each output, e.g. *"]
    )
    result.stdout.no_fnmatch_line("rank 0:*")


@pytest.mark.parametrize("where", ["Case('b2', batch=2, rank=1)", "DEFAULTS"])
def test_rank_and_world_size_are_the_harness_parameters(pytester: pytest.Pytester, scenes, sums, where) -> None:
    """A case parameter of either name would be overwritten on every rank without a word."""
    case = where if where != "DEFAULTS" else "Case('b2', batch=2)"
    defaults = "{'world_size': 4}" if where == "DEFAULTS" else "{}"
    pytester.makepyfile(
        test_scene=f"""
        from pytest_mpk import Case, scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            CASES = [{case}]
            DEFAULTS = {defaults}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*TestTwo: [[]'{'rank' if where != 'DEFAULTS' else 'world_size'}'[]] are set by the harness on a scene of 2 "
            "ranks (each rank gets its own rank, and world_size 2); name the case parameter otherwise"
        ]
    )


def test_mpk_replay_of_a_multi_rank_case_is_refused_not_ignored(pytester: pytest.Pytester, scenes, sums) -> None:
    """The case would otherwise build and run its scene and pass as if the saved graph had run."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            pass
    """
    )
    pytester.runpytest_inprocess("--mpk-keep-artifacts").assert_outcomes(passed=1)
    (kept,) = pytester.path.glob(".mpk-artifacts/*")
    assert (kept / "task_graph_rank1.json").is_file()
    result = pytester.runpytest_inprocess("--mpk-replay", str(kept))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"--mpk-replay {kept}: a scene on 2 ranks is not replayed by the plugin *; run the case without --mpk-replay, *"]
    )


MARKS = {  # the decorators above the scene class, and the collection error
    "bare": ("@pytest.mark.mpk_world_size", "mpk_world_size(): give the number of ranks alone, e.g. mpk_world_size(4)"),
    "another keyword": ("@pytest.mark.mpk_world_size(ranks=4)", "mpk_world_size(ranks=4): give the number of ranks alone*"),
    "two numbers": ("@pytest.mark.mpk_world_size(2, 4)", "mpk_world_size(2, 4): give the number of ranks alone*"),
    "disagreeing with the decorator": (
        "@pytest.mark.mpk_world_size(4)",
        "mpk_world_size(4) and @scene_test(world_size=2) disagree; say the number of ranks once",
    ),
}


@pytest.mark.parametrize("case", MARKS, ids=list(MARKS))
def test_a_world_size_marker_is_one_number_that_agrees(pytester: pytest.Pytester, scenes, sums, case) -> None:
    """Read as it was written or refused: a bare marker or one with another keyword had meant one rank,
    an extra number was ignored, and the decorator silently won over a marker that disagreed."""
    mark, message = MARKS[case]
    decorator = (
        "@scene_test(layer='allreduce', world_size=2)" if case.startswith("disagreeing") else "@scene_test(layer='allreduce')"
    )
    pytester.makepyfile(
        test_scene=f"import pytest\nfrom pytest_mpk import scene_test\nfrom sums import SumScene\n\n{mark}\n{decorator}\n"
        "class TestTwo(SumScene):\n    pass\n"
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*TestTwo: {message}*"])


def test_inputs_that_the_seed_does_not_give_again_are_refused(pytester: pytest.Pytester, scenes, sums) -> None:
    """Every rank regenerates the others' inputs from the seed under MPI; inputs drawn from a
    generator the harness does not seed passed emulated, and would be compared against other data
    under MPI."""
    pytester.makepyfile(
        test_scene="""
        import random
        import torch
        from pytest_mpk import Out, scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            def generate_args(self, params):
                g = torch.Generator().manual_seed(random.randrange(1 << 30))
                return {"input": torch.randn(2, 64, generator=g), "output": Out(torch.empty(2, 64))}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "SceneError: TestTwo.generate_args gave another 'input' for the same seed (rank 0, drawn twice); every rank "
            "regenerates the others' inputs from the seed: *"
        ]
    )


def test_a_key_no_rank_reads_fails_the_case(pytester: pytest.Pytester, scenes, sums) -> None:
    """As on one rank: every rank ran here, and none read the case's 'batchsize'."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from sums import SumScene

        @scene_test(layer="allreduce", world_size=2)
        class TestTwo(SumScene):
            CASES = [Case("b2", batch=2, batchsize=4)]
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Case 'b2' gives 'batchsize', which the scene never read *, so it has no effect; *"])


@pytest.mark.parametrize(
    ("scene", "reason"),
    [
        ('CASES = []\n    SWEEP = {"batch": st.integers(1, 2)}', "a sweep of a 2-rank scene runs emulated*"),
        ("pass", "needs 2 ranks under MPI: no mpirun here"),
    ],
    ids=["a sweep of launched ranks", "no way to launch them"],
)
def test_a_skipped_multi_rank_item_is_reported_at_its_scene(
    pytester: pytest.Pytester, scenes, sums, monkeypatch, scene: str, reason: str
) -> None:
    """Ranks that would each be launched, skipped; -rs names the scene's file, not the plugin's (as
    a one-rank case's skip does)."""
    from pytest_mpk import rank_items

    monkeypatch.setenv("MPK_LAUNCH_COMPILE_ONLY", "1")
    monkeypatch.setattr(rank_items, "can_launch", lambda: "no mpirun here")
    pytester.makepyfile(
        test_scene=f"""
from hypothesis import strategies as st
from pytest_mpk import scene_test
from sums import SumScene

@scene_test(layer="allreduce", world_size=2)
class TestTwo(SumScene):
    {scene}
"""
    )
    result = pytester.runpytest_inprocess("--mpk-backend", "compile-only", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_scene.py:*: {reason}"])
    result.stdout.no_fnmatch_line("*rank_items.py*")
