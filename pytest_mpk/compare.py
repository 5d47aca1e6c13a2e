"""Comparing a kernel's outputs with their golden: dtype-aware tolerances, and a failure report that
says how many elements are off, where the NaN / inf are, and which elements are worst."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import sanitize
from .scene import check_tolerance

# (rtol, atol) per dtype: what a correct kernel lands within against an fp32 reference; integers
# are exact. Cases override per case or per output (Case(rtol=..., atol=..., tolerances={...})).
DEFAULT_TOLERANCES = {
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 2e-3),
    torch.float32: (1e-5, 1e-6),
    torch.float64: (1e-7, 1e-9),
}
WORST = 8
# A 16-bit output's elements that differ from the golden rounded to that dtype: a kernel rounding to
# nearest differs by its summation order alone, on either side; one that truncates (or rounds up)
# puts nearly all of them on one side. Judged only from this many differing elements on.
BIAS_MIN_DIFFERING = 256
BIAS_SHARE = 0.9  # ... and only when at least this share lies on one side (toward or away from zero)


class MismatchError(AssertionError):
    """An output differs from its golden; the message is the full report."""


class GoldenError(MismatchError):
    """A golden that cannot be compared with its output: not a tensor, or of another shape or kind."""


def check_golden(where: str, name: str, value: object, output: torch.Tensor) -> None:
    """GoldenError unless ``value`` is a tensor of ``output``'s shape and kind of dtype (floating,
    integer, bool, complex; an fp32 golden of a bf16 output is fine). ``where`` names the scene."""
    if not isinstance(value, torch.Tensor):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise GoldenError(f"{where}: the golden of output {name!r} is {shown} ({type(value).__name__}), not a torch.Tensor")
    if tuple(value.shape) != tuple(output.shape):
        raise GoldenError(
            f"{where}: the golden of output {name!r} has shape {tuple(value.shape)}, but the output has {tuple(output.shape)}"
        )
    if _kind(value.dtype) != _kind(output.dtype):
        raise GoldenError(
            f"{where}: the golden of output {name!r} is {str(value.dtype).replace('torch.', '')} ({_kind(value.dtype)}), "
            f"but the output is {str(output.dtype).replace('torch.', '')} ({_kind(output.dtype)})"
        )


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating point" if dtype.is_floating_point else "integer"


def tolerance(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    if not dtype.is_floating_point:
        return (0.0 if rtol is None else rtol, 0.0 if atol is None else atol)
    d_rtol, d_atol = DEFAULT_TOLERANCES.get(dtype, (1e-5, 1e-6))
    return (d_rtol if rtol is None else rtol, d_atol if atol is None else atol)


# A float output's poison: a quiet NaN whose payload arithmetic does not make (a GPU's arithmetic
# gives the canonical NaN; 0/0 on a CPU the "default" one), so a report tells an element never
# written (these bits, or copied from one) from a NaN the kernel computed.
POISON_BITS = {
    torch.bfloat16: (torch.int16, 0x7FD5),
    torch.float16: (torch.int16, 0x7ED5),
    torch.float32: (torch.int32, 0x7FD5D5D5),
    torch.float64: (torch.int64, 0x7FFAD5D5D5D5D5D5),
}
# A pk.new_tensor intermediate's poison: other bits (other integers), so that an output element a
# task copied from an intermediate element nobody wrote is neither the output's poison, which would
# pass as never written, nor a NaN the kernel computed.
INTERMEDIATE_POISON_BITS = {
    torch.bfloat16: (torch.int16, 0x7FAB),
    torch.float16: (torch.int16, 0x7EAB),
    torch.float32: (torch.int32, 0x7FABABAB),
    torch.float64: (torch.int64, 0x7FFAABABABABABAB),
}


FROM_INTERMEDIATE = (
    "copied from an intermediate element no task wrote: read before its producer ran, or an element no task "
    "writes, such as a row of an inactive token"
)
COMPUTED_NAN = (
    " computed by the kernel (not the poison's bits: 0/0, inf - inf, a NaN input, or poison read before it was "
    "written: an output or pk.new_tensor read before a task wrote it, or a dependency the declared slices miss; "
    "--mpk-emulate-check names such a read)"
)


def poison_value(dtype: torch.dtype, intermediate: bool = False) -> float | int | bool:
    """What ``poison`` fills with: NaN (with the payload of POISON_BITS), True, or the integer
    furthest from 0 (the minimum; for an unsigned type the maximum, as its minimum, 0, is what kernels
    write all the time); an intermediate's integer is the next one toward 0."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    return (info.max - intermediate) if info.min == 0 else (info.min + intermediate)


def poison(t: torch.Tensor, intermediate: bool = False) -> torch.Tensor:
    """Fill an output (an ``intermediate``: INTERMEDIATE_POISON_BITS) with a value a kernel would not
    produce, so unwritten elements show."""
    bits = INTERMEDIATE_POISON_BITS if intermediate else POISON_BITS
    if t.dtype in bits and t.is_contiguous():
        view, value = bits[t.dtype]
        t.view(view).fill_(value)
        return t
    return t.fill_(poison_value(t.dtype, intermediate))


def poison_intermediates(pk: Any) -> None:
    """Poison the memory of a compiled kernel's ``pk.new_tensor`` intermediates with their own
    poison: a body that reads one before a task wrote it fails whatever the allocation held. Not
    under compute-sanitizer's initcheck, which reports such a read itself, and would not see it in
    memory the poison had written."""
    if sanitize.initcheck_child():
        return
    for info in pk.compiled_graph.tensors:
        if info.kind == "intermediate":
            poison(pk.tensor(info.name), intermediate=True)


def holds_poison(t: torch.Tensor, intermediate: bool = False) -> torch.Tensor:
    """Where a float output still has the poison's bits (never written, or copied from such an
    element); ``intermediate``: an intermediate's poison bits (copied from an element nobody wrote)."""
    bits = INTERMEDIATE_POISON_BITS if intermediate else POISON_BITS
    if t.dtype not in bits:  # a float type without a payload of ours: any NaN is the outputs' poison
        return torch.zeros_like(t, dtype=torch.bool) if intermediate else torch.isnan(t)
    view, value = bits[t.dtype]
    return t.contiguous().view(view) == value


def scaled_atol(dtype: torch.dtype, expected: torch.Tensor) -> tuple[float, str]:
    """The dtype's default atol, scaled down to the golden's largest |value| when that is below 1,
    and why: the defaults are absolute errors of values around 1, so against outputs of 1e-3 (a softmax
    over 32768 columns) bf16's 0.01 would let an all-zero output pass."""
    atol = tolerance(dtype)[1]
    finite = expected.detach().double().abs()[torch.isfinite(expected)]
    peak = float(finite.max()) if finite.numel() else 1.0
    if peak >= 1.0:
        return atol, ""
    return atol * peak, f"; atol: the default {atol:g} scaled to the golden's largest |value| {peak:.3g}"


def check(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    rtol: float | None = None,
    atol: float | None = None,
    owner: Callable[[tuple[int, ...]], str] | None = None,
) -> None:
    """Raise MismatchError with a report unless ``actual`` matches ``expected`` within tolerance
    (``torch.testing.assert_close`` semantics; NaN never matches). Without an ``atol`` of the case's, a
    floating-point output's default is scaled to the golden (``scaled_atol``). ``owner(index)`` says
    whose output slice holds an element, for the first one off."""
    check_tolerance(f"output {name!r}", rtol, atol)
    if not isinstance(expected, torch.Tensor):
        raise MismatchError(f"output {name!r}: the golden is a {type(expected).__name__}, not a tensor")
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    if actual.shape != expected.shape:
        raise MismatchError(f"output {name!r}: shape {tuple(actual.shape)}, but the golden has {tuple(expected.shape)}")
    why = ""
    if atol is None and actual.dtype.is_floating_point:
        atol, why = scaled_atol(actual.dtype, expected)
    rtol, atol = tolerance(actual.dtype, rtol, atol)
    try:
        torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError:
        raise MismatchError(report(name, actual, expected, rtol, atol, why, owner)) from None
    biased = rounding_bias(actual, expected)
    if biased is not None:
        raise MismatchError(f"output {name!r}: {biased}")


def rounding_bias(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Why a 16-bit float output within tolerance still looks wrongly rounded, or None: of the
    elements that differ from the golden rounded to nearest in the output's dtype, almost all lie
    toward zero (truncation) or away from it. Tolerances of a bf16 output are wider than a rounding
    mode's error, so only this side count shows a converter that truncates."""
    if actual.dtype not in (torch.bfloat16, torch.float16):
        return None
    a, e = actual.float(), expected.to(actual.dtype).float()
    differ = (a != e) & torch.isfinite(a) & torch.isfinite(e) & (e != 0) & (torch.sign(a) == torch.sign(e))
    n = int(differ.sum())
    if n < BIAS_MIN_DIFFERING:
        return None
    toward = int((differ & (a.abs() < e.abs())).sum())
    share = max(toward, n - toward) / n
    if share < BIAS_SHARE:
        return None
    side = "toward zero" if toward > n - toward else "away from zero"
    return (
        f"within tolerance, but rounded {side}: of the {n} elements that differ from the golden rounded to nearest "
        f"{str(actual.dtype).replace('torch.', '')}, {share:.1%} lie {side} (a kernel that rounds to nearest differs by "
        f"summation order alone, on either side); look for a conversion that truncates or rounds up, or a sum "
        f"accumulated in 16 bits"
    )


def report(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    rtol: float,
    atol: float,
    why: str = "",
    owner: Callable[[tuple[int, ...]], str] | None = None,
) -> str:
    a, e = actual.double(), expected.double()
    allowed = atol + rtol * e.abs()
    diff = (a - e).abs()
    bad = ~(diff <= allowed)  # NaN differences count as bad
    n, total = int(bad.sum()), a.numel()
    lines = [
        f"output {name!r} ({str(actual.dtype).replace('torch.', '')}, shape {tuple(actual.shape)}) differs "
        f"from the golden (rtol={rtol:g}, atol={atol:g}{why}): {n} of {total} elements ({100 * n / max(total, 1):.3g}%)"
    ]
    nan = torch.isnan(a)
    floats = actual.dtype.is_floating_point
    unwritten = holds_poison(actual) & nan if floats else torch.zeros_like(nan)
    copied = holds_poison(actual, intermediate=True) & nan if floats else torch.zeros_like(nan)
    for label, mask, what in (
        ("NaN", unwritten, " with the poison's bits (never written, or copied from an element never written)"),
        ("NaN", copied, f" with a pk.new_tensor's poison bits ({FROM_INTERMEDIATE})"),
        ("NaN", nan & ~unwritten & ~copied, COMPUTED_NAN),
        ("inf", torch.isinf(a), ""),
    ):
        count = int(mask.sum())
        if count:
            where = ", ".join(str(tuple(i.tolist())) for i in mask.nonzero()[:5])
            lines.append(f"  {label} in the output: {count}{what}, first at {where}")
    if not actual.dtype.is_floating_point and actual.dtype != torch.bool:
        value, other = poison_value(actual.dtype), poison_value(actual.dtype, intermediate=True)
        unwritten, from_intermediate = int((actual == value).sum()), int((actual == other).sum())
        if unwritten:
            lines.append(f"  {unwritten} elements still hold the poison value {value}: never written")
        if from_intermediate:
            lines.append(f"  {from_intermediate} elements hold {other}, a pk.new_tensor's poison ({FROM_INTERMEDIATE})")
    score = torch.where(bad, torch.nan_to_num(diff - allowed, nan=float("inf")), torch.full_like(diff, -1.0))
    worst = torch.topk(score.flatten(), min(WORST, n)).indices if n else torch.tensor([], dtype=torch.long)
    if n and owner is not None:
        first = tuple(int(i) for i in bad.nonzero()[0])
        lines.append(f"  the first element off, {first}: {owner(first)}")
    if n:
        lines.append("  worst elements (index: actual vs expected, |diff|):")
    for flat in worst.tolist():
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), actual.shape))
        lines.append(f"    {idx}: {a[idx].item():.6g} vs {e[idx].item():.6g}, {diff[idx].item():.3g}")
    return "\n".join(lines)


def check_expected(
    name: str,
    actual: torch.Tensor,
    expected: Any,
    before: torch.Tensor,
    rtol: float | None = None,
    atol: float | None = None,
    owner: Callable[[tuple[int, ...]], str] | None = None,
) -> None:
    """Check an output against an ``Expected``: its value where ``written``, and, elsewhere, the bits it
    held before the run (nothing may have written there). MismatchError with both reports otherwise.
    ``owner(index)`` says whose output slice holds an element, for the report of changed ones."""
    value, written = expected.value, expected.written
    actual = actual.detach().cpu()
    if not isinstance(written, torch.Tensor) or written.dtype != torch.bool:
        raise MismatchError(f"output {name!r}: Expected(written=...) must be a bool tensor, got {written!r}")
    if tuple(written.shape) != tuple(actual.shape[: written.dim()]):
        raise MismatchError(
            f"output {name!r}: Expected(written=...) has shape {tuple(written.shape)}; it must be the output's shape "
            f"{tuple(actual.shape)} or a prefix of it"
        )
    mask = written.reshape(*written.shape, *([1] * (actual.dim() - written.dim()))).expand(actual.shape)
    problems = []
    changed = ~mask & (bits(actual) != bits(before.detach().cpu()))
    if bool(changed.any()):
        where = ", ".join(str(tuple(i.tolist())) for i in changed.nonzero()[:5])
        problems.append(
            f"output {name!r}: {int(changed.sum())} elements that no task should write were changed (first at {where}); "
            f"the golden marks them unwritten (Expected(written=...))"
            + (f"; {owner(tuple(int(i) for i in changed.nonzero()[0]))}" if owner else "")
        )
    if not isinstance(value, torch.Tensor):
        raise MismatchError(f"output {name!r}: the golden's Expected value is a {type(value).__name__}, not a tensor")
    fill = torch.zeros((), dtype=actual.dtype)
    try:
        check(
            name,
            torch.where(mask, actual, fill),
            torch.where(mask, value.detach().cpu().to(actual.dtype), fill),
            rtol,
            atol,
            owner,
        )
    except MismatchError as e:
        problems.append(str(e))
    if problems:
        raise MismatchError("\n".join(problems))


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, so that NaN poison compares equal to itself."""
    if t.dtype.is_floating_point and t.element_size() in (1, 2, 4, 8):
        return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t
