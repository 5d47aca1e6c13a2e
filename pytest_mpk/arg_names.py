"""What a scene's generate_args returns, learned at collection without computing any tensor.

The check made at collection needs the names generate_args returns and which are Out, not values or
shapes. Running it for real would allocate the case's full-size tensors; running it on the "meta"
device is no better in a fresh process: most meta ops (arithmetic, cat, matmul, random factories)
go through torch's Python references, whose first call imports torch._dynamo and sympy, 1.3 s with
cached bytecode and 5 s without, in every pytest process and every xdist worker. So every torch call
made under this mode returns one empty placeholder tensor. Code that needs real shapes or values
(``x.shape[0]``, ``.item()``) then raises, and the caller leaves the check to run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class _Placeholders(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.placeholder = torch.empty(0, device="meta")  # an empty meta tensor: no memory, no kernel

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.placeholder


def generate_with_placeholders(generate_args: Callable[[dict[str, Any]], Any], params: dict[str, Any]) -> Any:
    """generate_args(params) with every tensor it makes replaced by an empty placeholder."""
    with _Placeholders():
        return generate_args(dict(params))
