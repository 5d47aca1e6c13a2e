"""``mpk-graph``: inspect a ``task_graph_rank{r}.json`` (written by ``compile(output_dir=...)``).

    mpk-graph task_graph_rank0.json              summary: tasks per type and layer, events, trigger-count
                                                 histogram, critical path, fan-in / fan-out extremes
    mpk-graph task_graph_rank0.json --task N     one task: deps (with hazards), dependents, worker, wait
                                                 event, triggered events, slices
    mpk-graph task_graph_rank0.json --event N    one event: producers, consumers, trigger count
    mpk-graph task_graph_rank0.json --dot FILE   Graphviz: tasks as nodes clustered by layer, deps as edges

Argument parsing only; the answers come from mpk_runtime/graph/queries.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..graph import queries
from ..graph.compiled import CompiledGraph
from .common import CliError, JsonArgumentParser, output_file, run


def parser() -> JsonArgumentParser:
    p = JsonArgumentParser(prog="mpk-graph", description="Inspect a pytest-mpk task graph JSON; prints JSON")
    p.add_argument("graph", metavar="GRAPH.json", help="task_graph_rank{r}.json from compile(output_dir=...)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--task", type=int, metavar="N", help="Details of task N")
    what.add_argument("--event", type=int, metavar="N", help="Details of event N")
    what.add_argument("--dot", metavar="FILE", help="Write the graph in Graphviz DOT to FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    return run(lambda: answer(parser().parse_args(argv)))


def answer(args: argparse.Namespace) -> dict:
    dot_file = output_file("--dot", args.dot, args.graph) if args.dot is not None else None
    g = load(args.graph)
    if args.task is not None:
        return queries.task_detail(g, args.task)
    if args.event is not None:
        return queries.event_detail(g, args.event)
    if dot_file is not None:
        dot_file.write_text(queries.dot(g))
        return {"dot": args.dot, "nodes": len(g.tasks), "edges": sum(len(t.deps) for t in g.tasks)}
    return queries.summary(g, args.graph)


def load(path: str) -> CompiledGraph:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise CliError(f"cannot read task graph {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CliError(f"{path}: not JSON (not UTF-8 text: {e}); pass a task_graph_rank{{r}}.json") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{path}: not JSON ({e})") from None
    except (ValueError, RecursionError) as e:  # nested too deeply, an integer of thousands of digits
        raise CliError(f"{path}: not a task graph ({type(e).__name__}: {str(e)[:80]}); pass task_graph_rank{{r}}.json") from None
    return CompiledGraph.from_json(data, path)


if __name__ == "__main__":
    raise SystemExit(main())
