"""Run: a built module and a compiled graph in, results (or an exception that says what went wrong) out.

Enters: a built module (build/), the compiled graph (graph/) and the tensors bound by name. Leaves:
the tensors, written by the GPU (lifecycle.py: launch, harvest, errors, free; device_graph.py: the
upload; launcher.py: the module's C ABI) or by the CPU emulator (emulator.py: workers, events and
iterations interleaved; emulated_tasks.py: each task by its host-compiled CUDA body, host_runner.py,
over guarded copies of the tensors, host_memory.py, or by its slice reference; batching.py, the Python
model of prepare_next_batch, checked against the device's own code run on the host, host_batching.py).
diagnostics.py turns a device status into an exception;
task_bodies.py launches each task body alone; gpu.py finds the GPU's arch and configuration.
"""
