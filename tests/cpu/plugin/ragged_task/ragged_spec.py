"""A user's own task that reads the batch (tests/cpu/plugin/test_ragged_task_bugs.py), declared as
README's "Adding a task" says: one task per request slot, picking its rows from qo_indptr at run time.
RAGGED_TASK_HEADER is the body to build (a patched copy)."""

import os

import torch

from mpk_runtime import resources
from mpk_runtime.errors import ConfigError
from mpk_runtime.tasks.registry import TaskSpec, register_task, selected, split

HEADER = os.path.relpath(os.environ["RAGGED_TASK_HEADER"], resources.CSRC_TASKS)


@register_task
class RaggedScale(TaskSpec):
    name = "ragged_scale"
    inputs = {"input": selected(x=0)}
    outputs = {"output": selected(x=0), "mean": split(x=0), "sumsq": split(x=0)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: HEADER for arch in ("sm80", "sm90", "sm100")}
    function = "user::ragged_scale"
    smem_function = "user::ragged_scale_smem_bytes"
    reference = "ragged_scale"

    def check_params(self, args, values, grid, params):
        if grid[0] != params.max_num_batched_requests:
            raise ConfigError(
                f"ragged_scale: grid x is {grid[0]}; it must be max_num_batched_requests ({params.max_num_batched_requests})"
            )

    def template_args(self, s, values):
        return [s["input"].dtype.cpp, s["input"].shape[1]]

    def cost_ns(self, s):
        return 200.0

    def emulate(self, inputs, outputs, values, ctx):  # the slice reference (--mpk-backend emulate-ref)
        x = ctx.grid_idx[0]
        qo = ctx.meta["qo_indptr_buffer"]
        q0, n = int(qo[x]), int(qo[x + 1] - qo[x])
        if n <= 0:
            return
        rows = inputs["input"][q0 : q0 + n].float()
        scale = torch.arange(1, n + 1, dtype=torch.float32)[:, None] / n
        outputs["output"][q0 : q0 + n] = (rows * scale).to(outputs["output"].dtype)
        outputs["mean"][0] = rows.mean(0)
        outputs["sumsq"][0] = (rows * rows).sum()
