"""Run: a built module and a compiled graph in, results (or an exception that says what went wrong) out.

Enters: a built module (build/), the compiled graph (graph/) and the tensors bound by name. Leaves:
the tensors, written by the GPU (lifecycle.py: launch, harvest, errors, free; device_graph.py: the
upload; launcher.py: the module's C ABI) or by the CPU emulator (emulator.py, with batching.py, the
Python model of prepare_next_batch). diagnostics.py turns a device status into an exception;
task_bodies.py launches each task body alone; gpu.py finds the GPU's arch and configuration.
"""
