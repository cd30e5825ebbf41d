"""Elementwise steps that write into a dying product (numpy only).

A Linear layer as exporters write it is ``MatMul`` then ``Add(bias)``: the
Add allocated a second activation-sized array and filled it while the
product, read by nobody else, was dropped right after. On the transformer's
128x1024 FFN activation that fresh array cost 60 us against ~20 us for the
same addition into the product in place (page faults of a new 512 KB array).

``in_place_steps`` finds, once at bind time, each Add/Sub/Mul/Div (and each
Relu/Tanh/Exp/Sqrt/Neg/Abs) whose first input is the output of a MatMul, Gemm or
one of those elementwise ops of this graph that no other node reads and that is
not a graph output; its bound call then computes ``a op= b`` (``a = f(a)``) into
that buffer when, at run time, nothing else can see it -- so a chain such as
MatMul > Add > Mul > Relu writes one activation-sized array, not four:

- the run keeps no intermediates (the debugger's ``keep_intermediates`` shows
  the product as it was, so those runs take the kernel as written);
- both operands are numpy arrays of one floating dtype and ``b`` broadcasts
  into ``a``'s shape (else numpy refuses the ``out=`` before writing anything,
  and the kernel as written runs).

The product is always the kernel's fresh result (``np.matmul``, the split path's
own ``np.empty``, a ufunc's new array, or an in-place step's own fresh input), never
a weight, an input or a view of another tensor (Reshape, Identity and the like are
not producers; a memoized product, ``engine/memo.py``, is handed out again on the next
run and is not one either), so overwriting it changes no other value. Device arrays never take this path.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from partition.ir import Node

from .memo import MEMOIZED

#: Elementwise ops done in place, by their numpy ufunc.
_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
#: One-input ops done in place (``ufunc(a, *extra, out=a)``).
_UNARY = {"Relu": (np.maximum, 0), "Tanh": (np.tanh,), "Exp": (np.exp,), "Sqrt": (np.sqrt,),
          "Neg": (np.negative,), "Abs": (np.absolute,)}
#: Producers whose output is a fresh array of their own: the products, and the
#: elementwise ops above (their kernels allocate a result; their in-place forms
#: return their own fresh first input), so a chain reuses one buffer.
_PRODUCERS = ("MatMul", "Gemm", *_UFUNCS, *_UNARY)

Call = Callable[[Any, list, Any], tuple]


def in_place_steps(steps: Sequence[Any], graph_outputs: Sequence[str]) -> list[int]:
    """Positions of the ``steps`` (the executor's ``_Step``s) whose first input is
    a product only they read (see the module's docstring)."""
    readers: dict[str, int] = {}
    producer: dict[str, str] = {}
    for s in steps:
        for t in s.reads:
            readers[t] = readers.get(t, 0) + 1
        if s.node.domain in ("", "ai.onnx") and not getattr(s.call, MEMOIZED, False):
            for t in s.node.outputs:
                if t:
                    producer[t] = s.node.op_type
    outs = set(graph_outputs)
    found = []
    for i, s in enumerate(steps):
        node: Node = s.node
        if node.domain not in ("", "ai.onnx") or node.attrs:
            continue
        if not (node.op_type in _UFUNCS and len(node.inputs) == 2
                or node.op_type in _UNARY and len(node.inputs) == 1):
            continue
        if not node.inputs[0] or node.inputs[0] in node.inputs[1:]:
            continue
        a = node.inputs[0]
        if producer.get(a) in _PRODUCERS and readers.get(a) == 1 and a not in outs:
            found.append(i)
    return found


def in_place_call(op_type: str, call: Call) -> Call:
    """``call`` (the step's bound kernel) preceded by the in-place form of ``op_type``."""
    if op_type in _UNARY:
        return _unary_in_place(_UNARY[op_type], call)
    ufunc = _UFUNCS[op_type]
    ndarray = np.ndarray

    def in_place(run: Any, args: list, rctx: Any) -> tuple:
        a, b = args
        if (not run.keep and type(a) is ndarray and type(b) is ndarray and a.dtype == b.dtype
                and a.dtype.kind == "f" and b.ndim <= a.ndim and a.flags.writeable):
            try:
                ufunc(a, b, out=a)
            except ValueError:  # b broadcasts beyond a: numpy wrote nothing
                return call(run, args, rctx)
            return (a,)
        return call(run, args, rctx)
    return in_place


def _unary_in_place(form: tuple, call: Call) -> Call:
    ufunc, extra = form[0], form[1:]
    ndarray = np.ndarray

    def in_place(run: Any, args: list, rctx: Any) -> tuple:
        a = args[0]
        if not run.keep and type(a) is ndarray and a.dtype.kind == "f" and a.flags.writeable:
            ufunc(a, *extra, out=a)
            return (a,)
        return call(run, args, rctx)
    return in_place


def bind_in_place(steps: Sequence[Any], graph_outputs: Sequence[str],
                  ours: Callable[[Node], bool] = lambda _node: True) -> None:
    """Each step ``in_place_steps`` finds (over all steps: every reader counts) that
    runs our kernel (``ours``) gets the in-place form of its call."""
    for i in in_place_steps(steps, graph_outputs):
        if ours(steps[i].node):
            steps[i].call = in_place_call(steps[i].node.op_type, steps[i].call)
