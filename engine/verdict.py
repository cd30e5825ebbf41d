"""The verdict of a comparison, in words a person can check: one headline and its reasons.

``engine.tolerance`` judges one tensor; this module judges the run from those
judgements and says what the judgement is worth. Four things used to make the
report contradict itself or claim too much:

- a **weak match**: when most of a reference output is at or below ``atol``,
  almost any answer near zero passes, so "outputs match" proves little. The
  verdict is then ``weak`` and says how much of the reference was below atol;
- a **difference under a match**: a subgraph boundary inside the partitioned
  graph may differ while the outputs match (the difference is squashed on the
  way out). The run is still a match; "first subgraph introducing a difference"
  is named only when an output differs, and the inner difference is a separate,
  clearly worded detail;
- an **output that ignores the inputs**: onnxruntime gives it bit for bit again on
  other inputs (``compare.inputs_independent``), e.g. a model whose weights are a
  constant fill. A match then checks only what the model computes from its weights;
  the verdict is ``weak`` when no output depends on the inputs, and says which do not;
- **relative errors near zero**: ``max_rel`` is taken only where ``|ref|`` is
  well above atol (``engine.tolerance``); the detail says so when it was limited;
- **rounding carried, not a kernel that departs**: in a quantized (QDQ) model, a float
  difference at rounding level moves a value across a QuantizeLinear's rounding boundary, and
  the whole step travels to the outputs, so correct kernels give outputs out of any float
  tolerance. Where every node out of tolerance, run alone on onnxruntime's own inputs, gives
  onnxruntime's output (``isolate.local_check``; in a partitioned run that differs, each
  differing subgraph too, run by the runtime that ran it), the verdict is ``rounding``, not
  ``differ``: no kernel departs. One node that still differs alone, or one that could not be
  run alone, keeps it ``differ``.

The same text is the CLI's (``sglens compare``) and the web run card's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .tolerance import ROUNDING_SCALE, Tolerance

MATCH, WEAK, ROUNDING, DIFFER = "match", "weak", "rounding", "differ"


@dataclass(frozen=True)
class Verdict:
    status: str                      # MATCH, WEAK, ROUNDING or DIFFER
    headline: str
    details: tuple[str, ...] = ()
    first_divergent: str | None = None   # a subgraph, named only when an output differs
    inner_difference: str | None = None  # a subgraph whose outputs differ while the run's outputs match
    suggested_atol: float | None = None  # a weak match: an atol at which the check means something

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "headline": self.headline, "details": list(self.details),
                "first_divergent": self.first_divergent, "inner_difference": self.inner_difference,
                "suggested_atol": self.suggested_atol}


def judge(outputs: Mapping[str, Mapping[str, dict[str, Any]]], subgraphs: Sequence[Mapping[str, Any]],
          tol: Tolerance, local: Mapping[str, Any] | None = None) -> Verdict:
    """``outputs``: output -> run -> ``compare_arrays`` result; ``subgraphs``: the boundary records;
    ``local``: the engine run's nodes out of tolerance, each run alone (``isolate.local_check``)."""
    differing = [(name, run) for name, per in outputs.items() for run, e in per.items() if not e["match"]]
    introducing = [sg for sg in subgraphs if sg.get("introduces_difference")]
    first = f"#{introducing[0]['id']} {introducing[0]['node']}" if introducing else None
    partitioned_differs = any(run == "partitioned" for _, run in differing)
    details: list[str] = []
    if differing:
        return _difference(outputs, subgraphs, differing, local, first if partitioned_differs else None)
    weak = [(name, e) for name, per in outputs.items() for e in per.values() if e.get("weak")]
    inner, suggested = first, None
    fixed = [name for name, per in outputs.items() if any(e.get("inputs_independent") for e in per.values())]
    every_fixed = bool(fixed) and len(fixed) == len(outputs)
    if every_fixed:
        headline = ("✔ outputs match onnxruntime, but the check proves little: no output changes "
                    "with the inputs")
        details.append(_independence_detail(fixed, every=True))
        status = WEAK
    elif weak:
        name, e = weak[0]
        share = 100.0 * e.get("ref_below_atol", 0.0)
        headline = ("✔ outputs match onnxruntime, but the check proves little: "
                    f"most of the reference ({share:.1f}% of {name}) is at or below atol {tol.atol:g}")
        suggested = suggested_atol(entry for _, entry in weak)
        several = len({n for n, _ in weak}) > 1
        lower = "e.g. to a thousandth of that" if suggested is None else f"e.g. to {suggested:g}, a thousandth of " + (
            "the smallest largest |ref| among them" if several else "that")
        details.append(f"largest |ref| of {name} is {e.get('ref_max_abs', 0.0):.3g}; near zero almost any "
                       f"answer passes. Lower atol ({lower}) or feed inputs that give larger outputs to "
                       "make the check mean something")
        others = sorted({n for n, _ in weak} - {name})
        if others:
            details.append(f"also mostly below atol: {_listing(others)}")
        status = WEAK
    else:
        headline = "✔ outputs match onnxruntime"
        status = MATCH
    if fixed and not every_fixed:
        details.append(_independence_detail(fixed, every=False))
    if inner:
        headline += " (a tensor inside the partitioned graph differs: see below)"
        scale = introducing[0].get("difference_scale")
        rounding = (f" Its largest difference is {scale:.1g} of its largest value: float32 rounding "
                    "(amplified where values cancel, e.g. near-zero results of large terms), not a "
                    "wrong result" if scale is not None and scale <= ROUNDING_SCALE else "")
        details.append(f"inside the partitioned graph, subgraph {inner}'s outputs differ from onnxruntime "
                       "beyond tolerance while its inputs match; the graph's outputs still match, so the "
                       "difference does not reach them." + rounding)
    return Verdict(status, headline, tuple(details + _rel_details(outputs, only_missing=True)), None, inner,
                   suggested)


def suggested_atol(weak: Iterable[Mapping[str, Any]]) -> float | None:
    """A thousandth of the smallest largest-|ref| of the weakly matched outputs, to one digit: an
    atol under which each of them is mostly above atol, so a match there checks the values (the
    web run card offers it as one click). None when every such output is all zeros: no atol helps."""
    peaks = [float(e.get("ref_max_abs") or 0.0) for e in weak]
    smallest = min((p for p in peaks if p > 0.0), default=0.0)
    return float(f"{smallest / 1000:.1g}") if smallest > 0.0 else None


def _difference(outputs: Mapping[str, Mapping[str, dict[str, Any]]], subgraphs: Sequence[Mapping[str, Any]],
                differing: Sequence[tuple[str, str]], local: Mapping[str, Any] | None,
                first: str | None) -> Verdict:
    """The verdict where an output differs: ``rounding`` when the difference is carried, not made
    (``_carried``), else ``differ``, saying whose kernel departs where that is known."""
    runs = sorted({run for _, run in differing})
    names = sorted({name for name, _ in differing})
    which = f"{_listing(names)} ({' and '.join(runs)} run{'s' if len(runs) > 1 else ''})"
    carried = _carried(runs, subgraphs, local)
    theirs = onnxruntime_departs(local)
    headline = (f"≈ outputs differ from onnxruntime by rounding carried through the model, not by a "
                f"kernel: {which}" if carried else
                f"✘ outputs differ from onnxruntime, whose own kernels depart from the operators' "
                f"definition (ONNX's reference evaluator agrees with ours): {which}" if theirs else
                f"✘ outputs differ from onnxruntime: {which}")
    details = [f"first subgraph introducing a difference: {first} (its inputs match onnxruntime, its "
               "outputs do not)"] if first else []
    return Verdict(ROUNDING if carried else DIFFER, headline,
                   tuple(_local_details(local, carried) + _alone_details(subgraphs) + details
                         + _sensitivity_details(outputs, names, carried) + _rel_details(outputs)), first, None)


def onnxruntime_departs(local: Mapping[str, Any] | None) -> bool:
    """Whether every node that still differs alone has ONNX's reference evaluator on our side."""
    return bool(local) and 0 < local.get("n_departing", 0) == local.get("n_theirs", 0)


def _carried(runs: Sequence[str], subgraphs: Sequence[Mapping[str, Any]],
             local: Mapping[str, Any] | None) -> bool:
    """Whether every differing run's difference is carried, not made: each node out of tolerance
    gives onnxruntime's output alone on onnxruntime's inputs (``local``, checked on the engine
    run's nodes), and, if the partitioned run differs, so does each of its subgraphs whose outputs
    differ, run alone by the runtime that ran it (``alone_matches``, ``compare._subgraphs_alone``)."""
    if not local or not local.get("complete"):
        return False
    made = [sg for sg in subgraphs if not all(e["match"] for e in sg.get("outputs", {}).values())]
    alone = all(sg.get("alone_matches") is True for sg in made)
    return all(run == "engine" or (run == "partitioned" and alone) for run in runs)


def _local_details(local: Mapping[str, Any] | None, carried: bool) -> list[str]:
    """What running each node out of tolerance alone found (``isolate.local_check``), after how the
    graph was flattened for it, if it was."""
    if not local:
        return []
    return _flattened_detail(local) + _local_findings(local, carried)


def _flattened_detail(local: Mapping[str, Any]) -> list[str]:
    ifs = local.get("flattened")
    if not ifs:
        return []
    return [f"each If was replaced by the branch it took on these inputs ({_listing(ifs)}), and both "
            "runtimes ran that graph, so the nodes inside are checked one by one"]


def _local_findings(local: Mapping[str, Any], carried: bool) -> list[str]:
    n = local["differing"]
    if carried and not n:
        return ["compared tensor by tensor with onnxruntime's run of the ops as the model writes them "
                "(every tensor exposed, so nothing fused), no node of ours is out of tolerance: the outputs "
                "differ only from onnxruntime's default run, whose fused kernels (a QDQ model's QLinearConv "
                "and the like) round differently from the ops the model writes; judge what the output "
                "decides (e.g. its argmax)"]
    if carried:
        return [f"each of the {n} node{'s' if n > 1 else ''} out of tolerance (engine run), run alone on "
                "onnxruntime's own inputs, gives onnxruntime's output (within tolerance, or within "
                "rounding of its largest value where terms cancel: float32's, float16's for a float16 "
                "tensor): no kernel of ours departs. The difference is rounding carried through the model "
                "-- in a quantized model a value next to a QuantizeLinear's rounding boundary goes to the "
                "neighbouring step; in a float16 one onnxruntime rounds to float16 after each op where we "
                "round at the model's casts -- and it travels on; judge what the output decides (e.g. "
                "its argmax)"]
    lines = []
    if not n and not local.get("fused_differs") and not local.get("flattened_differs"):
        return []
    if local.get("n_departing"):
        theirs = local.get("n_theirs", 0)
        whose = ("; at every one ONNX's reference evaluator agrees with ours: onnxruntime's kernel departs "
                 "there, not ours" if theirs == local["n_departing"] else
                 f"; at {theirs} of them ONNX's reference evaluator agrees with ours (onnxruntime's kernel "
                 "departs there)" if theirs else "")
        lines.append(f"run alone on onnxruntime's own inputs, {local['n_departing']} of the {n} node(s) out "
                     f"of tolerance still differ: {_listing(local['departing'])} (where the difference is "
                     f"made, not carried){whose}")
    if local.get("n_unchecked"):
        lines.append(f"{local['n_unchecked']} node(s) out of tolerance could not be run alone (control "
                     f"flow, or a value onnxruntime did not expose): {_listing(local['unchecked'])}")
    if local.get("flattened_differs"):
        lines.append(f"with the Ifs replaced by their branches, our run's {_listing(local['flattened_differs'])} "
                     "part from the run with the Ifs: the check does not stand for it")
    if local.get("fused_differs"):
        lines.append("the run checked node by node (fused chains as written, to keep every tensor) and "
                     f"the measured run (chains fused) differ at {_listing(local['fused_differs'])}: a fused "
                     "kernel adds a difference no node shows alone")
    if n > local.get("checked", 0) + local.get("n_unchecked", 0):
        lines.append(f"{n} nodes are out of tolerance; only the first {local['checked'] + local['n_unchecked']} "
                     "were run alone in the time the check has")
    return lines


def _alone_details(subgraphs: Sequence[Mapping[str, Any]]) -> list[str]:
    """What running each subgraph whose outputs differ alone found (``alone_matches``)."""
    made = [sg for sg in subgraphs if "alone_matches" in sg]
    if not made:
        return []
    ids = {k: [f"#{sg['id']}" for sg in made if sg["alone_matches"] is k] for k in (True, False, None)}
    lines = []
    if ids[True]:
        lines.append(f"subgraph{'s' if len(ids[True]) > 1 else ''} {_listing(ids[True])} of the partitioned run "
                     "differ at their outputs, yet run alone on onnxruntime's own inputs by the runtime that "
                     "ran them, give onnxruntime's output: the difference came in through their inputs")
    if ids[False]:
        lines.append(f"run alone on onnxruntime's own inputs, subgraph{'s' if len(ids[False]) > 1 else ''} "
                     f"{_listing(ids[False])} still differ: the difference is made there")
    if ids[None]:
        lines.append(f"subgraph{'s' if len(ids[None]) > 1 else ''} {_listing(ids[None])} could not be run alone "
                     "(their runtime is not available here, or a value onnxruntime did not expose)")
    return lines


def _independence_detail(names: Sequence[str], every: bool) -> str:
    """Outputs onnxruntime gave bit for bit again on other inputs (``compare.inputs_independent``)."""
    which = "every output" if every else _listing(names)
    return (f"onnxruntime gave {which} bit for bit again on other inputs (these ones resampled): "
            f"{'they do' if every or len(names) > 1 else 'it does'} not depend on the inputs, so the "
            "match checks only what the model computes from its weights -- placeholder weights (a "
            "constant fill) or inputs the model ignores do this. Feed real inputs, or the model with "
            "its trained weights, to make the check mean something")


def _rel_details(outputs: Mapping[str, Mapping[str, dict[str, Any]]],
                 only_missing: bool = False) -> list[str]:
    """One line when some output's max rel leaves out near-zero elements (or has none to use).
    ``only_missing`` (a match): only when an output has no max rel at all; that a max rel
    skips the near-zero elements is the match rule's own line, and a bullet under every
    matching run (ViT, GPT-2, GRU) read as a warning."""
    notes: dict[str, str] = {}   # output -> the first of its runs' notes
    for name, per in outputs.items():
        for e in per.values():
            if e.get("rel_note") and (not only_missing or e.get("max_rel") is None):
                notes.setdefault(name, e["rel_note"])
    by_note: dict[str, list[str]] = {}   # one line a note: outputs' notes differ (none near zero / some)
    for name in sorted(notes):
        by_note.setdefault(notes[name], []).append(name)
    return [f"max rel of {_listing(names)}: {note}" for note, names in by_note.items()]


def _sensitivity_details(outputs: Mapping[str, Mapping[str, dict[str, Any]]],
                         names: Sequence[str], carried: bool = False) -> list[str]:
    """Per differing output whose reference sensitivity was measured (``compare``'s
    ``ref_sensitivity``): our difference beside how far onnxruntime's own output moves when its
    float inputs move by a few ulp. About as far: the model amplifies rounding (re-quantized
    activations, thresholds) and its values cannot agree closer; much further: more than rounding."""
    lines = []
    for name in names[:4]:
        per = outputs[name]
        moved = next((e["ref_sensitivity"] for e in per.values() if "ref_sensitivity" in e), None)
        ours = max((float(e.get("max_abs") or 0.0) for e in per.values() if not e["match"]), default=0.0)
        if not moved:   # not measured, or onnxruntime's output did not move: the probe says nothing
            continue
        own = (f"onnxruntime's own {name} moves by up to {moved:.3g} when its float inputs move by "
               "a few units in the last place")
        if ours <= 2 * moved:
            lines.append(f"{own}; ours differs by {ours:.3g}, "
                         f"{'less than that' if ours <= moved else 'about as much'}: this model amplifies "
                         "rounding-level differences (re-quantized activations, thresholds), so its "
                         "values cannot agree closer -- judge what the output decides (e.g. its argmax)")
        elif not carried:   # every node checked alone outweighs a probe that moves only the inputs
            lines.append(f"{own}; ours differs by {ours:.3g}, more than rounding explains")
    return lines


def _listing(names: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
