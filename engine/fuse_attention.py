"""Attention found as a pattern at bind time (``plan="segments"``; ``engine/fuse.py``
splices the fused steps in beside its own chains): whatever an exporter wrote between
the two products,

    s = MatMul(Q, K)  [-> Mul/Div by a scale] [-> Add a mask] [-> Where(cond, s, fill)]
      -> Softmax [-> Cast] -> MatMul(., V)

in any order, up to four steps on the scores, becomes one step
(``kernels/attention.py``'s ``attention``): the scores are one array every step
updates in place, and the Softmax is the model's own kernel. As written, each step
allocates a new scores-sized array (five or six per head group); fused, there are
three (the scores, the probabilities, the output). BERT, DistilBERT and GPT-2 as
torch and transformers export them all match.

Each intermediate must have exactly one reader and not be a graph output (so it
can disappear inside the step); the nodes are kept, and a run that keeps
intermediates (the debugger) runs them instead. An operand that does not fit in
place (it would broadcast the scores larger, or change their dtype), or any
failure, runs the nodes as written, so results and errors stay the graph's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from partition.ir import Node

from .kernels.attention import ScoreStep, attention
from .kernels.registry import kernel_attrs
from .run_errors import named_failure

#: Ops that may sit on the scores between the first product and the Softmax.
_SCORE_OPS = ("Mul", "Div", "Add", "Sub", "Where")
_MAX_STEPS = 4
#: A chain found: its positions in the node list, its nodes, the fused step's inputs
#: and its kernel (``engine/fuse.py`` makes the fused node and splices it in).
Chain = tuple[list[int], tuple[Node, ...], tuple[str, ...], Callable[..., tuple]]


def attention_chains(nodes: Sequence[Node], sole: Callable[[str, str], int | None],
                     kernel_of: Callable[[Node], Any]) -> list[Chain]:
    """Every attention pattern of ``nodes``, none overlapping another. ``sole(t, op)`` is
    fuse.py's: the position of the one reader of ``t`` when it is a default-domain
    ``op`` and ``t`` no graph output."""
    if not any(n.op_type == "Softmax" for n in nodes):
        return []
    found: list[Chain] = []
    taken: set[int] = set()
    for i, first in enumerate(nodes):
        if first.op_type != "MatMul" or first.domain not in ("", "ai.onnx") or i in taken \
                or len(first.inputs) != 2 or not all(first.inputs):
            continue
        chain = _chain(nodes, sole, i)
        if chain is None or taken.intersection(chain):
            continue
        parts = tuple(nodes[k] for k in chain)
        kernels = [kernel_of(p) for p in parts]
        if any(k is None for k in kernels):
            continue
        inputs, steps = _operands(parts)
        found.append((chain, parts, inputs, _kernel(parts, kernels, inputs, steps)))
        taken.update(chain)
    return found


def _chain(nodes: Sequence[Node], sole: Callable[[str, str], int | None],
           i: int) -> list[int] | None:
    """The positions of MatMul, its score steps, Softmax and the second MatMul, or None."""
    chain, scores = [i], nodes[i].outputs[0]
    for _ in range(_MAX_STEPS + 1):
        j = sole(scores, "Softmax")
        if j is not None:
            chain.append(j)
            probs = nodes[j].outputs[0]
            cast = sole(probs, "Cast")  # GPT-2's exports cast the probabilities (a no-op)
            if cast is not None:
                chain.append(cast)
                probs = nodes[cast].outputs[0]
            k = sole(probs, "MatMul")
            if k is None or len(nodes[k].inputs) != 2 or nodes[k].inputs[0] != probs \
                    or nodes[k].inputs[1] in ("", probs):
                return None
            return [*chain, k]
        step = next((j for op in _SCORE_OPS if (j := sole(scores, op)) is not None), None)
        if step is None or _scores_at(nodes[step], scores) is None:
            return None
        chain.append(step)
        scores = nodes[step].outputs[0]
    return None


def _scores_at(node: Node, scores: str) -> int | None:
    """Where the scores sit among a step's inputs (once, never a Where's condition)."""
    ins = node.inputs
    if node.op_type == "Where":
        ok = len(ins) == 3 and all(ins) and ins.count(scores) == 1 and ins[0] != scores
    else:
        ok = len(ins) == 2 and all(ins) and ins.count(scores) == 1
    return ins.index(scores) if ok else None


def _operands(parts: tuple[Node, ...]) -> tuple[tuple[str, ...], list[ScoreStep]]:
    """The fused step's inputs (Q, K, V, then each step's other operands, each named
    once) and the steps, their operands as positions in those inputs."""
    first, last = parts[0], parts[-1]
    inputs = [first.inputs[0], first.inputs[1], last.inputs[1]]
    steps: list[ScoreStep] = []
    scores = first.outputs[0]
    for part in parts[1:-2]:
        if part.op_type in ("Softmax", "Cast"):
            break
        at = part.inputs.index(scores)
        others = []
        for t in (t for n, t in enumerate(part.inputs) if n != at):
            if t not in inputs:
                inputs.append(t)
            others.append(inputs.index(t))
        # Where's positions: the condition first; ``at`` says which branch the scores are
        steps.append((part.op_type, tuple(others), at))
        scores = part.outputs[0]
    return tuple(inputs), steps


def _kernel(parts: tuple[Node, ...], kernels: list[Any], inputs: tuple[str, ...],
            steps: list[ScoreStep]) -> Callable[..., tuple]:
    at = next(n for n, p in enumerate(parts) if p.op_type == "Softmax")
    # the Softmax, and a Cast if one follows
    after = [(kernel, kernel_attrs(part)) for part, kernel in zip(parts[at:-1], kernels[at:-1])]

    def probabilities(xp: Any, scores: Any) -> Any:
        for kernel, attrs in after:
            scores = kernel(xp, scores, **attrs)[0]
        return scores

    # The engine's MatMul kernel for both products (both are default-domain MatMuls of
    # one opset: one kernel), which cuts a large product over the cores.
    product = kernels[0]

    def run(xp: Any, *args: Any) -> tuple:
        try:
            y = attention(xp, args, steps, lambda s: probabilities(xp, s),
                          lambda a, b: product(xp, a, b)[0])
        except Exception:  # noqa: BLE001 -- the nodes as written: their result or their error
            y = None
        if y is None:
            return as_written(xp, parts, kernels, dict(zip(inputs, args)))
        return (y,)
    return run


def as_written(xp: Any, parts: tuple[Node, ...], kernels: list[Any],
               values: dict[str, Any]) -> tuple:
    """A fused chain's nodes run one by one as the graph has them, from ``values`` (its
    inputs by tensor name): their result, or the failing node's error naming it."""
    for part, kernel in zip(parts, kernels):
        args = [values[t] if t else None for t in part.inputs]
        try:
            values[part.outputs[0]] = kernel(xp, *args, **kernel_attrs(part))[0]
        except Exception as exc:  # noqa: BLE001 -- re-raised, naming the node
            raise named_failure(part, args, exc) from exc
    return (values[parts[-1].outputs[0]],)
