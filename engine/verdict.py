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
  well above atol (``engine.tolerance``); the detail says so when it was limited.

The same text is the CLI's (``sglens compare``) and the web run card's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .tolerance import Tolerance

MATCH, WEAK, DIFFER = "match", "weak", "differ"


@dataclass(frozen=True)
class Verdict:
    status: str                      # MATCH, WEAK or DIFFER
    headline: str
    details: tuple[str, ...] = ()
    first_divergent: str | None = None   # a subgraph, named only when an output differs
    inner_difference: str | None = None  # a subgraph whose outputs differ while the run's outputs match

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "headline": self.headline, "details": list(self.details),
                "first_divergent": self.first_divergent, "inner_difference": self.inner_difference}


#: A difference at most this fraction of a tensor's largest value is float32 rounding.
ROUNDING_SCALE = 1e-5


def judge(outputs: Mapping[str, Mapping[str, dict[str, Any]]], subgraphs: Sequence[Mapping[str, Any]],
          tol: Tolerance) -> Verdict:
    """``outputs``: output -> run -> ``compare_arrays`` result; ``subgraphs``: the boundary records."""
    differing = [(name, run) for name, per in outputs.items() for run, e in per.items() if not e["match"]]
    introducing = [sg for sg in subgraphs if sg.get("introduces_difference")]
    first = f"#{introducing[0]['id']} {introducing[0]['node']}" if introducing else None
    partitioned_differs = any(run == "partitioned" for _, run in differing)
    details: list[str] = []
    if differing:
        runs = sorted({run for _, run in differing})
        names = sorted({name for name, _ in differing})
        headline = (f"✘ outputs differ from onnxruntime: {_listing(names)} "
                    f"({' and '.join(runs)} run{'s' if len(runs) > 1 else ''})")
        if first and partitioned_differs:
            details.append(f"first subgraph introducing a difference: {first} "
                           "(its inputs match onnxruntime, its outputs do not)")
        return Verdict(DIFFER, headline, tuple(details + _sensitivity_details(outputs, names)
                                               + _rel_details(outputs)),
                       first if partitioned_differs else None, None)
    weak = [(name, e) for name, per in outputs.items() for e in per.values() if e.get("weak")]
    inner = first
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
        details.append(f"largest |ref| of {name} is {e.get('ref_max_abs', 0.0):.3g}; near zero almost any "
                       "answer passes. Lower atol (e.g. to a thousandth of that) or feed inputs that give "
                       "larger outputs to make the check mean something")
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
    return Verdict(status, headline, tuple(details + _rel_details(outputs, only_missing=True)), None, inner)


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
    if not notes:
        return []
    limited = sorted(notes)
    return [f"max rel of {_listing(limited)}: {notes[limited[0]]}"]


def _sensitivity_details(outputs: Mapping[str, Mapping[str, dict[str, Any]]],
                         names: Sequence[str]) -> list[str]:
    """Per differing output whose reference sensitivity was measured (``compare``'s
    ``ref_sensitivity``): our difference beside how far onnxruntime's own output moves when its
    float inputs move by a few ulp. About as far: the model amplifies rounding (re-quantized
    activations, thresholds) and its values cannot agree closer; much further: more than rounding."""
    lines = []
    for name in names[:4]:
        per = outputs[name]
        moved = next((e["ref_sensitivity"] for e in per.values() if "ref_sensitivity" in e), None)
        ours = max((float(e.get("max_abs") or 0.0) for e in per.values() if not e["match"]), default=0.0)
        if moved is None:
            continue
        own = (f"onnxruntime's own {name} moves by up to {moved:.3g} when its float inputs move by "
               "a few units in the last place")
        if ours <= 2 * moved:
            lines.append(f"{own}; ours differs by {ours:.3g}, "
                         f"{'less than that' if ours <= moved else 'about as much'}: this model amplifies "
                         "rounding-level differences (re-quantized activations, thresholds), so its "
                         "values cannot agree closer -- judge what the output decides (e.g. its argmax)")
        else:
            lines.append(f"{own}; ours differs by {ours:.3g}, more than rounding explains")
    return lines


def _listing(names: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
