"""Bind-time rewrites that let the engine run one node's work in parallel
(``plan="segments"`` only, like the fusions of ``engine/fuse.py``).

A bidirectional LSTM is two independent recurrences. Run as one node, its
100-step loop alternates between the two directions on one thread; each step
is a matrix-vector product bound by memory (1 MB of recurrent weights per
direction at hidden 256), so a second core is what onnxruntime has over us.
Split into a forward and a reverse LSTM (their weights sliced once, here) and
``Concat`` nodes rebuilding the declared outputs, the two directions become
two segments the engine runs on two workers.

Only plain cases are split: every weight input (W, R, B, initial states,
peepholes) a weight of the graph or absent, no sequence lengths, and no
per-direction activation lists (their split is not worth the code). The
original node's outputs keep their names and values; the debugger (a run that
keeps intermediates) also sees the two halves' outputs.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Mapping

from partition.ir import Node

#: A weight made at bind time from others: (its source weights, how to make it from the weights);
#: ``Executor.set_weight`` of a source makes it again.
Derived = tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Any]]

#: LSTM inputs that hold one slice per direction (X and sequence_lens do not); the
#: initial states (5, 6) hold it on axis 1 under layout 1, the others on axis 0.
_PER_DIRECTION = (1, 2, 3, 5, 6, 7)
_STATES = (5, 6)


def split_bidirectional_lstm(nodes: list[Node], weights: dict[str, Any], taken: set[str],
                             slice_dir: Callable[[Any, int, int], Any],
                             derived: dict[str, Derived]) -> tuple[list[Node], set[str]]:
    """``nodes`` with each plain bidirectional LSTM split in two directions plus
    Concats; new weights (one slice per direction) are added to ``weights`` and
    to ``derived`` (new name -> (its source weight, how it is made from the weights)). ``taken``: tensor and node
    names in use (new names avoid them). Returns the nodes and the names of the
    nodes made here."""
    out: list[Node] = []
    made: set[str] = set()
    for node in nodes:
        parts = _split(node, weights, taken, slice_dir, derived)
        if parts is None:
            out.append(node)
            continue
        out.extend(parts)
        made.update(p.name for p in parts)
    return out, made


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}~{k}"
    taken.add(name)
    return name


def _split(node: Node, weights: dict[str, Any], taken: set[str],
           slice_dir: Callable[[Any, int, int], Any],
           derived: dict[str, Derived]) -> list[Node] | None:
    a = node.attrs
    if node.op_type != "LSTM" or node.domain not in ("", "ai.onnx") \
            or a.get("direction") != "bidirectional" or node.subgraphs \
            or any(k in a for k in ("activations", "activation_alpha", "activation_beta")):
        return None
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    if ins[4] or any(ins[i] and ins[i] not in weights for i in _PER_DIRECTION):
        return None
    layout = int(a.get("layout", 0))
    halves: list[Node] = []
    outs: list[list[str]] = []
    for d, direction in enumerate(("forward", "reverse")):
        d_ins = list(ins)
        for i in _PER_DIRECTION:
            if ins[i]:
                w = _fresh(f"{ins[i]}/{direction}", taken)
                axis = layout if i in _STATES else 0
                weights[w] = slice_dir(weights[ins[i]], d, axis)
                derived[w] = ((ins[i],), partial(_direction_of, slice_dir, ins[i], d, axis))
                d_ins[i] = w
        while d_ins and not d_ins[-1]:
            d_ins.pop()
        d_outs = [_fresh(f"{t}/{direction}", taken) if t else "" for t in node.outputs]
        outs.append(d_outs)
        halves.append(Node(_fresh(f"{node.name}/{direction}", taken), "LSTM", tuple(d_ins),
                           tuple(d_outs), node.domain, {**a, "direction": direction}))
    # Y: [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]);
    # Y_h, Y_c: [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]).
    concats = []
    for k, t in enumerate(node.outputs):
        if t:
            axis = (1 if k == 0 else 0) + layout
            concats.append(Node(_fresh(f"{node.name}/concat{k}", taken), "Concat",
                                (outs[0][k], outs[1][k]), (t,), "", {"axis": axis}))
    return [*halves, *concats]


def _direction_of(slice_dir: Callable[[Any, int, int], Any], source: str, d: int, axis: int,
                  weights: Mapping[str, Any]) -> Any:
    return slice_dir(weights[source], d, axis)


def direction_slice(w: Any, d: int, axis: int) -> Any:
    """Direction ``d`` (on ``axis``) of a recurrent weight, as a view."""
    return w[(slice(None),) * axis + (slice(d, d + 1),)]
