"""The Qwen3 dense MLP, tensor parallel: column-parallel gate / up, row-parallel down, one all-reduce
with the residual (golden: pytorch_reference.qwen3_mlp_tp in this folder)."""

import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .pytorch_reference import qwen3_mlp_tp


class Qwen3MLPTensorParallel(SceneTestCase):
    """``tasks``: gate / up tasks per rank; the down projection and the all-reduce use hidden / 32 and
    hidden / 256 tasks."""

    CASES = [
        Case("b1_h1024_i2048", batch=1, hidden=1024, inter=2048, tasks=16),
        Case("b8_h1024_i4096", batch=8, hidden=1024, inter=4096, tasks=32),
        Case("b1_h4096_i12288", batch=1, hidden=4096, inter=12288, tasks=128, manual=True),
        Case("b8_h4096_i12288", batch=8, hidden=4096, inter=12288, tasks=128, manual=True),
    ]

    def kernel_params(self, params):
        b = params["batch"]
        return {"max_num_batched_tokens": b, "max_seq_length": b, "max_num_pages": b}

    def generate_args(self, params):
        b, h, i, w, r = params["batch"], params["hidden"], params["inter"], params["world_size"], params["rank"]
        bf, shard = torch.bfloat16, slice(r * i // w, (r + 1) * i // w)
        full = {  # the same draw on every rank (same seed); each keeps its shard of the weights
            "input": torch.randn(b, h, dtype=bf),
            "norm_weight": torch.randn(h, dtype=bf),
            "w_gate": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_up": torch.randn(i, h, dtype=bf) / h**0.5,
            "w_down": torch.randn(h, i, dtype=bf) / i**0.5,
            "residual": torch.randn(b, h, dtype=bf),
        }
        return {
            "input": full["input"],
            "norm_weight": full["norm_weight"],
            "w_gate": full["w_gate"][shard].clone(),
            "w_up": full["w_up"][shard].clone(),
            "w_down": full["w_down"][:, shard].contiguous(),
            "residual": full["residual"],
            "output": Out(torch.empty(b, h, dtype=bf)),
        }

    def build(self, pk, t, params):
        b, h, tasks = params["batch"], params["hidden"], params["tasks"]
        i = params["inter"] // pk.world_size
        bf, bd = torch.bfloat16, pk.block_dim
        x = pk.new_tensor((b, h), bf, "x_norm")
        mid = pk.new_tensor((b, 2 * i), bf, "mlp_mid")
        act = pk.new_tensor((b, i), bf, "mlp_act")
        partial = pk.new_tensor((b, h), bf, "mlp_partial")
        buffer = pk.new_comm_tensor((2, pk.world_size, b, h), bf, "mlp_allreduce")
        w_gatedup = pk.shuffle_tensors([t.w_gate, t.w_up], shuffled_dim=0, num_groups=tasks // 2, name="w_gatedup")
        pk.rmsnorm_layer(input=t.input, weight=t.norm_weight, output=x, grid_dim=(b, 1, 1), block_dim=bd)
        pk.linear_layer(input=x, weight=w_gatedup, output=mid, grid_dim=(tasks, 1, 1), block_dim=bd)
        pk.silu_mul_layer(input=mid, output=act, grid_dim=(tasks // 2, 1, 1), block_dim=bd)
        pk.linear_layer(input=act, weight=t.w_down, output=partial, grid_dim=(h // 32, 1, 1), block_dim=bd)
        pk.allreduce_layer(partial, buffer, t.output, residual=t.residual, grid_dim=(h // 256, 1, 1), block_dim=bd)

    def compute_golden(self, args, params):
        first = args.ranks[0]
        return qwen3_mlp_tp(args.ranks, first.input, first.norm_weight, first.residual)


@scene_test(layer="qwen3_mlp_tp", world_size=2)
class TestQwen3MLPTensorParallel2(Qwen3MLPTensorParallel):
    pass


@scene_test(layer="qwen3_mlp_tp", world_size=4)
class TestQwen3MLPTensorParallel4(Qwen3MLPTensorParallel):
    CASES = Qwen3MLPTensorParallel.CASES[1:2]


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
