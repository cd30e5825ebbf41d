"""What a selector sees and decides: ``NodeView``, ``SubgraphSelector``, ``ContainOpSelector``.

These are the parts of the subgraph API (the subgraph API design and tutorial) the partitioning
algorithm itself needs; they live below ``api.py`` so ``build.py`` can use
them without importing the registry and the properties (which use the
algorithm): the import graph stays acyclic.
"""

from __future__ import annotations

from typing import Any, Iterable

from .ir import Graph, Node, TensorInfo


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


class ContainOpSelector(SubgraphSelector):
    """Selects connected nodes whose op type is in a set (the subgraph API design's default selector)."""

    def __init__(self, op_types: Iterable[str]) -> None:
        self.op_types = frozenset(op_types)

    def select(self, node: NodeView) -> bool:
        return node.op_type in self.op_types

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return input_node.op_type in self.op_types

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        return output_node.op_type in self.op_types
