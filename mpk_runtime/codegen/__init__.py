"""Codegen: the generated C++ of a graph.

Enters: the graph's variants (graph/variants.py) and the compiled graph. Leaves: source text (the
dispatcher translation unit of a persistent kernel, dispatcher.py; the pybind11 module of task
bodies launched alone, task_bodies.py) and the binary layout both sides agree on (abi.py: the
ctypes mirror of csrc/runtime/abi.h, the task-descriptor packer, the meta / batch structs).
"""
