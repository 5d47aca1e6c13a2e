"""Greedy sampling into the meta tensor output_tokens, finalized by prepare_next_batch: after one
test-mode pass the sampled token is appended to the request's row of tokens."""

from __future__ import annotations

import torch


def test_sampled_token_is_appended_to_the_request(make_pk):
    b, v = 4, 4096
    tokens = torch.zeros(1, b + 1, dtype=torch.int64, device="cuda")
    pk = make_pk(
        max_num_batched_tokens=b,
        max_seq_length=b + 1,
        max_num_pages=b + 1,
        meta_tensors={"tokens": tokens, "prompt_lengths": torch.tensor([b], dtype=torch.int32, device="cuda")},
    )
    logits = torch.randn(b, v, dtype=torch.bfloat16, device="cuda")
    vals = pk.new_tensor((b, 16), torch.float32, "vals")
    idx = pk.new_tensor((b, 16), torch.int64, "idx")
    out = pk.attach_input(pk.meta_tensors["output_tokens"], "output_tokens")
    pk.argmax_partial_layer(
        input=pk.attach_input(logits, "logits"), values=vals, indices=idx, grid_dim=(16, 1, 1), block_dim=pk.block_dim
    )
    pk.argmax_reduce_layer(values=vals, indices=idx, output=out, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
    pk.compile()
    pk()
    pk.synchronize()
    want = torch.argmax(logits.float(), dim=-1)
    assert torch.equal(pk.meta_tensors["output_tokens"], want)
    assert pk.meta_tensors["step"].item() == b
    assert pk.meta_tensors["tokens"][0, b].item() == want[-1].item()  # the last prompt token's prediction
