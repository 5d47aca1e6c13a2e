"""The two MoE routing layers inside the megakernel next to their torch equivalents (see
bench_small_layers.py).

python bench/bench_moe_routing.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_small_layers  # noqa: E402

if __name__ == "__main__":
    bench_small_layers.main("routing")
