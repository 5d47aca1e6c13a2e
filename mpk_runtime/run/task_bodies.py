"""Task bodies launched alone: every layer of a compiled graph as one plain kernel launch, one
thread block per task slice, no scheduler and no events (layers run in program order, one launch
each). This is the first level of verification and benchmarking of a task: the body by itself,
with the same descriptors and meta tensors the persistent kernel would give it.

    pk.compile()
    bodies = pk.compile_task_bodies()   # a pybind11 module generated from the registry, cached
    bodies()                            # every layer, in order
    bodies.synchronize()                # raises what a task reported (Runtime::fail)
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import json
from pathlib import Path

import torch

from ..build.cache import build_module
from ..codegen import abi
from ..codegen.task_bodies import generate_task_bodies
from ..errors import BuildError, KernelError
from ..graph.compiled import CompiledGraph
from . import batching, diagnostics

_loaded: dict[Path, object] = {}  # an extension module initialises once per process


def _load_extension(name: str, path: Path):
    if path not in _loaded:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
        if spec is None:
            raise BuildError(f"cannot load the task-body module {path}: not an extension module")
        module = importlib.util.module_from_spec(spec)
        try:
            loader.exec_module(module)
        except ImportError as e:
            raise BuildError(f"cannot load the task-body module {path}: {e}") from e
        _loaded[path] = module
    return _loaded[path]


class TaskBodies:
    def __init__(
        self,
        graph: CompiledGraph,
        tensors: dict[str, torch.Tensor],
        meta: dict[str, torch.Tensor],
        cfg: batching.BatchConfig,
        arch: str,
        device: torch.device,
    ):
        self.graph, self.device = graph, device
        digest = hashlib.sha256(json.dumps([graph.to_json()["variants"], arch]).encode()).hexdigest()[:16]
        module = f"mpk_task_bodies_{digest}"  # the PyInit_ symbol: a valid, deterministic identifier
        source = generate_task_bodies(graph.variants, arch, module)
        names = "+".join(sorted({v.task for v in graph.variants}))[:60]
        self.build_result = build_module(source, arch, f"bodies-{names}", python_extension=True)
        self.module = _load_extension(module, self.build_result.path)

        # The batch of iteration 0, as prepare_next_batch would leave it, in the kernel's own meta
        # tensors: layers may have attached them (e.g. input_tokens) and read them through slices.
        cpu = {k: v.detach().cpu().clone() for k, v in meta.items()}
        batching.BatchPlanner(cfg, cpu).prepare_next_batch(0)
        for k, v in meta.items():
            v.copy_(cpu[k])
        self.meta = meta
        self._meta_bytes = bytes(abi.meta_struct(meta))
        self._batch_bytes = bytes(abi.batch_struct(cfg))
        self.control = torch.zeros(ctypes.sizeof(abi.MpkControl) // 8, dtype=torch.int64, device=device)
        self.tensors = tensors  # the descriptors point into them

        self.layers: list[tuple[str, int, torch.Tensor, int]] = []  # (name, variant, descriptors, count)
        pointers = {name: t.data_ptr() for name, t in tensors.items()}
        by_layer: dict[int, list] = {}
        for t in graph.tasks:
            by_layer.setdefault(t.layer, []).append(t)
        for layer in graph.layers:
            tasks = by_layer.get(layer.id, [])
            blob = b"".join(abi.pack_task(t, layer, pointers) for t in tasks)
            descs = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device)
            self.layers.append((layer.name, tasks[0].variant, descs, len(tasks)))

    def __call__(self, layers: list[str] | None = None, stream: torch.cuda.Stream | None = None) -> None:
        """Launch the bodies of ``layers`` (names, e.g. "linear_0"; default: all), in program order,
        on ``stream`` (default: the current stream). Returns at once."""
        stream = stream if stream is not None else torch.cuda.current_stream(self.device)
        wanted = set(layers) if layers is not None else None
        unknown = (wanted or set()) - {name for name, *_ in self.layers}
        if unknown:
            raise KernelError(f"no layers {sorted(unknown)}; this graph has {[n for n, *_ in self.layers]}")
        for name, variant, descs, count in self.layers:
            if wanted is None or name in wanted:
                err = self.module.launch(
                    variant,
                    descs.data_ptr(),
                    count,
                    self._meta_bytes,
                    self._batch_bytes,
                    self.control.data_ptr(),
                    stream.cuda_stream,
                )
                if err:
                    raise KernelError(f"launching the task bodies of {name}: {err}")

    def synchronize(self) -> None:
        """Wait, then raise what a task reported through Runtime::fail, if any."""
        torch.cuda.synchronize(self.device)
        raw = self.control.cpu()
        control = abi.MpkControl.from_buffer_copy(ctypes.string_at(raw.data_ptr(), raw.numel() * 8))
        if control.task_error_launch:
            self.control.zero_()
            raise KernelError(
                diagnostics.task_error_message(
                    self.graph, control.task_error_task, control.task_error_code, control.task_error_value
                )
            )
