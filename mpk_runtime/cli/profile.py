"""``mpk-profile``: questions about a profile CSV (written by a profiled ``pk()``), answered in JSON.

    mpk-profile TRACE.csv --list                      task types, with run counts and total time
    mpk-profile TRACE.csv TASK --stat STAT            min | max | avg | median | p90 | all | wall
    mpk-profile TRACE.csv [TASK] --per-layer          time per layer (work and span), in start order
    mpk-profile TRACE.csv [TASK] --png FILE           swimlane picture: worker x time, coloured by task type
    mpk-profile TRACE.csv [TASK] --phases             per task type and phase its body marks (Runtime::mark):
                                                      min, median, avg, p90, max (TRACE.phases.csv)

TASK is a task type name (``rmsnorm``) or its numeric task_type_id; without it, every row counts.
p90 is the nearest-rank percentile (a measured duration); wall is first begin to last end.
"""

from __future__ import annotations

import argparse

from ..errors import ProfileError
from ..profile import stats as ps
from .common import CliError, JsonArgumentParser, output_file, run


def parser() -> JsonArgumentParser:
    p = JsonArgumentParser(prog="mpk-profile", description="Query a pytest-mpk profile CSV; prints JSON")
    p.add_argument("csv", metavar="TRACE.csv", help="Profile CSV written next to the Perfetto trace")
    p.add_argument("task", metavar="TASK", nargs="?", help="Task type name or numeric task_type_id")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="List the task types with run counts and total time")
    what.add_argument("--stat", choices=ps.STATS, metavar="STAT", help=f"Statistic of task durations: {', '.join(ps.STATS)}")
    what.add_argument("--per-layer", action="store_true", help="Time per layer, in the order the layers started")
    what.add_argument("--png", metavar="FILE", help="Draw a swimlane picture (worker x time) into FILE")
    what.add_argument("--phases", action="store_true", help="Durations of the phases task bodies mark, per task type")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(lambda: answer(parser().parse_intermixed_args(argv)))  # TASK before or after the option


def answer(args: argparse.Namespace) -> dict:
    png = output_file("--png", args.png, args.csv, ps.phases_path(args.csv)) if args.png is not None else None
    rows = ps.read_csv(args.csv)
    if args.list:
        if args.task is not None:
            raise CliError(f"--list lists every task type; drop TASK ({args.task!r}) or use --stat")
        return {"task_types": ps.task_types(rows), "rows": len(rows)}
    picked = ps.select(rows, args.task) if args.task is not None else rows
    if args.stat:
        kind = (
            {"task_type": picked[0].task_type_name, "task_type_id": picked[0].task_type_id} if args.task else {"task_type": None}
        )
        return {**kind, **ps.stats(picked, args.stat)}
    if args.per_layer:
        return {"layers": ps.per_layer(picked)}
    if args.phases:
        return {"phases": _phases(args.csv, args.task)}
    from ..profile.swimlane import draw

    draw(picked, str(png), title=args.csv if args.task is None else f"{args.csv}: {args.task}")
    return {"png": args.png, "rows": len(picked), "workers": len({r.worker for r in picked})}


def _phases(csv: str, task: str | None) -> list[dict]:
    path = ps.phases_path(csv)
    if not path.exists():
        raise CliError(f"{csv}: no phases CSV next to it ({path.name}); a profiled launch writes it with the trace")
    rows = ps.read_phases_csv(path)
    if not rows:
        raise CliError(f"{path}: no task type marks phases in this profile; a body marks them with Runtime::mark (task_api.cuh)")
    if task is None:
        return ps.per_phase(rows)
    try:
        return ps.per_phase(ps.select(rows, task))
    except ProfileError:
        ps.select(ps.read_csv(csv), task)  # a task type the profile does not have: said as for every question
        marking = sorted({r.task_type_name for r in rows})
        raise CliError(
            f"task type {task!r} marks no phases in this profile (its body calls no Runtime::mark); these do: "
            f"{', '.join(marking)}"
        ) from None


if __name__ == "__main__":
    raise SystemExit(main())
