"""Bind-time kernels for nodes whose small inputs are constants, small convolutions
with constant weights, and float elementwise nodes called straight.

Exporters give Unsqueeze/Squeeze/Reshape/Slice/Pad/Gather/Reduce* their axes,
shapes, pads and indices as constant tensors. The registry kernel reads them back
on every call (a host copy, a list of Python ints, the index arithmetic): 3-20 us
on a small tensor, several times the work itself. Here those inputs are read once,
when the executor binds the node, and each distinct input *shape* is planned once
(the index tuple, the output shape, the gather indices); a call then costs one
array operation.

Safety: a specialised call checks that every constant input it was made for is
the very object the run passes (``args[i] is value``); a weight replaced by
``Executor.set_weight`` -- a new object -- sends the node back to the registry
kernel. A shape the plan rejects (an axis out of range, a squeezed axis that is
not 1) goes to the registry kernel too, which raises its usual error. Every
operation is written against ``xp`` (numpy or cupy); gather indices are uploaded
once per plan. Outputs may be views of the input, as the registry kernels' are.

Convolutions (``_conv``) are planned only in the streaming regime (at most
``nn._GATHER_PER_COPY`` input elements per kernel position, one group); larger ones
keep ``engine/kernels/nn.py``'s kernel and its parallel paths. Float Add/Sub/Mul/Div
and a few unary ops skip the registry's wrapper layers (``_direct``); any other
dtype takes the registry kernel.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Mapping

import numpy as np

from .kernels import device, elementwise, gemm, geometry, kernel_attrs, nn
from .kernels.reduce import REDUCTIONS, WIDE_FLOATS, sum_for
from .kernels.dtypes import np_dtype
from .kernels.tensor import _slice_index

#: A specialised body: (xp, x) -> output array, or _GENERIC to use the registry kernel.
Body = Callable[[Any, Any], Any]
_GENERIC = object()
_MAX_PLANS = 16   # distinct input shapes remembered per node (dynamic shapes: bounded)


def _ints(v: Any) -> list[int] | None:
    return None if v is None else [int(a) for a in np.asarray(v).reshape(-1)]


def _new_plan(plans: dict, plan_for: Callable, shape: tuple, xp: Any) -> Any:
    """Plan ``shape`` and keep it (at most ``_MAX_PLANS`` shapes, then start over)."""
    plan = plan_for(tuple(int(d) for d in shape), xp)
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    plans[shape] = plan
    return plan


def _planned(plan_for: Callable[[tuple, Any], Any], apply: Callable[[Any, Any, Any], Any]) -> Body:
    """A body that plans once per input shape (``plan_for(shape, xp)``; None: the
    registry kernel) and then runs ``apply(xp, x, plan)``. Index arrays in a plan are
    already on ``xp``'s device."""
    plans: dict[tuple, Any] = {}

    def body(xp: Any, x: Any) -> Any:
        shape = x.shape
        plan = plans.get(shape, _GENERIC)
        if plan is _GENERIC:  # a new shape: planned once (the hit above stays inline)
            plan = _new_plan(plans, plan_for, shape, xp)
        if plan is None:
            return _GENERIC
        return apply(xp, x, plan)
    body.planned = (plan_for, apply, plans)  # type: ignore[attr-defined] # see _flat_call
    return body


def _reshape_to(xp: Any, x: Any, shape: tuple) -> Any:
    return x.reshape(shape)


def _index(xp: Any, x: Any, index: tuple) -> Any:
    return x[index]


# ----------------------------------------------------------------- the ops --
def _unsqueeze(axes: list[int] | None) -> Body | None:
    if not axes:
        return None

    def plan(shape: tuple, xp: Any) -> tuple | None:
        rank = len(shape) + len(axes)
        norm = sorted(a % rank for a in axes if -rank <= a < rank)
        if len(norm) != len(axes) or len(set(norm)) != len(norm):
            return None
        out = list(shape)
        for a in norm:
            out.insert(a, 1)
        return tuple(out)
    return _planned(plan, _reshape_to)


def _squeeze(axes: list[int] | None) -> Body | None:
    def plan(shape: tuple, xp: Any) -> tuple | None:
        rank = len(shape)
        if axes is None:
            return tuple(d for d in shape if d != 1)
        if any(not -rank <= a < rank for a in axes):
            return None
        drop = {a % rank for a in axes}
        if any(shape[a] != 1 for a in drop):
            return None
        return tuple(d for i, d in enumerate(shape) if i not in drop)
    return _planned(plan, _reshape_to)


def _reshape(dims: list[int] | None, allowzero: int) -> Body | None:
    if dims is None:
        return None

    def plan(shape: tuple, xp: Any) -> tuple | None:
        out = [shape[i] if d == 0 and not allowzero and i < len(shape) else d
               for i, d in enumerate(dims)]
        return _resolve(shape, out)
    return _planned(plan, _reshape_to)


def _resolve(shape: tuple, out: list[int]) -> tuple | None:
    total = int(np.prod(shape, dtype=np.int64))
    known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
    if out.count(-1) > 1 or any(d < -1 for d in out):
        return None
    if -1 in out:
        if known == 0 or total % known:
            return None
        out = [total // known if d == -1 else d for d in out]
    return tuple(out) if int(np.prod(out, dtype=np.int64)) == total else None


def _slice(starts: list[int] | None, ends: list[int] | None, axes: list[int] | None,
           steps: list[int] | None) -> Body | None:
    if starts is None or ends is None or (steps is not None and 0 in steps):
        return None

    def plan(shape: tuple, xp: Any) -> tuple | None:
        rank = len(shape)
        ax = axes if axes is not None else list(range(len(starts)))
        if len(ax) != len(starts) or any(not -rank <= a < rank for a in ax):
            return None
        return _slice_index(shape, starts, ends, ax, steps)
    return _planned(plan, _index)


def _gather(indices: Any, axis: int) -> Body | None:
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        return None

    def plan(shape: tuple, xp: Any) -> Any:
        rank = len(shape)
        if not -rank <= axis < rank:
            return None
        a = axis % rank
        dim = shape[a]
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            return None
        if idx.ndim == 0:  # one position: a view
            return ("index", (slice(None),) * a + (int(idx) % dim,))
        return ("take", xp.asarray(np.where(idx < 0, idx + dim, idx).astype(np.int64)), a)

    def apply(xp: Any, x: Any, p: Any) -> Any:
        if p[0] == "index":
            return x[p[1]]
        return xp.take(x, p[1], axis=p[2])
    return _planned(plan, apply)


def _reduce(op: str, axes: list[int] | None, keepdims: int, noop: int) -> Body | None:
    if not axes and noop:
        return None

    def plan(shape: tuple, xp: Any) -> Callable[[Any], Any] | None:
        rank = len(shape)
        if not rank:
            return None
        ax = list(range(rank)) if not axes else axes
        if any(not -rank <= a < rank for a in ax):
            return None
        norm = tuple(sorted({a % rank for a in ax}))
        if any(shape[a] == 0 for a in norm):
            return None  # empty reduction: the registry kernel's identity element
        return _reduction_of_shape(op, xp, shape, norm, bool(keepdims))

    def apply(xp: Any, x: Any, reduce: Callable[[Any], Any]) -> Any:
        if x.dtype not in WIDE_FLOATS:   # (``in`` a tuple of dtypes: 0.07 us, two == 0.14)
            return _GENERIC  # float16 means accumulate wider; integers sum to int64
        return reduce(x)
    return _planned(plan, apply)


#: Rows this long or shorter take ``_OF_DOT``'s forms.
_DOT_MAX = 1024


def _squares_dot(keepdims: bool) -> Callable[[Any], Any]:
    vecdot = np.vecdot
    return (lambda x: vecdot(x, x)[..., None]) if keepdims else (lambda x: vecdot(x, x))


def _root_of_squares_dot(keepdims: bool) -> Callable[[Any], Any]:
    squares = _squares_dot(keepdims)
    return lambda x: np.sqrt(squares(x))


#: Reductions over a short last axis computed as a dot of each row with itself.
_OF_DOT = {"ReduceSumSquare": _squares_dot, "ReduceL2": _root_of_squares_dot}


def _reduction_of_shape(op: str, xp: Any, shape: tuple, norm: tuple,
                        keepdims: bool) -> Callable[[Any], Any]:
    """``op`` over the axes ``norm`` of a float array of ``shape``, as one call chosen at
    planning: a reshape over axes of length 1 (a streaming step's one frame); the registry's
    sum (``kernels.reduce.sum_for``: its short-axis form, or numpy's ``add.reduce`` itself)
    under ReduceSum, ReduceMean and ReduceSumSquare; the array's own max/min (``xp.max``
    adds ~1 us of dispatch on a small tensor); else the registry's reduction itself."""
    count = 1
    for a in norm:
        count *= shape[a]
    out = shape if keepdims else tuple(d for i, d in enumerate(shape) if i not in norm)
    if count == 1 and op in _OF_ONE:
        return lambda x: x.reshape(out)
    if op in _OF_DOT and xp is np and norm == (len(shape) - 1,) and 8 <= count <= _DOT_MAX \
            and hasattr(np, "vecdot"):  # (numpy 2)
        # the squares' sum over the last axis as one dot a row (numpy's vecdot): no squared
        # copy and no reduction set up -- 2.55 -> 1.6 us over 16x30 floats, skl2onnx's kNN
        # distance a Scan step. Rows of 8 to _DOT_MAX: shorter ones keep the registry's sum
        # (its short-axis adds where they apply: a dot a row of 2 costs more than it sums); a
        # long row's dot sums in the order BLAS's vector lanes take, where add.reduce sums
        # pairwise.
        return _OF_DOT[op](keepdims)
    if op == "ReduceSum" or op == "ReduceSumSquare" or op == "ReduceMean":
        total = sum_for(xp, shape, norm, keepdims)
        if op == "ReduceSum":
            return total
        if op == "ReduceSumSquare":
            return lambda x: total(x * x)

        def mean(x: Any) -> Any:
            s = total(x)
            s /= x.dtype.type(count)
            return s
        return mean
    if op == "ReduceMax":
        return lambda x: x.max(axis=norm, keepdims=keepdims)
    if op == "ReduceMin":
        return lambda x: x.min(axis=norm, keepdims=keepdims)
    reduction = REDUCTIONS[op]
    if keepdims:
        return lambda x: reduction(xp, x, norm)
    return lambda x: reduction(xp, x, norm).reshape(out)


def _pad_indices(dim: int, b: int, e: int, mode: str) -> np.ndarray | None:
    """Source positions along one axis of an edge/reflect/wrap pad (negative pads crop)."""
    pos = np.arange(-b, dim + e)
    if dim == 0:
        return None
    if mode == "edge":
        return np.clip(pos, 0, dim - 1)
    if mode == "wrap":
        return None if max(b, e) > dim else pos % dim
    if dim < 2 or max(b, e) >= dim:  # reflect: numpy repeats the pattern past one width
        return None
    pos = np.abs(pos)
    return np.where(pos > dim - 1, 2 * (dim - 1) - pos, pos)


def _pad(pads: list[int] | None, value: Any, axes: list[int] | None, mode: str) -> Body | None:
    if pads is None or mode not in ("constant", "reflect", "edge", "wrap") or len(pads) % 2:
        return None
    fill = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0]

    def plan(shape: tuple, xp: Any) -> Any:
        rank = len(shape)
        ax = list(range(rank)) if axes is None else axes
        n = len(ax)
        if n * 2 != len(pads) or any(not -rank <= a < rank for a in ax):
            return None
        widths = [(0, 0)] * rank
        for i, a in enumerate(ax):
            widths[a % rank] = (pads[i], pads[i + n])
        if mode == "constant":
            crop = tuple(slice(-min(b, 0), d + min(e, 0)) for d, (b, e) in zip(shape, widths))
            out = tuple(d + b + e for d, (b, e) in zip(shape, widths))
            if any(d < 0 for d in out):
                return None
            inner = tuple(slice(max(b, 0), max(b, 0) + max(d + min(b, 0) + min(e, 0), 0))
                          for d, (b, e) in zip(shape, widths))
            return ("constant", crop, out, inner)
        takes = []
        for a, (b, e) in enumerate(widths):
            if b or e:
                idx = _pad_indices(shape[a], b, e, mode)
                if idx is None:
                    return None
                takes.append((a, xp.asarray(idx)))
        return ("take", takes)

    def apply(xp: Any, x: Any, p: Any) -> Any:
        if p[0] == "constant":
            out = xp.full(p[2], fill, dtype=x.dtype)
            out[p[3]] = x[p[1]]
            return out
        for a, idx in p[1]:
            x = xp.take(x, idx, axis=a)
        return x
    return _planned(plan, apply)


#: Conv's attributes, as ``nn.conv_fused_plan`` takes them.
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _conv(w: Any, b: Any, attrs: Mapping[str, Any]) -> Body | None:
    """A Conv with constant weights, planned once per input shape: small ones as
    ``_small_conv`` plans them; on the host any other float32 1-D or 2-D conv as its
    compiled kernel decided once (``nn.conv_fused_plan``: geometry, reshaped weights, the
    kernel chosen -- a conv outside a fused chain, such as every conv before a SiLU in
    EfficientNet and YOLO, had re-derived them on every call). Else the registry kernel."""
    small = _small_conv(w, b, attrs)
    compiled = isinstance(w, np.ndarray) and w.dtype == np.float32 and w.ndim in (3, 4)
    if small is None and not compiled:
        return None
    conv_attrs = {k: v for k, v in attrs.items() if k in _CONV_ATTRS}

    def plan(shape: tuple, xp: Any) -> Any:
        if small is not None:
            p = small[0](shape, xp)
            if p is not None:
                return small[1], p
        if compiled and xp is np:
            run = nn.conv_fused_plan(shape, w, b, False, None, **conv_attrs)
            if run is not None:
                return _run_compiled, run
        return None
    return _planned(plan, lambda xp, x, p: p[0](xp, x, p[1]))


def _run_compiled(xp: Any, x: Any, run: Any) -> Any:
    if x.__class__ is not np.ndarray or x.dtype != np.float32:
        return _GENERIC
    y = run(x, None)
    return _GENERIC if y is None else y


def _small_conv(w: Any, b: Any, attrs: Mapping[str, Any]) -> tuple | None:
    """Small convolutions (a streaming step's: at most ``nn._GATHER_PER_COPY`` input
    elements) with constant weights: the geometry, padding and column gather index
    are planned once per input shape, the weight reshaped once; a call is a pad,
    one gather, one matmul and the bias -- on numpy one ``take`` of the flattened
    input with a zero appended for the taps in the padding (``_flat_taps``), no
    padded copy: 45.7 -> 35.6 us for the VAD's five convs. ``(plan, apply)``, or None for
    a grouped conv."""
    if int(attrs.get("group", 1)) != 1 or w.ndim < 3:
        return None
    kernel = [int(k) for k in (attrs.get("kernel_shape") or w.shape[2:])]
    if kernel != [int(k) for k in w.shape[2:]]:
        return None
    m, c = int(w.shape[0]), int(w.shape[1])
    k_size = math.prod(kernel)
    state: dict[str, Any] = {}

    def plan(shape: tuple, xp: Any) -> Any:
        if len(shape) != w.ndim or shape[1] != c:
            return None
        g = geometry.conv(shape, w.shape, None if b is None else b.shape,
                          kernel_shape=attrs.get("kernel_shape"), strides=attrs.get("strides"),
                          dilations=attrs.get("dilations"), pads=attrs.get("pads"),
                          auto_pad=attrs.get("auto_pad", "NOTSET"), group=1)
        strides, dil, pads, out_sp = g.strides, g.dilations, g.pads, g.out_sp
        nsp = len(kernel)
        padded = shape[:2] + tuple(shape[2 + i] + pads[i] + pads[i + nsp] for i in range(nsp))
        npos = math.prod(out_sp)
        if min(out_sp) < 1 or shape[0] * c * npos > nn._GATHER_PER_COPY:
            return None
        inner = (Ellipsis,) + tuple(slice(pads[i], pads[i] + shape[2 + i]) for i in range(nsp))
        index = (Ellipsis,) + nn._make_gather_index(xp, kernel, dil, strides, out_sp)
        flat = _flat_taps(shape, kernel, dil, strides, pads, out_sp) if xp is np else None
        return (padded if any(pads) else None, inner, index, (shape[0], c * k_size, npos),
                (shape[0], m) + out_sp, flat, np.zeros((shape[0], 1), dtype=w.dtype),
                (kernel, strides, dil, pads, out_sp))

    def apply(xp: Any, x: Any, p: Any) -> Any:
        wt, bias = state.get("w"), state.get("b")
        if wt is None:  # the weight as a (m, c*k) matrix and the bias as a column, once
            wt = state["w"] = w.reshape(m, c * k_size)
            bias = state["b"] = None if b is None else b.reshape(m, 1)
        if x.dtype != wt.dtype or (bias is not None and bias.dtype != x.dtype):
            return _GENERIC
        padded, inner, index, cols_shape, out_shape, flat, zero, geom = p
        if flat is not None and x.flags.c_contiguous:
            # numpy: one take of the flattened input (with a trailing zero for the taps
            # in the padding) instead of a padded copy and a multi-array gather.
            src = x.reshape(x.shape[0], -1)
            if flat[1]:
                src = np.concatenate((src, zero), axis=1)
            cols = src[0].take(flat[0]) if src.shape[0] == 1 else src.take(flat[0], axis=1)
            acc = np.matmul(wt, cols)  # (m, positions), or (N, m, positions)
            if bias is not None:
                acc += bias
            return acc.reshape(out_shape)
        cols = device.im2col(xp, x, *geom)   # a device: the columns in one launch
        if cols is None:
            if padded is not None:
                xpad = xp.zeros(padded, dtype=x.dtype)
                xpad[inner] = x
                x = xpad
            cols = x[index].reshape(cols_shape)
        acc = gemm.matmul(xp, wt, cols)
        if bias is not None:
            acc += bias
        return acc.reshape(out_shape)
    return plan, apply


def _flat_taps(shape: tuple, kernel: list[int], dil: Any, strides: Any, pads: Any,
               out_sp: tuple) -> tuple[np.ndarray, bool]:
    """The columns of a conv over an input of ``shape`` as one index into its flattened
    (C, *spatial) plane, (C * K, positions) C major; a tap falling in the padding points
    one past the plane (where the caller appends a zero). Also: whether any does."""
    nsp, c, sp = len(kernel), shape[1], shape[2:]
    flat = np.zeros([1] * (nsp + nsp), dtype=np.int64)
    inside = np.ones([1] * (nsp + nsp), dtype=bool)
    step = 1
    for i in reversed(range(nsp)):
        pos = (np.arange(kernel[i]).reshape(-1, 1) * dil[i]
               + np.arange(out_sp[i]).reshape(1, -1) * strides[i] - pads[i])  # (k_i, o_i)
        form = [1] * (nsp + nsp)
        form[i], form[nsp + i] = kernel[i], out_sp[i]
        pos = pos.reshape(form)
        inside = inside & (pos >= 0) & (pos < sp[i])
        flat = flat + pos * step
        step *= sp[i]
    plane = step
    flat = np.where(inside, flat, c * plane)  # broadcast over (K..., O...)
    k_size, npos = math.prod(kernel), math.prod(out_sp)
    taps = flat.reshape(1, k_size, npos) + (np.arange(c) * plane).reshape(c, 1, 1)
    taps = np.where(inside.reshape(1, k_size, npos), taps, c * plane)
    return taps.reshape(c * k_size, npos), not bool(inside.all())


#: Reductions over one element that give that element (the others square, root or log it).
_OF_ONE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
# The input position of the constants each op reads, by op (opset 13+ forms).
_CONST_INPUTS = {"Unsqueeze": (1,), "Squeeze": (1,), "Reshape": (1,), "Slice": (1, 2, 3, 4),
                 "Gather": (1,), "Pad": (1, 2, 3), "Conv": (1, 2), **{op: (1,) for op in REDUCTIONS}}


def _body(op: str, attrs: Mapping[str, Any], const: Mapping[int, Any], n_in: int) -> Body | None:
    c = {i: const.get(i) for i in range(1, 5)}
    if op == "Unsqueeze":
        return _unsqueeze(_ints(c[1]) if n_in > 1 else _ints(attrs.get("axes")))
    if op == "Squeeze":
        return _squeeze(_ints(c[1]) if n_in > 1 else _ints(attrs.get("axes")))
    if op == "Reshape" and n_in > 1:
        return _reshape(_ints(c[1]), int(attrs.get("allowzero", 0)))
    if op == "Slice" and n_in > 2:
        return _slice(_ints(c[1]), _ints(c[2]), _ints(c[3]), _ints(c[4]))
    if op == "Gather" and c[1] is not None:
        return _gather(c[1], int(attrs.get("axis", 0)))
    if op == "Pad" and n_in > 1:
        return _pad(_ints(c[1]), c[2], _ints(c[3]), str(attrs.get("mode", "constant")))
    if op in REDUCTIONS:
        axes = _ints(c[1]) if n_in > 1 else _ints(attrs.get("axes"))
        return _reduce(op, axes, int(attrs.get("keepdims", 1)),
                       int(attrs.get("noop_with_empty_axes", 0)))
    return None


# ------------------------------------------------- direct elementwise calls --
#: Unary ops whose registry kernel is ``asarray(f(x), dtype=x.dtype)``: for float
#: inputs, ``f(x)`` already has that dtype and is called without the kernel's layers.
_UNARY: dict[str, Callable[[Any, Any], Any]] = {
    "Relu": lambda xp, x: xp.maximum(x, 0), "Sigmoid": elementwise.sigmoid,
    "Tanh": lambda xp, x: xp.tanh(x), "Sqrt": lambda xp, x: xp.sqrt(x),
    "Exp": lambda xp, x: xp.exp(x), "Abs": lambda xp, x: xp.abs(x),
    "Neg": lambda xp, x: xp.negative(x),
}
_BINARY: dict[str, Callable[[Any, Any], Any]] = {  # C functions: no Python frame per call
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": operator.truediv,
}


def _cast(attrs: Mapping[str, Any],
          generic: Callable[[Any, list, Any], tuple]) -> Callable[[Any, list, Any], tuple] | None:
    """Cast between numeric dtypes as one ``astype`` with the target dtype resolved
    here (the registry kernel resolves it and checks for strings and float8 on every
    call); strings, float8 and other exotic targets go to the registry kernel."""
    try:
        dtype = np_dtype(attrs["to"])
    except (KeyError, ValueError, TypeError):
        return None
    if dtype not in _PLAIN_DTYPES:
        return None

    def cast(run: Any, args: list, rctx: Any) -> tuple:
        x = args[0]
        if x.dtype not in _PLAIN_DTYPES:  # a dtype hashes in C; its .name is Python code
            return generic(run, args, rctx)
        return (x.astype(dtype),)
    return cast


#: numpy's own numeric dtypes in native byte order (ml_dtypes' float8/int4 and friends, and
#: swapped byte orders, keep the kernel).
_PLAIN_DTYPES = frozenset(np.dtype(n) for n in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64"))


def _direct(node: Any, attrs: Mapping[str, Any], xp: Any,
            generic: Callable[[Any, list, Any], tuple]) -> Callable[[Any, list, Any], tuple] | None:
    """Float elementwise nodes called straight (the registry kernel adds ~1 us of
    wrappers to a ~0.5 us ufunc); any other dtype goes to the registry kernel."""
    op = node.op_type
    if op == "Cast" and node.domain in ("", "ai.onnx") and len(node.inputs) == 1:
        return _cast(attrs, generic)
    if attrs or node.domain not in ("", "ai.onnx"):
        return None
    if op in _UNARY and len(node.inputs) == 1:
        fn = _UNARY[op]

        def unary(run: Any, args: list, rctx: Any) -> tuple:
            x = args[0]
            if x.dtype.kind != "f":
                return generic(run, args, rctx)
            return (fn(xp, x),)
        return unary
    if op in _BINARY and len(node.inputs) == 2:
        bfn = _BINARY[op]

        def binary(run: Any, args: list, rctx: Any) -> tuple:
            a, b = args
            if a.dtype.kind != "f" or a.dtype != b.dtype:  # ints divide C-style; mixed types cast
                return generic(run, args, rctx)
            return (bfn(a, b),)
        return binary
    return None


def specialized_call(node: Any, attrs: Mapping[str, Any], weights: Mapping[str, Any],
                     produced: set[str], xp: Any,
                     generic: Callable[[Any, list, Any], tuple]) -> Callable[[Any, list, Any], tuple] | None:
    """The executor call of ``node`` (``call(run, args, rctx) -> tuple``) specialised on
    its constant inputs, or None when the op or the node does not qualify.
    ``weights``: the executor's weights (constants included); ``produced``: tensors
    a node or a feed writes (never constant); ``generic``: the registry call."""
    positions = _CONST_INPUTS.get(node.op_type)
    if positions is None:
        return _direct(node, attrs, xp, generic)
    if node.domain not in ("", "ai.onnx") or not node.inputs \
            or not node.inputs[0]:
        return None
    consts: dict[int, Any] = {}
    for i, t in enumerate(node.inputs[1:], start=1):
        if not t:
            continue
        if i not in positions or t not in weights or t in produced:
            return None  # a runtime input among the constants: nothing to plan on
        consts[i] = weights[t]
    if node.op_type == "Conv":  # weights stay on the device; the others are read on the host
        body = _conv(consts[1], consts.get(2), attrs) if 1 in consts else None
    else:
        host = {i: (v if isinstance(v, np.ndarray) else _to_host(v)) for i, v in consts.items()}
        body = _body(node.op_type, attrs, host, len(node.inputs))
    if body is None:
        return None
    checks = tuple(consts.items())
    planned = getattr(body, "planned", None)
    if planned is not None:
        return _flat_call(planned, checks, xp, generic)

    def call(run: Any, args: list, rctx: Any) -> tuple:
        for i, v in checks:
            if args[i] is not v:  # a replaced weight: plan on nothing stale
                return generic(run, args, rctx)
        out = body(xp, args[0])
        if out is _GENERIC:
            return generic(run, args, rctx)
        return (out,)
    return call


def _flat_call(planned: tuple, checks: tuple, xp: Any,
               generic: Callable[[Any, list, Any], tuple]) -> Callable[[Any, list, Any], tuple]:
    """``specialized_call``'s call and ``_planned``'s body as one function (a Python
    frame less per node; the same checks, plans and fall-backs). A reshape-like plan
    (a target shape) is applied inline."""
    plan_for, apply, plans = planned
    reshape = apply is _reshape_to

    def call(run: Any, args: list, rctx: Any) -> tuple:
        for i, v in checks:
            if args[i] is not v:  # a replaced weight: plan on nothing stale
                return generic(run, args, rctx)
        x = args[0]
        shape = x.shape
        plan = plans.get(shape, _GENERIC)
        if plan is _GENERIC:  # a new shape: planned once (the hit above stays inline)
            plan = _new_plan(plans, plan_for, shape, xp)
        if plan is None:
            return generic(run, args, rctx)
        out = x.reshape(plan) if reshape else apply(xp, x, plan)
        if out is _GENERIC:
            return generic(run, args, rctx)
        return (out,)
    return call


def _to_host(v: Any) -> np.ndarray:
    get = getattr(v, "get", None)  # cupy (and the test stand-in) copy back with .get()
    return np.asarray(get() if callable(get) else v)


# ------------------------------------------------------ nodes of constants --
#: Ops never evaluated at bind time: their value changes from run to run.
NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                         "Multinomial", "Bernoulli", "Dropout"})
#: The most bytes one folded node may produce (a ConstantOfShape of a crafted shape
#: allocates at run time, where a run's limits apply, not while binding).
FOLD_MAX_BYTES = 1 << 20


def fold_node(node: Any, weights: dict, folded: set, find: Callable[[Any], Any], xp: Any) -> bool:
    """Evaluate ``node`` once, at bind time, when every input is in ``folded`` (the
    shape arithmetic exporters write around If/Loop bodies: ConstantOfShape, Concat,
    Reshape, Cast of constants): its outputs join ``weights`` and ``folded``; True if
    so. A node that fails, is not deterministic or makes more than ``FOLD_MAX_BYTES``
    runs as written (and fails, if it does, naming itself at run time)."""
    if node.domain not in ("", "ai.onnx") or node.subgraphs or node.is_subgraph \
            or node.op_type in NOT_FOLDED or not all(not t or t in folded for t in node.inputs):
        return False
    kernel = find(node)
    if kernel is None:
        return False
    try:
        values = kernel(xp, *(weights[t] if t else None for t in node.inputs), **kernel_attrs(node))
    except Exception:  # noqa: BLE001 - the run reports it, naming the node
        return False
    if len(values) < len(node.outputs) or any(not hasattr(v, "shape") for v in values) \
            or sum(int(getattr(v, "nbytes", 0)) for v in values) > FOLD_MAX_BYTES:
        return False
    for t, v in zip(node.outputs, values):
        if t:
            weights[t] = v
            folded.add(t)
    return True
