"""Values derived only from weights: computed once per weight version, not per run.

Exporters write weight preparation into the graph: silero-VAD's LSTM cell slices
its ``weight_ih`` / ``weight_hh`` / biases into gates and concatenates them again
(12 Slices, 5 Concats and 3 Unsqueezes in an If body, on every 32 ms chunk); other
models Transpose, Cast or Reshape a weight before a MatMul. Bind-time folding
(``engine/specialize.py``'s ``fold_node``) cannot take them: a user's weight may be
replaced by ``Executor.set_weight``, and a folded copy would keep the old one.

So such a node is bound *memoized*: its call remembers its last arguments and
results, and returns the results again while every argument is the very same
object. That is correct because a weight is replaced, never written in place
(``set_weight`` installs a new array; kernels never write into their inputs), and
the memo holds its arguments, so an argument's identity cannot be reused by a new
array. A chain of such nodes hits all along, so what reads their results (an LSTM's
packed weights, ``engine/kernels/rnn.py``) sees the same arrays and keeps its own
prepared forms too.

Which nodes: every input is *stable* -- a weight, a value folded at bind time, a
memoized node's output, or (in an If/Loop/Scan body) a tensor of the enclosing
graph that is stable there -- and the op is deterministic. A result larger than its
arguments (a Tile or Expand of a weight, say) is not kept: it is recomputed, as it
was, so the memo never holds more than the weights it derives from. Except a weight
in the type the model computes with: a DequantizeLinear or Cast of a weight may be up to
``WIDENING`` times its arguments (int8 to float32). A model quantized as TensorRT takes it
(QDQ: every Conv and MatMul weight an int8 initializer behind a DequantizeLinear) otherwise
dequantized all its weights on every run -- ResNet-18 in QDQ, 57 of its 125 ms.
Memoized results are nobody's scratch space: ``engine/inplace.py`` never writes into
them (``MEMOIZED`` marks the call).

Shapes are stable too, while the inputs' shapes are. Exporters compute a Reshape's target,
an LSTM's zero state or a Slice's end from ``Shape`` at run time (openWakeWord's LSTM head:
17 of its 37 steps; Swin 658 of 1,160 more steps memoized than by weights alone, MobileViT 180
of 620, DETR 85 of 611, silero-VAD 17 of 90). A ``Shape`` or ``Size`` node is
bound *shape-memoized*: it returns its last result while its input has the same shape, so
its output is the same object run after run, and every node computing from it and from
weights alone is memoized by the rule above and hits all along. A new input shape makes a
new result, and the chain computes again.

A result larger than its arguments is kept too, within the executor's ``MemoBudget``: weights a
model computes from a shape (the onnx wheel's model-zoo graphs fill every weight with
``ConstantOfShape``; DenseNet-121's 8M floats were filled on every run, 2.6x onnxruntime, which
folds them once when its session is made) and zero states of ``ConstantOfShape(Shape(x))``. The
budget bounds what a crafted ``ConstantOfShape`` can make a run hold beyond what it computes;
``engine/budget.py`` counts such tensors as live for the whole run.
"""

from __future__ import annotations

import threading
from operator import is_
from typing import Any, Callable, Collection

from partition.ir import Node

from .specialize import FOLD_MAX_BYTES, NOT_FOLDED

Call = Callable[[Any, list, Any], tuple]
#: The attribute that marks a memoized call (``engine/inplace.py`` reads it).
MEMOIZED = "memoized"
#: Ops whose result is their input in a wider type, and how much wider it may be kept.
WIDENING_OPS = frozenset({"DequantizeLinear", "Cast"})
WIDENING = 4
#: Bytes the memos of one executor (its bodies' included) may keep in results larger than their
#: arguments (a weight of 1 GiB is past what the store and upload limits let a model carry).
MEMO_EXTRA_BYTES = 1 << 30


class MemoBudget:
    """What one executor's memos may still keep beyond their arguments' size (shared by its
    bodies' executors); taken when a result is kept, given back when it is replaced."""

    def __init__(self, limit: int | None = None) -> None:
        self.left = MEMO_EXTRA_BYTES if limit is None else limit
        self._lock = threading.Lock()  # bodies of parallel branches may keep results at once

    def take(self, n: int) -> bool:
        with self._lock:
            if n > self.left:
                return False
            self.left -= n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.left += n


def memoizable(node: Node, stable: Collection[str]) -> bool:
    """Whether ``node`` computes only from ``stable`` tensors, deterministically."""
    return (node.domain in ("", "ai.onnx") and not node.subgraphs and not node.is_subgraph
            and node.op_type not in NOT_FOLDED and any(node.inputs)
            and all(not t or t in stable for t in node.inputs))


#: Ops whose result depends on their input's shape alone.
SHAPE_OPS = frozenset({"Shape", "Size"})


def shape_memoizable(node: Node) -> bool:
    """Whether ``node`` is a ``Shape`` or ``Size`` of the default domain."""
    return node.op_type in SHAPE_OPS and node.domain in ("", "ai.onnx") and not node.is_subgraph


def _nbytes(values: Any) -> int:
    return sum(int(getattr(v, "nbytes", 0)) for v in values if v is not None)


def memoized(call: Call, op_type: str = "", budget: MemoBudget | None = None) -> Call:
    """``call`` (of an ``op_type`` node) that returns its last results while its arguments are
    the same objects; results larger than their arguments are kept while ``budget`` allows."""
    last: list[Any] = [None]  # (arguments, results, bytes taken from budget): replaced whole
    factor = WIDENING if op_type in WIDENING_OPS else 1

    def memo(run: Any, args: list, rctx: Any) -> tuple:
        seen = last[0]
        if seen is not None:
            before = seen[0]
            # map(is_) rather than a generator: 0.34 against 0.77 us on three arguments, and
            # silero-VAD's chunk checks 33 memoized steps
            if len(before) == len(args) and all(map(is_, args, before)):
                return seen[1]
        given = tuple(args)  # before the call: bound calls may swap in host copies
        results = call(run, args, rctx)
        size = _nbytes(results)
        extra = 0 if size <= max(FOLD_MAX_BYTES, factor * _nbytes(given)) else size
        if seen is not None and seen[2]:
            budget.give(seen[2])  # type: ignore[union-attr]
        kept = not extra or (budget is not None and budget.take(extra))
        last[0] = (given, results, extra) if kept else None
        return results
    setattr(memo, MEMOIZED, True)
    return memo


def shape_memoized(call: Call) -> Call:
    """``call`` (of a Shape or Size node) returning its last results while its input has the
    same shape."""
    last: list[Any] = [None]  # (input shape, results): replaced whole

    def memo(run: Any, args: list, rctx: Any) -> tuple:
        shape = getattr(args[0], "shape", None) if args else None
        seen = last[0]
        if seen is not None and shape is not None and seen[0] == shape:
            return seen[1]
        results = call(run, args, rctx)
        if shape is not None:
            last[0] = (tuple(shape), results)
        return results
    setattr(memo, MEMOIZED, True)
    return memo


__all__ = ["MEMOIZED", "MEMO_EXTRA_BYTES", "MemoBudget", "memoizable", "memoized", "shape_memoizable",
           "shape_memoized"]
