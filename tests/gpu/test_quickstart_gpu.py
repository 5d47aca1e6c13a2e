"""The guide's test-mode Quick Start runs as written (examples/quickstart_test_mode.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "quickstart_test_mode.py"


def test_quickstart_runs_as_written(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Max diff:" in proc.stdout
    out = tmp_path / "test_output"
    assert (out / "test_rank0.cu").is_file() and (out / "task_graph_rank0.json").is_file()
    assert (out / "signature_rank0.json").is_file()
