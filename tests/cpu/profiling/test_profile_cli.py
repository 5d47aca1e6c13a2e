"""mpk-profile: every query and every error, through main([...]) and once through the installed
console script. Output is always one JSON document on stdout; errors exit with status 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpk_runtime.cli.profile import main
from mpk_runtime.profile.stats import COLUMNS, Row, p90, write_csv

# The entry point of the environment that runs the tests (not whichever one the PATH finds first).
SCRIPT = Path(sys.executable).with_name("mpk-profile")

T0 = 1_700_000_000_000_000_000


@pytest.fixture
def trace_csv(tmp_path):
    """rmsnorm_0: 10 runs of 100..1000 ns over 2 workers; noop_0 then noop_1 (task_type_id 1)."""
    rows = [
        Row(2, "rmsnorm", "rmsnorm_0", i % 2, i // 2, T0 + 1000 * i, T0 + 1000 * i + 100 * (i + 1), 100 * (i + 1))
        for i in range(10)
    ]
    rows += [
        Row(1, "noop", "noop_0", 0, 5, T0 + 20_000, T0 + 20_030, 30),
        Row(1, "noop", "noop_0", 1, 5, T0 + 20_005, T0 + 20_015, 10),
        Row(1, "noop", "noop_1", 0, 6, T0 + 21_000, T0 + 21_050, 50),
    ]
    path = tmp_path / "run.csv"
    write_csv(path, rows)
    return path


def call(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def test_list(capsys, trace_csv):
    assert call(capsys, trace_csv, "--list") == (
        0,
        {
            "rows": 13,
            "task_types": [
                {"task_type_id": 1, "task_type_name": "noop", "count": 3, "total_ns": 90},
                {"task_type_id": 2, "task_type_name": "rmsnorm", "count": 10, "total_ns": 5500},
            ],
        },
    )


@pytest.mark.parametrize(
    "stat, value", [("min", 100), ("max", 1000), ("avg", 550.0), ("median", 550.0), ("p90", 900), ("wall", 9000 + 1000)]
)
def test_one_stat(capsys, trace_csv, stat, value):
    assert call(capsys, trace_csv, "rmsnorm", "--stat", stat) == (
        0,
        {"task_type": "rmsnorm", "task_type_id": 2, "count": 10, f"{stat}_ns": value},
    )


def test_all_stats_by_numeric_id(capsys, trace_csv):
    code, out = call(capsys, trace_csv, "1", "--stat", "all")
    assert code == 0
    assert out == {
        "task_type": "noop",
        "task_type_id": 1,
        "count": 3,
        "min_ns": 10,
        "max_ns": 50,
        "avg_ns": 30.0,
        "median_ns": 30,
        "p90_ns": 50,
        "wall_ns": 21_050 - 20_000,
    }


def test_stat_without_task_covers_every_row(capsys, trace_csv):
    assert call(capsys, trace_csv, "--stat", "wall") == (0, {"task_type": None, "count": 13, "wall_ns": 21_050})


def test_p90_is_nearest_rank():
    assert p90([5]) == 5
    assert p90(list(range(1, 11))) == 9  # rank ceil(0.9 * 10) = 9
    assert p90(list(range(1, 12))) == 10  # rank ceil(9.9) = 10
    assert p90([7, 1, 3]) == 7  # unsorted input


def test_per_layer(capsys, trace_csv):
    code, out = call(capsys, trace_csv, "--per-layer")
    assert code == 0
    assert [(e["layer"], e["count"], e["total_ns"], e["span_ns"]) for e in out["layers"]] == [
        ("rmsnorm_0", 10, 5500, 10_000),
        ("noop_0", 2, 40, 30),
        ("noop_1", 1, 50, 50),
    ]
    assert out["layers"][1] == {
        "layer": "noop_0",
        "task_type_name": "noop",
        "task_type_id": 1,
        "count": 2,
        "total_ns": 40,
        "avg_ns": 20.0,
        "min_ns": 10,
        "max_ns": 30,
        "first_begin_ns": T0 + 20_000,
        "last_end_ns": T0 + 20_030,
        "span_ns": 30,
    }


def test_per_layer_of_one_task_type(capsys, trace_csv):
    code, out = call(capsys, trace_csv, "noop", "--per-layer")
    assert [e["layer"] for e in out["layers"]] == ["noop_0", "noop_1"]


@pytest.mark.parametrize("task", [None, "rmsnorm"])
def test_png(capsys, trace_csv, tmp_path, task):
    png = tmp_path / "lanes.png"
    code, out = call(capsys, trace_csv, *([task] if task else []), "--png", png)
    assert code == 0
    assert out == {"png": str(png), "rows": 10 if task else 13, "workers": 2}
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 1000


@pytest.mark.parametrize("option", [["--per-layer"], ["--stat", "max"]])
def test_the_task_may_follow_the_option(capsys, trace_csv, option):
    """As the usage line reads; "--stat max rmsnorm" had been refused as unrecognized arguments."""
    assert call(capsys, trace_csv, *option, "rmsnorm") == call(capsys, trace_csv, "rmsnorm", *option)


def test_png_of_names_with_dollar_signs(capsys, tmp_path):
    """matplotlib reads a pair of $ as math: a file or task named with them had ended in a traceback."""
    csv = tmp_path / "we$ird^$name.csv"
    write_csv(csv, [Row(2, "lin$\\frac$", "lin_0", 0, 0, T0, T0 + 100, 100)])
    code, out = call(capsys, csv, "--png", tmp_path / "w.png")
    assert code == 0 and out["rows"] == 1 and (tmp_path / "w.png").stat().st_size > 1000


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "mpk-profile" in capsys.readouterr().out


def write(tmp_path, text):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return path


HEADER = ",".join(COLUMNS) + "\n"


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["{csv}", "attention", "--stat", "avg"],
            "no task type 'attention' in this profile; it has: noop \\(1\\), rmsnorm \\(2\\)",
        ),
        (["{csv}", "77", "--stat", "avg"], "no task type '77'"),
        (["{csv}", "rmsnorm", "--stat", "p95"], "argument --stat: invalid choice: 'p95'"),
        (["{csv}", "rmsnorm"], "one of the arguments --list --stat --per-layer --png --phases is required"),
        (["{csv}", "--list", "--per-layer"], "not allowed with argument"),
        (["{csv}", "rmsnorm", "--list"], "--list lists every task type; drop TASK"),
        (["{missing}", "--list"], "cannot read profile CSV .*missing.csv.*No such file"),
        (["{csv}", "--png", "{missing_dir}"], "--png '.*': directory '.*' does not exist; create it or write elsewhere"),
        ([], "one of the arguments --list --stat --per-layer --png --phases is required"),
        (["{csv}", "9" * 5000, "--stat", "avg"], "no task type '9999"),  # no int() of 5000 digits
        (["{csv}", "\u0662", "--stat", "avg"], "no task type '\u0662'"),  # an Arabic-Indic 2 is no task id
        (["{csv}", "--png", ""], "--png '': no file named; name the file to write"),
        (["{csv}", "--png", "{dir}"], "--png '.*': is a directory; name the file to write"),
    ],
)
def test_errors(capsys, trace_csv, tmp_path, argv, match):
    paths = {
        "csv": trace_csv,
        "missing": tmp_path / "missing.csv",
        "missing_dir": tmp_path / "no" / "such" / "x.png",
        "dir": tmp_path,
    }
    code, out = call(capsys, *[a.format(**paths) for a in argv])
    assert code == 2
    assert list(out) == ["error"]
    assert re.search(match, out["error"]), out["error"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "not a profile CSV; the header must be task_type_id,"),
        ("a,b,c\n1,2,3\n", "not a profile CSV"),
        (HEADER, "no rows"),
        (HEADER + "2,rmsnorm,rmsnorm_0,0,0,100,200\n", ":2: expected 8 fields, got 7"),
        (
            HEADER + "2,rmsnorm,rmsnorm_0,0,0,100,200,100\nx,rmsnorm,rmsnorm_0,0,1,200,300,100\n",
            ":3: task_type_id='x' is not an integer",
        ),
        (HEADER + "2,rmsnorm,rmsnorm_0,0,0,100,200,50\n", ":2: duration_ns=50 does not equal end_ns - begin_ns = 100"),
        (HEADER + "2,rmsnorm,rmsnorm_0,0,0,300,200,-100\n", "duration_ns=-100"),
        (HEADER + "2,rmsnorm,rmsnorm_0,-1,0,100,200,100\n", ":2: worker='-1' is not an integer in [0, 2**64)"),
        (HEADER + f"2,rmsnorm,rmsnorm_0,0,0,0,{'9' * 400},{'9' * 400}\n", ":2: end_ns='99999"),  # fmean overflowed
    ],
)
def test_malformed_csv(capsys, tmp_path, text, match):
    code, out = call(capsys, write(tmp_path, text), "--list")
    assert code == 2 and match in out["error"], out


def test_a_file_that_is_not_text(capsys, tmp_path):
    """A Perfetto trace (binary) passed for its CSV, or a CSV in Latin-1."""
    path = tmp_path / "run.perfetto-trace"
    path.write_bytes(b"\n\xe2\x01\x00\xff binary")
    code, out = call(capsys, path, "--list")
    assert code == 2 and out["error"].startswith(f"{path}:1: not a profile CSV (not UTF-8 CSV text: 'utf-8' codec can't decode")
    assert out["error"].endswith("; pass the .csv written next to the trace")


def test_png_never_overwrites_the_csv(capsys, trace_csv):
    before = trace_csv.read_bytes()
    code, out = call(capsys, trace_csv, "--png", trace_csv)
    assert (code, out) == (
        2,
        {"error": f"--png '{trace_csv}' is the input '{trace_csv}'; writing it would destroy it: name another file"},
    )
    assert trace_csv.read_bytes() == before


@pytest.mark.skipif(not SCRIPT.is_file(), reason=f"console script not installed beside {sys.executable} (pip install -e .)")
def test_console_script(trace_csv):
    """One run of the installed entry point (each start imports torch: about 1.5 s)."""
    ok = subprocess.run([str(SCRIPT), str(trace_csv), "rmsnorm", "--stat", "max"], capture_output=True, text=True)
    assert (ok.returncode, json.loads(ok.stdout)) == (0, {"task_type": "rmsnorm", "task_type_id": 2, "count": 10, "max_ns": 1000})
