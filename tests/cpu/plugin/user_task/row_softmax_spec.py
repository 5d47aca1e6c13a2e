"""A user's own task declared as README says (tests/cpu/plugin/test_user_task_bugs.py): a row
softmax, rows split over grid x. USER_TASK_HEADER is the body to build (a patched copy)."""

import os

from mpk_runtime import resources
from mpk_runtime.tasks.registry import TaskSpec, register_task, split

HEADER = os.path.relpath(os.environ["USER_TASK_HEADER"], resources.CSRC_TASKS)


@register_task
class RowSoftmax(TaskSpec):
    name = "row_softmax"
    inputs = {"input": split(x=0)}
    outputs = {"output": split(x=0)}
    token_dims = {"input": 0, "output": 0}
    headers = {arch: HEADER for arch in ("sm80", "sm90", "sm100")}
    function = "user::row_softmax"
    smem_function = "user::row_softmax_smem_bytes"
    reference = "row_softmax"

    def template_args(self, s, values):
        rows, cols = s["input"].shape
        return [s["input"].dtype.cpp, rows, cols]

    def scalar_values(self, values, s):
        return [s["input"].full_shape[0]]

    def cost_ns(self, s):
        return 100.0
