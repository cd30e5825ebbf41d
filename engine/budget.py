"""The run memory budget: refuse a run whose tensors would not fit, before anything runs.

``check_memory_budget(graph, inputs, limit_bytes)`` estimates the bytes of
every tensor the run would make and simulates which are alive when, in the
executor's order (nodes in graph order; a tensor is dropped after its last
reader, as ``engine/executor.py`` does). The first node at which the live
bytes would pass ``limit_bytes`` is refused with ``MemoryBudgetError`` naming
it, its largest output and the sizes -- without allocating anything: a
133-byte model whose ``ConstantOfShape`` asks for [100000, 100000] is refused
in milliseconds.

Sizes come from ONNX shape inference on the graph with the run's concrete
input shapes and data propagation on, so shape computations (a ``Constant`` or
small integer weight fed to ``ConstantOfShape``/``Reshape``/``Expand``,
``Shape -> Gather -> Concat`` chains) give concrete sizes. Decisions:

- **What counts**: graph inputs (held by the caller for the whole run), every
  intermediate and the outputs. Weights do not: they are loaded with the model
  and bounded by the upload/store limits, not by a run.
- **Unknown sizes** (a dim inference cannot settle, e.g. data-dependent
  shapes like ``NonZero`` or a Loop's scan outputs; unknown dtypes) count 0:
  the estimate is then a lower bound, and the error says "estimate partial".
  The hard limit of an out-of-process run catches what an estimate misses.
- **Bodies**: a node with bodies (If/Loop/Scan) adds the peak of its largest
  body on top of the live tensors while it runs (one iteration's worth);
  subgraph nodes are inlined (their bodies are the original nodes).
- **Values of weights alone** (a ``ConstantOfShape`` of a weight's shape, a Transpose of a
  weight, shape arithmetic) live for the whole run: the executor keeps them to hand out again
  (``engine/memo.py``). Counting every one is the safe side of its cap; inside bodies they count
  as other tensors do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import onnx

from partition.dtypes import ITEM_SIZE, ONNX_TYPE_NAMES, from_numpy
from partition.ir import Graph, Initializer, Node, TensorInfo

from .run_errors import RunError

#: Integer weights up to this many elements keep their values for inference
#: (shape inputs); larger weights become typed inputs, so nothing big is loaded.
SMALL_INT_ELEMENTS = 4096
_HINT = "raise the run memory limit or use smaller inputs"
#: The hint of ``sglens run/compare`` (the web server passes its own flag's).
CLI_HINT = "raise --memory-limit or use smaller inputs"


class MemoryBudgetError(RunError):
    """A run would pass its memory budget; names the node, the tensor and the sizes (HTTP 400,
    as every run error: the request was fine, the run it asks for is not)."""

    def __init__(self, message: str, *, node: str, tensor: str, tensor_bytes: int,
                 peak_bytes: int, limit_bytes: int, partial: bool) -> None:
        super().__init__(message)
        self.node, self.tensor = node, tensor
        self.tensor_bytes, self.peak_bytes, self.limit_bytes = tensor_bytes, peak_bytes, limit_bytes
        self.partial = partial

    def __reduce__(self):  # picklable (runs may cross a process boundary)
        return (_rebuild, (str(self), self.node, self.tensor, self.tensor_bytes, self.peak_bytes,
                           self.limit_bytes, self.partial))


def _rebuild(message: str, node: str, tensor: str, tensor_bytes: int, peak: int, limit: int,
             partial: bool) -> MemoryBudgetError:
    return MemoryBudgetError(message, node=node, tensor=tensor, tensor_bytes=tensor_bytes,
                             peak_bytes=peak, limit_bytes=limit, partial=partial)


@dataclass
class BudgetEstimate:
    """What the check found: the estimated peak and where it happens."""

    peak_bytes: int
    peak_node: str | None
    unknown: list[str] = field(default_factory=list)   # tensors of unknown size (counted 0)

    @property
    def partial(self) -> bool:
        return bool(self.unknown)


# ------------------------------------------------------------------ sizes --
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``"512M"`` -> 536870912; accepts bytes, K/M/G/T with optional B/iB (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise RunError(f"memory size {text!r}: expected a number with an optional unit, e.g. 512M or 2G")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise RunError(f"memory size {text!r}: must be more than 0 bytes")
    return value


def format_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.0f} {unit}" if n >= 10 * scale else f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------- inference --
def _flatten(graph: Graph) -> Graph:
    """Subgraph nodes replaced by their bodies' nodes (same tensor names), iteratively."""
    if not any(n.is_subgraph for n in graph.nodes):
        return graph
    nodes: list[Node] = []
    stack = list(reversed(graph.nodes))
    while stack:
        node = stack.pop()
        if node.is_subgraph:
            stack.extend(reversed(node.body.nodes))
        else:
            nodes.append(node)
    return graph.replace(nodes=nodes)


def _shape_model(graph: Graph, shapes: Mapping[str, tuple[tuple[int, ...], str | None]]) -> onnx.ModelProto:
    """The graph as ONNX with concrete input shapes; big weights become typed inputs (not loaded)."""
    from partition.onnx_io import to_model_proto
    small: dict[str, Initializer] = {}
    tensors: dict[str, TensorInfo] = dict(graph.tensors)
    inputs = list(graph.inputs)
    for name, w in graph.initializers.items():
        numel = int(np.prod(w.shape)) if w.shape else 1
        if w.dtype in ("INT64", "INT32") and numel <= SMALL_INT_ELEMENTS:
            small[name] = w
        else:
            tensors[name] = w.info()
            if name not in inputs:
                inputs.append(name)
    for name, (shape, dtype) in shapes.items():
        tensors[name] = TensorInfo(name, dtype or graph.info(name).dtype, tuple(shape))
    plain = graph.replace(inputs=inputs, initializers=small, tensors=tensors)
    return to_model_proto(plain)


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    from partition.local_functions import expanded_size
    if model.functions and not expanded_size(model):  # onnx would walk every call path of the functions
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; unknown sizes count 0
        return model


#: Bytes per element as a run holds them: float16 is computed in float32 on the host
#: (``engine/float16.py``); on a GPU that overstates a float16 tensor twice, the safe side of a limit.
_HOST_ITEM_SIZE = {**ITEM_SIZE, "FLOAT16": 4}


def _sizes(g: onnx.GraphProto, into: dict[str, int | None]) -> None:
    for vi in (*g.input, *g.value_info, *g.output):
        into[vi.name] = _vi_bytes(vi)


def _vi_bytes(vi: onnx.ValueInfoProto) -> int | None:
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None or not tt.HasField("shape"):
        return None
    size = _HOST_ITEM_SIZE.get(ONNX_TYPE_NAMES.get(tt.elem_type, ""))
    if size is None:
        return None
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        size *= d.dim_value
    return size


# --------------------------------------------------------------- liveness --
@dataclass
class _Walk:
    limit: int | None
    hint: str
    unknown: dict[str, None] = field(default_factory=dict)   # an ordered set
    peak: int = 0
    peak_node: str | None = None

    def size(self, sizes: Mapping[str, int | None], t: str) -> int:
        n = sizes.get(t)
        if n is None:
            self.unknown[t] = None
            return 0
        return n


def _body_reads(g: onnx.GraphProto) -> set[str]:
    """Every name read anywhere inside ``g`` (its outer-scope reads among them)."""
    names: set[str] = set()
    stack = [g]
    while stack:
        cur = stack.pop()
        for n in cur.node:
            names.update(t for t in n.input if t)
            for a in n.attribute:
                stack.extend([a.g] if a.HasField("g") else [])
                stack.extend(a.graphs)
    return names


def _kept(graph: Graph) -> frozenset[str]:
    """The tensors the executor computes from weights alone and keeps for the run: by
    ``engine/memo.py``'s own rule (``memoizable``, ``shape_memoizable``), and a Constant, which
    binding folds into a weight."""
    from .memo import memoizable, shape_memoizable
    stable = set(graph.initializers)
    for node in graph.nodes:
        constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx") and not node.inputs
        if constant or memoizable(node, stable) or shape_memoizable(node):
            stable.update(t for t in node.outputs if t)
    return frozenset(stable)


def _simulate(g: onnx.GraphProto, outer: Mapping[str, int | None], walk: _Walk, base: int,
              counted: Iterable[str], path: str = "", kept: frozenset[str] = frozenset()) -> int:
    """Peak live bytes of running ``g`` on top of ``base``; raises at the first node over the limit.

    ``counted``: the inputs of ``g`` that take memory during the run (the feeds,
    not the weights). ``kept``: tensors that stay live once made (``_kept``).
    Recursion follows body nesting (If inside Loop...), never the graph's length.
    """
    sizes = dict(outer)
    _sizes(g, sizes)
    produced = {t for n in g.node for t in n.output if t} - kept
    outputs = {o.name for o in g.output}
    bodies = [[b for a in n.attribute for b in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
              for n in g.node]
    reads = [{t for t in n.input if t}.union(*(_body_reads(b) for b in bs))
             for n, bs in zip(g.node, bodies)]
    last: dict[str, int] = {}
    for i, r in enumerate(reads):
        for t in r:
            last[t] = i
    live = base + sum(walk.size(sizes, t) for t in counted)
    peak = live
    for i, node in enumerate(g.node):
        name = path + (node.name or f"{node.op_type}_{i}")
        outs = [(t, walk.size(sizes, t)) for t in node.output if t]
        alloc = sum(n for _, n in outs)
        now = live + alloc
        if walk.limit is not None and now > walk.limit:
            _refuse(walk, name, outs, alloc, now)
        for body in bodies[i]:  # one iteration of a body, on top of what is live
            now = max(now, _simulate(body, sizes, walk, live + alloc, [x.name for x in body.input],
                                     name + " > "))
        peak = max(peak, now)
        if now > walk.peak:
            walk.peak, walk.peak_node = now, name
        live += alloc
        for t, n in outs:  # produced and never read: dropped at once, as the executor does
            if t not in last and t not in outputs and t in produced:
                live -= n
        for t in reads[i]:
            if last[t] == i and t in produced and t not in outputs:
                live -= walk.size(sizes, t)
    return peak


def _refuse(walk: _Walk, node: str, outs: list[tuple[str, int]], alloc: int, now: int) -> None:
    assert walk.limit is not None
    tensor, size = max(outs, key=lambda o: o[1]) if outs else ("", 0)
    what = f"{format_size(size)} for '{tensor}'" if len(outs) <= 1 else \
        f"{format_size(alloc)} (largest '{tensor}', {format_size(size)})"
    partial = f"; estimate partial: {len(walk.unknown)} tensor(s) of unknown size counted as 0" \
        if walk.unknown else ""
    raise MemoryBudgetError(
        f"node '{node}' would allocate {what} (peak {format_size(now)}), over the run memory limit "
        f"of {format_size(walk.limit)}{partial}; {walk.hint}",
        node=node, tensor=tensor, tensor_bytes=size, peak_bytes=now, limit_bytes=walk.limit,
        partial=bool(walk.unknown))


# ------------------------------------------------------------------ public --
def input_shapes(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str | None]]:
    """``{name: (shape, dtype)}`` from arrays, or from bare shapes (dtype as the graph declares)."""
    out: dict[str, tuple[tuple[int, ...], str | None]] = {}
    for name, value in inputs.items():
        if isinstance(value, (tuple, list)):
            out[name] = (tuple(int(d) for d in value), graph.info(name).dtype)
        else:
            shape = tuple(int(d) for d in getattr(value, "shape", np.shape(value)))
            dtype = getattr(value, "dtype", None)
            try:
                name_dtype = from_numpy(np.dtype(dtype)) if dtype is not None else None
            except (KeyError, TypeError):
                name_dtype = None
            out[name] = (shape, name_dtype or graph.info(name).dtype)
    return out


def tensor_sizes(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, int | None]:
    """Estimated bytes of every top-level tensor (None: unknown) for ``inputs``."""
    flat = _flatten(graph)
    model = _infer(_shape_model(flat, input_shapes(flat, inputs)))
    sizes: dict[str, int | None] = {}
    _sizes(model.graph, sizes)
    return sizes


def estimate_memory(graph: Graph, inputs: Mapping[str, Any], limit_bytes: int | None = None, *,
                    hint: str = _HINT) -> BudgetEstimate:
    """Estimated peak live bytes of running ``graph`` on ``inputs`` (arrays or shapes)."""
    flat = _flatten(graph)
    model = _infer(_shape_model(flat, input_shapes(flat, inputs)))
    walk = _Walk(limit_bytes, hint)
    feeds = [t for t in graph.inputs if t not in graph.initializers]
    _simulate(model.graph, {}, walk, 0, feeds, kept=_kept(flat))
    return BudgetEstimate(walk.peak, walk.peak_node, list(walk.unknown))


def check_memory_budget(graph: Graph, inputs: Mapping[str, Any], limit_bytes: int | None, *,
                        hint: str = _HINT) -> BudgetEstimate | None:
    """Refuse (``MemoryBudgetError``) a run that would pass ``limit_bytes``; None = unlimited.

    ``inputs`` maps graph input names to arrays or to shapes. Call it before
    anything runs; it allocates no tensor. ``hint`` ends the message (the web
    server names its own flag).
    """
    if limit_bytes is None:
        return None
    return estimate_memory(graph, inputs, limit_bytes, hint=hint)
