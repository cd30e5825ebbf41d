"""The run memory budget (``sglens serve --run-memory-limit``), checked before a run allocates.

``engine.budget.check_memory_budget`` estimates every tensor from shape inference with the run's
real input shapes and refuses (``MemoryBudgetError``, naming the node) a run that would pass the
limit; the message ends with the server's own flag.
"""

from __future__ import annotations

from typing import Any, Mapping

from partition.import_limits import ImportLimits
from partition.ir import Graph

#: How a refused run's message ends: the server's own flag.
HINT = "use smaller inputs or start the server with a larger --run-memory-limit"


def check_run_budget(graph: Graph, feeds: Mapping[str, Any], limit: int) -> None:
    from engine.budget import check_memory_budget
    check_memory_budget(graph, feeds, limit, hint=HINT)


def import_limits(max_bytes: int | None, config: Mapping[str, Any] | None = None) -> ImportLimits:
    """What one model may hold on this server (``partition/import_limits.py``): nodes, initializers
    and attributes from ``SGLENS_MAX_NODES`` / ``_INITIALIZERS`` / ``_ATTRIBUTES`` (flags
    ``--max-nodes`` ...), and tensor bytes once read up to the upload limit. ``config`` defaults to
    the current app's."""
    from partition import import_limits as il
    if config is None:
        from flask import current_app, has_app_context
        config = current_app.config if has_app_context() else {}
    return il.ImportLimits(nodes=int(config.get("SGLENS_MAX_NODES") or il.MAX_NODES),
                           initializers=int(config.get("SGLENS_MAX_INITIALIZERS") or il.MAX_INITIALIZERS),
                           attributes=int(config.get("SGLENS_MAX_ATTRIBUTES") or il.MAX_ATTRIBUTES),
                           tensor_bytes=max_bytes)
