"""The run memory budget (``sglens serve --run-memory-limit``), checked before a run allocates.

``engine.budget.check_memory_budget`` estimates every tensor from shape inference with the run's
real input shapes and refuses (``MemoryBudgetError``, naming the node) a run that would pass the
limit; the message ends with the server's own flag.
"""

from __future__ import annotations

from typing import Any, Mapping

from partition.ir import Graph

#: How a refused run's message ends: the server's own flag.
HINT = "use smaller inputs or start the server with a larger --run-memory-limit"


def check_run_budget(graph: Graph, feeds: Mapping[str, Any], limit: int) -> None:
    from engine.budget import check_memory_budget
    check_memory_budget(graph, feeds, limit, hint=HINT)
