"""compare.py: tolerances per dtype (integers exact), the poison outputs are filled with, and the
mismatch report (counts, NaN / inf positions, never-written elements, worst elements first)."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_mpk import compare, sanitize
from pytest_mpk.compare import MismatchError, check, poison, tolerance


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.bfloat16, (1.6e-2, 1e-2)),
        (torch.float16, (2e-3, 2e-3)),
        (torch.float32, (1e-5, 1e-6)),
        (torch.float64, (1e-7, 1e-9)),
        (torch.float8_e4m3fn, (1e-5, 1e-6)),  # a float type without its own entry: the strict fallback
        (torch.int32, (0.0, 0.0)),
        (torch.int64, (0.0, 0.0)),
        (torch.uint8, (0.0, 0.0)),
        (torch.bool, (0.0, 0.0)),
    ],
)
def test_default_tolerances(dtype: torch.dtype, expected: tuple[float, float]) -> None:
    assert tolerance(dtype) == expected


def test_overrides_replace_one_default_at_a_time() -> None:
    assert tolerance(torch.bfloat16, rtol=0.1) == (0.1, 1e-2)
    assert tolerance(torch.bfloat16, atol=0.0) == (1.6e-2, 0.0)
    assert tolerance(torch.int32, atol=1) == (0.0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_floats_are_poisoned_with_nan(dtype: torch.dtype) -> None:
    t = torch.zeros(2, 3, dtype=dtype)
    assert poison(t) is t
    assert t.isnan().all()


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (torch.int8, -128),
        (torch.int16, -(2**15)),
        (torch.int32, -(2**31)),
        (torch.int64, -(2**63)),
        (torch.uint8, 255),
        (torch.uint16, 2**16 - 1),
        (torch.uint32, 2**32 - 1),
        (torch.uint64, 2**64 - 1),
        (torch.bool, True),
    ],
)
def test_integers_are_poisoned_far_from_zero(dtype: torch.dtype, value: int) -> None:
    """The signed minimum; the unsigned maximum, since 0 is what kernels write most."""
    t = poison(torch.zeros(2, 3, dtype=dtype))
    assert (t == value).all()


def test_a_match_passes() -> None:
    x = torch.randn(4, 8)
    check("out", x.clone(), x)
    check("out", x.bfloat16(), x.double())  # the golden is compared in the output's dtype
    check("ids", torch.arange(5, dtype=torch.int32), torch.arange(5, dtype=torch.int32))


def report_of(actual: torch.Tensor, expected: torch.Tensor, **tolerances) -> list[str]:
    with pytest.raises(MismatchError) as e:
        check("out", actual, expected, **tolerances)
    return str(e.value).splitlines()


def test_report_counts_and_worst_elements_first() -> None:
    expected = torch.zeros(4, 8)
    actual = expected.clone()
    actual[0, 1], actual[2, 5], actual[3, 7] = 0.5, -3.0, 1.0
    lines = report_of(actual, expected, atol=1e-6)
    assert lines == [
        "output 'out' (float32, shape (4, 8)) differs from the golden (rtol=1e-05, atol=1e-06): 3 of 32 elements (9.38%)",
        "  worst elements (index: actual vs expected, |diff|):",
        "    (2, 5): -3 vs 0, 3",
        "    (3, 7): 1 vs 0, 1",
        "    (0, 1): 0.5 vs 0, 0.5",
    ]


def test_report_lists_at_most_the_eight_worst() -> None:
    expected = torch.zeros(100)
    actual = torch.arange(100, dtype=torch.float32)
    lines = report_of(actual, expected)
    assert lines[0].endswith("99 of 100 elements (99%)")
    worst = lines[2:]
    assert len(worst) == compare.WORST == 8
    assert worst[0] == "    (99,): 99 vs 0, 99" and worst[-1] == "    (92,): 92 vs 0, 92"


def test_report_locates_nan_and_inf() -> None:
    expected = torch.ones(3, 4)
    actual = expected.clone()
    actual[1, 2] = math.nan
    actual[2, 0] = math.inf
    actual[2, 3] = -math.inf
    lines = report_of(actual, expected)
    assert lines[0].endswith("3 of 12 elements (25%)")
    assert lines[1] == (
        "  NaN in the output: 1 computed by the kernel (not the poison's bits: 0/0, inf - inf, a NaN input, or "
        "poison read before it was written: an output or pk.new_tensor read before a task wrote it, or a dependency "
        "the declared slices miss; --mpk-emulate-check names such a read), "
        "first at (1, 2)"
    )
    assert lines[2] == "  inf in the output: 2, first at (2, 0), (2, 3)"
    assert lines[4].startswith("    (1, 2): nan vs 1")  # NaN counts as the worst


def test_nan_in_the_golden_never_matches() -> None:
    nan = torch.full((2,), math.nan)
    lines = report_of(nan.clone(), nan)
    assert lines[0].endswith("2 of 2 elements (100%)")


def test_nan_positions_are_the_first_five() -> None:
    lines = report_of(poison(torch.empty(3, 3)), torch.zeros(3, 3))
    assert lines[1].startswith("  NaN in the output: 9 with the poison's bits (never written, or copied from an element")
    assert lines[1].endswith("first at (0, 0), (0, 1), (0, 2), (1, 0), (1, 1)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_the_poison_is_a_nan_arithmetic_does_not_make(dtype: torch.dtype) -> None:
    """A NaN the kernel computed (0/0, or arithmetic on a NaN) is told apart from an element never written."""
    t = poison(torch.empty(4, dtype=dtype))
    assert torch.isnan(t).all() and compare.holds_poison(t).all()
    computed = torch.zeros(1, dtype=dtype) / 0
    assert torch.isnan(computed).all() and not compare.holds_poison(computed).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_an_intermediate_s_poison_copied_into_an_output_is_neither_unwritten_nor_computed(dtype: torch.dtype) -> None:
    """A task that copies an intermediate element nobody wrote into its output wrote that element: had
    intermediates the outputs' poison, the untouched-data check would take the copy for never written
    (argmax_reduce writing the rows of inactive tokens from its partials' poisoned rows passed so)."""
    mid = poison(torch.empty(4, dtype=dtype), intermediate=True)
    assert torch.isnan(mid).all() and compare.holds_poison(mid, intermediate=True).all()
    assert not compare.holds_poison(mid).any()
    actual = poison(torch.empty(2, 3, dtype=dtype))
    actual[0] = mid[:3]
    lines = report_of(actual, torch.ones(2, 3))
    assert lines[1].startswith("  NaN in the output: 3 with the poison's bits") and lines[1].endswith("(1, 2)")
    assert lines[2] == (
        "  NaN in the output: 3 with a pk.new_tensor's poison bits (copied from an intermediate element no task wrote: "
        "read before its producer ran, or an element no task writes, such as a row of an inactive token), first at "
        "(0, 0), (0, 1), (0, 2)"
    )


def test_an_intermediate_s_integer_poison_is_the_next_one_toward_zero() -> None:
    mid = poison(torch.empty(3, dtype=torch.int64), intermediate=True)
    assert bool((mid == torch.iinfo(torch.int64).min + 1).all())
    assert compare.poison_value(torch.uint8, intermediate=True) == 254
    lines = report_of(torch.cat([mid[:2], poison(torch.empty(1, dtype=torch.int64))]), torch.zeros(3, dtype=torch.int64))
    assert "  1 elements still hold the poison value -9223372036854775808: never written" in lines
    assert any(line.startswith("  2 elements hold -9223372036854775807, a pk.new_tensor's poison (copied from") for line in lines)


def test_a_computed_nan_and_an_unwritten_element_are_reported_apart() -> None:
    actual = poison(torch.empty(2, 3))
    actual[0] = torch.tensor([1.0, math.nan, 1.0])
    lines = report_of(actual, torch.ones(2, 3), owner=lambda i: f"task {i[0]} writes row {i[0]}")
    assert lines[1] == (
        "  NaN in the output: 3 with the poison's bits (never written, or copied from an element never written), "
        "first at (1, 0), (1, 1), (1, 2)"
    )
    assert lines[2].startswith("  NaN in the output: 1 computed by the kernel") and lines[2].endswith("first at (0, 1)")
    assert lines[3] == "  the first element off, (0, 1): task 0 writes row 0"


def test_the_default_atol_follows_a_golden_of_small_values() -> None:
    """bf16's default atol, 0.01, is larger than every value of a softmax over 32768 columns: an
    all-zero output had passed. Scaled to the golden's largest |value|, it fails."""
    expected = torch.softmax(torch.randn(2, 32768, generator=torch.Generator().manual_seed(0)), dim=-1)
    lines = report_of(torch.zeros(2, 32768, dtype=torch.bfloat16), expected)
    peak = float(expected.abs().max())
    assert lines[0].startswith(
        f"output 'out' (bfloat16, shape (2, 32768)) differs from the golden (rtol=0.016, atol={0.01 * peak:g}; atol: the "
        f"default 0.01 scaled to the golden's largest |value| {peak:.3g}): "
    )
    check("out", expected.to(torch.bfloat16), expected)  # the output rounded to bf16 still passes
    check("out", torch.zeros(2, 32768, dtype=torch.bfloat16), expected, atol=0.01)  # a tolerance given is kept
    assert compare.scaled_atol(torch.bfloat16, torch.tensor([-3.0, 0.5])) == (0.01, "")  # values past 1: as it was


def test_integers_are_exact_and_unwritten_ones_are_named() -> None:
    expected = torch.tensor([10, 20, 30, 40], dtype=torch.int32)
    actual = expected.clone()
    actual[1] = 21
    actual[3] = torch.iinfo(torch.int32).min
    lines = report_of(actual, expected)
    assert lines[0] == ("output 'out' (int32, shape (4,)) differs from the golden (rtol=0, atol=0): 2 of 4 elements (50%)")
    assert lines[1] == "  1 elements still hold the poison value -2147483648: never written"
    assert lines[-1] == "    (1,): 21 vs 20, 1"
    check("out", actual, expected, atol=2**32)  # a tolerance given for an integer output is honoured


def test_unsigned_unwritten_elements_hold_the_maximum() -> None:
    expected = torch.zeros(4, dtype=torch.uint8)
    actual = poison(torch.empty(4, dtype=torch.uint8))
    actual[:2] = 0
    lines = report_of(actual, expected)
    assert lines[1] == "  2 elements still hold the poison value 255: never written"


def test_tolerances_decide_within_and_beyond() -> None:
    expected = torch.full((4,), 100.0)
    actual = expected * (1 + 1e-3)
    check("out", actual.bfloat16(), expected)  # within bfloat16's defaults
    assert report_of(actual, expected)[0].endswith("4 of 4 elements (100%)")  # beyond float32's
    check("out", actual, expected, rtol=2e-3)
    check("out", actual, expected, atol=0.2)
    assert "(rtol=0.0001, atol=0.05)" in report_of(actual, expected, rtol=1e-4, atol=0.05)[0]


@pytest.mark.parametrize(
    ("actual", "expected", "message"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "output 'out': shape (2, 3), but the golden has (3, 2)"),
        (torch.zeros(4), torch.zeros(2, 2), "output 'out': shape (4,), but the golden has (2, 2)"),
        (torch.zeros(2), [0.0, 0.0], "output 'out': the golden is a list, not a tensor"),
    ],
)
def test_wrong_shape_or_type_of_golden(actual, expected, message: str) -> None:
    with pytest.raises(MismatchError) as e:
        check("out", actual, expected)
    assert str(e.value) == message


def _truncate_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 dropping the low 16 bits: rounding toward zero."""
    return (x.float().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def test_a_truncating_conversion_is_caught_though_within_tolerance() -> None:
    torch.manual_seed(0)
    exact = torch.randn(64, 256)
    truncated = _truncate_to_bf16(exact)
    torch.testing.assert_close(truncated, exact.to(torch.bfloat16), rtol=1.6e-2, atol=1e-2)  # the tolerance passes it
    with pytest.raises(compare.MismatchError) as e:
        compare.check("y", truncated, exact)
    assert "output 'y': within tolerance, but rounded toward zero: of the" in str(e.value)
    assert "100.0% lie toward zero" in str(e.value)


def test_summation_order_differences_on_both_sides_pass() -> None:
    """A kernel that rounds to nearest after summing in another order; and fp32 errors of 2**-9 either
    way, large enough that a third of the elements round differently: both pass."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 1024), torch.randn(1024, 256)
    golden = x @ w
    reordered = (x[:, :512] @ w[:512] + x[:, 512:] @ w[512:]).to(torch.bfloat16)
    compare.check("y", reordered, golden)  # (one element of 16384 differs: far below the count judged)
    nudged = (golden * (1 + 2**-9 * torch.where(torch.rand_like(golden) < 0.5, 1.0, -1.0))).to(torch.bfloat16)
    assert int((nudged.float() != golden.to(torch.bfloat16).float()).sum()) >= compare.BIAS_MIN_DIFFERING
    compare.check("y", nudged, golden)  # many differences, half each way


def test_too_few_differences_say_nothing_about_rounding() -> None:
    exact = torch.randn(4, 32)
    compare.check("y", _truncate_to_bf16(exact), exact)  # at most 128 differ: below the count judged


def test_a_kernel_s_intermediates_are_poisoned_and_its_attached_tensors_are_not() -> None:
    """What the one-rank runner and each rank of a multi-rank case do after compile()."""
    import mpk_runtime as mpk
    from pytest_mpk.compare import holds_poison, poison_intermediates

    params = mpk.PersistentKernel.get_default_init_parameters()
    params.update(emulate="reference", target_cc=90, max_num_batched_tokens=2, max_seq_length=2, max_num_pages=2)
    pk = mpk.PersistentKernel(**params)
    x = pk.attach_input(torch.ones(2, 256, dtype=torch.bfloat16), "x")
    w = pk.attach_input(torch.ones(256, dtype=torch.bfloat16), "w")
    mid = pk.new_tensor((2, 256), torch.bfloat16, "mid")
    out = pk.attach_input(torch.zeros(2, 256, dtype=torch.bfloat16), "out")
    pk.rmsnorm_layer(input=x, weight=w, output=mid, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.rmsnorm_layer(input=mid, weight=w, output=out, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    pk.tensor("mid").zero_()
    poison_intermediates(pk)
    assert holds_poison(pk.tensor("mid"), intermediate=True).all() and not holds_poison(pk.tensor("mid")).any()
    assert not holds_poison(pk.tensor("out")).any() and bool((pk.tensor("x") == 1).all())
    pk.tensor("mid").zero_()
    with pytest.MonkeyPatch.context() as mp:  # initcheck's child: the tool must see an unwritten intermediate
        mp.setenv(sanitize.CHILD, "initcheck")
        poison_intermediates(pk)
        assert bool((pk.tensor("mid") == 0).all())
        mp.setenv(sanitize.CHILD, "memcheck")
        poison_intermediates(pk)
        assert holds_poison(pk.tensor("mid"), intermediate=True).all()
    pk.finalize()
