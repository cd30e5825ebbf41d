"""The subgraph API of MXNet's subgraph API design and tutorial, in Python naming.

A backend is an ordered list of ``SubgraphProperty`` objects, registered with
``register_subgraph_property(backend, prop)``; each property makes a fresh
``SubgraphSelector`` per seed node and turns each found subgraph into a node.
Properties run in registration order, each on the graph the previous produced.
A backend built from options registers a factory and declares its options
once (``register_backend_factory(name, factory, options=[BackendOption(...)])``);
``backend_options_schema`` and ``validate_backend_options`` read that schema.
The registry functions act on the current registry (``partition.registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from .ir import SUBGRAPH_DOMAIN, SUBGRAPH_OP, Graph, Node
from .registry import BackendOption, BackendRegistry, Selection, current_registry, use_registry
from .selectors import ContainOpSelector, NodeView, SubgraphSelector
from .trace import TraceEvent

if TYPE_CHECKING:  # build.py and state.py import this module's names as types; the state is only a type here
    from .build import PassState

__all__ = ["BackendOption", "BackendRegistry", "ContainOpProperty", "ContainOpSelector", "NodeView",
           "SubgraphProperty", "SubgraphSelector", "backend_names", "backend_options_schema",
           "current_registry", "default_subgraph_node", "get_backend", "register_backend_factory",
           "register_subgraph_property", "select", "Selection", "unregister_backend", "use_registry",
           "validate_backend_options"]


class SubgraphProperty:
    """Makes selectors and turns subgraphs into nodes (the subgraph API design)."""

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

    #: The algorithm that finds this property's subgraphs, ``partition_pass(state)`` yielding trace
    #: events. None (the default) lets the runner run the generic breadth-first algorithm of the
    #: subgraph API design (``partition.build.generic_pass``); a backend with an algorithm of its
    #: own (TensorRT's, the TensorRT integration design) defines the method. The default lives in
    #: the runner, not here, because ``build`` and ``state`` import this module.
    partition_pass: Callable[["PassState"], Iterator[TraceEvent]] | None = None


def default_subgraph_node(subgraph: Graph, subgraph_id: int, property_name: str) -> Node:
    """The generic subgraph node: one input per outer tensor, one output per tensor used outside."""
    # ``trusted``: the fields are of the right types already, and a pass makes one per subgraph
    return Node.trusted(f"{property_name}_{subgraph_id}", SUBGRAPH_OP, tuple(subgraph.inputs),
                        tuple(subgraph.outputs), SUBGRAPH_DOMAIN,
                        {"property": property_name, "subgraph_id": subgraph_id}, {"body": subgraph})


class ContainOpProperty(SubgraphProperty):
    """A property using ``ContainOpSelector`` over a fixed op set."""

    def __init__(self, op_types: Iterable[str], property_name: str = "default") -> None:
        self.op_types = frozenset(op_types)
        self.property_name = property_name

    def create_subgraph_selector(self) -> SubgraphSelector:
        return ContainOpSelector(self.op_types)

    def fixed_op_types(self) -> frozenset[str] | None:
        """The op set when every selector made here is a plain ``ContainOpSelector`` over it
        (the pass driver then reads an op table instead of making a selector per seed)."""
        if type(self).create_subgraph_selector is ContainOpProperty.create_subgraph_selector:
            return self.op_types
        return None

    def explain(self, node: NodeView) -> str | None:
        op = node.node.op_type  # asked for every node left out (tens of thousands)
        if op not in self.op_types:
            return f"op {op} is not in the backend's op set"
        return None


# ---------------------------------------------------------------- registry --
def register_subgraph_property(backend: str, prop: SubgraphProperty) -> SubgraphProperty:
    """Append ``prop`` to ``backend``'s passes (registration order = run order). No options."""
    if not isinstance(prop, SubgraphProperty):
        raise TypeError(f"register_subgraph_property({backend!r}, ...) needs a SubgraphProperty, "
                        f"got {type(prop).__name__}")
    current_registry().add_property(backend, prop)
    return prop


def register_backend_factory(backend: str, factory: Callable[..., list[SubgraphProperty]],
                             options: Sequence[BackendOption] = (),
                             hints: dict[str, str] | None = None) -> None:
    """Register a backend built from ``options`` (its schema); ``factory`` gets every option, by name."""
    current_registry().add_factory(backend, factory, options, hints)


def backend_names() -> list[str]:
    return current_registry().names()


def select(backend: str, **options: Any) -> Selection:
    """``backend`` with ``options`` validated against its schema (``BackendOptionError`` names a bad one)."""
    return current_registry().select(backend, options)


def get_backend(backend: str, **options: Any) -> list[SubgraphProperty]:
    """The properties of ``backend``, in run order (a library call: its options are validated here)."""
    registry = current_registry()
    return registry.build(registry.select(backend, options))


def backend_options_schema(backend: str) -> list[dict[str, Any]]:
    """``backend``'s options as JSON-able dicts (name, type, default, help, choices, minimum)."""
    return [o.to_json() for o in current_registry().schema(backend)]


def validate_backend_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` coerced to the schema's types plus the defaults; ``BackendOptionError`` names a bad one."""
    return current_registry().validate(backend, options)


def unregister_backend(backend: str) -> None:
    """Remove a backend (plugins reloaded in tests)."""
    current_registry().remove(backend)

