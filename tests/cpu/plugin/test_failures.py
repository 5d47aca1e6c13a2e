"""What a failing case reports: the mismatch (counts, worst elements, NaN positions, never-written
elements), its params, backend, artifacts and repro line, without a traceback; and which
tolerances decide (dtype defaults, per case, per output; integers exactly)."""

from __future__ import annotations

import glob

import pytest


def test_mismatch_report(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene, rmsnorm

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def compute_golden(self, args, params):
                expected = rmsnorm(args.input, args.weight)
                expected[1, 7] += 5.0
                expected[0, 3] += 0.5
                return expected
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestNorm::b2[[]sm90[]] _*",
            "output 'output' (float32, shape (2, 256)) differs from the golden (rtol=1e-05, atol=1e-06): "
            "2 of 512 elements (0.391%)",
            "  worst elements (index: actual vs expected, |diff|):",
            "    (1, 7): * vs *, 5",
            "    (0, 3): * vs *, 0.5",
            "params: {'batch': 2, 'hidden': 256}",
            "backend: emulated (CUDA bodies on the CPU) (sm90)",
            f"artifacts: {glob.escape(str(pytester.path))}/.mpk-artifacts/test_scene.py_TestNorm_b2_sm90 (inputs.pt, actual.pt, "
            "expected.pt, test_rank0.cu, task_graph_rank0.json, signature_rank0.json)",
            "repro: pytest 'test_scene.py::TestNorm::b2[[]sm90[]]' -p mpk --arch sm90 --mpk-backend auto",
            "*- mpk backends: 1 emulated (CUDA bodies on the CPU) -*",
            # (the reason follows where the terminal is wide enough)
            "FAILED [[]emulated (CUDA bodies on the CPU)[]] test_scene.py::TestNorm::b2[[]sm90[]]*",
        ]
    )
    # The report is the whole message: no traceback through the plugin or the runtime.
    result.stdout.no_fnmatch_line("*runner.py*")
    result.stdout.no_fnmatch_line("*NaN in the output*")


def test_every_failing_output_is_reported(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import Case, Out, scene_test
        from scenes import NormScene, rmsnorm

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):  # two more outputs, which no layer writes
                args = super().generate_args(params)
                return {**args, "stats": Out(torch.empty(2, 4)), "counts": Out(torch.empty(3, dtype=torch.int32))}

            def compute_golden(self, args, params):
                return {"output": rmsnorm(args.input, args.weight), "stats": torch.zeros(2, 4),
                        "counts": torch.zeros(3, dtype=torch.int32)}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "output 'stats' (float32, shape (2, 4)) differs from the golden (rtol=1e-05, atol=0; atol: the default 1e-06 "
            "scaled to the golden's largest |value| 0): 8 of 8 elements (100%)",
            "  NaN in the output: 8 with the poison's bits (never written, or copied from an element never written), "
            "first at (0, 0), (0, 1), (0, 2), (0, 3), (1, 0)",
            "  the first element off, (0, 0): no task's output slice holds stats[[]0, 0[]]",
            "  worst elements (index: actual vs expected, |diff|):",
            "    (*): nan vs 0, nan",
            "output 'counts' (int32, shape (3,)) differs from the golden (rtol=0, atol=0): 3 of 3 elements (100%)",
            "  3 elements still hold the poison value -2147483648: never written",
            "params: {'batch': 2, 'hidden': 256}",
        ]
    )
    result.stdout.no_fnmatch_line("output 'output'*")  # the layer wrote that one correctly


TOLERANCES = """
from pytest_mpk import Case, scene_test
from scenes import NormScene, rmsnorm

@scene_test(layer="rmsnorm")
class TestNorm(NormScene):
    CASES = [
        Case("defaults", batch=2, hidden=256),
        Case("case_rtol", batch=2, hidden=256, rtol=2e-3),
        Case("output_tolerance", batch=2, hidden=256, tolerances={"output": (2e-3, 0.0)}),
        Case("output_beats_case", batch=2, hidden=256, rtol=2e-3, tolerances={"output": (1e-5, 1e-6)}),
        Case("case_atol", batch=2, hidden=256, atol=1.0),
    ]

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight) * (1 + 1e-3)  # 0.1% off: past the float32 defaults
"""


def test_tolerances_per_case_and_per_output(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(test_scene=TOLERANCES)
    result = pytester.runpytest_inprocess("-v")
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestNorm::defaults[[]sm90[]] FAILED*",
            "test_scene.py::TestNorm::case_rtol[[]sm90[]] PASSED*",
            "test_scene.py::TestNorm::output_tolerance[[]sm90[]] PASSED*",
            "test_scene.py::TestNorm::output_beats_case[[]sm90[]] FAILED*",
            "test_scene.py::TestNorm::case_atol[[]sm90[]] PASSED*",
        ]
    )
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(["*_ TestNorm::defaults[[]sm90[]] _*", "*(rtol=1e-05, atol=1e-06)*"])
    result.stdout.fnmatch_lines(["*_ TestNorm::output_beats_case[[]sm90[]] _*", "*(rtol=1e-05, atol=1e-06)*"])


def test_integer_outputs_are_compared_exactly(pytester: pytest.Pytester, scenes) -> None:
    """A golden one off in one row of values near 1000 fails: the 1.6% a bfloat16 output may be off
    by is no excuse for an integer, nor is a case-wide rtol meant for the float outputs. Only a
    tolerance given for that output loosens it."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import ProbeScene

        @scene_test(layer="probe")
        class TestProbe(ProbeScene):
            CASES = [
                Case("exact", batch=2, off=0),
                Case("off_by_one", batch=2, off=1),
                Case("case_rtol", batch=2, off=1, rtol=0.2),
                Case("own_tolerance", batch=2, off=1, tolerances={"y": (0.0, 1.0)}),
            ]

            def compute_golden(self, args, params):
                expected = super().compute_golden(args, params)
                expected[1] += params["off"]
                return expected
    """
    )
    result = pytester.runpytest_inprocess("-v")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "test_scene.py::TestProbe::exact[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestProbe::off_by_one[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestProbe::case_rtol[[]sm90[]] FAILED [[]emulated (CUDA bodies on the CPU)[]]*",
            "test_scene.py::TestProbe::own_tolerance[[]sm90[]] PASSED [[]emulated (CUDA bodies on the CPU)[]]*",
            "output 'y' (int32, shape (2, 4)) differs from the golden (rtol=0, atol=0): 4 of 8 elements (50%)",
            "    (1, *): * vs *, 1",
        ]
    )


def test_runtime_errors_show_their_message_and_the_scene_line(pytester: pytest.Pytester, scenes) -> None:
    """An MpkError in build() says what is wrong and how to fix it, and where in the scene: the
    runtime's frames would add nothing."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def build(self, pk, t, params):
                pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(2, 1, 1),
                                 block_dim=(128, 1, 1))
    """
    )
    result = pytester.runpytest_inprocess("--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestNorm::b2[[]sm90[]] _*",
            "BlockDimError: rmsnorm_layer(): block_dim=(128, 1, 1) does not match the 256 worker "
            "threads of sm90; pass block_dim=pk.block_dim",
            "  at test_scene.py:9, in build:",
            "    pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(2, 1, 1),",
            "                     block_dim=(128, 1, 1))",
        ]
    )
    result.stdout.no_fnmatch_line("*kernel.py*")


def test_a_graph_error_shows_the_scene_line_not_a_library_wrapper(pytester: pytest.Pytester, scenes) -> None:
    """A GridError raised inside the graph builder's decorated function: the frame shown is the
    scene's build(), not the standard library's contextlib wrapper (which it had been)."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def build(self, pk, t, params):
                pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    """
    )
    result = pytester.runpytest_inprocess("--arch", "sm90")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["GridError: rmsnorm_0: grid_dim x=4 does not divide *", "  at test_scene.py:9, in build:"])
    result.stdout.no_fnmatch_line("*contextlib.py*")


def test_a_mistake_in_the_scene_shows_the_scene_s_frames(pytester: pytest.Pytester, scenes) -> None:
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def compute_golden(self, args, params):
                return args.inptu
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([">*return args.inptu", "E*AttributeError: *'inptu'*", "test_scene.py:*: AttributeError"])
    result.stdout.no_fnmatch_line("*pytest_mpk*")


def test_an_inner_run_does_not_warn_about_assertion_rewriting(pytester: pytest.Pytester, scenes) -> None:
    """An in-process run finds the plugin as this process imported it (from the installation, not
    the checkout), so pytest has no module of ours to mark for rewriting after the fact."""
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
    """
    )
    result = pytester.runpytest_inprocess("--collect-only")
    result.stdout.no_fnmatch_line("*PytestAssertRewriteWarning*")
    result.stdout.no_fnmatch_line("*already imported*")


def test_a_non_contiguous_input_is_refused_as_attach_input_refuses_it(pytester: pytest.Pytester, scenes) -> None:
    """The harness copies what generate_args returns with its strides, so the one rule (in
    attach_input) applies: a transposed view is refused, not silently made contiguous."""
    pytester.makepyfile(
        test_scene="""
        import torch
        from pytest_mpk import Case, Out, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]

            def generate_args(self, params):
                return {"input": torch.randn(256, 2).t(), "weight": torch.randn(256), "output": Out(torch.empty(2, 256))}
    """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["LayoutError: tensor 'input' with shape (2, 256) and strides (1, 2) is not contiguous; pass tensor.contiguous()"]
    )


def test_a_build_error_keeps_the_source_and_gives_the_repro(pytester: pytest.Pytester, scenes, monkeypatch) -> None:
    """nvcc refusing the generated source: the case's artifacts directory holds test_rank0.cu (written
    before the build) and the report ends with the artifacts and repro lines, as any failure's."""
    from mpk_runtime import BuildError
    from mpk_runtime.build import cache

    def refuse(source_path, out, arch, *args, **kwargs):
        raise BuildError(f"nvcc failed (1) building {source_path} for {arch}:\n{source_path}(3): error: expected a ';'")

    monkeypatch.setattr(cache, "compile_to", refuse)
    monkeypatch.setenv("MPK_CACHE_DIR", str(pytester.path / "cache"))
    pytester.makepyfile(
        test_scene="""
        from pytest_mpk import Case, scene_test
        from scenes import NormScene

        @scene_test(layer="rmsnorm")
        class TestNorm(NormScene):
            CASES = [Case("b2", batch=2, hidden=256)]
    """
    )
    result = pytester.runpytest_inprocess("--mpk-backend", "compile-only", "--arch", "sm90")
    result.assert_outcomes(failed=1)
    kept = pytester.path / ".mpk-artifacts" / "test_scene.py_TestNorm_b2_sm90"
    result.stdout.fnmatch_lines(
        [
            f"BuildError: nvcc failed (1) building {pytester.path}/cache/failed/*.cu for sm90:",
            f"artifacts: {kept} (*test_rank0.cu*)",
            "repro: pytest 'test_scene.py::TestNorm::b2[[]sm90[]]' -p mpk *",
        ]
    )
    assert (kept / "test_rank0.cu").is_file()
    assert not (kept / "actual.pt").exists()  # the kernel never ran: its outputs' poison is no result
