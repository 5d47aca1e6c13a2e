"""Where one copy's span goes, from the profiles of launches that each hold that copy alone
(layer_bench.profiled_runs): the phases its task bodies mark (`Runtime::mark`), the median over the
tasks of each launch and then over the launches, and the task that ends last, whose chain the span
is, with its phase ends from the span's start in the launch of median span.

A split-KV decode's span is its merger's chain: the tasks' median end against the last task's says
how much of the span is the merge rather than the stream."""

from __future__ import annotations

import statistics

from mpk_runtime.profile.stats import PhaseRow, Row, p90


def span_phases(runs: list[tuple[list[Row], list[PhaseRow]]]) -> dict:
    """``runs``: each launch's task rows and phase rows (its profile CSVs). Times in µs."""
    if not runs or not all(rows for rows, _ in runs):
        raise ValueError("span_phases needs at least one launch, each with at least one task row")
    launches = []
    for rows, phases in runs:
        start = min(r.begin_ns for r in rows)
        ends = [r.end_ns - start for r in rows]
        last = max(rows, key=lambda r: r.end_ns)
        by_phase: dict[str, list[int]] = {}
        for ph in phases:
            by_phase.setdefault(ph.phase, []).append(ph.duration_ns)
        launches.append(
            {
                "span_ns": max(ends),
                "tasks": len(rows),
                "begin_max_ns": max(r.begin_ns for r in rows) - start,
                "end_p50_ns": statistics.median(ends),
                "end_p90_ns": p90(ends),
                "phase_median_ns": {name: statistics.median(d) for name, d in by_phase.items()},
                "last_task_ends_ns": [
                    (ph.phase, ph.end_ns - start)
                    for ph in sorted(phases, key=lambda ph: ph.end_ns)
                    if (ph.worker, ph.event_no) == (last.worker, last.event_no)
                ],
            }
        )
    median_launch = sorted(launches, key=lambda x: x["span_ns"])[(len(launches) - 1) // 2]
    names = list(dict.fromkeys(name for x in launches for name in x["phase_median_ns"]))

    def median_us(key: str) -> float:
        return statistics.median(x[key] for x in launches) / 1e3

    return {
        "launches": len(launches),
        "tasks": median_launch["tasks"],
        "span_us": median_us("span_ns"),
        "begin_max_us": median_us("begin_max_ns"),
        "end_p50_us": median_us("end_p50_ns"),
        "end_p90_us": median_us("end_p90_ns"),
        "phase_median_us": {
            n: statistics.median(x["phase_median_ns"][n] for x in launches if n in x["phase_median_ns"]) / 1e3 for n in names
        },
        "last_task_phase_ends_us": [(n, t / 1e3) for n, t in median_launch["last_task_ends_ns"]],
    }


def describe(name: str, s: dict) -> list[str]:
    """The lines the benches print for one case."""
    return [
        f"{name}: span {s['span_us']:.2f} us over {s['tasks']} tasks (median of {s['launches']} launches); "
        f"the last task begins within {s['begin_max_us']:.2f} us of the first; task ends: median "
        f"{s['end_p50_us']:.2f}, p90 {s['end_p90_us']:.2f}, last {s['span_us']:.2f}",
        "  phases, median us: " + "; ".join(f"{n} {v:.2f}" for n, v in s["phase_median_us"].items()),
        "  the last task's phase ends, us from the span's start: "
        + "; ".join(f"{n} {t:.2f}" for n, t in s["last_task_phase_ends_us"]),
    ]
