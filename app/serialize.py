"""The one serialisation module: graphs, nodes, layouts, trace events and results as JSON.

Views and tests read these shapes; ``docs/api.md`` documents them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from flask.json.provider import DefaultJSONProvider

from partition import report
from partition.dtypes import ONNX_TYPE_NAMES
from partition.ir import Graph, Node, TensorInfo
from partition.backends import suggested_ops
from partition.onnx_io import attribute_defaults
from partition.trace import PartitionResult, TraceEvent

MAX_ATTR_ITEMS = 64
#: Longest list a model card or node panel answers with (inputs, outputs, op counts, metadata):
#: a model can have 100,000 graph inputs or distinct op types. Longer lists are cut, and the
#: answer says so (``<field>_total`` and a ``note``); node inputs page with ``?offset=``.
MAX_LIST = 1000


def _capped(data: dict[str, Any], key: str, items: list, offset: int = 0, how: str = "") -> None:
    """``data[key]`` = ``items[offset:offset+MAX_LIST]``, with a total and a note when cut."""
    data[key] = items[offset:offset + MAX_LIST]
    if len(items) > MAX_LIST or offset:
        data[f"{key}_total"] = len(items)
        shown = f"{offset}..{offset + len(data[key]) - 1}" if data[key] else "none"
        note = f"{key}: showing {shown} of {len(items)} (at most {MAX_LIST} per answer{how})"
        data["note"] = f"{data['note']}; {note}" if data.get("note") else note


def tensor_json(info: TensorInfo) -> dict[str, Any]:
    return {"name": info.name, "dtype": info.dtype,
            "shape": list(info.shape) if info.shape is not None else None,
            "bytes": info.nbytes}


def attr_json(value: Any) -> Any:
    """Attribute values as JSON: arrays shortened, graphs named, bytes decoded."""
    if isinstance(value, Graph):
        return f"<graph {value.name}: {len(value.nodes)} nodes>"
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        flat = value.reshape(-1)
        items = flat[:MAX_ATTR_ITEMS].tolist()
        data = {"tensor": list(value.shape), "dtype": str(value.dtype), "values": items}
        if flat.size > MAX_ATTR_ITEMS:
            data["truncated"] = True
        return _finite(data)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        out = [attr_json(v) for v in value[:MAX_ATTR_ITEMS]]
        return out + ["..."] if len(value) > MAX_ATTR_ITEMS else out
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (int, str, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return attr_json(value.item())
    return str(value)


def _finite(value: Any) -> Any:
    """``value`` with every NaN / ±inf float written as the string ``"nan"`` / ``"inf"`` / ``"-inf"``."""
    if isinstance(value, float):   # numpy's float64 too (a subclass)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


class FiniteJSONProvider(DefaultJSONProvider):
    """Every JSON answer is JSON a browser parses: Python writes a NaN or inf float as the bare
    word ``NaN`` / ``Infinity``, which ``JSON.parse`` rejects, so one such number (an FP16 run of T5
    overflowing: its max abs error is inf) made the precision page's poll read null and stop.
    They go out as strings, as node attributes already did; the pages show them as they are."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs["allow_nan"] = False
        try:
            return super().dumps(obj, **kwargs)
        except ValueError:   # a non-finite float somewhere: walk once, only then
            return super().dumps(_finite(obj), **kwargs)


#: What ``graph_card`` returns, by version: a stored card of another version is made again.
CARD_VERSION = 1


def model_summary(entry: Any, card: Mapping[str, Any]) -> dict[str, Any]:
    """The library card of a model (``entry`` is a ``store.ModelEntry``): who it is, and
    ``card``, ``graph_card`` of its graph as the store keeps it (``ModelStore.card``)."""
    data: dict[str, Any] = {"id": entry.id, "name": entry.name, "source": entry.source, "size": entry.size,
                            **_NO_GRAPH}   # the fields a card of an unreadable model lacks
    data.update((k, v) for k, v in card.items() if k != "version")
    return data


_NO_GRAPH: dict[str, Any] = {"nodes": 0, "graph_name": "", "opset": {}, "op_counts": {}, "suggested_ops": [],
                             "inputs": [], "outputs": [], "initializers": 0, "control_flow": [], "metadata": {}}


def graph_card(g: Graph) -> dict[str, Any]:
    """What a library card shows of a graph: nodes, opsets, op counts, inputs and outputs."""
    data: dict[str, Any] = {
        "nodes": len(g.nodes), "graph_name": g.name,
        "opset": dict(list(g.opset.items())[:MAX_LIST]),
    }
    counts = g.op_counts()     # most used first: what a cut keeps
    _capped(data, "op_counts", list(counts.items()))
    data["op_counts"] = dict(data["op_counts"])
    data["suggested_ops"] = suggested_ops(counts)   # the page's first guess for ``ops``
    inputs = [t for t in g.inputs if t not in g.initializers]
    _capped(data, "inputs", inputs)
    data["inputs"] = [tensor_json(g.info(t)) for t in data["inputs"]]
    _capped(data, "outputs", list(g.outputs))
    data["outputs"] = [tensor_json(g.info(t)) for t in data["outputs"]]
    data["initializers"] = len(g.initializers)
    data["control_flow"] = sorted({n.op_type for n in g.nodes if n.subgraphs})[:MAX_LIST]
    _capped(data, "metadata", list(g.metadata.items()))
    data["metadata"] = dict(data["metadata"])
    return data


#: attributes whose value is an ONNX TensorProto data type
DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})


def _dtype_name(value: Any) -> str | None:
    """The IR's name of an ONNX data-type code (``partition.dtypes``: the names the panel shows
    for tensors), or None for a value that is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return ONNX_TYPE_NAMES.get(value)
    return None


def node_json(graph: Graph, node: Node, offset: int = 0) -> dict[str, Any]:
    """The node panel: op, attributes, typed inputs and outputs, producers, consumers, bodies.
    Inputs and outputs: at most ``MAX_LIST`` from ``offset`` (``?offset=`` pages through them)."""
    data: dict[str, Any] = {"name": node.name, "op_type": node.op_type, "domain": node.domain}
    _capped(data, "attrs", list(node.attrs.items()))
    data["attrs"] = {k: attr_json(v) for k, v in data["attrs"]}
    # the data-type attributes (Cast's ``to``, the Random*/EyeLike ``dtype``) are enum numbers in ONNX:
    # their names ride beside them, so the panel reads "6 (INT32)"
    named = {k: _dtype_name(v) for k, v in data["attrs"].items() if k in DTYPE_ATTRS}
    data["attr_dtypes"] = {k: name for k, name in named.items() if name is not None}
    # what the node leaves out, as ONNX's schema fills it in (the values a rule condition and
    # every backend read): a Conv without ``group`` shows "group 1 (default)"
    data["attr_defaults"] = {k: attr_json(v) for k, v in
                             attribute_defaults(node.op_type, node.domain, graph.opset).items() if k not in node.attrs}
    _capped(data, "inputs", list(node.inputs), offset, "; ask ?offset=N for more")
    data["inputs"] = [dict(tensor_json(graph.info(t)) if t else {"name": "", "dtype": None, "shape": None},
                           weight=t in graph.initializers,
                           producer=(graph.producer(t).name if t and graph.producer(t) else None))
                      for t in data["inputs"]]
    _capped(data, "outputs", list(node.outputs), offset, "; ask ?offset=N for more")
    data["outputs"] = [dict(tensor_json(graph.info(t)), consumers=[c.name for c in graph.consumers(t)][:50])
                       for t in data["outputs"]]
    data["bodies"] = {k: {"name": b.name, "nodes": len(b.nodes)} for k, b in list(node.subgraphs.items())[:MAX_LIST]}
    return data


def event_json(event: TraceEvent, explanation: str | None = None) -> dict[str, Any]:
    data = event.to_json()
    data["result"] = _plain(data.get("result"))
    data["extra"] = _plain(data.get("extra") or {})
    if explanation is not None:
        data["text"] = explanation
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def result_json(result: PartitionResult) -> dict[str, Any]:
    """The same JSON as ``sglens partition --json``."""
    return report.result_json(result)


def assignment(result: PartitionResult) -> dict[str, int]:
    return result.subgraph_of()


def node_metrics(graph: Graph) -> dict[str, dict[str, Any]]:
    """Per node: bytes of its outputs (known shapes only), for the memory colouring."""
    out: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        total = 0
        for t in node.outputs:
            nbytes = graph.info(t).nbytes if t else None
            total += nbytes or 0
        out[node.name] = {"out_bytes": total}
    return out


# ------------------------------------------------------------------ runs --
def run_summary(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the run history shows of a finished run: verdict, shapes, tolerance, median time and
    which subgraph runtime ran how many subgraphs (``auto`` resolved)."""
    if not result or "comparison" not in result:
        return None
    c = result["comparison"]
    verdict = c.get("verdict") or {"status": "match" if c.get("ok") else "differ",
                                   "headline": "✔ outputs match onnxruntime" if c.get("ok")
                                   else "✘ outputs differ from onnxruntime"}
    arrays = (result.get("inputs") or {}).get("arrays") or {}
    timings = c.get("timings") or {}
    median = (timings.get("partitioned") or timings.get("engine") or {}).get("seconds")
    return {"verdict": {"status": verdict["status"], "headline": verdict["headline"]},
            "shapes": {name: a.get("shape") for name, a in arrays.items()},
            "tolerance": c.get("tolerance"), "median_seconds": median,
            "runtimes": subgraph_runtimes(c.get("subgraphs") or []),
            "host_runtime": (result.get("runtimes") or {}).get("host", "ours"),
            "runtime_reasons": runtime_reasons(c.get("subgraphs") or [])}


def host_runtime(run: Mapping[str, Any]) -> str:
    """What ran the nodes outside the subgraphs of a stored run: ``ours`` (our engine, also every
    run from before the choice existed) or ``onnxruntime``."""
    result = run.get("result") or {}
    return str((result.get("runtimes") or {}).get("host") or (run.get("summary") or {}).get("host_runtime")
               or run.get("host_runtime") or "ours")


def runtime_reasons(subgraphs: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per runtime, the distinct reasons it was chosen (``auto``'s own words), at most 5 each."""
    out: dict[str, list[str]] = {}
    for s in subgraphs:
        reasons = out.setdefault(str(s.get("executor") or "?"), [])
        reason = str(s.get("reason") or "")
        if reason and reason not in reasons and len(reasons) < 5:
            reasons.append(reason)
    return out


def subgraph_runtimes(subgraphs: list[Mapping[str, Any]]) -> dict[str, int]:
    """How many subgraphs each runtime ran (engine, onnxruntime, tensorrt), in first-seen order."""
    counts: dict[str, int] = {}
    for s in subgraphs:
        name = str(s.get("executor") or "?")
        counts[name] = counts.get(name, 0) + 1
    return counts


def run_settings(run: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a stored run that decide its numbers, as plain values to compare."""
    result = run.get("result") or {}
    c = result.get("comparison") or {}
    inputs = result.get("inputs") or run.get("inputs") or {}
    specs = {s.get("name"): {k: s.get(k) for k in ("shape", "dtype", "fill", "low", "high", "seed", "value")
                             if s.get(k) is not None}
             for s in inputs.get("specs") or [] if isinstance(s, dict)}
    return {"model": run.get("model_name"), "backend": run.get("backend"), "options": run.get("options") or {},
            "device": run.get("device"), "subgraph runtime asked": run.get("executor"),
            "host runtime (outside the subgraphs)": host_runtime(run),
            "subgraph runtimes used": subgraph_runtimes(c.get("subgraphs") or []),
            "tolerance": c.get("tolerance") or inputs.get("tolerance"),
            "input shapes": {k: v.get("shape") for k, v in specs.items()},
            "input values": {k: {f: v[f] for f in v if f != "shape"} for k, v in specs.items()},
            "measured repeats": run.get("repeat")}


def settings_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every setting whose value differs between runs ``a`` and ``b``: [{setting, a, b}]."""
    sa, sb = run_settings(a), run_settings(b)
    return [{"setting": k, "a": _plain(sa[k]), "b": _plain(sb[k])} for k in sa if sa[k] != sb[k]]
