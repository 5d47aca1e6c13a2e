"""Offline generation over many iterations on the emulator with the real CUDA bodies: the device's
prepare_next_batch (checked against its model after every call) admits, batches, pages and finishes
three requests, while embed and argmax bodies turn each iteration's input tokens into the next ones
through meta tensors. The same run with the slice references must produce the same tokens: no
arithmetic is involved (embed copies a row, argmax compares), so they must agree bit for bit."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk

VOCAB = 64


def generate(emulate, seed: int = 0, stops: list[int] | None = None) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    table = torch.randn(VOCAB, VOCAB, dtype=torch.bfloat16)  # row t: the "logits" after token t
    prompts = torch.tensor([3, 5, 2], dtype=torch.int32)
    tokens = torch.zeros(3, 10, dtype=torch.int64)
    for r, n in enumerate(prompts.tolist()):
        tokens[r, :n] = torch.randint(0, VOCAB, (n,))
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(
        target_cc=90,
        emulate=emulate,
        num_workers=3,
        max_num_batched_tokens=4,
        max_num_batched_requests=2,
        page_size=2,
        max_num_pages=10,
        max_seq_length=10,
        eos_token_id=7,
        meta_tensors={"tokens": tokens, "prompt_lengths": prompts}
        | ({"stop_lengths": torch.tensor(stops, dtype=torch.int32)} if stops else {}),
    )
    pk = mpk.PersistentKernel(**p)
    ids = pk.attach_input(pk.meta_tensors["input_tokens"], "input_tokens")
    out = pk.attach_input(pk.meta_tensors["output_tokens"], "output_tokens")
    logits = pk.new_tensor((4, VOCAB), torch.bfloat16, "logits")
    values = pk.new_tensor((4, 4), torch.float32, "values")
    indices = pk.new_tensor((4, 4), torch.int64, "indices")
    bd = pk.block_dim
    pk.embed_layer(input=ids, weight=pk.attach_input(table, "table"), output=logits, grid_dim=(2, 1, 1), block_dim=bd)
    pk.argmax_partial_layer(input=logits, values=values, indices=indices, grid_dim=(4, 1, 1), block_dim=bd)
    pk.argmax_reduce_layer(values=values, indices=indices, output=out, grid_dim=(1, 1, 1), block_dim=bd)
    pk.compile()
    pk()
    pk.synchronize()
    pk.finalize()
    return {k: v.clone() for k, v in pk.meta_tensors.items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_generation_matches_the_slice_references(seed):
    bodies, references = generate(True, seed), generate("reference", seed)
    for name in ("tokens", "step"):
        assert torch.equal(bodies[name], references[name]), f"{name}: {bodies[name]} vs {references[name]}"
    steps = bodies["step"].tolist()
    assert all(s > p for s, p in zip(steps, [3, 5, 2])), f"every request generated tokens: {steps}"


def test_requests_stop_at_their_own_lengths():
    """The device's planner (checked against its model at every call) stops each request when its
    row holds stop_lengths tokens; the rest of the row is left as it was."""
    stops = [5, 6, 10]
    full, got = generate(True, 0), generate(True, 0, stops)
    assert full["step"].tolist() == [9, 9, 9]  # no eos_token_id sampled: each row ends full
    assert got["step"].tolist() == [4, 5, 9]
    for r, stop in enumerate(stops):
        assert torch.equal(got["tokens"][r, :stop], full["tokens"][r, :stop]), f"request {r}"
        assert not got["tokens"][r, stop:].any(), f"request {r} wrote past its stop length {stop}: {got['tokens'][r]}"


@pytest.mark.parametrize("emulate", [True, "reference"], ids=["bodies", "slice references"])
def test_argmax_of_logits_that_start_inside_their_storage(emulate):
    """The partial argmax's indices are global columns whatever storage the logits are a view of. The
    slice reference took them from the view's storage offset, so logits that start inside a larger
    buffer (the multi-rank harness's guard zones: 128 columns in) gave indices off by that much."""
    torch.manual_seed(3)
    store = torch.randn(4 * VOCAB + 3 * VOCAB + 5, dtype=torch.bfloat16)
    logits = store[3 * VOCAB + 5 :].view(4, VOCAB)  # contiguous, storage offset 3 * VOCAB + 5
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(test_mode=True, target_cc=90, emulate=emulate, num_workers=2, max_num_batched_tokens=4)
    pk = mpk.PersistentKernel(**p)
    values = pk.new_tensor((4, 4), torch.float32, "values")
    indices = pk.new_tensor((4, 4), torch.int64, "indices")
    out = pk.attach_input(torch.full((4,), -1, dtype=torch.int64), "out")
    bd = pk.block_dim
    pk.argmax_partial_layer(
        input=pk.attach_input(logits, "logits"), values=values, indices=indices, grid_dim=(4, 1, 1), block_dim=bd
    )
    pk.argmax_reduce_layer(values=values, indices=indices, output=out, grid_dim=(1, 1, 1), block_dim=bd)
    pk.compile()
    pk()
    pk.synchronize()
    got = pk.tensor("out").clone()
    pk.finalize()
    assert torch.equal(got, torch.argmax(logits.float(), dim=-1)), f"{got} vs {torch.argmax(logits.float(), dim=-1)}"


def test_a_relaunch_gives_the_tasks_the_next_launch_id_and_iterations(monkeypatch):
    """Each launch's tasks see the launch id and iterations a GPU worker's Runtime holds: ids count
    launches from 1, the absolute iteration counts on over the earlier launches' iterations."""
    import mpk_runtime as mpk
    from mpk_runtime import harness

    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(target_cc=90, emulate=True, test_mode=True, num_workers=2, max_num_batched_tokens=4)
    pk = mpk.PersistentKernel(**p)
    x = pk.attach_input(torch.randn(4, 64).to(torch.bfloat16), "x")
    w = pk.attach_input(torch.ones(64, dtype=torch.bfloat16), "w")
    y = pk.attach_input(torch.empty(4, 64, dtype=torch.bfloat16), "y")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    assert harness.launch_state(pk) == []  # rmsnorm keeps nothing between launches: no workspace, no device variable
    module = pk._runner.tasks.module
    seen, run_task = [], module.run_task

    def recording(*args, **kwargs):
        seen.append(kwargs["runtime"])
        return run_task(*args, **kwargs)

    monkeypatch.setattr(module, "run_task", recording)
    for _ in range(3):
        pk()
    pk.synchronize()
    pk.finalize()
    assert seen == [(1, 0, 0)] * 4 + [(2, 0, 1)] * 4 + [(3, 0, 2)] * 4
