"""The model IR: plain data, names as identity.

A ``Graph`` is an immutable list of ``Node`` objects in topological order plus
what surrounds them: graph inputs and outputs (tensor names, original order),
``TensorInfo`` for every tensor whose type is known, lazily loaded
``Initializer`` weights and the opset imports. Nodes refer to tensors by name
and to nothing else; who produces and who consumes a tensor is *derived* from
the node list (``Graph.producer`` / ``Graph.consumers``) and cached, never kept
in sync by hand. Passes are functions ``Graph -> Graph`` that build new graphs.

There is a closed set of node kinds, as in torch.fx: an ONNX operator
(``domain`` "" or a custom domain) or a subgraph node (``is_subgraph``: domain
``sglens``, op ``Subgraph``, its body in ``subgraphs["body"]``). Control-flow
operators keep their bodies in ``subgraphs`` under the ONNX attribute name
(``then_branch``, ``else_branch``, ``body``); a call of a model-local function
keeps its instantiated body under ``"function"`` (``partition/local_functions.py``).

Nothing here imports onnx: ``partition.onnx_io`` is the one module that
touches protobufs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, NoReturn, Sequence

import numpy as np

from .dtypes import ITEM_SIZE
from .errors import GraphCycleError, ModelError

Dim = int | str | None
SUBGRAPH_DOMAIN = "sglens"
SUBGRAPH_OP = "Subgraph"


@dataclass(frozen=True)
class TensorInfo:
    """Type of one tensor: ONNX dtype name and shape (symbolic dims as str)."""

    name: str
    dtype: str | None = None
    shape: tuple[Dim, ...] | None = None

    @classmethod
    def trusted(cls, name: str, dtype: str | None, shape: tuple[Dim, ...] | None) -> "TensorInfo":
        """From fields already of the right types (the importer's), without the frozen
        dataclass's per-field ``object.__setattr__`` (one TensorInfo per tensor of a model)."""
        info = object.__new__(cls)
        object.__setattr__(info, "__dict__", {"name": name, "dtype": dtype, "shape": shape})
        return info

    @property
    def nbytes(self) -> int | None:
        """Size in bytes when dtype and every dim are known, else None."""
        if self.shape is None or self.dtype not in ITEM_SIZE:
            return None
        size = ITEM_SIZE[self.dtype]
        for dim in self.shape:
            if not isinstance(dim, int):
                return None
            size *= dim
        return size


class Initializer:
    """A weight whose data is read only when first asked for."""

    __slots__ = ("name", "dtype", "shape", "_loader", "_value")

    def __init__(self, name: str, dtype: str | None, shape: tuple[int, ...],
                 loader: Callable[[], np.ndarray]) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self._loader = loader
        self._value: np.ndarray | None = None

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, dtype: str | None = None) -> "Initializer":
        from .dtypes import from_numpy
        array = np.asarray(array)
        init = cls(name, dtype or from_numpy(array.dtype), tuple(array.shape), lambda: array)
        init._value = array
        return init

    @property
    def value(self) -> np.ndarray:
        if self._value is None:
            self._value = self._loader()
        return self._value

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def info(self) -> TensorInfo:
        return TensorInfo(self.name, self.dtype, tuple(self.shape))

    def __repr__(self) -> str:
        return f"Initializer({self.name!r}, {self.dtype}, {list(self.shape)})"


@dataclass(frozen=True, eq=False)
class Node:
    """One operator. ``inputs`` may hold "" for an omitted optional input."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    domain: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    subgraphs: Mapping[str, "Graph"] = field(default_factory=dict)

    @classmethod
    def trusted(cls, name: str, op_type: str, inputs: tuple[str, ...], outputs: tuple[str, ...],
                domain: str, attrs: Mapping[str, Any], subgraphs: Mapping[str, "Graph"]) -> "Node":
        """A node from fields already of the right types (the importer's), without the
        frozen dataclass's per-field ``object.__setattr__`` (a third of import time at 100k nodes)."""
        node = object.__new__(cls)
        object.__setattr__(node, "__dict__", {"name": name, "op_type": op_type, "inputs": inputs,
                                              "outputs": outputs, "domain": domain, "attrs": attrs,
                                              "subgraphs": subgraphs})
        return node

    @property
    def is_subgraph(self) -> bool:
        return self.domain == SUBGRAPH_DOMAIN and self.op_type == SUBGRAPH_OP

    @property
    def body(self) -> "Graph":
        """The body of a subgraph node."""
        return self.subgraphs["body"]

    def __repr__(self) -> str:
        dom = f"{self.domain}." if self.domain else ""
        return f"Node({self.name!r}, {dom}{self.op_type}, in={list(self.inputs)}, out={list(self.outputs)})"


class Graph:
    """An immutable, validated graph. See the module docstring."""

    def __init__(self, name: str, nodes: Iterable[Node], inputs: Sequence[str],
                 outputs: Sequence[str], tensors: Mapping[str, TensorInfo] | None = None,
                 initializers: Mapping[str, Initializer] | None = None,
                 opset: Mapping[str, int] | None = None, *, is_body: bool = False,
                 metadata: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.inputs: tuple[str, ...] = tuple(inputs)
        self.outputs: tuple[str, ...] = tuple(outputs)
        self.tensors: dict[str, TensorInfo] = dict(tensors or {})
        self.initializers: dict[str, Initializer] = dict(initializers or {})
        self.opset: dict[str, int] = dict(opset or {})
        self.is_body = is_body
        self.metadata: dict[str, str] = dict(metadata or {})
        self.nodes: tuple[Node, ...]
        self.nodes, writers = _validated_order(tuple(nodes), self.inputs, self.initializers, is_body)
        if writers is not None:  # the check's tensor -> writer position map, when the order stood
            self.__dict__["_writer_pos"] = writers  # fills the cached_property
        self._check_outputs()

    # ---- derived maps (cached: the graph never changes after construction) ----
    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> position in ``nodes`` (a topological order)."""
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def _producers(self) -> dict[str, Node]:
        return {t: n for n in self.nodes for t in n.outputs if t}

    @cached_property
    def _reads(self) -> dict[str, tuple[str, ...]]:
        """Node name -> tensors it reads: its inputs, then what its bodies read from outside."""
        result: dict[str, tuple[str, ...]] = {}
        for node in self.nodes:
            ins = node.inputs
            if not node.subgraphs and (len(ins) == 1 and ins[0] or len(ins) == 2 and ins[0] != ins[1]
                                       and ins[0] and ins[1]):
                result[node.name] = ins  # the common case, already distinct and non-empty
                continue
            reads = dict.fromkeys(t for t in ins if t)
            for body in node.subgraphs.values():
                reads.update(dict.fromkeys(body.free_tensors))
            result[node.name] = tuple(reads)
        return result

    @cached_property
    def _consumers(self) -> dict[str, list[Node]]:
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for t in self._reads[node.name]:
                result.setdefault(t, []).append(node)
        return result

    @cached_property
    def _writer_pos(self) -> dict[str, int]:
        """Tensor -> position of the node writing it (the constructor's check fills it)."""
        return {t: i for i, n in enumerate(self.nodes) for t in n.outputs if t}

    def reads(self, node: Node) -> tuple[str, ...]:
        """Distinct tensors ``node`` depends on, outer-scope reads of its bodies included."""
        return self._reads[node.name]

    def producer(self, tensor: str) -> Node | None:
        """The node writing ``tensor``; None for graph inputs, weights, outer-scope tensors."""
        return self._producers.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        """Nodes reading ``tensor`` (directly or from a body), in graph order, each once."""
        return self._consumers.get(tensor, [])

    def input_nodes(self, node: Node) -> list[Node]:
        """Distinct producers of what ``node`` reads, in input-index order."""
        seen: dict[str, Node] = {}
        for t in self._reads[node.name]:
            p = self._producers.get(t)
            if p is not None and p.name not in seen:
                seen[p.name] = p
        return list(seen.values())

    def output_nodes(self, node: Node) -> list[Node]:
        """Distinct consumers of ``node``'s outputs, in graph order."""
        seen: dict[str, Node] = {}
        for t in node.outputs:
            for c in self._consumers.get(t, ()):
                seen.setdefault(c.name, c)
        index = self.index
        return sorted(seen.values(), key=lambda n: index[n.name])

    @cached_property
    def free_tensors(self) -> tuple[str, ...]:
        """Tensors read but defined nowhere in this graph (outer scope of a body)."""
        defined = set(self.inputs) | set(self.initializers) | set(self._producers)
        free: dict[str, None] = {}
        for node in self.nodes:
            for t in node.inputs:
                if t and t not in defined:
                    free[t] = None
            for body in node.subgraphs.values():
                for t in body.free_tensors:
                    if t not in defined:
                        free[t] = None
        return tuple(free)

    def info(self, tensor: str) -> TensorInfo:
        """Type of ``tensor``; an empty TensorInfo when unknown."""
        if tensor in self.tensors:
            return self.tensors[tensor]
        if tensor in self.initializers:
            return self.initializers[tensor].info()
        return TensorInfo(tensor)

    def is_constant(self, node: Node) -> bool:
        """Whether ``node`` only yields data known before any run: a Constant, or an Identity
        of a weight (how exporters alias a shared weight: the T5 export has 200 of them)."""
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Constant":
            return not any(node.inputs)
        return node.op_type == "Identity" and len(node.inputs) == 1 and node.inputs[0] in self.initializers

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @classmethod
    def trusted(cls, name: str, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
                tensors: Mapping[str, TensorInfo], opset: Mapping[str, int], *,
                closed: bool = False) -> "Graph":
        """A body cut from a validated graph: nodes already checked and ordered, so no re-check.

        Partitioning makes one body per subgraph; validating each again was a third
        of the time on large models. ``closed``: the inputs hold every tensor the
        nodes read from outside, so ``free_tensors`` is empty without looking.
        """
        graph = cls.__new__(cls)
        graph.name, graph.nodes = name, tuple(nodes)
        graph.inputs, graph.outputs = tuple(inputs), tuple(outputs)
        graph.tensors, graph.initializers, graph.opset = dict(tensors), {}, dict(opset)
        graph.is_body, graph.metadata = True, {}
        if closed:
            graph.__dict__["free_tensors"] = ()  # fills the cached_property
        return graph

    def replace(self, **changes: Any) -> "Graph":
        """A new graph with some constructor arguments changed."""
        args = dict(name=self.name, nodes=self.nodes, inputs=self.inputs, outputs=self.outputs,
                    tensors=self.tensors, initializers=self.initializers, opset=self.opset,
                    is_body=self.is_body, metadata=self.metadata)
        args.update(changes)
        return Graph(**args)

    def _check_outputs(self) -> None:
        if self.is_body:
            return
        producers, inputs = self._producers, self.inputs
        for out in self.outputs:
            if out not in producers and out not in self.initializers and out not in inputs:
                raise ModelError(f"graph output '{out}' is produced by no node and is not an input; "
                                 "fix the model's output list")

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, inputs={list(self.inputs)}, "
                f"outputs={list(self.outputs)})")


def _validated_order(nodes: tuple[Node, ...], inputs: Sequence[str], initializers: Mapping[str, Initializer],
                     is_body: bool) -> tuple[tuple[Node, ...], dict[str, int] | None]:
    """Check names and producers; return the nodes in a stable topological order, and
    tensor -> writer position when that order is the one given (else None).

    Files are usually sorted already (ONNX requires it), so the O(N) check comes
    first and the O(N log N) sort only when it fails. Names and writers are checked
    with set and dict comprehensions (quicker than a loop at 100k nodes); only a
    model that fails them is walked node by node, to name the first offender.
    """
    given = set(inputs) | set(initializers)
    written = [(t, pos) for pos, node in enumerate(nodes) for t in node.outputs if t]
    producer: dict[str, int] = dict(written)   # tensor -> position of the node writing it
    if len({node.name for node in nodes}) != len(nodes) or len(producer) != len(written) \
            or not given.isdisjoint(producer):
        _name_the_bad_writer(nodes, given)
    reads = [node.inputs if not node.subgraphs and "" not in node.inputs else _node_reads(node)
             for node in nodes]
    get = producer.get
    in_order = True
    for pos, node_reads in enumerate(reads):
        for t in node_reads:
            p = get(t)
            if p is None:
                if t not in given and not is_body:
                    node = nodes[pos]
                    raise ModelError(f"node '{node.name}' ({node.op_type}) reads tensor '{t}', which no "
                                     "node produces and which is not a graph input or initializer")
            elif p >= pos:
                in_order = False
    if in_order:
        return nodes, producer
    return _stable_toposort(nodes, reads, {t: nodes[p].name for t, p in producer.items()}), None


def _name_the_bad_writer(nodes: tuple[Node, ...], given: set[str]) -> NoReturn:
    """Raise the error of the first node whose name or outputs are taken (some node's are)."""
    producer: dict[str, int] = {}
    names: set[str] = set()
    for pos, node in enumerate(nodes):
        if node.name in names:
            raise ModelError(f"two nodes are named '{node.name}'; node names must be unique")
        names.add(node.name)
        for t in node.outputs:
            if not t:
                continue
            if t in producer:
                raise ModelError(f"tensor '{t}' is produced by two nodes, '{nodes[producer[t]].name}' and "
                                 f"'{node.name}'; each tensor must have one producer")
            if t in given:
                raise ModelError(f"node '{node.name}' writes '{t}', which is already a graph input "
                                 "or initializer")
            producer[t] = pos
    raise AssertionError("unreachable: a check failed, so some node is named")  # pragma: no cover


def _node_reads(node: Node) -> list[str] | tuple[str, ...]:
    if not node.subgraphs:
        return node.inputs if "" not in node.inputs else [t for t in node.inputs if t]
    reads = [t for t in node.inputs if t]
    for body in node.subgraphs.values():
        reads.extend(body.free_tensors)
    return reads


def _stable_toposort(nodes: tuple[Node, ...], reads: Sequence[Sequence[str]],
                     producer: Mapping[str, str]) -> tuple[Node, ...]:
    position = {n.name: i for i, n in enumerate(nodes)}
    preds: list[set[int]] = [{position[producer[t]] for t in rs if t in producer} for rs in reads]
    succs: list[list[int]] = [[] for _ in nodes]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    indegree = [len(ps) for ps in preds]
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for s in succs[i]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, s)
    if len(order) < len(nodes):
        cycle = _find_cycle([i for i, d in enumerate(indegree) if d > 0], preds)
        path = " -> ".join(nodes[i].name for i in cycle)
        raise GraphCycleError(f"the graph has a cycle: {path}; a model graph must be acyclic")
    return tuple(nodes[i] for i in order)


def _find_cycle(stuck: list[int], preds: list[set[int]]) -> list[int]:
    """A cycle among nodes left with unmet inputs: walk predecessors until one repeats."""
    stuck_set = set(stuck)
    seen: dict[int, int] = {}
    walk: list[int] = []
    current = stuck[0]
    while current not in seen:
        seen[current] = len(walk)
        walk.append(current)
        current = min(p for p in preds[current] if p in stuck_set)
    cycle = walk[seen[current]:]
    cycle.reverse()  # predecessors were walked: reverse into data-flow order
    return cycle + [cycle[0]]
