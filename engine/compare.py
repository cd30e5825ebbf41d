"""``sglens compare``: onnxruntime on the whole model vs our engine vs the partitioned graph.

Three runs on the same inputs:

- **reference**: onnxruntime on the whole, unpartitioned model, with every
  subgraph boundary tensor added as an extra graph output, so the reference
  value of each boundary is known too;
- **engine**: our engine on the unpartitioned graph;
- **partitioned**: the partitioned graph on our engine, subgraph nodes run by
  the chosen subgraph runtime (and, for ``host_runtime onnxruntime``, the rest in
  onnxruntime regions); its first, unmeasured warm-up keeps every tensor so the
  boundary values can be read.

Each graph output and each subgraph boundary tensor is judged elementwise,
``|ours - ref| <= atol + rtol * |ref|`` (``engine.tolerance``), and reported as max
abs, max rel, mean abs error and cosine similarity. A subgraph whose inputs all
match but whose outputs do not *introduced* the difference: ``first_divergent``
names it when an output differs (a boundary difference under matching outputs is
reported apart, see ``engine.verdict``, which also words the headline). When the
unpartitioned engine run differs, one diagnosis run names the first node in topological
order whose output leaves tolerance (``first_divergent_node``), and that node is run alone
on onnxruntime's own inputs (``engine/isolate.py``) to say where the difference came from. Timings are the median and p10-p90 of ``repeat``
measured runs after ``warmup`` unmeasured ones; memory is both the live tensors
our executor held and, for every run alike, the rise of the process's peak RSS.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx

from partition.ir import Graph
from partition.onnx_io import to_model_proto

from .budget import check_memory_budget
from .executor import Executor, to_numpy
from .flatten_branches import flatten_taken_branches
from .float16 import computes_in_float16
from .isolate import isolate, local_check, rounding_of
from .measure import Measurement, NodeTimeline, measure
from .ort_fallback import LABEL, OrtFallback
from .rss import PeakRSS
from .tolerance import Tolerance, compare_arrays, default_tolerance
from .values import map_keys
from .verdict import Verdict, judge



def errors(ours: Any, ref: Any, tol: Tolerance | None = None) -> dict[str, Any]:
    """Metrics and verdict of ``ours`` against ``ref`` (see ``engine.tolerance``); two sequences
    (ONNX's sequence type: lists) element by element, end to end, once their shapes agree; a
    map (a dict, as ZipMap's sequence holds) by its keys, then its values in key order."""
    ours, ref = to_numpy(ours), to_numpy(ref)
    if isinstance(ours, (list, dict)) or isinstance(ref, (list, dict)):
        mine, theirs = _element_shapes(ours), _element_shapes(ref)
        if mine != theirs:
            return {"shape": mine, "ref_shape": theirs, "max_abs": None, "max_rel": None,
                    "mean_abs": None, "cosine": None, "mismatched": None, "match": False,
                    "note": "sequences or maps differ in length, keys or element shapes"}
        ours, ref = (_flat(v) for v in (ours, ref))
    return compare_arrays(np.asarray(ours), np.asarray(ref), tol or Tolerance())


def _element_shapes(value: Any) -> Any:
    """A sequence's element shapes (a map's: its keys), a map's keys, or a tensor's shape."""
    if isinstance(value, dict):
        return ["map", map_keys(value)]
    if isinstance(value, list):
        return [_element_shapes(e) if isinstance(e, dict) else list(np.shape(e)) for e in value]
    return list(np.shape(value))


def _flat(value: Any) -> np.ndarray:
    """A sequence's or map's numbers end to end (a map's in key order), as one vector."""
    if isinstance(value, dict):
        value = [value[k] for k in map_keys(value)]
    if isinstance(value, list):
        parts = [_flat(e) if isinstance(e, (list, dict)) else np.ravel(np.asarray(e)) for e in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.ravel(value)


def spread(times: list[float], warmup: int) -> dict[str, Any]:
    """Median and p10-p90 of measured wall times; warm-up runs are excluded and counted."""
    ordered = sorted(times)
    def pct(q: float) -> float:
        return float(np.percentile(ordered, q)) if ordered else float("nan")
    return {"seconds": statistics.median(ordered), "p10": pct(10), "p90": pct(90),
            "repeat": len(ordered), "warmup": warmup, "all_seconds": list(times)}


@dataclass
class Comparison:
    model: str
    backend: str | None
    executor: str
    device: str
    outputs: dict[str, dict[str, Any]]                 # output -> {"engine": err, "partitioned": err}
    subgraphs: list[dict[str, Any]]                    # per subgraph: boundary errors, executor used
    timings: dict[str, Any]                            # run -> {"seconds", "p10", "p90", "rss_peak_bytes", ...}
    first_divergent: str | None = None                 # first subgraph introducing a difference
    first_divergent_node: dict[str, Any] | None = None  # first node (topological order) out of tolerance
    tolerance: Tolerance = field(default_factory=Tolerance)
    notes: list[str] = field(default_factory=list)
    fallback_nodes: list[dict[str, str]] = field(default_factory=list)  # ran on onnxruntime, one by one
    #: our runs' measurements ("engine", "partitioned"): per-node times, subgraph records (not in JSON)
    measurements: dict[str, Measurement] = field(default_factory=dict, repr=False)
    #: where the engine run differs: its nodes out of tolerance, each run alone (``diagnose``)
    local_check: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(e["match"] for per in self.outputs.values() for e in per.values())

    @property
    def verdict(self) -> Verdict:
        """The headline and its reasons (``engine.verdict``): weak matches and inner differences said."""
        return judge(self.outputs, self.subgraphs, self.tolerance, self.local_check)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "executor": self.executor,
                "device": self.device, "ok": self.ok, "verdict": self.verdict.to_json(),
                "tolerance": self.tolerance.to_json(),
                "outputs": self.outputs, "subgraphs": self.subgraphs,
                "first_divergent": self.first_divergent,
                "first_divergent_node": self.first_divergent_node, "local_check": self.local_check,
                "fallback_nodes": self.fallback_nodes,
                "timings": self.timings, "notes": self.notes}

    def text(self) -> str:
        verdict = self.verdict
        what = (f"backend {self.backend}, subgraph runtime {self.executor}" if self.backend
                else "unpartitioned (our engine against onnxruntime)")
        word = {"match": "OK", "weak": "OK", "rounding": "ROUNDING ONLY"}.get(verdict.status, "DIFFERENT")
        lines = [f"compare {self.model}: {what}, device {self.device}  ->  {word}",
                 verdict.headline.replace("✔", "OK:").replace("✘", "DIFFERENT:").replace("≈", "ROUNDING ONLY:"),
                 *(f"  - {d}" for d in verdict.details),
                 *([f"  - run again with --atol {verdict.suggested_atol:g}"] if verdict.suggested_atol else []),
                 f"match rule: {self.tolerance.describe()}; max rel only where |ref| > 10·atol",
                 "", "outputs (vs onnxruntime):",
                 f"  {'output':<28} {'run':<12} {'max abs':>10} {'max rel':>10} {'mean abs':>10} {'cosine':>9}"]
        for name, per in self.outputs.items():
            for run, e in per.items():
                lines.append(f"  {name[:28]:<28} {run:<12} {_metrics(e)}" + (
                    "  <- differs" if not e["match"] else
                    "  <- the same for other inputs" if e.get("inputs_independent") else ""))
        if self.first_divergent_node:
            d = self.first_divergent_node
            lines.append(f"  first node out of tolerance (engine run, topological order): "
                         f"{d['node']} ({d['op_type']}), output {d['tensor']}")
            if (d.get("isolated") or {}).get("finding"):
                lines.append(f"    alone: {d['isolated']['finding']}")
        if self.subgraphs:
            lines += ["", "subgraph boundaries (partitioned vs onnxruntime):"]
            for sg in self.subgraphs:
                lines.append(f"  #{sg['id']} {sg['node']} [{sg['property']}] ran on {sg['executor']}"
                             f" ({sg['reason']}){_cost(sg)}")
                for kind in ("inputs", "outputs"):
                    for name, e in sg[kind].items():
                        lines.append(f"      {kind[:-1]:<6} {name[:34]:<34} {_metrics(e)}"
                                     + ("" if e["match"] else "  <- differs"))
            if verdict.first_divergent:
                lines.append(f"  first subgraph introducing a difference: {verdict.first_divergent}")
        lines += ["", f"  {'run':<12} {'median ms':>10} {'p10-p90 ms':>17} {'repeats':>8} "
                      f"{'peak RSS MiB':>13} {'tensors MiB':>12}"]
        for run, t in self.timings.items():
            band = f"{t['p10'] * 1e3:.3f}-{t['p90'] * 1e3:.3f}"
            tensors = t.get("peak_bytes")
            lines.append(f"  {run:<12} {t['seconds'] * 1e3:>10.3f} {band:>17} {t['repeat']:>4}+{t['warmup']}w "
                         f"{t['rss_added_bytes'] / 2**20:>13.1f} "
                         f"{'n/a' if tensors is None else f'{tensors / 2**20:.3f}':>12}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _cost(sg: dict[str, Any]) -> str:
    """A subgraph's median time (device time on a GPU) and peak memory, when measured."""
    parts = []
    if sg.get("seconds") is not None:
        parts.append(f"{sg['seconds'] * 1e3:.3f} ms")
    if sg.get("device_seconds") is not None:
        parts.append(f"GPU {sg['device_seconds'] * 1e3:.3f} ms")
    if sg.get("peak_bytes") is not None:
        parts.append(f"peak {sg['peak_bytes'] / 2**20:.3f} MiB")
    if sg.get("pool_peak_bytes") is not None:
        parts.append(f"GPU pool {sg['pool_peak_bytes'] / 2**20:.3f} MiB")
    return ": " + ", ".join(parts) if parts else ""


def _metrics(e: dict[str, Any]) -> str:
    cos = e.get("cosine")
    return (f"{_num(e['max_abs'])} {_num(e['max_rel'])} {_num(e.get('mean_abs'))} "
            f"{'n/a' if cos is None else f'{cos:.6f}':>9}")


def _num(x: float | None) -> str:
    return f"{'n/a':>10}" if x is None else f"{x:>10.3e}"


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
    opts.log_severity_level = 4   # fatal only: a refusal is reported once, by reference_refused, not on stderr too
    try:
        return ort.InferenceSession(m.SerializeToString(), opts, providers=ort_providers(device))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own refusal, as one line naming it
        from .run_errors import RunError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"onnxruntime cannot load the model as the reference: {first}") from None


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


def reference_refused(exc: BaseException, feeds: Mapping[str, np.ndarray]):
    """onnxruntime's run-time refusal as a ``RunError`` a user can act on: the nodes it names
    (outermost first: an If or Loop, then the node inside), its innermost message, and the inputs
    it was given. Nearly always the inputs are not what the model expects (a length the model
    cannot pad, a sample rate it does not know), and the inputs are what the user can change."""
    from .run_errors import InputsRefused
    text = " ".join(str(exc).split())
    where = " > ".join(f"'{name}' ({op})" for op, name in _ORT_NODE.findall(text))
    said = text.rsplit("Status Message:", 1)[-1].strip() or type(exc).__name__
    given = ", ".join(f"{k} {list(np.shape(v))} {np.asarray(v).dtype}" for k, v in feeds.items())
    return InputsRefused(f"onnxruntime, the reference, refused these inputs{' at node ' + where if where else ''}: "
                         f"{said}. Inputs given: {given}. Give the shapes and values the model expects "
                         "(a symbolic axis's size is a guess unless set; integer inputs such as a "
                         "sample rate may need a constant)")


def _run_ort(model: onnx.ModelProto, extra: list[str], device: str, feeds: Mapping[str, np.ndarray],
             repeat: int, warmup: int, independence: bool = False
             ) -> tuple[dict[str, Any], dict[str, Any], set[str] | None]:
    """Reference values, timings and, with ``independence``, the graph outputs that did not
    change on other inputs (``inputs_independent``; else None). Session set-up counts in the
    RSS figure, not in the times."""
    import onnxruntime  # noqa: F401  loading the library once per process is not this run's memory
    with PeakRSS() as rss:
        session = reference_session(model, extra, device)
        out_names = [o.name for o in session.get_outputs()]
        try:
            for _ in range(max(0, warmup)):
                session.run(out_names, dict(feeds))
            times, result = [], None
            for _ in range(max(1, repeat)):
                t0 = time.perf_counter()
                result = session.run(out_names, dict(feeds))
                times.append(time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal, said in the user's terms
            raise reference_refused(exc, feeds) from exc
        ref = dict(zip(out_names, result))
        unchanged = inputs_independent(session, [o.name for o in model.graph.output], feeds, ref) \
            if independence else None
    timing = spread(times, warmup) | rss.to_json() | {"peak_bytes": None}
    return ref, timing, unchanged


def resampled(feeds: Mapping[str, Any], seed: int = 1) -> dict[str, Any] | None:
    """Other inputs drawn like ``feeds``: each input's elements resampled, with replacement, from
    its own values -- token ids stay ids, a 0/1 mask stays 0/1, pixels stay in their range, and
    an input holding one value (a sample rate, a zero state) keeps it. None when that changes
    no input (every input holds one value, or is not an array)."""
    rng = np.random.default_rng(seed)
    other, changed = {}, False
    for name, value in feeds.items():
        arr = value if isinstance(value, np.ndarray) else None
        if arr is None or arr.size < 2:
            other[name] = value
            continue
        flat = arr.reshape(-1)
        new = flat[rng.integers(0, flat.size, flat.size)].reshape(arr.shape)
        changed = changed or not np.array_equal(new, arr)
        other[name] = new
    return other if changed else None


def inputs_independent(session: Any, outputs: Sequence[str], feeds: Mapping[str, Any],
                       ref: Mapping[str, Any]) -> set[str] | None:
    """The graph outputs onnxruntime gives bit for bit again on ``resampled`` inputs: outputs
    that do not depend on the inputs, so a match on them checks only what the model computes
    from its weights. The ONNX test suite's model-zoo copies (``light_resnet50.onnx`` and its
    siblings, installed with the onnx package) fill every conv weight with 0.02, and their
    softmax is 0.001 everywhere whatever the image: "outputs match" said nothing there.
    None when no input could be changed or onnxruntime refused the other inputs."""
    other = resampled(feeds)
    if other is None:
        return None
    try:
        got = dict(zip(outputs, session.run(list(outputs), other)))
    except Exception:  # noqa: BLE001 - other values outside the model's domain: cannot tell
        return None
    same = set()
    for name in outputs:
        pairs = list(zip(got[name], ref[name])) if isinstance(ref[name], list) and \
            isinstance(got[name], list) and len(got[name]) == len(ref[name]) else [(got[name], ref[name])]
        if all(_identical(np.asarray(a), np.asarray(b)) for a, b in pairs):   # a sequence: every element
            same.add(name)
    return same


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


#: Passes of ``flatten_taken_branches`` the diagnosis makes at most: each exposes the ``If``s
#: nested one level deeper.
FLATTEN_ROUNDS = 4


def diagnose(graph: Graph, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
             ours: Mapping[str, Any], tol: Tolerance, device: str = "cpu",
             kernels: Any = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The first node, in topological order, one of whose outputs leaves tolerance (None when
    none does), with (``isolated``, ``engine/isolate.py``) what it gives alone on onnxruntime's own
    inputs: whether the difference came in through its inputs or which kernel departs; and the
    same for every node out of tolerance (``isolate.local_check``).

    ``ours`` holds every intermediate of our engine's run; onnxruntime is run once
    more with every top-level node output exposed. Where an ``If`` could not be run alone, its
    taken branch replaces it (``engine/flatten_branches.py``) and both runtimes run the flattened
    graph, so the branch's nodes are checked one by one (``local["flattened"]``: those ``If``s);
    nodes inside Loop/Scan bodies are judged through the node that holds them.
    """
    first, local, ref = _diagnose_graph(graph, model, feeds, ours, tol, device, kernels)
    flattened: list[str] = []
    top = set(graph.node_by_name)   # the graph's own nodes: what the page can show
    flat_ours = ours
    for _ in range(FLATTEN_ROUNDS):
        if not local["n_unchecked"]:
            break
        graph, names = flatten_taken_branches(graph, {**feeds, **ref})
        if not names:
            break
        flattened += names
        with Executor(graph, device=device, subgraph_runtime="engine", kernels=kernels) as ex:
            flat_ours = ex.run(feeds, keep_intermediates=True).values
        first, local, ref = _diagnose_graph(graph, to_model_proto(graph), feeds, flat_ours, tol, device,
                                            kernels)
    if flattened:
        local["flattened"] = flattened
        if first is not None and first["node"] not in top:   # a node of a branch: the If holding it
            first["inside"] = next((n for n in flattened if n in top and first["node"].startswith(n + "/")), None)
        # the flattened run stands for the run with the Ifs: where their outputs part, it does not
        same_as_measured(local, {o: ours[o] for o in graph.outputs if o in ours}, flat_ours, tol,
                         key="flattened_differs")
    return first, local


def _diagnose_graph(graph: Graph, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                    ours: Mapping[str, Any], tol: Tolerance, device: str, kernels: Any
                    ) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
    """``diagnose`` on one graph as it stands, and onnxruntime's values of its tensors."""
    names = [t for n in graph.nodes for t in n.outputs if t]
    ref, _, _ = _run_ort(model, names, device, feeds, repeat=1, warmup=0)
    differing: list[tuple[Any, str, dict[str, Any]]] = []   # (node, its first tensor out, errors)
    for node in graph.nodes:
        e = next(((t, e) for t in node.outputs if t and t in ours and t in ref
                  for e in (errors(ours[t], ref[t], tol),) if not e["match"]), None)
        if e is not None:
            differing.append((node, *e))
    if not differing:   # every tensor as onnxruntime computes the ops as written (none fused)
        return None, local_check([], graph.opset, {}, kernels, tol), ref
    node, t, e = differing[0]
    values = {**{w: graph.initializers[w].value for n, _, _ in differing for w in n.inputs
                 if w in graph.initializers}, **feeds, **ref}
    first = _isolated(graph, node, values, kernels, tol)
    # every node out of tolerance alone (engine/isolate.py): a difference no kernel makes is carried
    local = local_check([n for n, _, _ in differing], graph.opset, values, kernels, tol,
                        known={node.name: first})
    return {"node": node.name, "op_type": node.op_type, "tensor": t, **e, "isolated": first}, local, ref


def _isolated(graph: Graph, node: Any, values: Mapping[str, Any], kernels: Any,
              tol: Tolerance) -> dict[str, Any] | None:
    try:   # (no oracle for a rounding difference: the reference evaluator's loops take minutes on big convs)
        return isolate(node, graph.opset, values, kernels, tol, settled=rounding_of(values))
    except Exception as exc:  # noqa: BLE001 - a bonus on a finished comparison: said, never raised
        return {"finding": f"could not run this node alone: {type(exc).__name__}: {exc}"}


def compare(graph: Graph, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], *,
            partitioned: Any = None, executor: str = "auto", device: str = "cpu", repeat: int = 3,
            warmup: int = 1, label: str = "model", engine_name: str | None = None,
            kernels: Any = None, progress: Callable[[str], None] | None = None,
            tolerance: Tolerance | None = None, memory_limit: int | None = None,
            memory_hint: str | None = None, partitioned_graph: Graph | None = None,
            runtime_by_property: tuple[tuple[str, str], ...] = (),
            timeline: NodeTimeline | None = None) -> Comparison:
    """Compare the three runs; ``partitioned`` is a ``PartitionResult`` (or None).

    ``executor`` is the subgraph runtime. ``partitioned_graph`` (default: ``partitioned.graph``)
    is the graph run as the partitioned side, e.g. with its host part in onnxruntime regions
    (``engine/host_regions.py``), whose subgraph nodes run on ``runtime_by_property``'s runtime.
    ``timeline``, a hook given to the partitioned run's executor (the engine run's without a
    partition), records the dependency timeline of its last measured repeat: no extra run.
    Every run is ``warmup`` + ``repeat`` executions; the partitioned side's first warm-up keeps
    every tensor for the boundary errors (one more unmeasured run only when ``warmup`` is 0).

    ``memory_limit`` (bytes; None = unlimited): the run is refused before
    anything runs when its tensors are estimated to pass it (``engine/budget.py``);
    ``memory_hint`` ends that message (the web server names its own flag).

    ``progress(stage)`` is called as each run starts ("onnxruntime", "engine",
    "partitioned", "diagnosis"), for a bar on the terminal or a status line in the browser.
    """
    if memory_hint is not None:
        check_memory_budget(graph, feeds, memory_limit, hint=memory_hint)
    else:
        check_memory_budget(graph, feeds, memory_limit)
    step = progress or (lambda stage: None)
    half = computes_in_float16(graph)
    tol = tolerance or default_tolerance(half)
    # Nodes we have no kernel for run in single-node onnxruntime sessions and are listed.
    fallback = kernels if isinstance(kernels, OrtFallback) else OrtFallback(kernels)
    fallback.check(graph)
    kernels = fallback
    notes: list[str] = [
        "times: median and p10-p90 of the measured repeats; warm-up runs are excluded",
        "peak RSS: rise of this process's resident memory during the run (set-up, warm-up and "
        "repeats; includes onnxruntime's arenas); tensors: live tensors our executor held (n/a for onnxruntime)"]
    if half:
        notes.append(_float16_note(device, tol if tolerance is None else None))
    sg_infos = list(partitioned.subgraphs) if partitioned is not None else []
    weights = set(graph.initializers)
    boundary = list(dict.fromkeys(t for s in sg_infos for t in (*s.inputs, *s.outputs)
                                  if t not in weights and t not in graph.inputs))
    step("onnxruntime")
    # Timed on the model as it deploys. With the boundary tensors added as outputs onnxruntime
    # fuses less and copies each one out: PP-OCR cls under a 73-subgraph partition ran 16.7 ms
    # against 7.3, and the card showed that as onnxruntime's time. The values (the boundary
    # tensors and the outputs judged with them) come from one more, unmeasured session.
    ref, ref_timing, unchanged = _run_ort(model, [], device, feeds, repeat, warmup, independence=True)
    if boundary:
        ref, _, _ = _run_ort(model, boundary, device, feeds, repeat=1, warmup=0)
    timings: dict[str, Any] = {"onnxruntime": ref_timing}
    ref_values = dict(feeds) | ref

    measurements: dict[str, Measurement] = {}

    def run_ours(g: Graph, runtime: str, keep: bool, name: str, hook: NodeTimeline | None):
        with PeakRSS() as rss:
            with Executor(g, device=device, subgraph_runtime=runtime, engine_name=engine_name,
                          kernels=kernels, node_times=hook,
                          runtime_by_property=runtime_by_property) as ex:
                m = measure(ex, feeds, repeat=repeat, warmup=warmup, label=name, profiler=hook,
                            first_keeps=keep)
                values = m.values
                if keep and not m.warmup:   # no warm-up to keep them: one more run, not measured
                    values = ex.run(feeds, keep_intermediates=True).values
        if m.settling:
            notes.append(f"{name}: {m.warmup} warm-up runs, not {warmup}: our executor first times "
                         "its parallel branches against one serial function and keeps the faster; "
                         "the measured runs are the one it kept")
        timings[name] = (spread(m.all_seconds, m.warmup) | rss.to_json()
                         | {"peak_bytes": m.peak_bytes, "weight_bytes": m.weight_bytes,
                            "subgraphs": m.subgraphs, "cuda_graph": m.cuda_graph})
        measurements[name] = m
        return m, values

    step("engine")
    eng, _ = run_ours(graph, "engine", False, "engine", timeline if partitioned is None else None)
    outputs: dict[str, dict[str, Any]] = {o: {"engine": errors(eng.outputs[o], ref[o], tol)}
                                          for o in graph.outputs}
    first_node, local = None, None
    if not all(per["engine"]["match"] for per in outputs.values()):
        step("diagnosis")
        try:
            with Executor(graph, device=device, subgraph_runtime="engine", engine_name=engine_name,
                          kernels=kernels) as ex:
                eng_values = ex.run(feeds, keep_intermediates=True).values
            first_node, local = diagnose(graph, model, feeds, eng_values, tol, device, kernels)
            same_as_measured(local, eng.outputs, eng_values, tol)
        except Exception as exc:  # diagnosis is a bonus: never lose the comparison over it
            notes.append(f"could not locate the first differing node: {type(exc).__name__}: {exc}")
    subgraphs, first = [], None
    if partitioned is not None:
        step("partitioned")
        run_graph = partitioned_graph if partitioned_graph is not None else partitioned.graph
        part, values = run_ours(run_graph, executor, True, "partitioned", timeline)
        for o in graph.outputs:
            outputs[o]["partitioned"] = errors(part.outputs[o], ref[o], tol)
        subgraphs = _boundaries(sg_infos, part.subgraphs, values, ref_values, weights, tol)
        # named only when an output differs: a boundary difference under a match is a detail
        first = judge(outputs, subgraphs, tol).first_divergent
        if (local or {}).get("complete") and \
                not all(outputs[o]["partitioned"]["match"] for o in graph.outputs):
            _subgraphs_alone(subgraphs, run_graph, ref_values, kernels, tol)
    _add_sensitivity(outputs, model, feeds, device, ref, notes, half)
    for name in unchanged or ():
        for e in outputs[name].values():
            e["inputs_independent"] = True   # the verdict words it (engine/verdict.py)
    if unchanged is None:
        notes.append("whether the outputs depend on the inputs was not checked: no input could be "
                     "redrawn (each holds one value) or onnxruntime refused the redrawn ones")
    if fallback.nodes:
        notes.append(f"{len(fallback.nodes)} node(s) without a kernel of ours ran on {LABEL}: "
                     + ", ".join(f"{n} ({op})" for n, op in list(fallback.nodes.items())[:20]))
    return Comparison(label, partitioned.backend if partitioned is not None else None,
                      executor, device, outputs, subgraphs, timings, first, first_node, tol, notes,
                      fallback.report(), measurements, local)


#: How far the reference's float inputs move to measure its own sensitivity: this many units in
#: the last place of their dtype (a relative 9.5e-7 in float32).
SENSITIVITY_ULPS = 8


def reference_sensitivity(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], device: str,
                          names: Sequence[str], ref: Mapping[str, Any],
                          float16: bool = False) -> dict[str, float]:
    """Per output of ``names``: the largest change of onnxruntime's own output when its float
    inputs are scaled by ``1 + SENSITIVITY_ULPS`` ulp -- what rounding-level input changes do to
    this model. Empty when no input is a float tensor. ``float16``: the model computes in float16,
    so the ulp is float16's even for a float32 input (a model that casts its float32 input to
    float16 rounds float32 ulps away: onnxruntime's output did not move at all, and the verdict
    read that as "more than rounding explains")."""
    def ulp(dtype: np.dtype) -> float:
        return float(np.finfo(np.float16).eps) if float16 else float(np.finfo(dtype).eps)
    moved = {k: (v * (1 + SENSITIVITY_ULPS * ulp(v.dtype))).astype(v.dtype)
             if np.issubdtype(np.asarray(v).dtype, np.floating) else v for k, v in feeds.items()}
    if all(moved[k] is feeds[k] for k in feeds):
        return {}
    session = reference_session(model, [], device)
    out_names = [o.name for o in session.get_outputs()]
    got = dict(zip(out_names, session.run(out_names, moved)))
    found = {}
    for name in names:
        a, b = np.asarray(got.get(name)), np.asarray(to_numpy(ref[name]))
        if a.shape == b.shape and a.size and np.issubdtype(b.dtype, np.floating):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            found[name] = float(np.max(np.where(np.isnan(diff), 0.0, diff)))
    return found


def _add_sensitivity(outputs: dict[str, dict[str, Any]], model: onnx.ModelProto,
                     feeds: Mapping[str, np.ndarray], device: str, ref: Mapping[str, Any],
                     notes: list[str], float16: bool) -> None:
    """Where an output differs, how much onnxruntime's own output moves under rounding-level
    input changes (``ref_sensitivity`` on each of its runs' errors, which the verdict words):
    a dynamically quantized OCR differed by 0.19 while onnxruntime moved 0.3 by itself, and the
    verdict alone could not tell that from a wrong kernel."""
    differing = [o for o, per in outputs.items() if not all(e["match"] for e in per.values())]
    if not differing:
        return
    try:
        found = reference_sensitivity(model, feeds, device, differing, ref, float16)
    except Exception as exc:  # noqa: BLE001 - a bonus, like the diagnosis: never lose the comparison
        notes.append(f"could not measure onnxruntime's own sensitivity: {type(exc).__name__}: {exc}")
        return
    for name, moved in found.items():
        for e in outputs[name].values():
            e["ref_sensitivity"] = moved


def _float16_note(device: str, rule: Tolerance | None) -> str:
    """What a float16 model's comparison means (``engine/float16.py``); ``rule``: the float16
    match rule, when it is the default and not the user's."""
    how = ("our engine computes it in float32 on the CPU, rounding where the model casts to float16 "
           "and at its float16 outputs, as onnxruntime's CPU provider does for the ops it has no "
           "float16 kernel for" if device == "cpu" else "our engine computes it in float16 on the device")
    if rule is None:
        return f"the model computes in float16: {how}"
    return (f"the model computes in float16: {how}; the match rule is float16's (atol {rule.atol:g}, "
            f"rtol {rule.rtol:g}): two correct runs round at different places (a tolerance you set replaces it)")


def _boundaries(sg_infos: list[Any], ran_records: list[dict[str, Any]], values: Mapping[str, Any],
                ref_values: Mapping[str, Any], weights: set[str],
                tol: Tolerance) -> list[dict[str, Any]]:
    """Per subgraph: errors at its inputs and outputs, and whether it introduced a difference."""
    ran = {s["node"]: s for s in ran_records}
    subgraphs: list[dict[str, Any]] = []
    for info in sg_infos:
        rec = ran.get(info.node_name, {})
        entry = {"id": info.id, "node": info.node_name, "property": info.property,
                 "executor": rec.get("executor", "?"), "reason": rec.get("reason", ""),
                 "seconds": rec.get("seconds"), "device_seconds": rec.get("device_seconds"),
                 "peak_bytes": rec.get("peak_bytes"), "pool_peak_bytes": rec.get("pool_peak_bytes"),
                 "inputs": {}, "outputs": {}}
        for kind, names in (("inputs", info.inputs), ("outputs", info.outputs)):
            for t in names:
                if t not in weights and t in values and t in ref_values:
                    entry[kind][t] = errors(values[t], ref_values[t], tol)
        ins_ok = all(e["match"] for e in entry["inputs"].values())
        outs_ok = all(e["match"] for e in entry["outputs"].values())
        entry["introduces_difference"] = ins_ok and not outs_ok
        if entry["introduces_difference"]:
            entry["difference_scale"] = max(_scale_of_difference(e) for e in entry["outputs"].values()
                                            if not e["match"])
        subgraphs.append(entry)
    return subgraphs


def same_as_measured(local: dict[str, Any], measured: Mapping[str, Any], checked: Mapping[str, Any],
                      tol: Tolerance, key: str = "fused_differs") -> None:
    """The nodes checked alone are those of a run that keeps every tensor, where fused chains run
    node by node; the measured run fuses them. Where the two runs' outputs part beyond tolerance,
    a fused kernel adds a difference no node shows alone: the check does not cover the measured
    run, so it is not complete (``key``, ``fused_differs`` unless told, names the outputs)."""
    parted = [o for o, v in measured.items() if o in checked and not errors(v, checked[o], tol)["match"]]
    if parted:
        local[key] = parted
        local["complete"] = False


def _subgraphs_alone(subgraphs: list[dict[str, Any]], run_graph: Graph, ref_values: Mapping[str, Any],
                     kernels: Any, tol: Tolerance) -> None:
    """Each subgraph whose outputs differ, run alone on onnxruntime's values of its inputs by the
    runtime that ran it (``isolate.local_check``; ``alone_matches``: True, False, or None where it
    could not be run alone): with the engine run's nodes checked alone, a partitioned run's
    difference that no subgraph makes is carried too (``verdict.judge``)."""
    nodes = {n.name: n for n in run_graph.nodes}
    for sg in subgraphs:
        node = nodes.get(sg["node"])
        if node is None or all(e["match"] for e in sg["outputs"].values()):
            continue
        values = {**{t: run_graph.initializers[t].value for t in node.inputs if t in run_graph.initializers},
                  **ref_values}
        alone = local_check([node], run_graph.opset, values, kernels, tol, runtimes={node.name: sg["executor"]})
        sg["alone_matches"] = None if alone["n_unchecked"] else alone["complete"]


def _scale_of_difference(e: Mapping[str, Any]) -> float:
    """A boundary tensor's largest difference over its largest reference value: about 1e-7 to
    1e-6 is float32 rounding (amplified where values cancel), not a wrong result."""
    big = float(e.get("ref_max_abs") or 0.0)
    return float(e.get("max_abs") or 0.0) / big if big > 0 else float("inf")
