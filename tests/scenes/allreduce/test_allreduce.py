"""The all-reduce across ranks: every rank's input summed (plus a residual) on every rank. Emulated
(all ranks in one process) without GPUs; on a host with enough GPUs, one rank per GPU under MPI."""

import torch
from hypothesis import strategies as st

from mpk_runtime.harness import find_reference
from pytest_mpk import Case, Out, SceneTestCase, scene_test

allreduce = find_reference("allreduce")


class AllReduceScene(SceneTestCase):
    """Rank r's input is slice r of one (world_size, batch, hidden) draw; the residual is shared."""

    CASES = [
        Case("b1_h4096", batch=1, hidden=4096, tiles=(16, 1), residual=False),
        Case("b8_h4096_res", batch=8, hidden=4096, tiles=(16, 2), residual=True),
        Case("b64_h1024_res", batch=64, hidden=1024, tiles=(4, 8), residual=True),
    ]
    SWEEP = {
        "batch": st.integers(1, 16),
        "hidden": st.sampled_from([256, 512]),
        "tiles": st.sampled_from([(1, 1), (4, 1), (2, 1)]),
        "residual": st.booleans(),
    }

    def kernel_params(self, params):
        b = params["batch"]
        return {"max_num_batched_tokens": b, "max_seq_length": b, "max_num_pages": b}

    def generate_args(self, params):
        b, h, w, r = params["batch"], params["hidden"], params["world_size"], params["rank"]
        args = {
            "input": torch.randn(w, b, h, dtype=torch.bfloat16)[r].clone(),
            "output": Out(torch.empty(b, h, dtype=torch.bfloat16)),
        }
        if params["residual"]:
            args["residual"] = torch.randn(b, h, dtype=torch.bfloat16)
        return args

    def build(self, pk, t, params):
        b, h = params["batch"], params["hidden"]
        gx, gy = params["tiles"]
        buffer = pk.new_comm_tensor((2, pk.world_size, b, h), torch.bfloat16, "ar_buffer")
        pk.allreduce_layer(
            t.input,
            buffer,
            t.output,
            residual=getattr(t, "residual", None),
            grid_dim=(gx, gy if b % gy == 0 else 1, 1),
            block_dim=pk.block_dim,
        )

    def compute_golden(self, args, params):
        return allreduce([a.input for a in args.ranks], getattr(args.ranks[0], "residual", None))


@scene_test(layer="allreduce", world_size=2)
class TestAllReduce2(AllReduceScene):
    pass


@scene_test(layer="allreduce", world_size=4)
class TestAllReduce4(AllReduceScene):
    CASES = AllReduceScene.CASES[1:2]
    SWEEP = {}


@scene_test(layer="allreduce", world_size=8)
class TestAllReduce8(AllReduceScene):
    CASES = AllReduceScene.CASES[:2]
    SWEEP = {}


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
