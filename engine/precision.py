"""Reduced-precision runs on our kernels: FP16 and BF16 as TensorRT stores them, INT8 through Q/DQ.

``PrecisionRunner(graph, target)`` binds the graph once to an ``Executor`` whose kernel
finder wraps every kernel (``ExecOptions.kernels``; plan ``nodes``, so no fusion and no
bind-time specialisation hides a node). A run names the nodes that run in reduced
precision (``reduced``); every other node runs its FP32 kernel unchanged. For a reduced
node under ``fp16``/``bf16``:

1. each float32 input (activation or weight) is rounded to the target format, as
   TensorRT's reformat layer does when an FP16 layer reads a tensor; a weight's rounded
   copy is made once and kept;
2. the kernel runs in float32 on those values: Conv/MatMul/Gemm and reductions accumulate
   in FP32, which is TensorRT's behaviour on tensor cores for FP16 inputs;
3. each float32 output is rounded to the target format: a value beyond the format's
   largest finite one (65504 for FP16) becomes inf, one below half its smallest
   subnormal (2^-25 for FP16) becomes 0. That is where FP16 trouble shows.

An inference BatchNormalization is the one exception to step 1: TensorRT's ONNX parser
folds its four parameters into a per-channel scale and shift in FP32, so those two are
rounded instead (``_folded_batchnorm``).

Rounding is round-to-nearest-even in both formats: FP16 by ``astype(float16)``, BF16 by
adding the rounding bias to the float32 bit pattern and clearing its low 16 bits (NaN is
kept a NaN). Everything is written against ``xp`` (numpy, or cupy on a GPU).

Under ``int8`` the candidates are the model's QuantizeLinear nodes: a reduced one
quantizes as written; a pinned one passes its float input through, and the
DequantizeLinear nodes reading it pass that float on. So "pinning" a Q node removes
that Q/DQ pair, which is how a TensorRT user keeps a tensor out of INT8 (explicit
quantization: TensorRT runs INT8 exactly where the Q/DQ nodes say).

Statistics (``stats=True``): per reduced node, how many elements overflowed to inf and
how many nonzero values flushed to zero in its rounding (inputs and outputs). A float32
value beyond ``INFINITY_STAND_IN`` that rounds to an infinity of its own sign is not
counted: exporters write ``torch.finfo(float32).min`` as a mask's minus infinity, and it
stays one in FP16 (Llama's causal mask: 2016 "overflows" per layer made every mask Add and
its Softmax a suspect, and the suspects-first search spent its first run pinning them).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from partition.errors import LensError
from partition.ir import Graph, Node

from .executor import Executor
from .kernels import kernel_attrs
from .ort_fallback import OrtFallback
from .values import to_numpy

TARGETS = ("fp16", "bf16", "int8")

#: Ops that only move or reshape data. They still round (a pinned producer's large
#: value overflows when an FP16 reshape reads it), but are named so in the report.
DATA_MOVEMENT = frozenset({
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Split",
    "Slice", "Gather", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth"})
#: Data movement whose outputs hold only its inputs' elements: with every float input rounded,
#: its outputs are (Pad is not here: its constant need not be representable).
KEEPS_ROUNDED = DATA_MOVEMENT - {"Pad"}
#: Ops that never compute on floats: nothing to round, never a candidate.
NON_FLOAT_OPS = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "NonZero", "Range"})


def _touches_float32(graph: Graph, node: Node) -> bool:
    """Whether reducing ``node`` can round anything: a float32 input or output, or one of
    unknown type. A node on integers and booleans only (position arithmetic, masks built
    with Equal/And) has nothing to round; as a candidate it cost search runs and came back
    as a "pin" (GPT-2's LessOrEqual, And, Cast to int)."""
    for t in (*node.inputs, *node.outputs):
        if t and graph.info(t).dtype in (None, "FLOAT"):
            return True
    return False


class PrecisionError(LensError):
    """A precision run or bisection that cannot be done as asked (bad target, tolerance, inputs)."""


# ------------------------------------------------------------ rounding --
def round_fp16(xp: Any, x: Any) -> Any:
    """``x`` (float32) rounded to FP16 and back: overflow -> inf, tiny -> 0 (RNE)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return x.astype(xp.float16).astype(xp.float32)


def round_bf16(xp: Any, x: Any) -> Any:
    """``x`` (float32) rounded to BF16 (round to nearest even) and back to float32."""
    bits = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    bias = ((bits >> 16) & 1) + xp.uint32(0x7FFF)
    rounded = ((bits + bias) & xp.uint32(0xFFFF0000)).view(xp.float32)
    return xp.where(xp.isnan(x), x, rounded.reshape(x.shape))


ROUNDERS: dict[str, Callable[[Any, Any], Any]] = {"fp16": round_fp16, "bf16": round_bf16}


def _is_float32(v: Any) -> bool:
    dtype = getattr(v, "dtype", None)
    return dtype is not None and getattr(v, "ndim", None) is not None and dtype == np.float32


#: Float32 magnitudes from here on are infinities written as numbers (masks), not values.
INFINITY_STAND_IN = 1e30


@dataclass
class NodeCounts:
    """Elements of one node that overflowed to inf or flushed to zero when rounded."""

    overflow: int = 0
    underflow: int = 0
    elements: int = 0


@dataclass
class _State:
    """What the wrapped kernels read during one run (runs are serialized by ``run``)."""

    reduced: frozenset[str] = frozenset()
    stats: bool = False
    counts: dict[str, NodeCounts] = field(default_factory=dict)
    #: the outputs reduced nodes rounded this run, id -> weak reference: a reduced consumer reading
    #: one takes it as it is, rounding being idempotent (whisper-tiny's attention tensors, 13.5M
    #: elements, were rounded by their producer and again by each consumer)
    rounded: dict[int, Any] = field(default_factory=dict)

    def is_rounded(self, v: Any) -> bool:
        ref = self.rounded.get(id(v))
        return ref is not None and ref() is v   # the same object, not one reusing a freed id

    def mark_rounded(self, v: Any) -> None:
        try:
            self.rounded[id(v)] = weakref.ref(v)
        except TypeError:   # an array type without weak references: rounded again, as before
            pass


class PrecisionRunner:
    """One graph bound once; ``run(feeds, reduced)`` any number of times.

    ``candidates`` are the nodes whose precision can change (float-computing nodes for
    ``fp16``/``bf16``, QuantizeLinear nodes for ``int8``), in graph order.
    """

    def __init__(self, graph: Graph, target: str = "fp16", device: str = "cpu") -> None:
        if target not in TARGETS:
            raise PrecisionError(f"unknown precision target {target!r}; choose one of {list(TARGETS)}")
        self.graph, self.target = graph, target
        self._state = _State()
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._fallback = OrtFallback()
        self._fallback.check(graph)
        if target == "int8":
            self.candidates = [n.name for n in graph.nodes if n.op_type == "QuantizeLinear"]
            if not self.candidates:
                raise PrecisionError(
                    f"--target int8: graph '{graph.name}' has no QuantizeLinear nodes; INT8 runs "
                    "through the model's own Q/DQ nodes (quantize it first, e.g. with "
                    "onnxruntime.quantization in QDQ format), or use --target fp16")
        else:
            self.candidates = [n.name for n in graph.nodes
                               if n.op_type not in NON_FLOAT_OPS and not n.is_subgraph
                               and _touches_float32(graph, n)]
        self._executor = Executor(graph, kernels=self._find, plan="nodes", device=device,
                                  timing=False)
        self.xp = self._executor.xp

    # --- public -------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], reduced: Iterable[str] = (), *, keep: bool = False,
            stats: bool = False) -> tuple[dict[str, np.ndarray], dict[str, NodeCounts]]:
        """Outputs (host arrays; every tensor when ``keep``) with ``reduced`` nodes in the
        target precision, and the per-node rounding counts (empty unless ``stats``)."""
        with self._run_lock:
            self._state = _State(frozenset(reduced), stats, {})
            result = self._executor.run(feeds, keep_intermediates=keep)
            values = result.values if keep else result.outputs
            host = {k: to_numpy(v) for k, v in values.items() if hasattr(v, "dtype")}
            return host, dict(self._state.counts)

    def node_alone(self, node: Node, values: Mapping[str, Any]) -> tuple[tuple, NodeCounts] | None:
        """``node`` reduced on exact inputs (``values``: FP32 tensors by name, weights taken from
        the graph): its outputs and rounding counts -- the error it adds by itself. None for a
        node that cannot run alone (a control-flow node, or an input not in ``values``)."""
        if node.subgraphs or node.is_subgraph:
            return None
        args = []
        for t in node.inputs:
            if not t:
                args.append(None)
            elif t in values:
                args.append(self.xp.asarray(values[t]))
            elif t in self.graph.initializers:
                args.append(self.xp.asarray(self.graph.initializers[t].value))
            else:
                return None
        while args and args[-1] is None:
            args.pop()
        kernel = self._find(node, self.graph.opset)
        if kernel is None:
            return None
        with self._run_lock:
            self._state = _State(frozenset([node.name]), True, {})
            outs = kernel(self.xp, *args, **kernel_attrs(node))
            return tuple(to_numpy(o) if hasattr(o, "dtype") else o for o in outs), \
                self._state.counts.get(node.name, NodeCounts())

    def close(self) -> None:
        self._executor.close()

    def __enter__(self) -> "PrecisionRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the wrapped kernels ---------------------------------------------------
    def _find(self, node: Node, opset: Mapping[str, int]) -> Any:
        kernel = self._fallback(node, opset)
        if kernel is None:
            return None
        if self.target == "int8":
            return self._int8_kernel(node, kernel)
        return self._float_kernel(node, kernel, ROUNDERS[self.target])

    def _float_kernel(self, node: Node, kernel: Callable[..., tuple],
                      rounder: Callable[[Any, Any], Any]) -> Callable[..., tuple]:
        if _folds_to_scale(node):
            kernel = _folded_batchnorm(node, rounder)
        name = node.name
        moves = node.op_type in KEEPS_ROUNDED
        weights = {i for i, t in enumerate(node.inputs) if t and t in self.graph.initializers}
        if _folds_to_scale(node):   # its parameters are folded in FP32, then rounded (below)
            weights = set()
            skip = {1, 2, 3, 4}
        else:
            skip = set()
        cache: dict[int, tuple[Any, Any]] = {}   # input position -> (weight, its rounded copy)

        def rounded_input(xp: Any, i: int, v: Any, state: _State, counts: NodeCounts | None) -> Any:
            if not _is_float32(v) or i in skip or state.is_rounded(v):
                return v
            if i in weights and counts is None:
                hit = cache.get(i)
                if hit is not None and hit[0] is v:
                    return hit[1]
                r = rounder(xp, v)
                cache[i] = (v, r)
                return r
            return self._round(xp, v, rounder, counts)

        def call(xp: Any, *args: Any, **attrs: Any) -> tuple:
            state = self._state
            if name not in state.reduced:
                return kernel(xp, *args, **attrs)
            counts = NodeCounts() if state.stats else None
            args = tuple(rounded_input(xp, i, v, state, counts) for i, v in enumerate(args))
            outs = kernel(xp, *args, **attrs)
            if not moves or counts is not None:   # (a stats run counts every output's elements)
                outs = tuple(self._round(xp, v, rounder, counts) if _is_float32(v) else v for v in outs)
            for v in outs:
                if _is_float32(v):
                    state.mark_rounded(v)
            if counts is not None:
                with self._lock:
                    state.counts[name] = counts
            return outs
        return call

    @staticmethod
    def _round(xp: Any, v: Any, rounder: Callable[[Any, Any], Any], counts: NodeCounts | None) -> Any:
        r = rounder(xp, v)
        if counts is not None:
            counts.overflow += int(xp.count_nonzero(xp.isinf(r) & (xp.abs(v) < INFINITY_STAND_IN)))
            counts.underflow += int(xp.count_nonzero((r == 0) & (v != 0)))
            counts.elements += int(v.size)
        return r

    def _int8_kernel(self, node: Node, kernel: Callable[..., tuple]) -> Callable[..., tuple]:
        name, op = node.name, node.op_type
        if op == "QuantizeLinear":
            def quantize(xp: Any, *args: Any, **attrs: Any) -> tuple:
                state = self._state
                if name in state.reduced:
                    outs = kernel(xp, *args, **attrs)
                    if state.stats:
                        with self._lock:
                            state.counts[name] = _saturation(xp, outs[0])
                    return outs
                return (args[0],)   # pinned: the Q/DQ pair is removed, the float passes
            return quantize
        if op == "DequantizeLinear":
            def dequantize(xp: Any, *args: Any, **attrs: Any) -> tuple:
                x = args[0]
                if getattr(x, "dtype", None) is not None and x.dtype.kind == "f":
                    return (x,)     # its QuantizeLinear was pinned: nothing to dequantize
                return kernel(xp, *args, **attrs)
            return dequantize
        return kernel


def _folds_to_scale(node: Node) -> bool:
    """An inference BatchNormalization: TensorRT's ONNX parser folds its four parameters into
    one per-channel scale and shift in FP32 (an IScaleLayer) before the layer's precision
    applies, so those two are what get rounded, not mean and variance one by one (a running
    variance beyond 65504 would otherwise become inf)."""
    return node.op_type == "BatchNormalization" and len(node.inputs) == 5 and \
        len([t for t in node.outputs if t]) == 1 and not _attr(node, "training_mode", 0)


def _attr(node: Node, name: str, default: Any) -> Any:
    return node.attrs.get(name, default)


def _folded_batchnorm(node: Node, rounder: Callable[[Any, Any], Any]) -> Callable[..., tuple]:
    eps = float(_attr(node, "epsilon", 1e-5))

    def call(xp: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, **_attrs: Any) -> tuple:
        s = (scale / xp.sqrt(var + xp.float32(eps))).astype(xp.float32)
        b = (bias - mean * s).astype(xp.float32)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return (x * rounder(xp, s).reshape(shape) + rounder(xp, b).reshape(shape),)
    return call


def _saturation(xp: Any, q: Any) -> NodeCounts:
    """An INT8/UINT8 quantized tensor's elements at the ends of its range count as overflow."""
    info = np.iinfo(q.dtype) if q.dtype.kind in "iu" else None
    if info is None:
        return NodeCounts(elements=int(q.size))
    hit = int(xp.count_nonzero((q == info.min) | (q == info.max)))
    return NodeCounts(overflow=hit, elements=int(q.size))
