"""The kernel registry: one function per ONNX op, looked up by (domain, op, opset).

A kernel is ``fn(xp, *inputs, **attrs) -> tuple`` written once against an array
module ``xp`` (numpy or cupy). Omitted optional inputs arrive as ``None``.
Several versions of one op can be registered with ``since``: ``lookup`` picks
the highest ``since <= opset``, the way ONNX resolves operator versions.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import numpy as np

from partition.errors import LensError

Kernel = Callable[..., tuple]

#: (domain, op_type) -> [(since, kernel)] sorted by since.
_REGISTRY: dict[tuple[str, str], list[tuple[int, Kernel]]] = {}
#: Ops whose kernels take ``subgraphs=`` and ``run_graph=`` keyword arguments.
CONTROL_FLOW_OPS: set[tuple[str, str]] = set()
#: What lookup assumes when a graph does not import the op's domain at all.
LATEST_OPSET = 10_000


class KernelNotFound(LensError):
    """No kernel exists for an op (at the requested opset)."""

    http_status = 422


class KernelError(LensError):
    """A kernel raised while running a node; names the node, its op and its input shapes."""

    http_status = 422


def _norm_domain(domain: str | None) -> str:
    # "ai.onnx" is the explicit spelling of the default domain.
    return "" if domain in (None, "", "ai.onnx") else domain


def register(op_type: str, domain: str = "", since: int = 1) -> Callable[[Kernel], Kernel]:
    """Decorator: register ``fn`` as the kernel of ``op_type`` from opset ``since`` on."""

    def deco(fn: Kernel) -> Kernel:
        @functools.wraps(fn)
        def kernel(xp: Any, *inputs: Any, **attrs: Any) -> tuple:
            out = fn(xp, *inputs, **attrs)
            # A kernel may return one array (or one sequence, a list); callers always get a tuple.
            return out if isinstance(out, tuple) else (out,)
        kernel.raw = fn  # type: ignore[attr-defined] # generated code calls it without this wrapper

        key = (_norm_domain(domain), op_type)
        versions = [v for v in _REGISTRY.get(key, []) if v[0] != since]
        versions.append((since, kernel))
        versions.sort(key=lambda v: v[0])
        _REGISTRY[key] = versions
        return fn

    return deco


def register_control_flow(op_type: str, domain: str = "", since: int = 1) -> Callable[[Kernel], Kernel]:
    """Like ``register``, and marks the op as taking ``subgraphs`` and ``run_graph``."""
    CONTROL_FLOW_OPS.add((_norm_domain(domain), op_type))
    return register(op_type, domain, since)


def is_control_flow(op_type: str, domain: str = "") -> bool:
    return (_norm_domain(domain), op_type) in CONTROL_FLOW_OPS


def _find(op_type: str, domain: str, opset: int | None) -> Kernel | None:
    versions = _REGISTRY.get((_norm_domain(domain), op_type))
    if not versions:
        return None
    limit = LATEST_OPSET if opset is None else opset
    chosen = None
    for since, fn in versions:
        if since <= limit:
            chosen = fn
    return chosen


def lookup(op_type: str, domain: str = "", opset: int = 17) -> Kernel:
    """The kernel for ``op_type`` at ``opset``: the highest registered ``since <= opset``."""
    fn = _find(op_type, domain, opset)
    if fn is None:
        dom = _norm_domain(domain) or "ai.onnx"
        versions = [s for s, _ in _REGISTRY.get((_norm_domain(domain), op_type), [])]
        detail = (f"; kernels exist only from opset {versions[0]}" if versions else "")
        raise KernelNotFound(f"no kernel exists for op '{op_type}' (domain '{dom}', opset {opset})"
                             f"{detail}; the model cannot run on the reference interpreter")
    return fn


def has_kernel(op_type: str, domain: str = "", opset: int = 17) -> bool:
    return _find(op_type, domain, opset) is not None


def opset_for(opsets: Mapping[str, int] | None, domain: str | None) -> int | None:
    """The opset ``opsets`` (a graph's imports) gives ``domain``; "" and "ai.onnx" are one
    domain, whichever spelling the model or the node uses. None (latest) when not imported."""
    if not opsets:
        return None
    dom = _norm_domain(domain)
    for key in (("", "ai.onnx") if dom == "" else (dom,)):
        if key in opsets and opsets[key] is not None:
            return int(opsets[key])
    return None


def kernel_for(op_type: str, domain: str | None, opsets: Mapping[str, int] | None) -> Kernel:
    """THE kernel lookup, shared by the interpreter and the executor: the kernel of
    ``op_type`` in ``domain`` at the opset the graph's imports ``opsets`` give that domain.

    An op without a hand-written kernel whose ONNX schema defines it as a function
    (Attention, SoftmaxCrossEntropyLoss, ...) runs as that function's body; KernelNotFound
    when neither exists."""
    opset = opset_for(opsets, domain)
    fn = _find(op_type, domain or "", opset)
    if fn is not None:
        return fn
    for fallback in _FALLBACKS:
        expanded = fallback(op_type, _norm_domain(domain), opset)
        if expanded is not None:
            return expanded
    return lookup(op_type, domain or "", LATEST_OPSET if opset is None else opset)  # raises, named


#: Resolvers ``(op_type, domain, opset) -> kernel | None`` that ``kernel_for`` tries when no
#: kernel is registered. ``functions.py`` installs the ONNX function-body expansion here (it
#: depends on this module, so it registers itself rather than being imported from here).
_FALLBACKS: list[Callable[[str, str, int | None], Kernel | None]] = []


def register_fallback(fn: Callable[[str, str, int | None], Kernel | None]) -> Callable[..., Kernel | None]:
    """Decorator: try ``fn`` in ``kernel_for`` for ops that have no registered kernel."""
    _FALLBACKS.append(fn)
    return fn


def registered_ops() -> list[tuple[str, str, list[int]]]:
    """(domain, op_type, [since versions]) for every registered op, sorted."""
    return sorted((d, op, [s for s, _ in v]) for (d, op), v in _REGISTRY.items())


def graph_opset(graph: Any, domain: str) -> int | None:
    """The opset ``graph`` imports for ``domain``; None (latest) when it imports none."""
    return opset_for(getattr(graph, "opset", None), domain)


def missing_kernels(graph: Any) -> list[tuple[str, str]]:
    """(node name, op_type) for every node, nested bodies included, that has no kernel."""
    missing: list[tuple[str, str]] = []
    _collect_missing(graph, missing, None)
    return missing


def _collect_missing(graph: Any, missing: list[tuple[str, str]], outer: Any) -> None:
    for node in graph.nodes:
        if not node.is_subgraph and "function" not in node.subgraphs:  # a local function call: its body
            # Bodies sometimes carry no opset of their own: use the enclosing graph's.
            owner = graph if getattr(graph, "opset", None) else outer
            try:
                kernel_for(node.op_type, node.domain, getattr(owner, "opset", None))
            except KernelNotFound:
                missing.append((node.name, node.op_type))
        for body in node.subgraphs.values():
            _collect_missing(body, missing, graph if getattr(graph, "opset", None) else outer)


def to_host(xp: Any, a: Any) -> np.ndarray | None:
    """A device array as a numpy array (shape tensors, axes given as inputs)."""
    if a is None:
        return None
    if xp is np or isinstance(a, np.ndarray):
        return np.asarray(a)
    get = getattr(a, "get", None)
    return np.asarray(get() if get is not None else a)


def host_ints(xp: Any, a: Any) -> list[int] | None:
    """A small integer tensor (shape, axes, pads) as a python list."""
    h = to_host(xp, a)
    return None if h is None else [int(v) for v in h.reshape(-1)]


#: Inputs kernels read on the host (``host_ints`` / ``to_host``: shapes, axes, pads,
#: counts), by op type and input position. When such an input is a weight the
#: executor hands the kernel a host copy made at bind time, so a device run does
#: not read it back from the device on every call.
HOST_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Unsqueeze": (1,), "Squeeze": (1,), "Expand": (1,), "Tile": (1,),
    "Split": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "Trilu": (1,), "OneHot": (1,), "TopK": (1,),
    "Resize": (1, 2, 3), "Upsample": (1,),
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare")},
}

#: Ops whose output count is not implied by inputs and attributes (Split before opset 18),
#: or that skip work for outputs nobody declared (MaxPool's Indices).
_NEEDS_OUTPUT_COUNT = {("", "Split"), ("", "MaxPool")}


def kernel_attrs(node: Any) -> dict[str, Any]:
    """The keyword arguments a caller passes a kernel for ``node``: its attributes, plus
    ``_n_outputs`` for the few ops that need to know how many outputs the node declares."""
    attrs = dict(node.attrs)
    key = (_norm_domain(node.domain), node.op_type)
    # Ops run as their ONNX function body (no kernel of their own) build the body per
    # declared output count: optional outputs change the body.
    if key in _NEEDS_OUTPUT_COUNT or key not in _REGISTRY:
        attrs["_n_outputs"] = len(node.outputs)
    return attrs
