"""Which unsupported op (or node) to support first: what a plugin for it would gain.

For a model and a target (the tensorrt backend's options: release, GPU or DLA), each
op type the rules leave out is assumed supported in turn (``assume_supported``, as
a plugin would make it) and the model partitioned again. The gain is the difference
to the partition as it is: subgraphs merged (TensorRT engines, or DLA loadables,
saved), nodes covered, and bytes crossing subgraph boundaries saved. The same for
the single nodes of the best op types (a node is assumed supported by name).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..ir import Graph
from ..registry import Selection, current_registry

#: how many single nodes are tried (each costs one partition)
NODE_CANDIDATES = 24


def _figures(result: Any) -> dict[str, int]:
    from ..report import boundary
    sizes: dict[str, int | None] = {}
    bytes_, unknown = 0, set()
    for sg in result.subgraphs:
        known, symbolic = boundary(result.original, sg.inputs, sg.outputs, sizes)
        bytes_ += known
        unknown.update(symbolic)
    covered = sum(len(sg.nodes) for sg in result.subgraphs)
    # symbolic-shape tensors have no size: counted apart, never as 0 B
    return {"subgraphs": len(result.subgraphs), "covered": covered, "boundary_bytes": bytes_,
            "boundary_unknown": len(unknown)}


def _gain(base: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {"subgraphs_merged": base["subgraphs"] - after["subgraphs"],
            "nodes_covered": after["covered"] - base["covered"],
            "boundary_bytes_saved": base["boundary_bytes"] - after["boundary_bytes"]}


def _key(row: Mapping[str, Any]) -> tuple:
    g = row["gain"]
    return (-g["subgraphs_merged"], -g["nodes_covered"], -g["boundary_bytes_saved"], row.get("op_type", ""),
            row.get("node", ""))


def rank_gains(graph: Graph, selection: Selection | Mapping[str, Any] | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """{"base": figures, "op_types": [...], "nodes": [...]} best first; each row has its ``gain``
    (``subgraphs_merged`` -- on the DLA target these are loadables saved -- ``nodes_covered``,
    ``boundary_bytes_saved``) and the partition figures it would give."""
    if not isinstance(selection, Selection):  # a library call: its options are validated here, once
        selection = current_registry().select("tensorrt", dict(selection or {}))
    options = selection.values()   # every option, coerced; assume_supported grows per try
    assumed = list(options.pop("assume_supported") or ())
    base = _figures(_partition(graph, options, assumed))
    refused = _property(options, assumed).rules.compat(graph)
    by_type: dict[str, list[str]] = {}
    for name in refused:
        by_type.setdefault(graph.node_by_name[name].op_type, []).append(name)
    total = len(by_type) + min(NODE_CANDIDATES, len(refused))
    done = 0
    op_rows = []
    for op, names in sorted(by_type.items()):
        after = _figures(_partition(graph, options, assumed + [op]))
        op_rows.append({"op_type": op, "nodes": len(names), "reason": refused[names[0]], "gain": _gain(base, after),
                        "after": after})
        done += 1
        if progress:
            progress(done, total)
    op_rows.sort(key=_key)
    node_rows = []
    candidates = [n for row in op_rows for n in by_type[row["op_type"]]][:NODE_CANDIDATES]
    for name in candidates:
        after = _figures(_partition(graph, options, assumed, [name]))
        node_rows.append({"node": name, "op_type": graph.node_by_name[name].op_type, "reason": refused[name],
                          "gain": _gain(base, after), "after": after})
        done += 1
        if progress:
            progress(done, total)
    node_rows.sort(key=_key)
    return {"target": options["trt_target"], "base": base, "op_types": op_rows, "nodes": node_rows,
            "nodes_tried": len(candidates), "nodes_refused": len(refused)}


def _property(options: Mapping[str, Any], assumed: list[str], nodes: list[str] = ()) -> Any:
    from .algorithm import tensorrt_backend
    prop = tensorrt_backend(assume_supported=assumed, **options)[0]
    prop.rules.assume_nodes = frozenset(nodes)
    return prop


def _partition(graph: Graph, options: Mapping[str, Any], assumed: list[str], nodes: list[str] = ()) -> Any:
    from ..runner import partition
    return partition(graph, "tensorrt", properties=[_property(options, assumed, nodes)])
