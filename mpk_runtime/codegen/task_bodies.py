"""The source of a task-body module: every variant of a compiled graph as a plain kernel launched
alone (one thread block per task descriptor, no scheduler), exposed to Python with pybind11."""

from __future__ import annotations

from ..graph.compiled import VariantInfo
from ..tasks import registry
from .dispatcher import BANNER


def generate_task_bodies(variants: tuple[VariantInfo, ...], arch: str, module: str) -> str:
    """A pybind11 module that launches each variant's body alone: one thread block per task
    descriptor, no scheduler, no events (``variants``: the compiled graph's)."""
    specs = {v.task: registry.get(v.task) for v in variants}
    headers = sorted({s.header_for(arch) for s in specs.values()})
    out = [
        BANNER,
        f"// task bodies of: {', '.join(sorted(specs))}",
        f"// target: {arch}",
        "#include <pybind11/pybind11.h>",
        "#include <string>",
        '#include "runtime/task_api.cuh"',
    ]
    out += [f'#include "tasks/{h}"' for h in headers]
    out += ['#include "runtime/task_body.cuh"', "", "namespace mpk {"]
    for v in variants:
        call = v.call.replace("(task, rt);", "")
        out.append(f"MPK_TASK_BODY({v.id}, ({call}(task, rt)), ({v.smem or '0u'}))")
    out += [
        "}  // namespace mpk",
        "",
        f"PYBIND11_MODULE({module}, m) {{",
        '  m.doc() = "Task bodies launched alone: one thread block per task descriptor.";',
        '  m.def("launch", &mpk::launch_body, "variant, descriptors, count, meta, batch, control, stream -> error");',
        '  m.def("smem_bytes", &mpk::body_smem_bytes);',
        "}",
        "",
    ]
    return "\n".join(out)
