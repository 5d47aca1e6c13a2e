"""Greedy decoding of a Qwen3 model through the runtime, checked token for token against the
PyTorch reference (reference/qwen3_model): shared by the emulated scene (tiny shapes) and the GPU
test (Qwen3-0.6B shapes). On the emulator every iteration is observed, so the logits of every step
and the last layer's hidden state of the first layer are compared too; on the GPU one launch runs
all iterations, so the logits of the last step are."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mpk_runtime.harness import find_reference
from mpk_runtime.models import Qwen3Config, Qwen3Generator

Qwen3Reference = find_reference("Qwen3Reference", layer="qwen3_model")


@dataclass
class Observed:
    """Per request, per generated token: the runtime's logits row and layer 0's output row."""

    logits: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    hidden0: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)


@dataclass
class Report:
    tokens: list[list[int]]
    min_margin: float  # the reference's smallest top-1 minus top-2 logit over every step
    max_logit_err: float  # the largest |runtime - reference| logit over the compared steps
    steps_compared: int


def observe(gen: Qwen3Generator, prompt_lengths: list[int]) -> Observed:
    """Record, after every emulated iteration, the logits (and layer 0's output) of each request's
    last row when that row predicts a generated token."""
    seen = Observed()
    pk = gen.pk

    def after(iteration: int, requests: list[int]) -> None:
        m = pk.meta_tensors
        qo = m["qo_indptr_buffer"]
        for slot, r in enumerate(requests):
            n = int(qo[slot + 1] - qo[slot])
            k = int(m["step"][r]) + n - prompt_lengths[r]  # which generated token the last row predicts
            if k >= 0:
                row = int(qo[slot + 1]) - 1
                seen.logits[(r, k)] = pk.tensor("logits")[row].clone()
                seen.hidden0[(r, k)] = pk.tensor("layers.0.hidden")[row].clone()

    gen.observe(after)
    return seen


def check_generation(
    config: Qwen3Config,
    state_dict: dict[str, torch.Tensor],
    prompts: list[list[int]],
    max_new_tokens: int,
    atol: float,
    **init_params,
) -> Report:
    """Decode ``prompts`` on the runtime and with the reference; assert equal tokens, logits within
    ``atol`` plus 2% of the largest logit (+ 2% of their size) at every observed step, and the smallest margin above the largest
    logit error (so the tokens agree by a margin, not by luck). Returns what was seen."""
    gen = Qwen3Generator(config, state_dict, prompts, max_new_tokens, **init_params)
    gen.compile()
    seen = observe(gen, [len(p) for p in prompts]) if gen.pk.backend == "emulated" else None
    last = last_batch(gen)[0]  # whose logits row 0 holds when the launch ends
    device = gen.pk.device
    try:
        got = gen.generate()
        last_logits = gen.pk.tensor("logits")[0].float().cpu()
    finally:
        gen.finalize()
    sd = {k: v.to(device) for k, v in state_dict.items()}
    report = Report(got, float("inf"), 0.0, 0)
    for r, prompt in enumerate(prompts):
        assert len(got[r]) == max_new_tokens, f"request {r} generated {len(got[r])} tokens, not {max_new_tokens}"
        ref = Qwen3Reference(sd, config)
        logits = ref.forward(torch.tensor(prompt))[-1]
        want = []
        for k in range(len(got[r])):
            want.append(int(torch.argmax(logits.float())))
            top = torch.topk(logits.float(), 2).values
            report.min_margin = min(report.min_margin, float(top[0] - top[1]))
            if seen is not None:
                report.max_logit_err = max(
                    report.max_logit_err, _close(seen.logits[(r, k)], logits, atol, f"request {r} step {k}")
                )
                _close(seen.hidden0[(r, k)], ref.hidden[0][-1], atol, f"request {r} step {k} layer 0 output")
                report.steps_compared += 1
            if k + 1 < len(got[r]):
                logits = ref.forward(torch.tensor([want[-1]]))[-1]
        assert got[r] == want, f"request {r}: tokens differ from the reference at step {_first_diff(got[r], want)}"
        if seen is not None and r == last:  # the last iteration's row 0 is what last_batch says
            assert torch.equal(last_logits, seen.logits[(r, len(got[r]) - 1)].float().cpu()), "last_batch is wrong"
        if seen is None and r == last:
            report.max_logit_err = _close(last_logits, logits, atol, f"request {r} last step")
            report.steps_compared += 1
    assert report.min_margin > report.max_logit_err, (
        f"the smallest argmax margin {report.min_margin:.4f} is within the logit error {report.max_logit_err:.4f}: "
        f"equal tokens would be luck; raise lm_head_peak"
    )
    return report


def last_batch(gen: Qwen3Generator) -> list[int]:
    """The requests of the launch's last iteration, in slot order: the Python model of
    prepare_next_batch run on a copy of the generator's meta tensors (no token here is an eos, so
    the tokens sampled do not change the batches)."""
    from mpk_runtime.frontend import meta
    from mpk_runtime.run.batching import BatchPlanner

    m = {k: v.cpu().clone() for k, v in gen.pk.meta_tensors.items()}
    planner = BatchPlanner(meta.batch_config(gen.pk.params, m), m)
    batch: list[int] = []
    while planner.prepare_next_batch(0):
        batch = list(planner.batch)
    return batch


def _close(got: torch.Tensor, want: torch.Tensor, atol: float, what: str) -> float:
    got, want = got.float().cpu(), want.float().cpu()
    # bf16 rounding in the layers scales with the activations, not with each logit: 2% of the
    # largest logit on top of atol, so a logit near zero beside large ones is judged as they are.
    atol = atol + 2e-2 * float(want.abs().max())
    torch.testing.assert_close(got, want, atol=atol, rtol=2e-2, msg=lambda m: f"{what}: {m}")
    return float((got - want).abs().max())


def _first_diff(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
