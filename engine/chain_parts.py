"""What every fused chain is made of (``engine/fuse.py``, ``engine/fuse_channel.py``,
``engine/fuse_elementwise.py``): the fused step's record, and the lookups the chain finders share
-- the one reader of a tensor, the other operand of a binary node, the node list with each chain
replaced by its step -- and what may bound a conv chain's activation (a Clip; a Max or Min after
a LeakyRelu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from partition.ir import Graph, Node

FUSED_DOMAIN = "sglens.fused"
#: The ONNX default domain, as models write it: only its ops are fused.
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Fused:
    node: Node                 # the synthetic node that replaces the chain
    parts: tuple[Node, ...]    # the chain, in order (run instead when intermediates are kept)
    kernel: Callable[..., tuple]


def scalar_safe(kernel: Callable[..., tuple]) -> Callable[..., tuple]:
    """``kernel`` (a fused chain's, on numpy) taking 0-d inputs too. numpy turns a ufunc's result
    on 0-d arrays into a scalar, which the chains' in-place steps (``out=``) refuse: a 0-d tensor
    through a Paddle hard swish failed its run. So when every input is 0-d the chain runs on
    shape (1,) and its results go back to 0-d (elementwise: the same values); a chain with a
    larger input broadcasts (1,) as it would ()."""
    def run(xp: Any, *args: Any) -> tuple:
        if not args or getattr(args[0], "ndim", 1) or any(getattr(a, "ndim", 0) for a in args[1:]):
            return kernel(xp, *args)
        out = kernel(xp, *(a.reshape(1) if hasattr(a, "reshape") else a for a in args))
        return tuple(r.reshape(()) if getattr(r, "shape", None) == (1,) else r for r in out)
    return run


def other_input(node: Node, t: str) -> str | None:
    """The input of a binary node that is not ``t`` (None if both or neither are)."""
    a, b = (node.inputs + ("", ""))[:2]
    if a == t and b != t:
        return b
    if b == t and a != t:
        return a
    return None


def sole_reader(graph: Graph, nodes: Sequence[Node]) -> Callable[[str, str], int | None]:
    """``sole(t, op)``: the position of the one node of ``nodes`` reading tensor ``t``
    when that node is a default-domain ``op`` and ``t`` is not a graph output (so the
    tensor can disappear inside a fused step); else None."""
    readers: dict[str, list[int]] = {}
    known = graph.node_by_name
    for i, n in enumerate(nodes):  # a fused or rewritten step is not the graph's: its inputs are its reads
        for t in dict.fromkeys(graph.reads(n) if known.get(n.name) is n else n.inputs):
            readers.setdefault(t, []).append(i)
    outputs = set(graph.outputs)

    def sole(t: str, op: str, domains: Sequence[str] = DEFAULT_DOMAINS) -> int | None:
        r = readers.get(t, [])
        if len(r) == 1 and t not in outputs and nodes[r[0]].op_type == op \
                and nodes[r[0]].domain in domains:
            return r[0]
        return None
    return sole


def spliced(nodes: Sequence[Node], drop: set[int], replace: dict[int, Node]) -> list[Node]:
    """``nodes`` without the fused ones, each fused step at its chain's last place."""
    return [replace.get(i, n) for i, n in enumerate(nodes) if i not in drop or i in replace]


# --- what bounds a chain's activation (engine/fuse.py's conv chains) ---------------

def clip_bounds_constant(clip: Node, const: Callable[[str], Any]) -> bool:
    """Whether a Clip's bounds are attributes (opset < 11) or absent or constant scalars."""
    return len(clip.outputs) == 1 and all(not t or getattr(const(t), "size", 0) == 1 for t in clip.inputs[1:])


#: What may bound a conv chain's activation: a Clip of constant bounds; after a LeakyRelu, also a
#: Max (the lower bound) or Min (the upper) against a scalar constant.
BOUNDS = ("Clip", "Max", "Min")


def bound_reader(sole: Callable[..., int | None], y: str, nodes: list[Node],
                 const: Callable[[str], Any]) -> int | None:
    """The position of the node of ``BOUNDS`` that alone reads ``y`` (a LeakyRelu's output)
    with constant scalar bounds, or None."""
    for op in BOUNDS:
        k = sole(y, op)
        if k is None:
            continue
        node = nodes[k]
        if op == "Clip":
            return k if node.inputs[0] == y and clip_bounds_constant(node, const) else None
        c = const(other_input(node, y) or "") if len(node.inputs) == 2 else None
        return k if getattr(c, "size", 0) == 1 and c.ndim <= 4 else None   # no broadcast past the conv's 4-D
    return None


def bound_inputs(node: Node, y: str) -> tuple[str, ...]:
    """The inputs of a bounding node that are its bounds (``y``: the tensor it bounds)."""
    if node.op_type == "Clip":
        return tuple(t for t in node.inputs[1:] if t)
    return (other_input(node, y),)  # type: ignore[return-value]


def bound_pair(node: Node, bounds: tuple) -> tuple:
    """``(lo, hi)`` of a bounding node from its bound inputs' values: a Clip's (``_clip_pair``),
    a Max's lower bound or a Min's upper one (0-d)."""
    if node.op_type == "Clip":
        return _clip_pair(node, _with_omitted(node.inputs[1:], bounds))
    value = bounds[0].reshape(())
    return (value, None) if node.op_type == "Max" else (None, value)


def _clip_pair(clip: Node, bounds: list) -> tuple:
    """``(lo, hi)`` of a Clip: its inputs (opset 11+) as 0-d arrays (on a device they stay
    there: no read to the host), else its attributes; None for none."""
    if len(clip.inputs) > 1 or not clip.attrs:
        lo, hi = (bounds + [None, None])[:2]
        return (None if lo is None else lo.reshape(()), None if hi is None else hi.reshape(()))
    return clip.attrs.get("min"), clip.attrs.get("max")


def _with_omitted(inputs: Sequence[str], present: tuple) -> list:
    it = iter(present)
    return [next(it) if t else None for t in inputs]
