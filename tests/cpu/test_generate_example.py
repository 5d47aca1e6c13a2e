"""examples/generate.py's command line: a value it cannot use is a usage error naming it (exit 2,
before any weight is made), not a traceback or a flag silently ignored.

The usage errors run the script in this process (``runpy``, ``__main__`` as from the command line):
a fresh interpreter each cost 1.5 s of torch's import. ``--help`` runs it as a real script."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "generate.py"


@pytest.mark.parametrize(
    "args, said",
    [
        (["--layers", "0"], "argument --layers: 0 must be at least 1"),  # had run the preset's layers
        (["--prompt", "1,,2"], "argument --prompt: '1,,2' is not comma-separated token ids, e.g. 9707,11,1879"),
        (["--batch", "0"], "argument --batch: 0 must be at least 1"),
        (["--new-tokens", "x"], "argument --new-tokens: 'x' is not an integer"),
        (["--checkpoint", ".", "--model", "tiny"], "--layers and --model shape the random model; a --checkpoint brings"),
    ],
)
def test_a_flag_it_cannot_use_is_a_usage_error(args, said, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *args])
    with pytest.raises(SystemExit) as exited:  # any other exception fails the test with its traceback
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and said in stderr, stderr


def test_help_gives_the_whole_first_paragraph():
    done = subprocess.run([sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=120)
    assert "prints the generated token ids and tokens/s." in " ".join(done.stdout.split())
