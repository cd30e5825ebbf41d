"""A whole precision investigation: groups from a backend's partition, per-node error
growth and overflow counts, the search, the exports -- one JSON-ready report.

``investigate(graph, feeds, PrecisionRequest(...), progress)`` is what the CLI
(``sglens precision``) and the web page both call.

Per node (``analyse``), from one FP32 run and one run with every candidate reduced,
both keeping every tensor:

- ``error``: max |reduced - fp32| over the node's float outputs divided by their max |fp32|
  (``None`` when the reduced output is inf/NaN where FP32 is finite: ``nonfinite``);
- ``growth``: log10 of that error over the largest such error of its inputs, both floored
  at the format's unit roundoff (2^-11 for FP16): how many decades this node adds beyond
  one rounding. The graph is coloured by it;
- ``max_abs`` and ``max_abs_growth``: the FP32 output's largest magnitude, and that over the
  largest magnitude of the graph inputs (how far values grew along the path);
- ``alone_error`` / ``alone_growth``: the same for the node reduced alone on the exact FP32
  inputs (one kernel call, no model run): the error the node adds by itself, seen even
  where an earlier overflow has already turned everything after it into NaN. The graph
  is coloured by ``alone_growth`` (decades above one rounding);
- ``overflow`` / ``underflow``: elements rounded to inf / flushed to zero by this node (the
  larger of the two runs' counts);
- ``suspect``: a sentence when the node is one of the usual suspects (LayerNorm, Softmax,
  reductions, Pow, Exp, MatMul logits) and its values explain the trouble.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from partition.api import select
from partition.ir import Graph
from partition.registry import Selection

from .precision import DATA_MOVEMENT, TARGETS, NodeCounts, PrecisionError, PrecisionRunner
from .precision_export import polygraphy_flags, trtexec_flags
from .precision_search import Group, search
from .tolerance import Tolerance

FP16_MAX = 65504.0
#: exp(x) overflows FP16 above this
EXP_LIMIT = math.log(FP16_MAX)
SCOPES = ("subgraphs", "all")
#: half the distance from 1 to the next number: the relative error of one rounding
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "int8": 2.0 ** -8}
_TINY = 1e-12
REDUCTIONS = frozenset({"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp",
                        "GlobalAveragePool"})


@dataclass(frozen=True)
class PrecisionRequest:
    """What to investigate, validated once here."""

    target: str = "fp16"
    atol: float = 1e-3
    rtol: float = 1e-3
    max_runs: int = 200
    #: whose subgraphs are the first level of the search (validated at the edge); None: the whole model
    selection: Selection | None = field(default_factory=lambda: select("tensorrt"))
    scope: str = "subgraphs"
    analyse: bool = True      # the per-node analysis: two runs keeping every tensor, one kernel call per node

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise PrecisionError(f"--target {self.target!r}: choose one of {list(TARGETS)}")
        if self.scope not in SCOPES:
            raise PrecisionError(f"--scope {self.scope!r}: choose one of {list(SCOPES)}")
        if not isinstance(self.max_runs, int) or not 1 <= self.max_runs <= 100_000:
            raise PrecisionError(f"--max-runs {self.max_runs!r}: give a whole number from 1 to 100000")
        try:
            Tolerance(self.atol, self.rtol)
        except ValueError as exc:
            raise PrecisionError(f"--atol/--rtol: {exc}") from None

    @property
    def backend(self) -> str | None:
        return self.selection.backend if self.selection is not None else None

    @property
    def tolerance(self) -> Tolerance:
        return Tolerance(self.atol, self.rtol)


def groups_for(graph: Graph, candidates: list[str], selection: Selection | None,
               scope: str) -> tuple[list[Group], list[str]]:
    """The bisection's first-level groups (the backend's subgraphs) and notes on them."""
    if selection is None:
        return [Group("whole model", tuple(candidates))], ["no backend: the whole model is one group"]
    from partition.runner import partition
    backend = selection.backend
    result = partition(graph, selection)
    wanted = set(candidates)
    groups, inside = [], set()
    for s in result.subgraphs:
        members = tuple(n for n in s.nodes if n in wanted)
        inside.update(s.nodes)
        groups.append(Group(f"subgraph {s.id} ({s.property}, {len(s.nodes)} nodes)", members))
    notes = [f"backend {backend}: {len(result.subgraphs)} subgraph(s) with "
             f"{len(inside)} of {len(graph.nodes)} nodes"]
    rest = tuple(n for n in candidates if n not in inside)
    if scope == "all" and rest:
        groups.append(Group(f"outside subgraphs ({len(rest)} nodes)", rest))
    elif rest:
        notes.append(f"{len(rest)} node(s) outside the subgraphs stay FP32 (the runtime that runs "
                     "them is not the backend); --scope all reduces them too")
    return groups, notes


def _float_outputs(node_outputs: tuple[str, ...], values: Mapping[str, np.ndarray]) -> list[str]:
    return [t for t in node_outputs if t in values and values[t].dtype.kind == "f"]


def _error(low: np.ndarray, ref: np.ndarray) -> tuple[float | None, float]:
    """(relative error or None when nonfinite where ref is finite, max |ref|)."""
    r64, l64 = ref.astype(np.float64), low.astype(np.float64)
    finite = np.isfinite(r64)
    scale = float(np.abs(r64[finite]).max()) if finite.any() else 0.0
    if ref.size == 0:
        return 0.0, 0.0
    if (~np.isfinite(l64) & finite).any():
        return None, scale
    diff = np.abs(np.where(finite, l64 - r64, 0.0))
    return float(diff.max()) / max(scale, _TINY), scale


def local_errors(runner: PrecisionRunner, ref: Mapping[str, np.ndarray],
                 reduced: set[str]) -> dict[str, tuple[float | None, NodeCounts]]:
    """Per reduced node: its relative output error and rounding counts when it alone runs
    reduced on the exact FP32 inputs (one kernel call each, no model run)."""
    out: dict[str, tuple[float | None, NodeCounts]] = {}
    for node in runner.graph.nodes:
        if node.name not in reduced:
            continue
        done = runner.node_alone(node, ref)
        if done is None:
            continue
        outs, counts = done
        errs = [_error(np.asarray(o), ref[t])[0] for t, o in zip(node.outputs, outs)
                if t and t in ref and ref[t].dtype.kind == "f" and hasattr(o, "dtype")]
        out[node.name] = (None if any(e is None for e in errs) else max(errs, default=0.0), counts)
    return out


def analyse(graph: Graph, ref: Mapping[str, np.ndarray], low: Mapping[str, np.ndarray],
            counts: Mapping[str, NodeCounts], target: str,
            local: Mapping[str, tuple[float | None, NodeCounts]] | None = None) -> list[dict[str, Any]]:
    """One row per node (graph order): error, growth, magnitudes, counts, suspect."""
    local = local or {}
    floor = UNIT_ROUNDOFF.get(target, 2.0 ** -11)
    tensor_error: dict[str, float | None] = {}
    input_scale = max((float(np.abs(ref[t]).max()) for t in graph.inputs
                       if t in ref and ref[t].dtype.kind == "f" and ref[t].size), default=1.0)
    for t in graph.inputs:
        if t in ref and t in low and ref[t].dtype.kind == "f":
            tensor_error[t] = _error(low[t], ref[t])[0]
    rows = []
    for node in graph.nodes:
        outs = _float_outputs(node.outputs, ref)
        errors, scale = [], 0.0
        for t in outs:
            e, s = _error(low[t], ref[t]) if t in low else (0.0, 0.0)
            tensor_error[t] = e
            errors.append(e)
            scale = max(scale, s)
        err = None if any(e is None for e in errors) else max(errors, default=0.0)
        ins = [tensor_error.get(t, 0.0) for t in node.inputs if t in tensor_error]
        in_err = None if any(e is None for e in ins) else max(ins, default=0.0)
        in_scale = max((float(np.abs(ref[t]).max()) for t in node.inputs
                        if t in ref and ref[t].dtype.kind == "f" and ref[t].size
                        and t not in graph.initializers), default=0.0)
        c = counts.get(node.name, NodeCounts())
        alone_err, alone = local.get(node.name, (0.0, NodeCounts()))
        row = {"node": node.name, "op": node.op_type, "reduced": node.name in counts,
               "error": err, "nonfinite": err is None and bool(outs),
               "growth": _growth(err, in_err, floor),
               "alone_error": alone_err, "alone_nonfinite": alone_err is None,
               "alone_growth": None if alone_err is None else round(math.log10(max(alone_err, floor) / floor), 3),
               "max_abs": scale, "max_abs_in": in_scale,
               "max_abs_growth": scale / max(input_scale, _TINY),
               "overflow": max(c.overflow, alone.overflow), "underflow": max(c.underflow, alone.underflow),
               "elements": c.elements or alone.elements,
               "data_movement": node.op_type in DATA_MOVEMENT}
        row["suspect"] = _suspect(node.op_type, row, target)
        rows.append(row)
    return rows


def _growth(err: float | None, in_err: float | None, floor: float) -> float | None:
    """Decades of error this node adds; None (shown as the worst colour) when it turns inf/NaN.

    Errors below ``floor`` (the format's unit roundoff) count as the floor: one rounding is
    what every reduced node adds, not growth."""
    if err is None:
        return None if in_err is not None else 0.0
    if in_err is None:
        return 0.0
    return round(math.log10(max(err, floor) / max(in_err, floor)), 3)


def in_trouble(row: Mapping[str, Any], target: str) -> bool:
    """What the analysis saw of this node says it may need FP32: it overflowed (int8:
    saturated), made a NaN/inf, or alone adds more than a decade of error."""
    if target == "int8":
        return bool(row["overflow"])
    return bool(row["overflow"] or row["nonfinite"] or row["alone_nonfinite"]
                or (row["alone_growth"] or 0) > 1)


def _suspect(op: str, row: dict[str, Any], target: str) -> str | None:
    """Why this node is trouble, when it is one of the usual suspects and its values say so."""
    if target == "int8":
        return (f"{row['overflow']} of {row['elements']} quantized values saturated"
                if row["overflow"] else None)
    big_in, big_out = row["max_abs_in"], row["max_abs"]
    over = row["overflow"]
    if not in_trouble(row, target):
        return None
    limit = FP16_MAX if target == "fp16" else 3.39e38
    if op == "Pow":
        return f"Pow of values up to {big_in:.3g} reaches {big_out:.3g} (FP16 max {FP16_MAX:g}): " \
               "the squared deviations of a LayerNorm written out" if big_out > limit or over else None
    if op in REDUCTIONS and (over or big_out > limit or (op != "ReduceMean" and big_in > 256)):
        return f"{op} over values up to {big_in:.3g} (result {big_out:.3g}): a LayerNorm/variance " \
               "sum that leaves the FP16 range or loses its small terms"
    if op == "Exp":
        return f"Exp of values up to {big_in:.3g} overflows above {EXP_LIMIT:.2f} in FP16"
    if op == "Softmax" and (row["nonfinite"] or big_in > 1e3):
        return f"Softmax over logits up to {big_in:.3g}" + (" (inf in its input: NaN out)"
                                                            if row["nonfinite"] else
                                                            ": FP16 keeps ~3 digits of such logits")
    if op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization"):
        return f"{op} over values up to {big_in:.3g}: its mean/variance in FP16 lose precision"
    if op in ("MatMul", "Gemm") and (over or big_out > limit):
        return f"{op} products reach {big_out:.3g} > {FP16_MAX:g}: attention logits (q.k) " \
               "overflow FP16 before the Softmax scale"
    if over:
        return f"{over} element(s) overflowed to inf in {target.upper()}"
    return None


def investigate(graph: Graph, feeds: Mapping[str, Any], request: PrecisionRequest,
                progress: Callable[[dict[str, Any]], None] | None = None,
                device: str = "cpu") -> dict[str, Any]:
    """Analyse, search and export: the report ``sglens precision --json`` prints."""
    step = progress or (lambda event: None)
    with PrecisionRunner(graph, request.target, device=device) as runner:
        if request.target == "int8":
            groups, notes = [Group("Q/DQ pairs", tuple(runner.candidates))], \
                ["int8: the candidates are the QuantizeLinear nodes; a pinned one removes its Q/DQ pair"]
        else:
            groups, notes = groups_for(graph, runner.candidates, request.selection, request.scope)
        reduced = [n for g in groups for n in g.nodes]
        if not reduced:
            notes.append("no node runs in reduced precision: the backend's subgraphs hold none of the "
                         "float nodes; try --backend none or --scope all")
        rows: list[dict[str, Any]] = []
        if request.analyse:
            step({"stage": "analyse", "run": 0, "pins": 0, "match": None, "max_abs": None, "candidate": []})
            ref, _ = runner.run(feeds, (), keep=True)
            low, counts = runner.run(feeds, reduced, keep=True, stats=True)
            rows = analyse(graph, ref, low, counts, request.target, local_errors(runner, ref, set(reduced)))
            del ref, low
            step({"stage": "nodes analysed", "run": 2, "pins": 0, "match": None, "max_abs": None,
                  "candidate": [], "nodes": rows})
        else:
            notes.append("no per-node analysis (--no-analysis): no counts, growth or suspects")
        result = search(runner, feeds, request.tolerance, groups, request.max_runs, progress,
                        suspects=[r["node"] for r in rows if in_trouble(r, request.target)])
    pins = result.pins
    if result.capped and rows:
        notes.extend(_spread_note(rows, result, request.target))
    if result.baseline.weak:
        # the wave's "vacuous verdict": an untrained MobileViT's outputs are ~1e-41, and
        # "no pins needed" said nothing about its FP16 behaviour
        notes.append(f"output(s) {', '.join(result.baseline.weak)}: the FP32 reference is at or below "
                     f"atol ({request.tolerance.atol:g}) almost everywhere, so nearly any run is within "
                     "tolerance there and this answer proves little; lower --atol below the outputs' "
                     "scale, or feed inputs that give the model real outputs")
    report = result.to_json()
    report.update({
        "model": graph.name, "backend": request.backend, "scope": request.scope, "notes": notes,
        "candidates": len(reduced), "nodes": rows, "analysis_runs": 2 if request.analyse else 0,
        "suspects": [{"node": r["node"], "op": r["op"], "why": r["suspect"]} for r in rows if r["suspect"]],
        "trtexec": trtexec_flags(pins, request.target),
        "polygraphy": polygraphy_flags(pins, request.target),
        "summary": _summary(result.no_pins_needed, pins, result.capped, result.runs),
    })
    return report


def _spread_note(rows: list[dict[str, Any]], result: Any, target: str) -> list[str]:
    """A capped search with no culprit to find: say that the error is rounding spread over
    the model and what tolerance needs no pins (GPT-2 at 1e-3 in FP16 got '186 nodes must
    stay FP32', each harmless alone, after its 40 runs)."""
    if any(h["stage"] == "suspects" and h["match"] for h in result.history):
        return []
    grown = [r for r in rows if r.get("reduced") and r["alone_growth"] is not None]
    worst = max(grown, key=lambda r: r["alone_growth"], default=None)
    if worst is None or worst["alone_growth"] > 1 or result.baseline.max_abs is None:
        return []
    b = result.baseline.max_abs
    step = 10.0 ** (math.floor(math.log10(b)) - 1) if b > 0 else 1e-12
    atol = math.ceil(b / step) * step   # two digits, rounded up: it must cover the error
    return [f"no small set of pins exists to find: no node adds a decade of error alone (the most, "
            f"{worst['node']}, {worst['alone_growth']:.2f}) and pinning the analysis' suspects did not "
            f"pass; the fully reduced run's error (max abs {b:.3g}) is {target.upper()} rounding spread "
            f"over the model. A tolerance above it (atol {atol:.2g}) needs no pins; else keep the model "
            "in FP32, or raise the search cap for a smaller set."]


def _summary(no_pins: bool, pins: list[str], capped: bool, runs: int) -> str:
    if no_pins:
        return f"no pins needed: the reduced-precision run is within tolerance ({runs} runs)"
    what = f"{len(pins)} node(s) must stay FP32: {', '.join(pins[:10])}" + (" ..." if len(pins) > 10 else "")
    return what + f" ({runs} runs" + ("; the run cap was reached, the set may not be minimal)" if capped else ")")
