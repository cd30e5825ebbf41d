"""``sglens compare``: onnxruntime on the whole model vs our engine vs the partitioned graph.

Three runs on the same inputs:

- **reference**: onnxruntime on the whole, unpartitioned model, with every
  subgraph boundary tensor added as an extra graph output, so the reference
  value of each boundary is known too;
- **engine**: our engine on the unpartitioned graph;
- **partitioned**: the partitioned graph on our engine, subgraph nodes run by
  the chosen executor, intermediates kept so boundary values can be read.

Errors are reported per graph output and per subgraph boundary tensor as max
absolute error and *relative* error = max|ours - ref| / max(max|ref|, tiny)
(relative to the reference's magnitude, so values near zero do not blow it up).
A subgraph whose inputs all match but whose outputs do not *introduced* the
difference: ``first_divergent`` names it. Timings (median of ``repeat`` after
a warm-up) and peak memory sit side by side.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import onnx

from partition.ir import Graph

from .executor import Executor, to_numpy
from .measure import measure

TINY = 1e-12
#: A boundary is "matching" below this relative error (float32 arithmetic noise).
MATCH_RTOL = 1e-4


def errors(ours: Any, ref: Any) -> dict[str, Any]:
    """max abs and relative error of ``ours`` against ``ref`` (shapes must agree)."""
    a, b = np.asarray(to_numpy(ours)), np.asarray(to_numpy(ref))
    if a.shape != b.shape:
        return {"shape": list(a.shape), "ref_shape": list(b.shape), "max_abs": None,
                "max_rel": None, "match": False, "note": "shapes differ"}
    if a.size == 0:
        return {"shape": list(a.shape), "max_abs": 0.0, "max_rel": 0.0, "match": True}
    if a.dtype.kind in "biu" and b.dtype.kind in "biu" or a.dtype == bool:
        diff = float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64))))
        scale = float(np.max(np.abs(b.astype(np.int64))))
    else:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        d = np.where(both_nan, 0.0, np.abs(a64 - b64))
        diff = float(np.max(np.where(np.isnan(d), np.inf, d)))
        finite = np.abs(b64[np.isfinite(b64)])
        scale = float(np.max(finite)) if finite.size else 0.0
    rel = diff / max(scale, TINY)
    return {"shape": list(a.shape), "max_abs": diff, "max_rel": rel, "match": rel <= MATCH_RTOL}


@dataclass
class Comparison:
    model: str
    backend: str | None
    executor: str
    device: str
    outputs: dict[str, dict[str, Any]]                 # output -> {"engine": err, "partitioned": err}
    subgraphs: list[dict[str, Any]]                    # per subgraph: boundary errors, executor used
    timings: dict[str, Any]                            # run -> {"seconds", "peak_bytes", ...}
    first_divergent: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(e["match"] for per in self.outputs.values() for e in per.values())

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "executor": self.executor,
                "device": self.device, "ok": self.ok, "outputs": self.outputs,
                "subgraphs": self.subgraphs, "first_divergent": self.first_divergent,
                "timings": self.timings, "notes": self.notes}

    def text(self) -> str:
        lines = [f"compare {self.model}: backend {self.backend or '-'}, executor {self.executor}, "
                 f"device {self.device}  ->  {'OK' if self.ok else 'DIFFERENT'} "
                 f"(match: relative error <= {MATCH_RTOL:g})", "", "outputs (vs onnxruntime):"]
        lines.append(f"  {'output':<28} {'run':<12} {'max abs':>11} {'max rel':>11}")
        for name, per in self.outputs.items():
            for run, e in per.items():
                lines.append(f"  {name[:28]:<28} {run:<12} {_num(e['max_abs'])} {_num(e['max_rel'])}"
                             + ("" if e["match"] else "  <- differs"))
        if self.subgraphs:
            lines += ["", "subgraph boundaries (partitioned vs onnxruntime):"]
            for sg in self.subgraphs:
                lines.append(f"  #{sg['id']} {sg['node']} [{sg['property']}] ran on {sg['executor']}"
                             f" ({sg['reason']})")
                for kind in ("inputs", "outputs"):
                    for name, e in sg[kind].items():
                        lines.append(f"      {kind[:-1]:<6} {name[:34]:<34} {_num(e['max_abs'])} "
                                     f"{_num(e['max_rel'])}" + ("" if e["match"] else "  <- differs"))
            if self.first_divergent:
                lines.append(f"  first subgraph introducing a difference: {self.first_divergent}")
        lines += ["", f"  {'run':<12} {'median ms':>10} {'peak MiB':>10}"]
        for run, t in self.timings.items():
            peak = t.get("peak_bytes")
            lines.append(f"  {run:<12} {t['seconds'] * 1e3:>10.3f} "
                         f"{'n/a' if peak is None else f'{peak / 2**20:.3f}':>10}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _num(x: float | None) -> str:
    return f"{'n/a':>11}" if x is None else f"{x:>11.3e}"


def reference_session(model: onnx.ModelProto, extra_outputs: list[str], device: str = "cpu"):
    """onnxruntime on ``model`` with ``extra_outputs`` added as graph outputs."""
    import onnxruntime as ort

    from .subgraph_ops import ort_providers
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra_outputs:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))  # onnxruntime infers the type
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(m.SerializeToString(), opts, providers=ort_providers(device))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusal, as one line naming it
        from .run_errors import RunError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"onnxruntime cannot load the model as the reference: {first}") from None


def _time_ort(session, feeds: Mapping[str, np.ndarray], repeat: int, warmup: int) -> tuple[dict, list[float]]:
    out_names = [o.name for o in session.get_outputs()]
    for _ in range(max(0, warmup)):
        session.run(out_names, dict(feeds))
    times = []
    result = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        result = session.run(out_names, dict(feeds))
        times.append(time.perf_counter() - t0)
    return dict(zip(out_names, result)), times


def compare(graph: Graph, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
            partitioned: Any = None, executor: str = "auto", device: str = "cpu", repeat: int = 3,
            warmup: int = 1, label: str = "model", engine_name: str | None = None,
            kernels: Any = None, progress: Callable[[str], None] | None = None,
            memory_limit: int | None = None, memory_hint: str | None = None) -> Comparison:
    """Compare the three runs; ``partitioned`` is a ``PartitionResult`` (or None).

    ``memory_limit`` (bytes; None = unlimited): the run is refused before
    anything runs when its tensors are estimated to pass it (``engine/budget.py``);
    ``memory_hint`` ends that message (the web server names its own flag).

    ``progress(stage)`` is called as each run starts ("onnxruntime", "engine",
    "partitioned"), for a bar on the terminal or a status line in the browser.
    """
    from .budget import check_memory_budget
    if memory_hint is not None:
        check_memory_budget(graph, feeds, memory_limit, hint=memory_hint)
    else:
        check_memory_budget(graph, feeds, memory_limit)
    step = progress or (lambda stage: None)
    notes: list[str] = []
    sg_infos = list(partitioned.subgraphs) if partitioned is not None else []
    weights = set(graph.initializers)
    boundary = list(dict.fromkeys(t for s in sg_infos for t in (*s.inputs, *s.outputs)
                                  if t not in weights and t not in graph.inputs))
    step("onnxruntime")
    session = reference_session(model, boundary, device)
    ref, ref_times = _time_ort(session, feeds, repeat, warmup)
    timings: dict[str, Any] = {"onnxruntime": {"seconds": statistics.median(ref_times), "peak_bytes": None}}
    notes.append("onnxruntime's peak memory is its arena's, not visible here (n/a)")
    ref_values = dict(feeds) | ref

    def run_ours(g: Graph, execname: str, keep: bool, name: str):
        with Executor(g, device=device, executor=execname, engine_name=engine_name,
                      kernels=kernels) as ex:
            m = measure(ex, feeds, repeat=repeat, warmup=warmup, label=name)
            # Boundary values from one more run that keeps every tensor (not measured).
            values = ex.run(feeds, keep_intermediates=True).values if keep else {}
        timings[name] = {"seconds": m.seconds, "peak_bytes": m.peak_bytes,
                         "weight_bytes": m.weight_bytes, "subgraphs": m.subgraphs}
        return m, values

    step("engine")
    eng, _ = run_ours(graph, "engine", False, "engine")
    outputs: dict[str, dict[str, Any]] = {o: {"engine": errors(eng.outputs[o], ref[o])} for o in graph.outputs}
    subgraphs: list[dict[str, Any]] = []
    first = None
    if partitioned is not None:
        step("partitioned")
        part, values = run_ours(partitioned.graph, executor, True, "partitioned")
        for o in graph.outputs:
            outputs[o]["partitioned"] = errors(part.outputs[o], ref[o])
        ran = {s["node"]: s for s in part.subgraphs}
        for info in sg_infos:
            rec = ran.get(info.node_name, {})
            entry = {"id": info.id, "node": info.node_name, "property": info.property,
                     "executor": rec.get("executor", "?"), "reason": rec.get("reason", ""),
                     "seconds": rec.get("seconds"), "peak_bytes": rec.get("peak_bytes"),
                     "inputs": {}, "outputs": {}}
            for kind, names in (("inputs", info.inputs), ("outputs", info.outputs)):
                for t in names:
                    if t in weights:
                        continue
                    if t in values and t in ref_values:
                        entry[kind][t] = errors(values[t], ref_values[t])
            ins_ok = all(e["match"] for e in entry["inputs"].values())
            outs_ok = all(e["match"] for e in entry["outputs"].values())
            entry["introduces_difference"] = ins_ok and not outs_ok
            if entry["introduces_difference"] and first is None:
                first = f"#{info.id} {info.node_name}"
            subgraphs.append(entry)
    return Comparison(label, partitioned.backend if partitioned is not None else None,
                      executor, device, outputs, subgraphs, timings, first, notes)
