"""What a device run keeps on the host: shape arithmetic, and the reads it cannot avoid.

On a GPU every read of a device value on the host (``.get()``, ``float(a)``, a shape
tensor passed to Reshape) waits for the whole stream, and every small host array a
kernel uploads costs a copy. Exported models compute shapes in the graph
(``Shape -> Gather -> Concat -> Reshape``, ``Resize`` to computed sizes, an ``If`` on a
sample rate): those values are facts the host already knows (array shapes are host
metadata on cupy too), so this plan, made once at bind time, runs such nodes with the
numpy kernels on host values and hands them to the kernels that read them on the host.

A node runs on the host when its op is plain shape arithmetic (``HOST_OPS``), its outputs
are neither graph outputs nor read by a body, and every input is host-known: a host
tensor, a small weight (host copy made here), a small static integer graph input (fed,
never uploaded), or, for ``Shape``/``Size``, anything (only its shape is read). A device
kernel given a host tensor where it wants a device one gets it through
``kernels.device.resident``: the same shape facts every run, uploaded once.

What stays on the device but needs a host value anyway (an ``If`` whose condition the
model computes from device data, a Reshape to a shape computed on the device) is listed
in ``host_reads``: the plan says so before the run, and each is one sync per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from partition.ir import Graph, Node

from .kernels.device import resident
from .kernels.registry import HOST_INPUTS, kernel_attrs
from .values import to_numpy

#: Ops whose numpy kernel is cheap on a handful of integers.
HOST_OPS = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice", "Reshape",
    "Identity", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Max", "Min",
    "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Where",
    "ReduceProd", "ReduceMax", "ReduceMin",
})
#: Ops that read only their input's shape: host-known whatever the input is.
SHAPE_READERS = frozenset({"Shape", "Size"})
#: Inputs read on the host: ``HOST_INPUTS`` (shapes, axes, Resize's scales), conditions, trip counts.
HOST_READ_INPUTS: dict[str, tuple[int, ...]] = {
    **HOST_INPUTS, "If": (0,), "Loop": (0, 1),
}
#: Weights and graph inputs larger than this stay device-only (a host copy is for shapes).
MAX_HOST_ELEMENTS = 64
_INT_TYPES = frozenset({"int64", "int32", "int16", "int8", "uint8", "bool"})


@dataclass(frozen=True)
class HostRead:
    """A device value a node must read on the host: one sync per run, said in the plan."""

    node: str
    op_type: str
    tensor: str
    why: str


@dataclass(frozen=True)
class DevicePlan:
    host_nodes: frozenset[str]
    host_tensors: frozenset[str]
    host_inputs: frozenset[str]        # graph inputs kept on the host (never uploaded)
    host_weights: Mapping[str, np.ndarray]
    host_reads: tuple[HostRead, ...]
    is_body: bool = False   # host inputs are a subgraph body's host-fed facts, not fresh feeds

    @property
    def fresh_inputs(self) -> frozenset[str]:
        """Host inputs a device kernel wanting one gets uploaded each run (a graph's own feeds);
        a body's host-fed facts go up once per value instead (``resident``)."""
        return frozenset() if self.is_body else self.host_inputs

    def describe(self) -> dict[str, Any]:
        """For run reports: what runs on the host and what reads the device."""
        return {"host_nodes": sorted(self.host_nodes), "host_inputs": sorted(self.host_inputs),
                "host_reads": [{"node": r.node, "op": r.op_type, "tensor": r.tensor, "why": r.why}
                               for r in self.host_reads]}

    def feed(self, name: str, value: Any, upload: Callable[[Any], Any]) -> Any:
        """A graph input's value for the run: host inputs stay numpy, the rest go up."""
        return to_numpy(value) if name in self.host_inputs else upload(value)


EMPTY = DevicePlan(frozenset(), frozenset(), frozenset(), {}, ())


def plan_device_run(graph: Graph, nodes: Sequence[Node], weights: Mapping[str, Any],
                    is_body: bool, host_fed: frozenset[str] = frozenset(),
                    host_out: frozenset[str] = frozenset(),
                    engine_body: Callable[[Node], bool] = lambda node: False) -> DevicePlan:
    """The plan for ``nodes`` (bound order) of ``graph`` on a device. Reads small weights
    back once (at bind time, not in a run). ``host_fed``: a subgraph body's inputs that the
    enclosing graph computes on the host (it hands them over as host arrays); ``host_out``:
    its outputs the enclosing graph wants as host arrays. ``engine_body(node)``: whether a
    subgraph node's body runs on our engine -- then the outputs it can compute on the host
    from what it is fed there are host facts here too (a partition cuts shape arithmetic
    apart: a Slice's bounds made by Unsqueezes inside a TensorRT region)."""
    host_weights: dict[str, np.ndarray] = {}

    def weight_on_host(t: str) -> bool:
        if t in host_weights:
            return True
        w = weights.get(t)
        if w is None or getattr(w, "size", MAX_HOST_ELEMENTS + 1) > MAX_HOST_ELEMENTS:
            return False
        host_weights[t] = to_numpy(w)
        return True

    pinned = set(graph.outputs) - host_out  # outputs stay device arrays; bodies read device values
    for node in nodes:
        for body in node.subgraphs.values():
            pinned.update(body.free_tensors)
    # A small integer graph input stays on the host only where no device kernel wants it
    # as data (token ids for a Gather go up as usual): planned, then planned again without.
    host_inputs = set(host_fed) & {*graph.inputs, *graph.free_tensors} if is_body else {t for t in graph.inputs
                                         if t not in weights and _small_int_input(graph, t)}
    while True:
        host, host_nodes = _host_side(nodes, host_inputs, pinned, weight_on_host, engine_body)
        if is_body:
            # A subgraph body's host-fed facts stay host facts where its own kernels, or the
            # If/Loop/Scan bodies inside it, want them as data too: those get them uploaded once
            # per value (bind_call, Executor._control_flow_call); a Reshape by one reads it on
            # the host, with no sync.
            break
        wanted = {t for n in nodes if n.name not in host_nodes and not n.is_subgraph  # a body takes them as they are
                  for i, t in enumerate(n.inputs) if t in host_inputs and i not in _read_on_host(n)}
        wanted |= {t for n in nodes for body in n.subgraphs.values()   # an If/Loop/Scan body reads it on the device
                   for t in body.free_tensors if t in host_inputs}
        if not wanted:
            break
        host_inputs -= wanted
    reads = tuple(_host_reads(nodes, host_nodes, host, weights))
    kept = {t: host_weights[t] for n in nodes if n.name in host_nodes for t in n.inputs if t in host_weights}
    return DevicePlan(frozenset(host_nodes), frozenset(host - host_inputs), frozenset(host_inputs),
                      kept, reads, is_body)


def _host_side(nodes: Sequence[Node], host_inputs: set[str], pinned: set[str],
               weight_on_host: Callable[[str], bool],
               engine_body: Callable[[Node], bool] = lambda node: False) -> tuple[set[str], set[str]]:
    """(host-known tensors, host nodes), in one pass over the bound order."""
    host, host_nodes = set(host_inputs), set()
    for node in nodes:
        if node.is_subgraph and engine_body(node):
            host.update(t for t in _body_host_outputs(node.body, host, weight_on_host) if t not in pinned)
        elif _runs_on_host(node, host, pinned, weight_on_host):
            host_nodes.add(node.name)
            host.update(t for t in node.outputs if t)
    return host, host_nodes


def _body_host_outputs(body: Graph, host: set[str], weight_on_host: Callable[[str], bool]) -> set[str]:
    """The outputs of a subgraph body our engine runs that its own plan computes on the host,
    fed ``host`` (the enclosing graph's host-known tensors and small weights, by name). Its
    Constant nodes are weights once bound (small ones host-known). An estimate of the body's
    plan made before it binds: where they disagree the subgraph operator reads the value back
    (``subgraph_ops._EngineImpl.run``), once per run."""
    fed = {t for t in body.inputs if t in host or weight_on_host(t)}
    fed.update(t for t, w in body.initializers.items() if math.prod(w.shape) <= MAX_HOST_ELEMENTS)
    fed.update(n.outputs[0] for n in body.nodes if n.op_type == "Constant" and not n.inputs and n.outputs
               and n.attrs.get("value") is not None and np.size(n.attrs["value"]) <= MAX_HOST_ELEMENTS)
    inner, _ = _host_side(body.nodes, fed, set(), lambda t: False)
    return {t for t in body.outputs if t in inner}


def _read_on_host(node: Node) -> tuple[int, ...]:
    return HOST_READ_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()


def _small_int_input(graph: Graph, name: str) -> bool:
    info = graph.tensors.get(name)
    if info is None or str(info.dtype).lower() not in _INT_TYPES or info.shape is None:
        return False
    if not all(isinstance(d, int) for d in info.shape):
        return False
    return int(np.prod(info.shape, dtype=np.int64)) <= MAX_HOST_ELEMENTS


def _runs_on_host(node: Node, host: set[str], pinned: set[str],
                  weight_on_host: Callable[[str], bool]) -> bool:
    if node.op_type not in HOST_OPS or node.domain not in ("", "ai.onnx") or node.subgraphs:
        return False
    if any(t in pinned for t in node.outputs if t):
        return False
    if node.op_type in SHAPE_READERS:
        return True
    ins = [t for t in node.inputs if t]
    return bool(ins) and all(t in host or weight_on_host(t) for t in ins)


def _host_reads(nodes: Sequence[Node], host_nodes: set[str], host: set[str],
                weights: Mapping[str, Any]) -> list[HostRead]:
    found = []
    for node in nodes:
        if node.name in host_nodes or node.domain not in ("", "ai.onnx"):
            continue
        for i in HOST_READ_INPUTS.get(node.op_type, ()):
            t = node.inputs[i] if i < len(node.inputs) else ""
            if t and t not in host and t not in weights:
                what = ("condition" if (node.op_type, i) in (("If", 0), ("Loop", 1)) else
                        "trip count" if node.op_type == "Loop" else f"input {i}")
                found.append(HostRead(node.name, node.op_type, t,
                                      f"its {what} '{t}' is computed on the device; the kernel reads it "
                                      "on the host (one sync per run)"))
    return found


def bind_call(plan: DevicePlan, node: Node, call: Callable[..., tuple], kernel: Any,
              xp: Any) -> Callable[..., tuple]:
    """``call`` as the run should make it: a host node through its numpy kernel on host
    values; a device node given host tensors where it wants device ones, with those uploaded
    (a host tensor read by a device kernel: rare, and counted as an upload)."""
    if node.name in plan.host_nodes:
        attrs = kernel_attrs(node)
        host_weights = plan.host_weights  # looked up per call: set_weight refreshes it
        weights = tuple((i, t) for i, t in enumerate(node.inputs) if t in host_weights)

        def host_call(run: Any, args: list, rctx: Any) -> tuple:
            for i, t in weights:
                args[i] = host_weights[t]
            return tuple(kernel(np, *args, **attrs))
        return host_call
    host = plan.host_tensors | plan.host_inputs
    # A subgraph operator takes host tensors as they are: its body on our engine plans
    # them as host inputs (a Reshape's shape stays a host fact across the cut), and it
    # uploads what another runtime needs on the device (subgraph_ops.SubgraphOp.call).
    keep = set(range(len(node.inputs))) if node.is_subgraph else set(_read_on_host(node))
    # Shape facts are the same run after run: uploaded once (kernels/device.py); a graph
    # input kept on the host for shape arithmetic is uploaded where a kernel wants it.
    fresh = plan.fresh_inputs
    lift = tuple((i, xp.asarray if t in fresh else partial(resident, xp))
                 for i, t in enumerate(node.inputs) if t in host and i not in keep)
    if not lift:
        return call

    def device_call(run: Any, args: list, rctx: Any) -> tuple:
        for i, up in lift:
            if isinstance(args[i], np.ndarray):
                args[i] = up(args[i])
        return call(run, args, rctx)
    return device_call


def device_read_notes(executor: Any) -> list[str]:
    """One line per device value a run of ``executor`` (bodies included) reads on the host."""
    lines = [f"on the device, node '{r.node}' ({r.op_type}): {r.why}"
             for r in executor.device_plan.host_reads]
    for child in list(executor._children.values()):
        lines += device_read_notes(child)
    return lines
