"""The run memory budget (``sglens serve --run-memory-limit``), checked before a run allocates.

``engine.budget.check_memory_budget`` (the engine's estimate from shape inference) does the work.
Until that module is in the tree, a conservative estimate of our own stands in: every tensor whose
size shape inference knows, counted as if all stayed alive; the first node past the budget is named.
"""

from __future__ import annotations

from typing import Any, Mapping

from partition.errors import LensError
from partition.ir import Graph


#: How a refused run's message ends: the server's own flag.
HINT = "use smaller inputs or start the server with a larger --run-memory-limit"


class RunMemoryError(LensError):
    """A run would need more memory than the server's budget allows."""


def check_run_budget(graph: Graph, feeds: Mapping[str, Any], limit: int) -> None:
    try:
        from engine.budget import check_memory_budget
    except ImportError:   # engine/budget.py arrives with the engine's side of issue 9
        _estimate(graph, feeds, limit)
        return
    check_memory_budget(graph, feeds, limit, hint=HINT)


def _estimate(graph: Graph, feeds: Mapping[str, Any], limit: int) -> None:
    total = sum(int(getattr(v, "nbytes", 0)) for v in feeds.values())
    for node in graph.nodes:
        for t in node.outputs:
            size = graph.info(t).nbytes if t else None
            if not size:
                continue
            total += size
            if size > limit or total > limit:
                raise RunMemoryError(
                    f"node '{node.name}' ({node.op_type}) would bring the run to about {total} bytes "
                    f"(output '{t}' alone {size}), over the server's run memory limit of {limit} bytes; {HINT}")
