"""The swimlane picture of ``mpk-profile --png``: one lane per worker, time across, one colour per
task type. Drawn with matplotlib's object API (no pyplot), so no display or global state is used."""

from __future__ import annotations

from .stats import Row


def draw(rows: list[Row], path: str, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    t0 = min(r.begin_ns for r in rows)
    workers = sorted({r.worker for r in rows})
    lane = {w: i for i, w in enumerate(workers)}
    types = sorted({(r.task_type_id, r.task_type_name) for r in rows})
    colours = {t: f"C{i % 10}" for i, t in enumerate(types)}

    fig = Figure(figsize=(12, 1.5 + 0.3 * len(workers)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    bars: dict[tuple[tuple[int, str], int], list[tuple[float, float]]] = {}
    for r in rows:
        bars.setdefault(((r.task_type_id, r.task_type_name), r.worker), []).append(((r.begin_ns - t0) / 1e3, r.duration_ns / 1e3))
    for (t, w), spans in bars.items():
        ax.broken_barh(spans, (lane[w] - 0.4, 0.8), facecolors=colours[t])
    ax.set_yticks(range(len(workers)), [f"worker {w}" for w in workers])
    ax.set_ylim(len(workers) - 0.5, -0.5)
    ax.set_xlabel("time since the first task began (µs)")
    ax.set_title(_plain(title))
    ax.legend(handles=[Patch(color=colours[t], label=_plain(t[1])) for t in types], loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)


def _plain(text: str) -> str:
    """``text`` as matplotlib draws it literally: a pair of $ would start its math mode (and a file
    or task name with them had ended the drawing with a parse error)."""
    return text.replace("$", r"\$")
