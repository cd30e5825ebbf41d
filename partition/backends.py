"""Built-in backends: ``default``, ``conv_bn`` (seed 002) and ``conv_bn_relu`` (oneDNN style)."""

from __future__ import annotations

from typing import Any, Iterable

from .api import (ContainOpProperty, NodeView, SubgraphProperty, SubgraphSelector,
                  register_backend_factory, register_subgraph_property)
from .errors import LensError


def _single_consumer(node: NodeView, consumer: NodeView) -> bool:
    """Fusing is only sound when ``consumer`` is the one reader of ``node``'s output."""
    outs = [t for t in node.node.outputs if t]
    return (len(outs) >= 1 and len(node.graph.consumers(outs[0])) == 1
            and outs[0] not in node.graph.outputs and consumer.node.inputs[:1] == (outs[0],))


class ConvBNSelector(SubgraphSelector):
    """Seed 002's example: start at a Conv, take one BatchNormalization after it."""

    def __init__(self) -> None:
        self.find_bn = False

    def select(self, node: NodeView) -> bool:
        return node.op_type == "Conv"

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return False

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        if output_node.op_type == "BatchNormalization" and not self.find_bn:
            self.find_bn = True
            return True
        return False

    def filter(self, candidates: list[NodeView]) -> list[NodeView]:
        # A Conv without its BatchNormalization is no pattern: drop it as well.
        return candidates if self.find_bn else []

    def reset(self) -> None:
        self.find_bn = False


class ConvBNReluSelector(SubgraphSelector):
    """oneDNN-style fusion: exactly Conv -> BatchNormalization -> Relu, each link the only reader."""

    def __init__(self) -> None:
        self.stage = "Conv"

    def select(self, node: NodeView) -> bool:
        return node.op_type == "Conv"

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        nxt = {"Conv": "BatchNormalization", "BatchNormalization": "Relu"}.get(node.op_type)
        if nxt is None or output_node.op_type != nxt or self.stage != node.op_type:
            return False
        if not _single_consumer(node, output_node):
            return False
        self.stage = nxt
        return True

    def filter(self, candidates: list[NodeView]) -> list[NodeView]:
        return candidates if self.stage == "Relu" else []

    def reset(self) -> None:
        self.stage = "Conv"


class ConvBNProperty(SubgraphProperty):
    property_name = "conv_bn"

    def create_subgraph_selector(self) -> SubgraphSelector:
        return ConvBNSelector()


class ConvBNReluProperty(SubgraphProperty):
    property_name = "conv_bn_relu"

    def create_subgraph_selector(self) -> SubgraphSelector:
        return ConvBNReluSelector()


def _default_backend(ops: Iterable[str] | None = None, **_: Any) -> list[SubgraphProperty]:
    ops = [o for o in (ops or []) if o]
    if not ops:
        raise LensError("backend 'default' needs the op types it supports: pass --ops Conv,Relu,... "
                        "(or \"ops\": [...] in the API)")
    return [ContainOpProperty(ops, "default")]


def register_builtins() -> None:
    register_backend_factory("default", _default_backend)
    register_subgraph_property("conv_bn", ConvBNProperty())
    register_subgraph_property("conv_bn_relu", ConvBNReluProperty())
