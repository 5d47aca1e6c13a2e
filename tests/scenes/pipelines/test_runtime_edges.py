"""The runtime's own edge cases as scenes. A straggler: a wide layer, then one long task that runs
while every other worker has drained its queue, so END_OF_TASK_GRAPH must wait for that one
worker (the host checks the count the controller passed at). A straggling producer: consumers
that wait for many quick producers and one slow one, which finishes last, so a consumer that
started one producer early reads what the slow one has not written yet. An early publish: one
RMSNorm task whose row every warp writes after the block reduction, read at once by 32 linear tasks
on the other workers, so a worker that publishes a task before all its warps finished (the warp
jitter of the test harness keeps some of them late) lets the consumers read the row's old contents.
A graph of a single task: a count of one, one worker, nothing to overlap."""

import torch

from pytest_mpk import Case, Out, SceneTestCase, scene_test

from .pytorch_reference import linear, linear_with_residual, rmsnorm


@scene_test(layer="runtime_straggler")
class TestStraggler(SceneTestCase):
    # The last task reads k x n weights alone: 512 KB (k 2048, n 128), long after the 32 short tasks.
    CASES = [Case("wide_then_one", batch=2, hidden=512, wide=2048, tasks=32, n=128)]

    def generate_args(self, params):
        b, h, w, n = params["batch"], params["hidden"], params["wide"], params["n"]
        bf = torch.bfloat16
        return {
            "input": torch.randn(b, h, dtype=bf),
            "w_wide": torch.randn(w, h, dtype=bf) / h**0.5,
            "w_last": torch.randn(n, w, dtype=bf) / w**0.5,
            "output": Out(torch.empty(b, n, dtype=bf)),
        }

    def build(self, pk, t, params):
        b, w, bd = params["batch"], params["wide"], pk.block_dim
        mid = pk.new_tensor((b, w), torch.bfloat16, "mid")
        pk.linear_layer(input=t.input, weight=t.w_wide, output=mid, grid_dim=(params["tasks"], 1, 1), block_dim=bd)
        pk.linear_layer(input=mid, weight=t.w_last, output=t.output, grid_dim=(1, 1, 1), block_dim=bd)

    def compute_golden(self, args, params):
        return linear(linear(args.input, args.w_wide), args.w_last)


@scene_test(layer="runtime_straggling_producer")
class TestStragglingProducer(SceneTestCase):
    # Every consumer task reads all of `quick` (32 short tasks) and its columns of `slow` (one task
    # reading 512 KB of weights alone): its event counts 33 producers, and the slow one comes last.
    CASES = [Case("quick32_slow1", batch=2, hidden=512, wide=2048, tasks=32, n=128)]

    def generate_args(self, params):
        b, h, w, n = params["batch"], params["hidden"], params["wide"], params["n"]
        bf = torch.bfloat16
        return {
            "input": torch.randn(b, h, dtype=bf),
            "w_quick": torch.randn(w, h, dtype=bf) / h**0.5,
            "w_slow": torch.randn(n, 4 * h, dtype=bf) / (4 * h) ** 0.5,
            "x_slow": torch.randn(b, 4 * h, dtype=bf),
            "w_out": torch.randn(n, w, dtype=bf) / w**0.5,
            "output": Out(torch.empty(b, n, dtype=bf)),
        }

    def build(self, pk, t, params):
        b, w, n, bd = params["batch"], params["wide"], params["n"], pk.block_dim
        quick = pk.new_tensor((b, w), torch.bfloat16, "quick")
        slow = pk.new_tensor((b, n), torch.bfloat16, "slow")
        pk.linear_layer(input=t.x_slow, weight=t.w_slow, output=slow, grid_dim=(1, 1, 1), block_dim=bd)
        pk.linear_layer(input=t.input, weight=t.w_quick, output=quick, grid_dim=(params["tasks"], 1, 1), block_dim=bd)
        pk.linear_with_residual_layer(
            input=quick, weight=t.w_out, residual=slow, output=t.output, grid_dim=(4, 1, 1), block_dim=bd
        )

    def compute_golden(self, args, params):
        quick = linear(args.input, args.w_quick)
        return linear_with_residual(quick, args.w_out, linear(args.x_slow, args.w_slow))


@scene_test(layer="runtime_early_publish")
class TestEarlyPublish(SceneTestCase):
    # hidden 2048 on the 16-byte path: each of the 256 threads writes 8 elements of the row.
    CASES = [Case("norm1_then_32", hidden=2048, n=1024, tasks=32)]

    def generate_args(self, params):
        h, n = params["hidden"], params["n"]
        bf = torch.bfloat16
        return {
            "input": torch.randn(1, h, dtype=bf),
            "norm_weight": torch.randn(h, dtype=bf),
            "weight": torch.randn(n, h, dtype=bf) / h**0.5,
            "output": Out(torch.empty(1, n, dtype=bf)),
        }

    def build(self, pk, t, params):
        normed = pk.new_tensor((1, params["hidden"]), torch.bfloat16, "normed")
        pk.rmsnorm_layer(input=t.input, weight=t.norm_weight, output=normed, grid_dim=(1, 1, 1), block_dim=pk.block_dim)
        pk.linear_layer(input=normed, weight=t.weight, output=t.output, grid_dim=(params["tasks"], 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return linear(rmsnorm(args.input, args.norm_weight), args.weight)


@scene_test(layer="runtime_one_task")
class TestOneTask(SceneTestCase):
    CASES = [Case("one_row", hidden=1024)]

    def generate_args(self, params):
        h = params["hidden"]
        return {
            "input": torch.randn(1, h, dtype=torch.bfloat16),
            "weight": torch.randn(h, dtype=torch.bfloat16),
            "output": Out(torch.empty(1, h, dtype=torch.bfloat16)),
        }

    def build(self, pk, t, params):
        pk.rmsnorm_layer(input=t.input, weight=t.weight, output=t.output, grid_dim=(1, 1, 1), block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        return rmsnorm(args.input, args.weight)


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
