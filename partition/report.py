"""Reports on a partition result, for every backend: sizes, boundary traffic, a summary.

- ``describe(result)``: the result's JSON plus, per subgraph, ``node_count``,
  ``compute_nodes``, ``weights`` (initializers pulled in) and
  ``boundary_bytes`` (activations crossing its boundary, where shapes are
  known; ``boundary_unknown`` lists the tensors whose size is not), and a
  ``summary``: nodes covered, partitions, unsupported op types with counts and
  reasons (what Polygraphy's ``inspect capability`` reports), the other nodes
  left out counted by reason kind. Everything is read from ``Reason.kind``,
  never from a reason's text.
- ``export_subgraphs(result, out_dir)``: each subgraph as a standalone ONNX
  model (weights as initializers, the model's opset, IR 8).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

from .api import NodeView, SubgraphProperty, get_backend
from .gcpause import paused_gc
from .ir import Graph
from .trace import REASON_LABELS, PartitionResult, ReasonKind

NON_COMPUTE_OPS = frozenset({"Constant", "Identity"})


def boundary(graph: Graph, inputs: Sequence[str], outputs: Sequence[str],
             sizes: dict[str, int | None] | None = None) -> tuple[int, list[str]]:
    """Bytes of the non-weight tensors in ``inputs`` + ``outputs`` whose size is known, and the unknown ones.

    ``sizes`` memoises tensor -> bytes across calls (a report asks for each boundary tensor
    about twice: once as a subgraph's output, once as the next one's input).
    """
    total, unknown = 0, []
    inits = graph.initializers
    for t in (*inputs, *outputs):
        if t in inits:
            continue
        if sizes is None:
            nbytes = graph.info(t).nbytes
        elif t in sizes:
            nbytes = sizes[t]
        else:
            nbytes = sizes[t] = graph.info(t).nbytes
        if nbytes is None:
            unknown.append(t)
        else:
            total += nbytes
    return total, unknown


def describe(result: PartitionResult, properties: Sequence[SubgraphProperty] | None = None) -> dict[str, Any]:
    """``result.to_json()`` with per-subgraph sizes and a summary (see the module docstring).

    ``properties`` is accepted for older callers and not needed: each reason carries its kind.
    """
    with paused_gc():  # a large result is ~1M small acyclic objects: see partition/gcpause.py
        return _describe(result)


def _describe(result: PartitionResult) -> dict[str, Any]:
    data = result.to_json()
    original = result.original
    by_name = original.node_by_name
    inits = original.initializers
    sizes: dict[str, int | None] = {}
    for sg, js in zip(result.subgraphs, data["subgraphs"]):
        nbytes, unknown = boundary(original, sg.inputs, sg.outputs, sizes)
        op_types = _counts([by_name[n].op_type for n in sg.nodes])
        js["node_count"] = len(sg.nodes)
        js["compute_nodes"] = len(sg.nodes) - sum(op_types.get(op, 0) for op in NON_COMPUTE_OPS)
        js["weights"] = [t for t in sg.inputs if t in inits]
        js["boundary_bytes"] = nbytes
        js["boundary_unknown"] = unknown
        js["op_types"] = op_types
    summary = dict(data.get("summary") or {})
    summary.update(_summary(result))
    data["summary"] = summary
    if "tensorrt_rules" in summary:  # which rule table decided, at the top where a script looks first
        data["tensorrt_rules"] = summary["tensorrt_rules"]
    return data


def result_json(result: PartitionResult) -> dict[str, Any]:
    """The JSON of a partition result with sizes and summary: ``sglens partition --json`` and the web app."""
    return describe(result)


def _counts(items: Any) -> dict[str, int]:
    """Item -> count, most frequent first, ties by item."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    if len(counts) < 2:  # most subgraphs of a large model: nothing to sort
        return counts
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _summary(result: PartitionResult) -> dict[str, Any]:
    """Counts by reason kind (``Reason.kind``): what the backend cannot run, and why the rest stayed out."""
    original = result.original
    total = len(original.nodes)
    covered = total - len(result.reasons)
    unsupported: dict[str, dict[str, Any]] = {}
    other: dict[str, int] = {}
    by_name = original.node_by_name
    for name, reason in result.reasons.items():
        if reason.kind is ReasonKind.UNSUPPORTED:
            op_type = by_name[name].op_type
            entry = unsupported.setdefault(op_type, {"op_type": op_type, "count": 0, "reasons": {}, "nodes": []})
            entry["count"] += 1
            text = reason.text
            entry["reasons"][text] = entry["reasons"].get(text, 0) + 1
            if len(entry["nodes"]) < 20:
                entry["nodes"].append(name)
        else:
            label = REASON_LABELS[reason.kind.value]
            other[label] = other.get(label, 0) + 1
    sizes = [len(s.nodes) for s in result.subgraphs]
    return {
        "nodes": total,
        "nodes_covered": covered,
        "coverage": round(covered / total, 4) if total else 0.0,
        "partitions": len(result.subgraphs),
        "partition_sizes": {"min": min(sizes, default=0), "max": max(sizes, default=0),
                            "mean": round(sum(sizes) / len(sizes), 2) if sizes else 0.0},
        "unsupported_nodes": sum(e["count"] for e in unsupported.values()),
        "unsupported": sorted(unsupported.values(), key=lambda e: (-e["count"], e["op_type"])),
        "left_out_supported": dict(sorted(other.items(), key=lambda kv: -kv[1])),
        "left_out_by_kind": _counts(str(r.kind) for r in result.reasons.values()),
        "left_out_by_op": _counts(by_name[n].op_type for n in result.reasons),
        "cycles_avoided": len(result.cycles),
    }


# ------------------------------------------------------------------ export --
def export_subgraphs(result: PartitionResult, out_dir: str | os.PathLike) -> list[Path]:
    """Write each subgraph as ``<out_dir>/<property>_<id>.onnx``: a model onnxruntime loads and runs.

    Weights the subgraph reads become its initializers; the opset is the
    model's; IR version 8.
    """
    import onnx

    from .onnx_io import standalone_model
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    original = result.original
    final_nodes = result.graph.node_by_name
    paths: list[Path] = []
    for sg in result.subgraphs:
        node = final_nodes.get(sg.node_name)
        if node is not None and node.is_subgraph:
            body = node.body
        else:  # rebuild from the member names
            from .build import subgraph_body
            members = sorted((original.node_by_name[n] for n in sg.nodes), key=lambda n: original.index[n.name])
            body = subgraph_body(original, members, f"{sg.property}_{sg.id}")
        body = _flatten(body, original)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{sg.property}_{sg.id}")
        model = standalone_model(body, original.initializers, original.opset, name=stem)
        path = out / f"{stem}.onnx"
        onnx.save_model(model, str(path))
        paths.append(path)
    return paths


def _flatten(body: Graph, original: Graph) -> Graph:
    """A body whose nodes are themselves subgraphs (a later pass over an earlier one) as plain nodes."""
    if not any(n.is_subgraph for n in body.nodes):
        return body
    nodes = []
    for n in body.nodes:
        nodes.extend(_flatten(n.body, original).nodes if n.is_subgraph else [n])
    return Graph(body.name, nodes, body.inputs, body.outputs, body.tensors, {}, body.opset, is_body=True)
