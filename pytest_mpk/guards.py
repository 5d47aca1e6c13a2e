"""Guard zones and untouched-data checks: what a case's tensors must still hold after the run,
beyond what the golden says.

Each generated tensor the harness attaches lives in the middle of a larger byte buffer whose
guard zones (``GUARD_BYTES`` before and after) hold ``PATTERN``; a body that writes past either end
of a tensor changes a guard byte. Inputs (neither Out nor InOut) must equal their copy from before
the run, and output elements that no task's output slice covers must hold what they held before
(the poison). A write cannot be traced to the task that made it, so the reports name the slices
next to the damage, from the compiled task graph: the owner of the slice that ends where a tail
guard begins is the first suspect of an overrun.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import compare

GUARD_BYTES = 256  # a multiple of every alignment a body assumes (16-byte vectors, 128-byte lines)
PATTERN = 0xA5  # neither 0 nor 0xff, nor the top byte of a NaN, poison or small integer
SHOWN = 5


class GuardError(AssertionError):
    """Data outside what the tasks may write was changed; the message names the tensor, the
    positions and the tasks whose slices are next to them."""


@dataclass
class Guarded:
    """A tensor inside ``buffer`` (uint8), ``GUARD_BYTES`` after its start, with guards around it."""

    buffer: torch.Tensor
    tensor: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()


def allocate(like: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, Guarded | None]:
    """A copy of ``like`` on ``device``; a contiguous one sits between guard zones (its Guarded is
    returned too). A non-contiguous one keeps its strides and gets no guards, so that the runtime's
    rules (attach_input refuses it) judge what the scene generated."""
    if not like.is_contiguous() or like.numel() == 0:
        return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=device).copy_(like), None
    nbytes = like.numel() * like.element_size()
    buffer = torch.full((2 * GUARD_BYTES + nbytes,), PATTERN, dtype=torch.uint8, device=device)
    tensor = buffer[GUARD_BYTES : GUARD_BYTES + nbytes].view(like.dtype).view(like.shape)
    return tensor.copy_(like), Guarded(buffer, tensor)


def check(guarded: dict[str, Guarded], graph: Any) -> list[str]:
    """One line per tensor whose guard zones were written, with the slices next to the damage."""
    problems = []
    for name, g in guarded.items():
        raw = g.buffer.cpu()
        for side, zone in (("before", raw[:GUARD_BYTES]), ("after", raw[GUARD_BYTES + g.nbytes :])):
            hit = (zone != PATTERN).nonzero().flatten()
            if not hit.numel():
                continue
            size = g.tensor.element_size()
            if side == "after":
                first, last = int(hit[0]), int(hit[-1])
                element = g.tensor.numel() + first // size
                where = f"bytes {first}..{last} past its end (element {element} of a flat {_dtype(g.tensor)} view)"
                edge = tuple(d - 1 for d in g.tensor.shape)
            else:
                first, last = GUARD_BYTES - int(hit[-1]), GUARD_BYTES - int(hit[0])
                where = f"bytes {first}..{last} before its start (element -{(first + size - 1) // size})"
                edge = tuple(0 for _ in g.tensor.shape)
            problems.append(
                f"tensor {name!r}: {hit.numel()} guard bytes written at {where}; {_neighbours(graph, name, edge, side)}"
            )
    return problems


def check_inputs(inputs: dict[str, torch.Tensor], after: dict[str, torch.Tensor], graph: Any) -> list[str]:
    """One line per input (neither Out nor InOut) that the run changed: no task writes an input."""
    problems = []
    for name, want in inputs.items():
        got = after[name].detach().cpu()
        changed = compare.bits(got) != compare.bits(want)
        if bool(changed.any()):
            first = tuple(int(i) for i in changed.nonzero()[0])
            problems.append(
                f"input {name!r} changed: {int(changed.sum())} elements (first at {first}), but no task writes an "
                f"input; {_owners(graph, name, first)}"
            )
    return problems


def check_uncovered(actual: dict[str, torch.Tensor], before: dict[str, torch.Tensor], graph: Any) -> list[str]:
    """One line per output with elements that no task's output slice covers and that changed
    (they must keep the poison, or an InOut's input)."""
    problems = []
    for name, got in actual.items():
        covered = covered_mask(graph, name, tuple(got.shape))
        if covered is None:
            continue
        changed = ~covered & (compare.bits(got.detach().cpu()) != compare.bits(before[name]))
        if bool(changed.any()):
            where = [tuple(int(i) for i in p) for p in changed.nonzero()[:SHOWN]]
            problems.append(
                f"output {name!r}: {int(changed.sum())} elements that no task's output slice covers were written "
                f"(first at {', '.join(map(str, where))}); {_nearest_before(graph, name, where[0])}"
            )
    return problems


def covered_mask(graph: Any, name: str, shape: tuple[int, ...]) -> torch.Tensor | None:
    """Which elements of tensor ``name`` some task's output slice covers; None when none does."""
    mask = torch.zeros(shape, dtype=torch.bool)
    found = False
    for task in graph.tasks:
        for s in task.outputs:
            if s.tensor == name and len(s.lo) == len(shape):
                mask[tuple(slice(lo, hi) for lo, hi in zip(s.lo, s.hi))] = True
                found = True
    return mask if found else None


def describe(graph: Any, task: Any) -> str:
    layer = graph.layers[task.layer]
    return f"task {task.id} ({task.label}, layer {layer.name}, {layer.task})"


def _slices(graph: Any, name: str, outputs: bool) -> list[tuple[Any, Any]]:
    return [(t, s) for t in graph.tasks for s in (t.outputs if outputs else t.inputs) if s.tensor == name]


def _contains(s: Any, index: tuple[int, ...]) -> bool:
    return len(s.lo) == len(index) and all(lo <= i < hi for lo, i, hi in zip(s.lo, index, s.hi))


def _text(s: Any) -> str:
    return f"{s.tensor}[{', '.join(f'{lo}:{hi}' for lo, hi in zip(s.lo, s.hi))}]"


def _neighbours(graph: Any, name: str, edge: tuple[int, ...], side: str) -> str:
    """Who owns the element at the tensor's ``edge`` (its first or last): the likeliest writer."""
    end = "last" if side == "after" else "first"
    for outputs, verb in ((True, "writes"), (False, "reads")):
        owners = [(t, s) for t, s in _slices(graph, name, outputs) if _contains(s, edge)]
        if owners:
            listed = "; ".join(f"{describe(graph, t)} {verb} {_text(s)}" for t, s in owners[:SHOWN])
            return f"the {end} slice of {name!r}: {listed}"
    return f"no task of the graph touches {name!r}'s {end} element: a stray pointer"


def _owners(graph: Any, name: str, index: tuple[int, ...]) -> str:
    owners = [(t, s) for t, s in _slices(graph, name, False) if _contains(s, index)]
    if not owners:
        return f"no task reads {name}{list(index)}"
    listed = "; ".join(f"{describe(graph, t)} reads {_text(s)}" for t, s in owners[:SHOWN])
    return f"the element lies in the input slice of {listed}"


def owner_of(graph: Any, name: str) -> Callable[[tuple[int, ...]], str]:
    """index -> who writes that element of output ``name``: the task(s) whose output slice holds it."""

    def owner(index: tuple[int, ...]) -> str:
        owners = [(t, s) for t, s in _slices(graph, name, True) if _contains(s, index)]
        if not owners:
            return f"no task's output slice holds {name}{list(index)}"
        layers = {t.layer for t, _ in owners}
        if len(owners) > 2 and len(layers) == 1 and len({(s.lo, s.hi) for _, s in owners}) == 1:
            # One slice for every task (a paged cache, tokens picked at run time): one line says it.
            layer = graph.layers[owners[0][0].layer]
            return f"its output slice: all {len(owners)} tasks of layer {layer.name} ({layer.task}) write {_text(owners[0][1])}"
        listed = "; ".join(f"{describe(graph, t)} writes {_text(s)}" for t, s in owners[:SHOWN])
        return f"its output slice: {listed}"

    return owner


def _nearest_before(graph: Any, name: str, index: tuple[int, ...]) -> str:
    """The output slice that ends closest before ``index`` in flat order (an overrun's likely
    source), or, when none does, the first slice after it."""
    shape = tuple(graph.tensor(name).shape)
    flat = _flat(index, shape)
    best = None
    for t, s in _slices(graph, name, True):
        last = _flat(tuple(h - 1 for h in s.hi), shape)
        if last < flat and (best is None or last > best[0]):
            best = (last, t, s)
    if best is None:
        return "it comes before every task's output slice"
    return f"the output slice just before it is {_text(best[2])} of {describe(graph, best[1])}"


def _flat(index: tuple[int, ...], shape: tuple[int, ...]) -> int:
    flat = 0
    for i, d in zip(index, shape):
        flat = flat * d + i
    return flat


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def after_run(
    guarded: dict[str, Guarded],
    inputs: dict[str, torch.Tensor],
    tensors: dict[str, torch.Tensor],
    outputs_before: dict[str, torch.Tensor],
    graph: Any,
) -> list[str]:
    """Every check of this module on one run: the guard zones, the inputs against their copies from
    before the run (``inputs``), the outputs' uncovered elements against ``outputs_before``."""
    return [
        *check(guarded, graph),
        *check_inputs(inputs, {n: tensors[n] for n in inputs}, graph),
        *check_uncovered({n: tensors[n].detach().cpu() for n in outputs_before}, outputs_before, graph),
    ]


def raise_with(damage: list[str], compare_outputs: Callable[[], None]) -> None:
    """Compare the outputs; GuardError with ``damage`` first (it names the cause) and the
    comparison's report after it, when there is damage."""
    try:
        compare_outputs()
    except AssertionError as e:
        if not damage:
            raise
        raise GuardError("\n".join([*damage, str(e)])) from None
    if damage:
        raise GuardError("\n".join(damage))
