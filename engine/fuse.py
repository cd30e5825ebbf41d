"""Chains fused at bind time (``plan="segments"`` only): GELU, HardSwish, SiLU, and Conv with a zero Pad
before it and its BatchNormalization / Add / Relu / Clip epilogue, and a per-channel affine after
that activation (``_fuse_conv_chains``, ``_affine_after``).

GELU as PyTorch and BERT exporters write it, five nodes over one tensor::

    d = Div(x, sqrt2);  e = Erf(d);  a = Add(e, 1);  m = Mul(x, a);  y = Mul(m, 0.5)

becomes one step computing the same expression with the model's own constants,
in place after the first temporaries (two allocations instead of five). The
erf inside is Abramowitz & Stegun 7.1.26 in the input's own dtype (absolute
error < 1.5e-7, which is all GELU needs: it adds 1 before scaling), written
against ``xp`` with in-place ufuncs: on CPU ~4x faster than
``scipy.special.erf`` on float32 (0.42 vs 1.6 ms for 128x1024; scipy is no longer a
dependency), and the same
code on a device. A chain is fused only when every
intermediate has exactly one reader and is not a graph output; the five nodes
are kept, and a run that keeps intermediates (the debugger) runs them instead.
"""

from __future__ import annotations

import math
from operator import is_
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from partition.ir import Graph, Node

from .chain_parts import (BOUNDS, DEFAULT_DOMAINS, FUSED_DOMAIN, Fused, bound_inputs, bound_pair, bound_reader,
                          clip_bounds_constant, other_input, sole_reader, spliced)
from .fuse_attention import as_written, attention_chains
from .fuse_qdq import fuse_fake_quant
from .fuse_channel import channel_fold, conv_vector, fuse_channel_affine, mul_add_run
from .kernels import device, elementwise, native
from .kernels.conv_epilogue import AffineAfter, HardSwishAct, LeakyReluAct
from .kernels.nn import conv as nn_conv, conv_fused, conv_fused_plan
from .kernels.prepared import LastPlan
from .kernels.registry import kernel_attrs
from .kernels.tensor import _pad as pad_zeros
from .values import to_numpy


def _scalar(value: Any) -> float | None:
    if value is None or getattr(value, "size", 0) != 1:
        return None
    return float(to_numpy(value).reshape(()))  # a weight may live on the GPU


_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu_kernel(div: float, one: float, half: float,
                erf_kernel: Callable[..., tuple] | None = None) -> Callable[..., tuple]:
    """``half * x * (one + erf(x / div))``; ``erf_kernel`` is unused (kept for callers).
    A float32 numpy input goes through the compiled kernel (one pass with glibc's
    vector erff: 0.09 against 0.41 ms for 128x1024), anything else through the xp form."""
    xp_form = _gelu_one(div, half) if one == 1.0 else _gelu_general(div, one, half)

    def gelu(xp: Any, x: Any) -> tuple:
        y = device.gelu(xp, x, div, one, half)  # cupy: one ElementwiseKernel; numpy: None
        if y is None:
            y = native.gelu(xp, x, div, one, half)  # float32 numpy: the compiled pass
        return xp_form(xp, x) if y is None else (y,)
    return gelu


def _gelu_general(div: float, one: float, half: float) -> Callable[..., tuple]:
    """``half * x * (one + erf(x / div))`` for any ``one``, against ``xp``."""

    def gelu(xp: Any, x: Any) -> tuple:
        f = x.dtype.type
        a = xp.abs(x)
        a *= f(1.0 / div)                       # |z|, z = x / div
        t = a * f(_AS_P)
        t += f(1.0)
        xp.reciprocal(t, out=t)                 # t = 1 / (1 + p|z|)
        poly = t * f(_AS_A[4])
        for c in reversed(_AS_A[:4]):
            poly += f(c)
            poly *= t
        a *= a
        xp.negative(a, out=a)
        xp.exp(a, out=a)
        poly *= a                               # 1 - |erf(z)|
        poly -= f(1.0)
        xp.negative(poly, out=poly)             # |erf(z)|
        xp.copysign(poly, x, out=poly)          # erf(z)
        poly += f(one)
        poly *= x
        poly *= f(half)
        return (poly,)
    return gelu


def _gelu_one(div: float, half: float) -> Callable[..., tuple]:
    """``half * x * (1 + erf(x / div))`` with no sign pass: with E = 1 - |erf(z)| (the
    A&S polynomial times exp(-z^2)), x * (1 + erf(z)) = 2 max(x, 0) - |x| E for either
    sign of x. numpy's copysign is not vectorised (a fifth of the general form's time
    on 128x1024 float32); this form makes 19-21 passes instead of 25, over the same three arrays."""
    coef = [c * half for c in _AS_A]            # half folded into the polynomial
    p_over_div, neg_inv_div2, two_half = _AS_P / div, -1.0 / (div * div), 2.0 * half

    def gelu(xp: Any, x: Any) -> tuple:
        f = x.dtype.type
        a = xp.abs(x)                           # |x|
        t = a * f(p_over_div)
        t += f(1.0)
        xp.reciprocal(t, out=t)                 # t = 1 / (1 + p|z|), z = x / div
        poly = t * f(coef[4])
        for c in reversed(coef[:4]):
            poly += f(c)
            poly *= t
        xp.multiply(a, a, out=t)                # three arrays in all: t and a are reused
        t *= f(neg_inv_div2)                    # -z^2
        xp.exp(t, out=t)
        poly *= t                               # half * E
        poly *= a                               # half * |x| * E
        xp.maximum(x, f(0), out=a)
        if two_half != 1.0:
            a *= f(two_half)
        a -= poly
        return (a,)
    return gelu


def fuse(graph: Graph, nodes: Sequence[Node], const: Callable[[str], Any],
         kernel_of: Callable[[Node], Any], host: bool = True) -> tuple[list[Node], list[Fused]]:
    """``nodes`` with every GELU chain replaced by one fused node; the fusions made.
    ``kernel_of(node)`` is the executor's kernel lookup (the chain's Erf kernel
    serves the device path). ``host``: the run is numpy's (SiLU is fused only there: on a
    device ``engine/fuse_elementwise.py`` makes the whole elementwise chain one kernel)."""
    sole = sole_reader(graph, nodes)
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, d in enumerate(nodes):
        if d.op_type != "Div" or d.domain not in DEFAULT_DOMAINS or len(d.inputs) != 2 or i in drop:
            continue
        x, c_div = d.inputs
        div = _scalar(const(c_div))
        if div is None or not math.isclose(div, math.sqrt(2), rel_tol=1e-3):
            continue
        chain = [i]
        j = sole(d.outputs[0], "Erf")
        if j is not None:
            chain.append(j)
            j = sole(nodes[j].outputs[0], "Add")
        one = _scalar(const(other_input(nodes[j], nodes[chain[-1]].outputs[0]) or "")) if j is not None else None
        if j is None or one is None:
            continue
        chain.append(j)
        j = sole(nodes[j].outputs[0], "Mul")
        if j is None or other_input(nodes[j], nodes[chain[-1]].outputs[0]) != x:
            continue
        chain.append(j)
        j = sole(nodes[j].outputs[0], "Mul")
        half = _scalar(const(other_input(nodes[j], nodes[chain[-1]].outputs[0]) or "")) if j is not None else None
        if j is None or half is None:
            continue
        chain.append(j)
        parts = tuple(nodes[k] for k in chain)
        node = Node(f"{d.name}+gelu", "Gelu", (x,), (parts[-1].outputs[0],), FUSED_DOMAIN)
        erf_kernel = kernel_of(parts[1])
        if erf_kernel is None:
            continue
        fused.append(Fused(node, parts, gelu_kernel(div, one, half, erf_kernel)))
        drop.update(chain)
        replace[chain[-1]] = node  # at the last node's place: its inputs are ready there
    out, swish_fused = _fuse_hard_swish(graph, spliced(nodes, drop, replace), const)
    silu_fused: list[Fused] = []
    if host:
        out, silu_fused = _fuse_silu(graph, out)
    # On the host a hard swish after a conv joins its chain (read on the host each run); on a
    # device engine/fuse_elementwise.py makes such tails one kernel.
    swishes = {f.node.name: f for f in swish_fused} if host else None
    out, affine_fused = fuse_channel_affine(graph, out, kernel_of, sole_reader(graph, out), const)
    out, conv_fused = _fuse_conv_chains(graph, out, const, kernel_of, swishes,
                                        {f.node.name: f for f in affine_fused})
    kept = {n.name for n in out}   # those a conv chain took are its parts now
    swish_fused = [f for f in swish_fused if f.node.name in kept]
    affine_fused = [f for f in affine_fused if f.node.name in kept]
    out, attention_fused = _fuse_attention(graph, out, kernel_of)
    out, quant_fused = fuse_fake_quant(graph, out, const)
    return out, fused + swish_fused + silu_fused + affine_fused + conv_fused + attention_fused + quant_fused


# ------------------------------------------------------------------ SiLU --
def _fuse_silu(graph: Graph, nodes: list[Node]) -> tuple[list[Node], list[Fused]]:
    """SiLU (Swish) as every exporter writes it, ``Mul(x, Sigmoid(x))`` (either operand
    order), as one step: one compiled pass on float32 (``native.sigmoid(..., times_x=True)``)
    instead of numpy's four for the sigmoid and one for the product. EfficientNet,
    MobileViT, YOLOv5/v8 and Llama's MLP gate carry one per activation."""
    sole = sole_reader(graph, nodes)
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, sig in enumerate(nodes):
        if sig.op_type != "Sigmoid" or sig.domain not in DEFAULT_DOMAINS or len(sig.inputs) != 1:
            continue
        j = sole(sig.outputs[0], "Mul")
        if j is None or j in drop or other_input(nodes[j], sig.outputs[0]) != sig.inputs[0]:
            continue
        node = Node(f"{sig.name}+silu", "Silu", (sig.inputs[0],), (nodes[j].outputs[0],), FUSED_DOMAIN)
        fused.append(Fused(node, (sig, nodes[j]), _silu))
        drop.update((i, j))
        replace[j] = node
    return spliced(nodes, drop, replace), fused


def _silu(xp: Any, x: Any) -> tuple:
    y = native.sigmoid(xp, x, times_x=True)
    if y is None:   # not float32 numpy, or no compiled module: the two nodes' maths
        y = elementwise.sigmoid(xp, x)
        y = y * x
    return (y,)


# ------------------------------------------------------------- HardSwish --
def _fuse_hard_swish(graph: Graph, nodes: list[Node],
                     const: Callable[[str], Any]) -> tuple[list[Node], list[Fused]]:
    """HardSwish as Paddle and older exporters write it, ``Div(Mul(x, Clip(Add(x, 3), 0,
    6)), 6)`` (the Div may be a Mul by a constant, or absent), as one step: one new
    array instead of four, the same float operations in the same order. The constants
    stay the step's inputs (``set_weight`` reaches them); PP-OCR's det has 24 of these."""
    sole = sole_reader(graph, nodes)
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, add in enumerate(nodes):
        if add.op_type != "Add" or add.domain not in DEFAULT_DOMAINS or len(add.inputs) != 2:
            continue
        x = next((t for t in add.inputs if _scalar(const(t)) is None), None)
        shift = other_input(add, x) if x else None
        j = sole(add.outputs[0], "Clip") if shift and _scalar(const(shift)) is not None else None
        if j is None or nodes[j].inputs[0] != add.outputs[0] or len(nodes[j].inputs) != 3 \
                or not clip_bounds_constant(nodes[j], const) or not all(nodes[j].inputs[1:]):
            continue
        k = sole(nodes[j].outputs[0], "Mul")
        if k is None or other_input(nodes[k], nodes[j].outputs[0]) != x:
            continue
        chain, scale = [i, j, k], ""
        for op in ("Div", "Mul"):
            last = sole(nodes[k].outputs[0], op)
            if last is not None and nodes[last].inputs[0] == nodes[k].outputs[0] \
                    and _scalar(const(nodes[last].inputs[1])) is not None:
                chain.append(last)
                scale = nodes[last].inputs[1]
                break
        if any(c in drop for c in chain):
            continue
        parts = tuple(nodes[c] for c in chain)
        ins = (x, shift, *nodes[j].inputs[1:]) + ((scale,) if scale else ())
        node = Node(f"{add.name}+hardswish", "HardSwish", ins, (parts[-1].outputs[0],), FUSED_DOMAIN)
        fused.append(Fused(node, parts, _hard_swish_kernel(parts[-1].op_type if scale else "")))
        drop.update(chain)
        replace[chain[-1]] = node
    return spliced(nodes, drop, replace), fused


def _hard_swish_kernel(last: str) -> Callable[..., tuple]:
    """``(xp, x, shift, lo, hi[, scale]) -> (x * clip(x + shift, lo, hi) (/ or *) scale,)``,
    computed into one new array in the graph's order of operations."""
    def hard_swish(xp: Any, x: Any, shift: Any, lo: Any, hi: Any, scale: Any = None) -> tuple:
        y = device.hard_swish(xp, last, x, shift, lo, hi, scale)
        if y is not None:   # a device: one generated kernel
            return (y,)
        t = x + shift
        xp.clip(t, lo, hi, out=t)
        t *= x
        if last == "Div":
            t /= scale
        elif last == "Mul":
            t *= scale
        return (t,)
    return hard_swish


def _fuse_attention(graph: Graph, nodes: list[Node],
                    kernel_of: Callable[[Node], Any]) -> tuple[list[Node], list[Fused]]:
    """Attention as one step each: the chains and their kernels are fuse_attention.py's."""
    found = attention_chains(nodes, sole_reader(graph, nodes), kernel_of)
    fused = [Fused(Node(f"{parts[0].name}+attention", "Attention", inputs,
                        (parts[-1].outputs[0],), FUSED_DOMAIN), parts, kernel)
             for _, parts, inputs, kernel in found]
    replace = {chain[-1]: f.node for (chain, *_), f in zip(found, fused)}
    return spliced(nodes, {i for chain, *_ in found for i in chain}, replace), fused


# ------------------------------------------------------------ Conv chains --
def _fuse_conv_chains(graph: Graph, nodes: list[Node], const: Callable[[str], Any],
                      kernel_of: Callable[[Node], Any], swishes: dict[str, Fused] | None = None,
                      affines: dict[str, Fused] | None = None) -> tuple[list[Node], list[Fused]]:
    """``Conv -> Relu``, ``Conv -> Add -> Relu`` and ``Conv -> Add`` (a ResNet's
    residual; a two-input ``Sum`` too), and the same with a ``Clip`` of constant bounds in the Relu's place
    (Relu6) or, given ``swishes`` (the hard swishes fused before, by node name), a hard
    swish (ONNX's HardSwish, or Paddle's Add-Clip-Mul-Div: PP-OCR, PP-LCNet, MobileNetV3),
    as one step each: the Add and the activation run in place on the conv's
    output -- no new tensor for either.
    Only 2-D convs (4-D weight): 1-D convs are a streaming model's small convs,
    which ``engine/specialize.py`` plans per shape and which gain nothing here.
    ``affines``: the per-channel affine chains fused before (``engine/fuse_channel.py``), by node
    name: one that reads a conv's output alone becomes that conv's epilogue (BN-Inception's
    BatchNormalization, Mul, Add and Relu after each conv)."""
    if not any(n.op_type == "Conv" for n in nodes):
        return nodes, []
    sole = sole_reader(graph, nodes)
    producer = {t: k for k, n in enumerate(nodes) for t in n.outputs if t}
    affine_at = {n.inputs[0]: k for k, n in enumerate(nodes) if affines and n.name in affines
                 and affines[n.name].node is n}
    fused: list[Fused] = []
    drop: set[int] = set()
    replace: dict[int, Node] = {}
    for i, conv in enumerate(nodes):
        if conv.op_type != "Conv" or conv.domain not in DEFAULT_DOMAINS or i in drop \
                or len(conv.outputs) != 1 or not _is_2d(conv, const):
            continue
        chain, residual, bn = [i], "", None
        k = producer.get(conv.inputs[0], -1)
        folded = _zero_pad_into(nodes[k], conv, const) \
            if k >= 0 and k not in drop and sole(conv.inputs[0], "Conv") == i else None
        pad = nodes[k] if folded is not None else None
        if pad is not None:
            chain.insert(0, k)
        y = conv.outputs[0]
        k_affine = affine_at.get(y)
        affine = None
        if k_affine is not None and sole(y, nodes[k_affine].op_type, (FUSED_DOMAIN,)) == k_affine:
            chain.append(k_affine)
            affine = affines[nodes[k_affine].name]  # type: ignore[index]
            y = affine.node.outputs[0]
        j = sole(y, "BatchNormalization") if affine is None else None
        if j is not None and j not in drop and _bn_foldable(nodes[j], y, const):
            chain.append(j)
            bn = nodes[j]
            y = bn.outputs[0]
        j = sole(y, "Add")
        if j is None:
            j = sole(y, "Sum")   # a two-input Sum is an Add: Caffe2's residuals (the model zoo's ResNet-50)
        if j is not None and j not in drop and len(nodes[j].inputs) == 2:
            other = other_input(nodes[j], y)
            if other:
                chain.append(j)
                residual = other
                y = nodes[j].outputs[0]
        j = sole(y, "Relu")
        if j is None:
            j = sole(y, "Clip")   # Relu6 and the like: MobileNet's, PP-OCR's
            if j is not None and not (nodes[j].inputs[0] == y and clip_bounds_constant(nodes[j], const)):
                j = None
        swish, bound = None, None
        if j is None and swishes is not None:
            j, swish = _hard_swish_reader(sole, y, nodes, swishes)
        if j is None:
            j = sole(y, "LeakyRelu")
            bound = bound_reader(sole, nodes[j].outputs[0], nodes, const) if j is not None else None
        acted = j is not None and j not in drop
        if acted:
            chain.append(j)
            if bound is not None and bound not in drop:
                chain.append(bound)
        else:
            swish = None
        after = _affine_after(nodes, chain, conv, sole, drop, const) if acted else None
        if after is not None:
            chain += after.indices
        if len(chain) == 1:
            continue
        # a Paddle hard swish is one fused step already: the chain takes its nodes
        parts = tuple(p for k in chain for p in (swish.parts if swish is not None and k == j
                                                 else affine.parts if affine is not None and k == k_affine
                                                 else (nodes[k],)))
        kernels = [kernel_of(p) for p in parts]
        if getattr(kernels[1 if pad else 0], "__wrapped__", None) is not nn_conv \
                or any(k is None for k in kernels):  # a caller's own Conv kernel runs as it is
            continue
        ins = (pad.inputs[0],) if pad is not None else ()
        ins += tuple(t for t in conv.inputs[int(pad is not None):] if t) + ((residual,) if residual else ())
        if bn is not None:   # its parameters stay inputs too
            ins += tuple(bn.inputs[1:5])
        if affine is not None:   # likewise the affine chain's (its BatchNormalization's, its vectors)
            ins += affine.node.inputs[1:]
        core = parts[:len(parts) - len(after.indices)] if after is not None else parts   # to the activation
        if core[-1].op_type in BOUNDS and swish is None:   # its bounds stay inputs: read each run (set_weight)
            ins += bound_inputs(core[-1], core[-2].outputs[0])
        if swish is not None:   # a Paddle hard swish's shift, bounds (, scale) likewise
            ins += swish.consts
        if pad is not None:   # its amounts and value too: checked against the bound ones
            ins += tuple(t for t in pad.inputs[1:] if t)
        if after is not None:   # the affine after the activation: its vectors or BatchNormalization's, last
            ins += after.inputs
        # Named after the conv: per-node times (the app's "time" colouring) give the
        # chain's time to the conv, which is nearly all of it, under a real node's name.
        node = Node(conv.name, "+".join(p.op_type for p in parts), ins,
                    (parts[-1].outputs[0],), FUSED_DOMAIN)
        fused.append(Fused(node, parts, _conv_chain_kernel(parts, kernels, bool(residual), bn, folded,
                                                           swish, ins, affine, after)))
        drop.update(chain)
        replace[chain[-1]] = node  # at the last node's place: the residual is ready there
    return spliced(nodes, drop, replace), fused


class _After(NamedTuple):
    """An affine after a conv chain's activation: the nodes (their positions), the inputs the
    fused step reads for it, and how they fold: a BatchNormalization's (scale, bias, mean, var)
    with its ``epsilon``, or Mul / Add vectors (``ops``: True for a Mul)."""
    indices: list[int]
    inputs: tuple[str, ...]
    ops: tuple[bool, ...]
    epsilon: float | None   # None: Mul / Add vectors


def _affine_after(nodes: list[Node], chain: list[int], conv: Node, sole: Callable[..., int | None],
                  drop: set[int], const: Callable[[str], Any]) -> _After | None:
    """What scales and shifts the activation's output per channel by constants, read by the
    chain alone: an inference BatchNormalization (Keras' Conv -> Relu -> BatchNormalization), or
    Mul / Add nodes by vectors of the conv's channels or single values (PP-OCRv4's learnable
    scale and shift after each hard swish: 24 Mul and Add pairs over the detector's largest maps,
    read and written in passes of their own)."""
    y = nodes[chain[-1]].outputs[0]
    k = sole(y, "BatchNormalization")
    if k is not None and k not in drop and _bn_foldable(nodes[k], y, const):
        bn = nodes[k]
        return _After([k], tuple(bn.inputs[1:5]), (), float(bn.attrs.get("epsilon", 1e-5)))
    run, ops, vectors = mul_add_run(nodes, [chain[-1]], [], [], sole, drop,
                                    lambda t: conv_vector(conv, t, const))
    return _After(run[1:], tuple(vectors), tuple(ops), None) if len(run) > 1 else None


def _is_2d(conv: Node, const: Callable[[str], Any]) -> bool:
    shape = conv.attrs.get("kernel_shape")
    if shape is not None:
        return len(shape) == 2
    w = const(conv.inputs[1]) if len(conv.inputs) > 1 else None
    return w is not None and getattr(w, "ndim", 0) == 4


class _Swish(NamedTuple):
    """A hard swish a conv chain takes: the graph's nodes it is, and the names of its constant
    inputs (Paddle's shift, bounds and scale; none for ONNX's HardSwish op)."""
    parts: tuple[Node, ...]
    consts: tuple[str, ...]


def _hard_swish_reader(sole: Callable[..., int | None], y: str, nodes: list[Node],
                       swishes: dict[str, Fused]) -> tuple[int | None, _Swish | None]:
    """The hard swish that alone reads ``y`` (ONNX's op, or one of ``swishes``, Paddle's form
    fused before): its position and what the chain takes of it, or ``(None, None)``."""
    j = sole(y, "HardSwish")
    if j is not None:
        return j, _Swish((nodes[j],), ())
    j = sole(y, "HardSwish", (FUSED_DOMAIN,))
    if j is not None and nodes[j].name in swishes and nodes[j].inputs[0] == y:
        fused = swishes[nodes[j].name]
        return j, _Swish(fused.parts, fused.node.inputs[1:])
    return None, None


_F32 = np.dtype(np.float32)

#: ONNX's HardSwish: y * max(0, min(1, y / 6 + 1/2)).
_ONNX_HARD_SWISH = HardSwishAct(1 / 6, 0.5, 0.0, 1.0)


def _conv_chain_kernel(parts: tuple[Node, ...], kernels: list[Any], has_residual: bool,
                       bn: Node | None = None, folded: tuple | None = None,
                       swish: _Swish | None = None, ins: tuple[str, ...] = (),
                       affine: Fused | None = None, after: _After | None = None) -> Callable[..., tuple]:
    """The fused step: ``(xp, x, w[, b][, residual][, bn params][, bounds][, pad
    inputs][, hard swish constants]) -> (y,)`` (``ins``: their names). A residual of
    another shape or dtype (broadcasting), or any failure, runs the nodes as written
    instead, so results and errors are those of the graph (a failure names the node that
    failed, inside the fused step).
    ``folded``: ``(pads, values, amounts)`` of a zero Pad before the conv (``parts[0]``), its pads
    added to the conv's own (``_zero_pad_into``) and ``values`` the Pad's other inputs as
    bound; should a run bring others (``set_weight``), the nodes run as written."""
    pad = parts[0] if folded is not None else None
    conv = parts[1] if pad is not None else parts[0]
    attrs = {k: v for k, v in kernel_attrs(conv).items()
             if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")}
    own = dict(attrs)
    if folded is not None:
        attrs["pads"] = folded[0]
        attrs.pop("auto_pad", None)   # VALID's zero pads are in the sum; the sum is explicit
    bound = folded[1] if folded is not None else ()
    # cuDNN (kernels/device.py) takes symmetric pads only: on a device an asymmetric sum
    # is padded as written first, then convolved with the conv's own pads (unverified on
    # a GPU, like the rest of the device path).
    lopsided = folded is not None and folded[0][:2] != folded[0][2:]
    core = parts[:len(parts) - len(after.indices)] if after is not None else parts   # to the activation
    last = core[-1]
    bounding = last if last.op_type in BOUNDS and swish is None else None   # a Clip, or a Max / Min after a LeakyRelu
    leaky = next((p for p in parts if p.op_type == "LeakyRelu"), None)
    # Paddle's hard swish: its shift, bounds and scale are inputs after the Clip's place
    n_consts = len(swish.consts) if swish is not None else 0
    post = swish.parts[-1].op_type if n_consts == 4 else ""
    n_conv = sum(1 for t in conv.inputs if t)
    n_bn = n_conv + int(has_residual)
    n_fixed = n_bn + (4 if bn is not None else len(affine.node.inputs) - 1 if affine is not None else 0)
    n_bounds = n_fixed + (len(bound_inputs(bounding, core[-2].outputs[0])) if bounding is not None else 0)
    epsilon = float(bn.attrs.get("epsilon", 1e-5)) if bn is not None else 0.0
    chain_fold = affine.kernel.fold if affine is not None else None  # type: ignore[attr-defined]
    n_post = len(after.inputs) if after is not None else 0

    def fold_norm(xp: Any, norm: tuple, channels: int) -> tuple | None:
        if chain_fold is None:
            return _bn_affine(xp, norm, epsilon)
        # a per-channel affine chain (engine/fuse_channel.py); not per-channel: as written
        return _per_channel(chain_fold(xp, norm, 4, norm[0].dtype, channels), "the affine chain's vectors")

    def fold_after(xp: Any, params: tuple, channels: int) -> tuple | None:
        if after.epsilon is not None:
            return _bn_affine(xp, params, after.epsilon)
        st = channel_fold(xp, params, after.ops, 0.0, 4, params[0].dtype, False, channels)
        return _per_channel(st, "the affine's vectors after the activation")
    affine_of, post_of = _once_per_version(fold_norm), _once_per_version(fold_after)

    def act_of(xp: Any, args: tuple, channels: int) -> Any:
        act = activation(args)
        return act if after is None else AffineAfter(act, *post_of(xp, args[len(args) - n_post:], channels))

    def activation(args: tuple) -> Any:
        if n_consts:
            shift, lo, hi, *scale = (float(v.reshape(())) for v in args[n_bounds:n_bounds + n_consts])
            return HardSwishAct(1.0, shift, lo, hi, post, scale[0] if scale else 1.0)
        if swish is not None:
            return _ONNX_HARD_SWISH
        bounds = None if bounding is None else bound_pair(bounding, args[n_fixed:n_bounds])
        if leaky is not None:
            return LeakyReluAct(float(leaky.attrs.get("alpha", 0.01)), *(bounds or (None, None)))
        return bounds if bounds is not None else last.op_type == "Relu"

    def make_plan(x: Any, args: tuple) -> Any:
        return conv_fused_plan(x.shape, args[1], args[2] if n_conv > 2 else None,
                               act_of(np, args, args[1].shape[0]),
                               affine_of(np, args[n_bn:n_fixed], args[1].shape[0]), **attrs)
    host_plan = LastPlan(lambda args: args[1:n_conv] + args[n_bn:], make_plan)

    def run(xp: Any, *args: Any) -> tuple:
        conv_args = args[:n_conv]
        x, w = conv_args[0], conv_args[1]
        b = conv_args[2] if n_conv > 2 else None
        residual = args[n_conv] if has_residual else None
        norm = args[n_bn:n_fixed]
        pad_args = args[n_bounds + n_consts:len(args) - n_post]
        try:
            use = attrs
            if pad is not None and (x.ndim != 4 or any(a is not c for a, c in zip(pad_args, bound))):
                raise ValueError("not the Pad planned at bind time")
            if xp is np and x.dtype == _F32 and x.__class__ is np.ndarray:
                plan = host_plan(x, args)
                y = None if plan is None else plan(x, residual)
                if y is not None:
                    return (y,)
            if lopsided and xp is not np:  # the amounts as bound, on the host: no device read
                x = pad_zeros(xp, x, folded[2], "constant", 0.0, None)
                use = own
            return (conv_fused(xp, x, w, b, residual, act_of(xp, args, w.shape[0]),
                               affine=affine_of(xp, norm, w.shape[0]), **use),)
        except Exception:  # noqa: BLE001 -- the nodes as written: their result or their error
            return as_written(xp, parts, kernels, dict(zip(ins, args)))
    return run


def _once_per_version(fold: Callable[[Any, tuple, int], tuple | None]) -> Callable[[Any, tuple, int], tuple | None]:
    """``fold(xp, params, channels)`` (an ``(s, t)`` per channel) once per parameter version, as
    weight preparation is (engine/memo.py): the same objects give the same (s, t); set_weight
    installs new ones."""
    seen: list[Any] = [None]   # (the parameters, their (s, t)): replaced whole

    def of(xp: Any, params: tuple, channels: int) -> tuple | None:
        last = seen[0]
        if last is not None and len(last[0]) == len(params) and all(map(is_, last[0], params)):
            return last[1]
        st = fold(xp, params, channels)
        seen[0] = (tuple(params), st)
        return st
    return of


def _per_channel(st: tuple | None, what: str) -> tuple:
    """``st``, or the error that sends the chain back to its nodes as written."""
    if st is None:
        raise ValueError(f"{what} are not per-channel")
    return st


def _zero_pad_into(pad: Node, conv: Node, const: Callable[[str], Any]) -> tuple | None:
    """``(pads, values, amounts)`` when ``pad`` (read by ``conv`` alone) is a constant-mode Pad of
    zeros on the spatial axes of a 4-D input, with non-negative constant amounts, and
    ``conv`` pads explicitly: ``pads`` the conv's pads with the Pad's added (as
    onnxruntime's Pad fusion does: MobileNetV2 exports pad every strided conv this
    way), ``values`` the Pad's other inputs as bound (their identity is checked per
    run). Else None."""
    auto = conv.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    # VALID pads nothing: the conv's own pads are zeros (transformers' EfficientNet pads
    # every strided depthwise conv explicitly before a VALID conv); SAME_* depend on the shape
    if pad.op_type != "Pad" or pad.domain not in DEFAULT_DOMAINS or len(pad.outputs) != 1 \
            or auto not in ("NOTSET", "VALID") or (auto == "VALID" and "pads" in conv.attrs):
        return None
    mode = pad.attrs.get("mode", "constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        return None
    extra = [t for t in pad.inputs[1:] if t]
    values = tuple(const(t) for t in extra)
    if any(v is None for v in values) or (len(pad.inputs) > 3 and pad.inputs[3]):
        return None  # amounts or value computed at run time, or an axes input
    if len(pad.inputs) > 1:
        amounts = [int(v) for v in to_numpy(values[0]).reshape(-1)]
        fill = to_numpy(values[1]).reshape(-1) if len(values) > 1 else [0]
    else:  # Pad-2: attributes
        amounts, fill = list(pad.attrs.get("pads", ())), [pad.attrs.get("value", 0.0)]
    if len(amounts) != 8 or any(amounts[i] for i in (0, 1, 4, 5)) or min(amounts) < 0 \
            or len(fill) > 1 or (len(fill) == 1 and float(fill[0]) != 0.0):
        return None
    own = list(conv.attrs.get("pads", (0, 0, 0, 0)))
    if len(own) != 4:
        return None
    pads = [own[0] + amounts[2], own[1] + amounts[3], own[2] + amounts[6], own[3] + amounts[7]]
    return pads, values, amounts


def _bn_foldable(bn: Node, y: str, const: Callable[[str], Any]) -> bool:
    """An inference BatchNormalization of ``y`` whose scale, bias, mean and variance are
    constant vectors: it folds into the conv's epilogue as ``* s + t`` per channel."""
    return (bn.inputs[0] == y and len(bn.inputs) == 5 and not any(bn.outputs[1:])
            and not bn.attrs.get("training_mode", 0)
            and all(const(t) is not None and getattr(const(t), "ndim", 0) == 1 for t in bn.inputs[1:]))


def _bn_affine(xp: Any, norm: tuple, epsilon: float) -> tuple | None:
    """``(s, t)`` with ``y * s + t == (y - mean) / sqrt(var + eps) * scale + bias``, from the
    run's own parameter values (C-sized vectors; ``set_weight`` reaches them)."""
    if not norm:
        return None
    scale, bias, mean, var = norm
    s = scale / xp.sqrt(var + epsilon)  # a Python float: the vector's dtype, no upload on a device
    return s, bias - mean * s
