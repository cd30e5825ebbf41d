"""A node's incompatibility groups and its TensorRT verdict, for ``sglens groups`` and the web's groups view.

It lives beside the groups and rules it reports on, so ``partition/report.py`` (every backend's
report) never imports the TensorRT folder, which imports ``report`` to export subgraphs.
"""

from __future__ import annotations

from typing import Any

from ..registry import Selection, current_registry
from ..ir import Graph
from .groups import incompatibility_groups
from .options import rules_for


def groups_report(graph: Graph, node_name: str, selection: Selection | None = None, **options: Any) -> dict[str, Any]:
    """A node's incompatibility groups (the TensorRT integration design) and its TensorRT verdict, for ``sglens groups``.

    ``selection`` is a validated tensorrt selection; a library caller may pass ``options`` instead,
    validated here (every rule option matters; ``min_size``/``mode`` do not change a verdict).
    """
    if selection is None:
        selection = current_registry().select("tensorrt", options)
    elif options or selection.backend != "tensorrt":
        raise ValueError("groups_report takes a tensorrt Selection or options, not both")
    rules = rules_for(selection.options)
    ancestors, descendants = incompatibility_groups(graph, node_name)
    node = graph.node_by_name[node_name]
    reasons = rules.compat(graph)   # the backend's own verdicts: release, plugins, target (GPU or DLA)
    reason = reasons.get(node.name)
    report: dict[str, Any] = {
        "node": node_name,
        "op_type": node.op_type,
        "compatible": reason is None,
        "reason": reason or "",
        "ancestors": ancestors,
        "descendants": descendants,
        "ancestor_count": len(ancestors),
        "descendant_count": len(descendants),
    }
    if reason is None:
        report["note"] = ("compatible with TensorRT: these groups matter only for incompatible nodes; "
                          "the incompatible nodes among them are listed below")
    else:
        report["note"] = ("a TensorRT subgraph holding any node of 'ancestors' may hold no node of "
                          "'descendants', and the reverse: this node would stay between them")
    report["incompatible_ancestors"] = [n for n in ancestors if n in reasons]
    report["incompatible_descendants"] = [n for n in descendants if n in reasons]
    report["tensorrt_rules"] = rules.version  # which release's table decided, and from which source line
    report["reason_source"] = rules.cite(node_name) or ""
    return report
