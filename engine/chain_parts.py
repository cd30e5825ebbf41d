"""What every fused chain is made of (``engine/fuse.py``, ``engine/fuse_channel.py``,
``engine/fuse_elementwise.py``): the fused step's record, and the lookups the chain finders share
-- the one reader of a tensor, the other operand of a binary node, the node list with each chain
replaced by its step."""

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
