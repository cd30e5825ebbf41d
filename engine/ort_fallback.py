"""Nodes our kernels do not cover, run by onnxruntime one node at a time.

A real model with one op we have no kernel for used to give no result at all. With
``OrtFallback`` as the executor's kernel finder, such a node gets a kernel that runs
it in its own single-node onnxruntime session, so the run completes and the report
names every node that ran this way (``OrtFallback.nodes``). Control-flow nodes are
not handed over (their bodies must run on our engine to see outer-scope values);
their bodies' nodes are, one by one.

Each session is built once per node and input dtypes and cached. Inputs are typed but
shapeless, so one session serves every shape. The node's constant inputs (weights), which
the executor names at bind time (``with_constants``), are the session's initializers, as
in the deployed model: onnxruntime then prepares them once (a quantized LSTM packs its
8-bit matrices) instead of on every call -- ddddocr's ``DynamicQuantizeLSTM`` took
6.5 ms a call fed its weights, 1.8 ms holding them. On a GPU the values make a host round
trip (onnxruntime's CPU provider): correct, not fast, and said so in the report.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import numpy as np

from partition.dtypes import from_numpy
from partition.ir import Graph, Initializer, Node, TensorInfo

from .executor import find_kernel, to_numpy
from .run_errors import RunError

Finder = Callable[[Node, Mapping[str, int]], Any]
LABEL = "onnxruntime (single-node session)"


class OrtFallback:
    """A kernel finder: ours first, else onnxruntime for the one node."""

    def __init__(self, finder: Finder | None = None) -> None:
        self.finder = finder or find_kernel
        #: node name -> "domain.op" of every node handed to onnxruntime
        self.nodes: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, node: Node, opset: Mapping[str, int]) -> Any:
        kernel = self.finder(node, opset)
        if kernel is not None or node.subgraphs or node.is_subgraph:
            return kernel
        with self._lock:
            self.nodes[node.name] = f"{node.domain + '.' if node.domain else ''}{node.op_type}"
        return _SingleNodeKernel(node, dict(opset))

    def report(self) -> list[dict[str, str]]:
        return [{"node": n, "op": op, "executor": LABEL} for n, op in self.nodes.items()]

    def check(self, graph: Graph) -> None:
        """Refuse up front, naming every op that neither our kernels nor onnxruntime can run."""
        nobody = [f"{op} (node '{name}')" for name, op, node, opset in _walk(graph)
                  if self.finder(node, opset) is None and not _onnxruntime_knows(node)]
        if nobody:
            raise RunError(f"no kernel in our engine or in onnxruntime for: {', '.join(nobody[:20])}"
                           + (f" and {len(nobody) - 20} more" if len(nobody) > 20 else "")
                           + "; partition them out to a backend that has them, or add kernels")


def _walk(graph: Graph):
    """(name, domain.op, node, opset) of every plain node, bodies included (iteratively)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            stack.extend(node.subgraphs.values())
            if node.subgraphs or node.is_subgraph:
                continue
            op = f"{node.domain + '.' if node.domain else ''}{node.op_type}"
            yield node.name, op, node, g.opset or graph.opset


_ORT_OPS: set[tuple[str, str]] | None = None


def _onnxruntime_knows(node: Node) -> bool:
    """onnxruntime has a CPU kernel for the op, or ONNX defines it (it may run as a function)."""
    global _ORT_OPS
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if _ORT_OPS is None:
        try:
            from onnxruntime.capi import onnxruntime_pybind11_state as C
            _ORT_OPS = {("" if k.domain == "ai.onnx" else k.domain, k.op_name)
                        for k in C.get_all_opkernel_def() if k.provider == "CPUExecutionProvider"}
        except (ImportError, AttributeError):  # an onnxruntime without the listing: let it try
            return True
    if (domain, node.op_type) in _ORT_OPS:
        return True
    import onnx
    return onnx.defs.has(node.op_type, domain)


class _SingleNodeKernel:
    """``kernel(xp, *args, **attrs)`` for one node, backed by cached onnxruntime sessions."""

    runs_on = LABEL

    def __init__(self, node: Node, opset: dict[str, int],
                 constants: Mapping[int, Any] | None = None) -> None:
        self.node = node
        self.opset = opset
        #: input position -> the weight array the executor passes there on every run
        self.constants: dict[int, Any] = dict(constants or {})
        # What a call needs of the node, read once: a call is one session run plus this
        # wrapping, and a one-node model (a tree ensemble) is little else.
        self._outputs = [t for t in node.outputs if t]
        self._sessions: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def with_constants(self, constants: Mapping[int, Any]) -> "_SingleNodeKernel":
        """This kernel, its session holding ``constants`` (input position -> weight array)
        as initializers; the executor calls it once, at bind time."""
        return _SingleNodeKernel(self.node, self.opset, constants)

    def __call__(self, xp: Any, *args: Any, **_attrs: Any) -> tuple:
        # A weight replaced since bind time (``Executor.set_weight``) is fed like any input.
        constants = self.constants
        held = frozenset(i for i, v in constants.items() if i < len(args) and args[i] is v) \
            if constants else frozenset()
        feeds = {}
        for i, (t, a) in enumerate(zip(self.node.inputs, args)):
            if t and a is not None and i not in held:
                feeds[t] = a if a.__class__ is np.ndarray else np.asarray(to_numpy(a))
        session = self._session(feeds, held)
        try:
            out = session.run(self._outputs, feeds)
        except Exception as exc:  # noqa: BLE001  onnxruntime raises its own types
            raise RunError(f"node '{self.node.name}' ({self.node.op_type}): our engine has no kernel "
                           f"and onnxruntime failed on it: {str(exc).splitlines()[0][:300]}") from None
        values = iter(out)
        # a sequence stays a list (ZipMap's maps made an object array of it)
        return tuple((v if isinstance(v := next(values), list) else xp.asarray(v)) if t else None
                     for t in self.node.outputs)

    def _session(self, feeds: Mapping[str, np.ndarray], held: frozenset[int]) -> Any:
        """The session for these inputs' names and dtypes (the inputs are shapeless)."""
        key = (held, *((t, v.dtype) for t, v in feeds.items()))
        session = self._sessions.get(key)   # a dict read needs no lock; a build does
        if session is None:
            with self._lock:
                session = self._sessions.get(key)
                if session is None:
                    session = self._sessions[key] = self._build(feeds, held)
        return session

    def _build(self, feeds: Mapping[str, np.ndarray], held: frozenset[int]) -> Any:
        import onnxruntime as ort

        from partition.onnx_io import to_model_proto
        tensors = {t: TensorInfo(t, from_numpy(v.dtype), None) for t, v in feeds.items()}
        weights = {}
        for i in held:
            t, v = self.node.inputs[i], np.asarray(to_numpy(self.constants[i]))
            weights[t] = Initializer.from_array(t, v)
            tensors[t] = TensorInfo(t, from_numpy(v.dtype), tuple(v.shape))
        outputs = [t for t in self.node.outputs if t]
        opset = dict(self.opset)
        opset.setdefault(self.node.domain or "", 1)
        graph = Graph(f"fallback_{self.node.name}", [self.node], list(feeds), outputs, tensors,
                      initializers=weights, opset=opset)
        opts = ort.SessionOptions()
        # fatal only: a failing run raises, and the run reports that once; at 3 onnxruntime also
        # wrote each error to stderr in colour, three more lines beside the CLI's one
        opts.log_severity_level = 4
        # One node inside our run: it computes on the engine worker that calls it, as our own
        # kernels do. With onnxruntime's default intra-op pool, whose idle threads spin, that
        # pool kept a core busy all run long beside the engine and BLAS: ddddocr's quantized CRNN
        # (one fallback node of 292) ran 66-105 ms; without the pool 34-41 ms (not spinning,
        # but with the pool: 37-40).
        opts.intra_op_num_threads = 1
        try:
            return ort.InferenceSession(to_model_proto(graph).SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001
            op = f"{self.node.domain + '.' if self.node.domain else ''}{self.node.op_type}"
            raise RunError(f"node '{self.node.name}': no kernel for {op} in our engine, and "
                           f"onnxruntime cannot run it either ({str(exc).splitlines()[0][:300]}); "
                           "no executor here can run this node") from None
