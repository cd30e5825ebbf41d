"""The subgraph API of seeds 000 and 002, in Python naming.

A backend is an ordered list of ``SubgraphProperty`` objects, registered with
``register_subgraph_property(backend, prop)``; each property makes a fresh
``SubgraphSelector`` per seed node and turns each found subgraph into a node.
Properties run in registration order, each on the graph the previous produced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from .errors import UnknownBackendError
from .ir import SUBGRAPH_DOMAIN, SUBGRAPH_OP, Graph, Node, TensorInfo

if TYPE_CHECKING:
    from .build import PassState
    from .trace import TraceEvent


class NodeView:
    """What a selector sees of a node: name, op, attributes, typed inputs and outputs.

    ``id`` is the node's number in the partitioner's seed order.
    """

    __slots__ = ("node", "graph", "id")

    def __init__(self, node: Node, graph: Graph, id: int) -> None:
        self.node = node
        self.graph = graph
        self.id = id

    name = property(lambda self: self.node.name)
    op_type = property(lambda self: self.node.op_type)
    domain = property(lambda self: self.node.domain)
    attrs = property(lambda self: self.node.attrs)

    @property
    def inputs(self) -> list[TensorInfo]:
        return [self.graph.info(t) if t else TensorInfo("") for t in self.node.inputs]

    @property
    def outputs(self) -> list[TensorInfo]:
        return [self.graph.info(t) for t in self.node.outputs]

    @property
    def input_shapes(self) -> list[Any]:
        return [i.shape for i in self.inputs]

    @property
    def output_shapes(self) -> list[Any]:
        return [o.shape for o in self.outputs]

    @property
    def input_dtypes(self) -> list[str | None]:
        return [i.dtype for i in self.inputs]

    @property
    def output_dtypes(self) -> list[str | None]:
        return [o.dtype for o in self.outputs]

    def is_weight(self, index: int) -> bool:
        """Whether input ``index`` is an initializer (a build-time constant weight)."""
        t = self.node.inputs[index] if index < len(self.node.inputs) else ""
        return bool(t) and t in self.graph.initializers

    def __repr__(self) -> str:
        return f"<{self.op_type} {self.name!r} #{self.id}>"


class SubgraphSelector:
    """Decides which nodes join a subgraph. Stateful: a fresh one per seed."""

    def select(self, node: NodeView) -> bool:
        """Whether growth may start at ``node``."""
        return False

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        """Whether ``input_node`` (a producer of ``node``) joins the candidates."""
        return False

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        """Whether ``output_node`` (a consumer of ``node``) joins the candidates."""
        return False

    def filter(self, candidates: list[NodeView]) -> list[NodeView]:
        """The last word on the candidates: the nodes returned form the subgraph."""
        return candidates

    def reset(self) -> None:
        """Forget state before growth restarts from the same seed."""


class SubgraphProperty:
    """Makes selectors and turns subgraphs into nodes (seed 000)."""

    property_name: str = "subgraph"
    inference_only: bool = True

    def create_subgraph_selector(self) -> SubgraphSelector:
        raise NotImplementedError(f"{type(self).__name__} must define create_subgraph_selector()")

    def create_subgraph_node(self, subgraph: Graph, subgraph_id: int) -> Node | None:
        """The node replacing ``subgraph``; None rejects the subgraph."""
        return default_subgraph_node(subgraph, subgraph_id, self.property_name)

    def explain(self, node: NodeView) -> str | None:
        """Why ``node`` can never be in this property's subgraphs, if there is a simple reason."""
        return None

    def partition_pass(self, state: "PassState") -> "Iterable[TraceEvent]":
        """The algorithm that finds this property's subgraphs; yields trace events.

        The default is the generic breadth-first algorithm of seed 000; a backend
        with an algorithm of its own (TensorRT's, seed 004) overrides this.
        """
        from .build import generic_pass
        return generic_pass(self, state)


def default_subgraph_node(subgraph: Graph, subgraph_id: int, property_name: str) -> Node:
    """The generic subgraph node: one input per outer tensor, one output per tensor used outside."""
    return Node(f"{property_name}_{subgraph_id}", SUBGRAPH_OP, tuple(subgraph.inputs),
                tuple(subgraph.outputs), SUBGRAPH_DOMAIN,
                {"property": property_name, "subgraph_id": subgraph_id}, {"body": subgraph})


class ContainOpSelector(SubgraphSelector):
    """Selects connected nodes whose op type is in a set (seed 000's default selector)."""

    def __init__(self, op_types: Iterable[str]) -> None:
        self.op_types = frozenset(op_types)

    def select(self, node: NodeView) -> bool:
        return node.op_type in self.op_types

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return input_node.op_type in self.op_types

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        return output_node.op_type in self.op_types


class ContainOpProperty(SubgraphProperty):
    """A property using ``ContainOpSelector`` over a fixed op set."""

    def __init__(self, op_types: Iterable[str], property_name: str = "default") -> None:
        self.op_types = frozenset(op_types)
        self.property_name = property_name

    def create_subgraph_selector(self) -> SubgraphSelector:
        return ContainOpSelector(self.op_types)

    def explain(self, node: NodeView) -> str | None:
        if node.op_type not in self.op_types:
            return f"op {node.op_type} is not in the backend's op set"
        return None


# ---------------------------------------------------------------- registry --
_BACKENDS: dict[str, list[SubgraphProperty]] = {}
#: Backends built from options (e.g. ``default`` needs the op set): name -> factory.
_FACTORIES: dict[str, Callable[..., list[SubgraphProperty]]] = {}


def register_subgraph_property(backend: str, prop: SubgraphProperty) -> SubgraphProperty:
    """Append ``prop`` to ``backend``'s passes (registration order = run order)."""
    if not isinstance(prop, SubgraphProperty):
        raise TypeError(f"register_subgraph_property({backend!r}, ...) needs a SubgraphProperty, "
                        f"got {type(prop).__name__}")
    _BACKENDS.setdefault(backend, []).append(prop)
    return prop


def register_backend_factory(backend: str, factory: Callable[..., list[SubgraphProperty]]) -> None:
    """Register a backend whose properties depend on options (``ops=...``, ``min_size=...``)."""
    _FACTORIES[backend] = factory


def backend_names() -> list[str]:
    return sorted(set(_BACKENDS) | set(_FACTORIES))


def get_backend(backend: str, **options: Any) -> list[SubgraphProperty]:
    """The properties of ``backend``, in run order."""
    if backend in _FACTORIES:
        return _FACTORIES[backend](**options)
    if backend in _BACKENDS:
        return list(_BACKENDS[backend])
    raise UnknownBackendError(f"unknown backend '{backend}'; known: {', '.join(backend_names()) or 'none'}")


def unregister_backend(backend: str) -> None:
    """Remove a backend (plugins reloaded in tests, the web server's per-plugin cleanup)."""
    _BACKENDS.pop(backend, None)
    _FACTORIES.pop(backend, None)


def sequence_names(props: Sequence[SubgraphProperty]) -> list[str]:
    return [p.property_name for p in props]
