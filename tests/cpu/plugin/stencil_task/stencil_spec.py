"""A user's own task whose body reads more than its slice (tests/cpu/plugin/test_stencil_task_bugs.py):
a row stencil. STENCIL_INPUT says how its input is declared: "whole" (right: the task reads its
neighbours' rows) or "split" (split(x=0) like the output: no dependency on the tasks that write the
halo rows, a bug only the order of the tasks shows). STENCIL_TASK_HEADER is the body to build."""

import os

from mpk_runtime import resources
from mpk_runtime.tasks.registry import TaskSpec, register_task, split, whole

HEADER = os.path.relpath(os.environ["STENCIL_TASK_HEADER"], resources.CSRC_TASKS)


@register_task
class RowStencil(TaskSpec):
    name = "row_stencil"
    inputs = {"input": {"whole": whole(), "split": split(x=0)}[os.environ["STENCIL_INPUT"]]}
    outputs = {"output": split(x=0)}
    headers = {arch: HEADER for arch in ("sm80", "sm90", "sm100")}
    function = "user::row_stencil"
    reference = "row_stencil"

    def template_args(self, s, values):
        whole_input = "true" if os.environ["STENCIL_INPUT"] == "whole" else "false"
        return [s["input"].dtype.cpp, s["output"].shape[0], s["input"].full_shape[1], s["input"].full_shape[0], whole_input]

    def cost_ns(self, s):
        return 200.0
