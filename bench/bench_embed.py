"""The embed layer inside the megakernel next to its torch equivalent (see bench_small_layers.py).

python bench/bench_embed.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_small_layers  # noqa: E402

if __name__ == "__main__":
    bench_small_layers.main("embed")
