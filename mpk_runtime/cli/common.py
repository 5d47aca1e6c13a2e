"""What both CLI tools share: an argument parser whose errors are JSON, and the JSON printer."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ..errors import MpkError

EXIT_ERROR = 2


class CliError(MpkError, ValueError):
    """A command-line request that cannot be answered (bad arguments, unknown names, bad files)."""


class JsonArgumentParser(argparse.ArgumentParser):
    """argparse prints usage text and exits on an error; here the error becomes a CliError, so it
    is reported as JSON like every other error."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)")


def output_file(option: str, path: str, *inputs: str | Path) -> Path:
    """The file an option writes (``--png FILE``), checked before any work: not empty, not a
    directory, in a directory that exists, and none of the files the command reads (writing it
    would destroy the input)."""
    out = Path(path)
    if not path or out.is_dir():
        raise CliError(f"{option} {path!r}: {'is a directory' if path else 'no file named'}; name the file to write")
    if not out.parent.is_dir():
        raise CliError(f"{option} {path!r}: directory {str(out.parent)!r} does not exist; create it or write elsewhere")
    for given in inputs:
        if Path(given).exists() and out.exists() and os.path.samefile(out, given):
            raise CliError(f"{option} {path!r} is the input {str(given)!r}; writing it would destroy it: name another file")
    return out


def emit(data: Any) -> None:
    print(json.dumps(data))


def run(body: Callable[[], Any]) -> int:
    """Run one command: print its JSON result and return 0, or print {"error": ...} and return 2."""
    try:
        emit(body())
    except BrokenPipeError:
        # The reader went away (`| head`, a mistyped pipeline): nothing more can be said to it, and
        # Python would print a traceback when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except (MpkError, OSError) as e:
        emit({"error": str(e)})
        return EXIT_ERROR
    return 0
