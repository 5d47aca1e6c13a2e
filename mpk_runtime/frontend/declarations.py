"""The tensors a PersistentKernel's layers read and write: attached by the user, owned by the
runtime (intermediates, communication buffers), or derived (shuffled), and the torch tensor behind
each. A part of PersistentKernel (kernel.py), kept apart because declaring tensors is one concept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import StateError
from ..graph import DTensor, TaskGraph
from .lowering import check_attachable


class TensorDeclarations:
    """The tensor methods of PersistentKernel, on its graph, parameters and device."""

    _graph: TaskGraph
    _p: Any  # KernelParams
    _compiled: Any  # CompiledGraph | None
    device: torch.device
    _check_open: Callable[[str], None]  # PersistentKernel's: a StateError once finalized

    def attach_input(self, tensor: torch.Tensor, name: str) -> DTensor:
        """Register a tensor the kernel reads or writes (inputs, weights *and* outputs)."""
        self._check_declaring("attach_input")
        check_attachable(tensor, name, self._p, self.device)
        return self._graph.add_tensor(tensor, name, "attached")

    def new_tensor(self, dims: tuple[int, ...], dtype: torch.dtype, name: str) -> DTensor:
        """An intermediate tensor owned by the runtime; its data is ``pk.tensor(name)``."""
        self._check_declaring("new_tensor")
        return self._graph.add_intermediate(dims, dtype, name, self.device)

    def new_comm_tensor(self, dims: tuple[int, ...], dtype: torch.dtype, name: str) -> DTensor:
        """A tensor the other ranks can reach (e.g. an all-reduce's buffer), owned by the runtime: on
        the GPU it lies in the communication heap that compile() allocates and maps into every rank,
        so its data (``pk.tensor(name)``) exists from compile() on. Every rank must declare the same."""
        self._check_declaring("new_comm_tensor")
        return self._graph.add_comm(dims, dtype, name, self._p.world_size, self.device)

    def shuffle_tensors(self, inputs: list[DTensor], shuffled_dim: int, num_groups: int, name: str) -> DTensor:
        """A new tensor interleaving ``inputs`` in ``num_groups`` groups along ``shuffled_dim``:
        [in0_0, in1_0, ..., in0_1, in1_1, ...] (e.g. a gate / up weight for linear + silu_mul). It
        is computed now, from the inputs' current data, and recorded so that replays recompute it."""
        self._check_declaring("shuffle_tensors")
        return self._graph.add_shuffled(inputs, shuffled_dim, num_groups, name)

    def _check_declaring(self, what: str) -> None:
        """StateError once the graph is compiled: a tensor declared then would be in no layer."""
        self._check_open(what)
        if self._compiled is not None:
            raise StateError(
                f"{what}(): the kernel is already compiled, so no layer can use a new tensor; declare every "
                f"tensor before compile(), or build a new PersistentKernel for another graph"
            )

    def tensor(self, name: str) -> torch.Tensor:
        """The torch tensor behind an attached or intermediate tensor."""
        data = self._graph.data(name)
        if data.device.type == "meta" and self._graph.tensors[name].kind == "comm" and self._compiled is None:
            raise StateError(f"tensor({name!r}): a communication tensor's memory is allocated by compile(); call it first")
        return data
