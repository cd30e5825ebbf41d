"""Per-channel affine chains fused at bind time (``plan="segments"``): a BatchNormalization, the
per-channel Mul and Add nodes after it, and a Relu, as one step; or, after a Conv, such Mul and
Add nodes by constant per-channel vectors without a BatchNormalization -- a frozen batch norm as
torch exports it (transformers' DETR backbone, torchvision's FrozenBatchNorm2d: ``x * scale +
shift``), or by single values (PP-OCRv4's learnable affine after each conv, ``Mul(w, conv) + b``:
the same scale on every channel) -- which the conv then takes as its epilogue (``engine/fuse.py``).

Caffe2 exported every spatial BatchNormalization followed by a "scale" layer, a Mul and an Add
by per-channel vectors (read through Unsqueeze); DenseNet and Inception v2 (the ONNX model zoo's,
which the onnx package ships) carry 120 and 69 of them, DenseNet's before its convs, where no
conv chain (``engine/fuse.py``) can take them. As written that is four passes over a large tensor
and four new arrays; ~35% of DenseNet-121's run. Fused: the parameters fold into one scale and
one shift per channel, ``y = relu(x * s + t)``, one new array and one pass (the compiled channel
epilogue on float32 numpy arrays, ``xp``'s in-place ufuncs elsewhere).

The vectors and the BatchNormalization's parameters stay inputs of the step, read on every run
(``set_weight`` reaches them); the fold is kept while they are the same objects. A vector that is
not per-channel for this input (a shape that broadcasts otherwise), BatchNormalization parameters
that are not vectors of the channel count, or any failure runs the nodes as written, so the results
and errors are the graph's. A caller's own kernel for any of the nodes leaves the chain as written.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from partition.ir import Graph, Node

from .chain_parts import DEFAULT_DOMAINS, FUSED_DOMAIN, Fused, other_input, spliced
from .fuse_attention import as_written
from .kernels import native
from .kernels.prepared import LastPlan
from .kernels.registry import kernel_for


def fuse_channel_affine(graph: Graph, nodes: list[Node], kernel_of: Callable[[Node], Any],
                        sole: Callable[..., int | None],
                        const: Callable[[str], Any] | None = None) -> tuple[list[Node], list[Any]]:
    """``nodes`` with each BatchNormalization -> (Mul | Add by another tensor)* -> Relu? chain of
    at least two nodes replaced by one fused node (``sole``: ``engine/fuse.py``'s sole-reader
    lookup over ``nodes``); given ``const`` (the executor's weights), each Conv -> (Mul | Add by
    a constant vector of its output channels)+ -> Relu? chain's Mul / Add / Relu nodes too. The
    fusions made, as ``engine/fuse.py``'s ``Fused``."""
    opsets = {("" if d in DEFAULT_DOMAINS else d): int(v) for d, v in graph.opset.items()}
    convs = {n.outputs[0]: n for n in nodes if n.op_type == "Conv" and n.domain in DEFAULT_DOMAINS
             and n.outputs}
    conv_outputs = set(convs)
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, bn in enumerate(nodes):
        if i in drop:
            continue
        if not _inference_bn(bn):
            head = _frozen_bn_head(bn, i, convs, sole, const)
            if head is not None:   # the Mul / Add by vectors of the conv's channels that follow
                conv = convs[head]
                chain, ops, vectors = mul_add_run(nodes, [i], [bn.op_type == "Mul"], [other_input(bn, head)],
                                                   sole, drop, lambda t, conv=conv: conv_vector(conv, t, const))
                _fuse_one(graph, nodes, chain, ops, vectors, head, False, kernel_of, opsets, sole,
                          fused, drop, replace)
            continue
        x_info = graph.tensors.get(bn.inputs[0])
        ndim = len(x_info.shape) if x_info is not None and x_info.shape is not None else None
        chain, ops, vectors = mul_add_run(nodes, [i], [], [], sole, drop,
                                           lambda t, ndim=ndim: _may_be_per_channel(graph, t, ndim))
        if bn.inputs[0] in conv_outputs and not (ops and ops[0]):
            # Conv -> BatchNormalization -> Add / Relu / a hard swish is the conv chain's (its
            # epilogue, engine/fuse.py); a per-channel Mul after it ends that chain, so it is ours
            continue
        _fuse_one(graph, nodes, chain, ops, vectors, bn.inputs[0], True, kernel_of, opsets, sole,
                  fused, drop, replace)
    return spliced(nodes, drop, replace), fused


def _fuse_one(graph: Graph, nodes: list[Node], chain: list[int], ops: list[bool], vectors: list[str],
              x: str, has_bn: bool, kernel_of: Callable[[Node], Any], opsets: dict[str, int],
              sole: Callable[..., int | None], fused: list, drop: set[int], replace: dict[int, Node]) -> None:
    """The chain (its head, Mul / Add nodes) and a Relu after it, if any, as one fused node,
    where it has at least two nodes and our kernels run them all."""
    j = sole(nodes[chain[-1]].outputs[0], "Relu")
    relu = j is not None and j not in drop
    if relu:
        chain = [*chain, j]
    if len(chain) < 2:
        return
    parts = tuple(nodes[k] for k in chain)
    kernels = [kernel_of(p) for p in parts]
    if any(k is None or k is not _registered(p, opsets) for p, k in zip(parts, kernels)):
        return
    ins = (tuple(parts[0].inputs) if has_bn else (x,)) + tuple(vectors)
    node = Node(parts[0].name, "+".join(p.op_type for p in parts), ins, (parts[-1].outputs[0],), FUSED_DOMAIN)
    fused.append(Fused(node, parts, channel_affine_kernel(parts, kernels, tuple(ops), relu, ins, has_bn)))
    drop.update(chain)
    replace[chain[-1]] = node


def _frozen_bn_head(node: Node, i: int, convs: dict[str, Node], sole: Callable[..., int | None],
                    const: Callable[[str], Any] | None) -> str | None:
    """The conv output ``node`` (a Mul or Add) scales or shifts by a constant vector of that
    conv's output channels, as its only reader; else None."""
    if const is None or node.op_type not in ("Mul", "Add") or node.domain not in DEFAULT_DOMAINS \
            or len(node.inputs) != 2:
        return None
    for y in node.inputs:
        conv = convs.get(y)
        if conv is not None and sole(y, node.op_type) == i and conv_vector(conv, other_input(node, y), const):
            return y
    return None


def conv_vector(conv: Node, t: str | None, const: Callable[[str], Any]) -> bool:
    """Whether ``t`` is a constant that varies along the channels of ``conv``'s 4-D output only,
    one value per output channel, or is one value (the same on every channel)."""
    v, w = (const(t) if t else None), const(conv.inputs[1]) if len(conv.inputs) > 1 else None
    shape, w_shape = getattr(v, "shape", None), getattr(w, "shape", None)
    return shape is not None and w_shape is not None and len(w_shape) == 4 \
        and _channel_extent(tuple(shape), 4) in (1, w_shape[0]) and getattr(v, "dtype", None) == w.dtype


def mul_add_run(nodes: list[Node], chain: list[int], ops: list[bool], vectors: list[str],
                 sole: Callable[..., int | None], drop: set[int],
                 takes: Callable[[str], bool]) -> tuple[list[int], list[bool], list[str]]:
    """``chain`` extended by the Mul / Add nodes that follow its last node, each the sole reader
    of the one before, while ``takes`` their other input (``ops``: True for a Mul; ``vectors``:
    those other inputs)."""
    y = nodes[chain[-1]].outputs[0]
    while True:
        j = sole(y, "Mul")
        if j is None:
            j = sole(y, "Add")
        other = other_input(nodes[j], y) if j is not None and len(nodes[j].inputs) == 2 else None
        if j is None or j in drop or not other or not takes(other):
            return chain, ops, vectors
        chain.append(j)
        ops.append(nodes[j].op_type == "Mul")
        vectors.append(other)
        y = nodes[j].outputs[0]


def _inference_bn(bn: Node) -> bool:
    return (bn.op_type == "BatchNormalization" and bn.domain in DEFAULT_DOMAINS and len(bn.inputs) == 5
            and all(bn.inputs) and not any(bn.outputs[1:]) and not bn.attrs.get("training_mode", 0)
            and bn.attrs.get("spatial", 1) == 1)


def _may_be_per_channel(graph: Graph, t: str, ndim: int | None) -> bool:
    """False when ``t``'s known shape (a weight's, or inferred: ``graph.tensors``) already says it
    varies along an axis other than the channels of an ``ndim``-D input (a residual, a spatial
    map): the chain ends before it. Unknown shapes or rank pass; the step checks every run."""
    info = graph.initializers.get(t) or graph.tensors.get(t)
    shape = info.shape if info is not None else None
    if shape is None or ndim is None or not all(isinstance(d, int) for d in shape):
        return True
    return _channel_extent(tuple(shape), ndim) is not None


def _registered(node: Node, opsets: dict[str, int]) -> Any:
    try:
        return kernel_for(node.op_type, node.domain, opsets)
    except Exception:  # noqa: BLE001 - no kernel of ours: the chain stays as written
        return None


def _channel_extent(shape: tuple, ndim: int) -> int | None:
    """The extent along the channel axis (1) of ``shape`` broadcast against an ``ndim``-D NCHW
    tensor, when every other axis is 1; else None."""
    if len(shape) > ndim or ndim < 2:
        return None
    full = (1,) * (ndim - len(shape)) + shape
    return None if any(d != 1 for k, d in enumerate(full) if k != 1) else full[1]


def channel_axis_vector(v: Any, ndim: int, channels: int) -> Any:
    """``v`` as a vector of ``channels`` values when, broadcast against an ``ndim``-D NCHW tensor
    of that many channels, it varies along the channel axis only (or not at all); else None."""
    extent = _channel_extent(tuple(getattr(v, "shape", ())), ndim)
    return None if extent not in (1, channels) else v.reshape(extent)


def channel_fold(xp: Any, params: tuple, ops: tuple[bool, ...], epsilon: float, ndim: int,
                 dtype: Any, has_bn: bool = True, channels: int | None = None) -> tuple | None:
    """``(s, t)``, one scale and one shift per channel, with ``y * s + t`` what the chain computes
    on an ``ndim``-D input ``y`` of ``dtype`` from ``params`` (the BatchNormalization's scale,
    bias, mean and variance unless not ``has_bn``, then the chain's vectors; ``ops``: True for a
    Mul). None when a parameter is not a vector of the channel count or a vector is not
    per-channel."""
    if has_bn:
        scale, bias, mean, var = params[:4]
        c = getattr(scale, "shape", (0,))[0]
        if any(getattr(p, "shape", None) != (c,) or p.dtype != dtype for p in params[:4]):
            return None
        s = scale / xp.sqrt(var + epsilon)
        t = bias - mean * s
        vectors = params[4:]
    else:   # the input's channel count (else the vectors'); x * 1 + 0 before the first
        c = channels if channels is not None else \
            max((_channel_extent(tuple(getattr(v, "shape", ())), ndim) or 0) for v in params) if params else 0
        if c < 1:
            return None
        s, t = xp.ones(c, dtype=dtype), xp.zeros(c, dtype=dtype)
        vectors = params
    for is_mul, v in zip(ops, vectors):
        vec = channel_axis_vector(v, ndim, c)
        if vec is None or vec.dtype != dtype:
            return None
        if is_mul:
            s, t = s * vec, t * vec
        else:
            t = t + vec
    return xp.ascontiguousarray(s.astype(dtype)), xp.ascontiguousarray(t.astype(dtype))


def channel_affine_kernel(parts: tuple[Node, ...], kernels: list[Any], ops: tuple[bool, ...],
                          relu: bool, ins: tuple[str, ...], has_bn: bool = True) -> Callable[..., tuple]:
    """The fused step: ``(xp, x, scale, bias, mean, var, *vectors) -> (y,)`` (without a
    BatchNormalization: ``(xp, x, *vectors)``); ``ops``: per vector, True for a Mul, False for
    an Add, in the chain's order. The step's ``fold(xp, params, ndim, dtype)`` (``channel_fold``
    for this chain) lets a conv before it take the whole chain as its epilogue (``engine/fuse.py``)."""
    epsilon = float(parts[0].attrs.get("epsilon", 1e-5)) if has_bn else 0.0
    lo = 0.0 if relu else -math.inf

    def make(x: Any, args: tuple) -> tuple | None:
        """``((s, t), compiled pass or None)`` for this input shape and these parameters."""
        xp, params = args[0], args[1:]
        st = channel_fold(xp, params, ops, epsilon, x.ndim, x.dtype, has_bn, x.shape[1])
        if st is None or st[0].shape != (x.shape[1],):   # not x's channels
            return None
        return st, native.epilogue_plan(x.shape, *st, lo, math.inf) if xp is np else None
    # kept while the parameters are the same objects (set_weight installs new ones)
    plans = LastPlan(lambda args: args[1:], make)

    def run(xp: Any, x: Any, *params: Any) -> tuple:
        try:
            plan = plans(x, (xp, *params)) if x.ndim >= 2 and x.dtype.kind == "f" else None
            if plan is not None:
                return (_apply(xp, x, *plan, relu),)
        except Exception:  # noqa: BLE001 - the nodes as written say what is wrong, naming theirs
            pass
        return as_written(xp, parts, kernels, dict(zip(ins, (x, *params))))
    run.fold = lambda xp, params, ndim, dtype, channels: channel_fold(  # type: ignore[attr-defined]
        xp, params, ops, epsilon, ndim, dtype, has_bn, channels)
    return run


def _apply(xp: Any, x: Any, st: tuple, compiled: Any, relu: bool) -> Any:
    """``relu(x * s + t)`` per channel (axis 1) into a new array: the ``compiled`` pass (float32
    numpy) on a copy of ``x``, else ``xp``'s ufuncs in place on the product."""
    s, t = st
    if compiled is not None and x.__class__ is np.ndarray:
        y = np.array(x, order="C")   # the copy is the step's own output; the epilogue runs on it
        if compiled(y, None):
            return y
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    y = xp.multiply(x, s.reshape(per_channel))
    xp.add(y, t.reshape(per_channel), out=y)
    if relu:
        xp.maximum(y, 0, out=y)
    return y
