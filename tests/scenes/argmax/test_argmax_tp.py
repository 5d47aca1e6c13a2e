"""Greedy sampling over a vocabulary-parallel head: each rank holds a shard of the logits, takes its
partial maxima, the ranks all-gather them (indices made global with rank_offset), and every rank
reduces to the same tokens: torch.argmax over the whole vocabulary."""

import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test


def full_logits(params):
    """Every rank draws the whole vocabulary (same seed) and keeps its shard."""
    b, v = params["batch"], params["vocab"]
    x = torch.randn(b, v, dtype=torch.bfloat16)
    if params["ties"]:  # the same maximum in several shards: the lowest index must win on every rank
        for row in range(b):
            for col in (v - 1, v // 2 + row, row):
                x[row, col] = 9.0
    return x


class ArgmaxTensorParallel(SceneTestCase):
    CASES = [
        Case("b1_v32000_p16", batch=1, vocab=32000, parts=16, ties=False),
        Case("b8_v4096_p8_ties", batch=8, vocab=4096, parts=8, ties=True),
    ]

    def kernel_params(self, params):
        b = params["batch"]
        return {"max_num_batched_tokens": b, "max_seq_length": b, "max_num_pages": b}

    def generate_args(self, params):
        w, r = params["world_size"], params["rank"]
        shard = params["vocab"] // w
        logits = full_logits(params)[:, r * shard : (r + 1) * shard].contiguous()
        return {"logits": logits, "tokens": Out(torch.empty(params["batch"], dtype=torch.int64))}

    def build(self, pk, t, params):
        b, p, w = params["batch"], params["parts"], pk.world_size
        values = pk.new_tensor((b, p), torch.float32, "values")
        indices = pk.new_tensor((b, p), torch.int64, "indices")
        all_values = pk.new_tensor((b, w * p), torch.float32, "all_values")
        all_indices = pk.new_tensor((b, w * p), torch.int64, "all_indices")
        bd = pk.block_dim
        pk.argmax_partial_layer(input=t.logits, values=values, indices=indices, grid_dim=(p, 1, 1), block_dim=bd)
        pk.allgather_layer(
            values, pk.new_comm_tensor((2, w, b, p), torch.float32, "gather_values"), all_values, grid_dim=(1, 1, 1), block_dim=bd
        )
        pk.allgather_layer(
            indices,
            pk.new_comm_tensor((2, w, b, p), torch.int64, "gather_indices"),
            all_indices,
            grid_dim=(1, 1, 1),
            block_dim=bd,
            rank_offset=params["vocab"] // w,
        )
        pk.argmax_reduce_layer(values=all_values, indices=all_indices, output=t.tokens, grid_dim=(1, 1, 1), block_dim=bd)

    def compute_golden(self, args, params):
        return torch.argmax(torch.cat([a.logits for a in args.ranks], dim=1).float(), dim=-1)


@scene_test(layer="argmax_tp", world_size=2)
class TestArgmaxTensorParallel2(ArgmaxTensorParallel):
    pass


@scene_test(layer="argmax_tp", world_size=4)
class TestArgmaxTensorParallel4(ArgmaxTensorParallel):
    CASES = ArgmaxTensorParallel.CASES[1:]


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
