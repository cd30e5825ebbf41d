"""Built-in backends and their option schemas: ``default``, ``conv_bn`` (the subgraph API tutorial),
``conv_bn_relu`` (oneDNN style) and ``tensorrt`` (the TensorRT integration design, in ``partition/tensorrt``).

Each backend's options are declared once as ``BackendOption`` lists (here; tensorrt's in
``partition/tensorrt/options.py``);
``register_builtins(registry)`` puts the four backends into a registry.
"""

from __future__ import annotations

import re

from typing import Iterable

from .api import ContainOpProperty, NodeView, SubgraphProperty, SubgraphSelector
from .errors import LensError
from .ir import Graph, Node
from .registry import BackendOption, BackendRegistry
from .tensorrt.algorithm import tensorrt_backend
from .tensorrt.options import TENSORRT_HINTS, TENSORRT_OPTIONS

DEFAULT_OPTIONS = (
    BackendOption("ops", "str_list", [], "op types the backend supports (CLI: comma-separated)"),
    BackendOption("min_size", "int", 1, "smallest subgraph kept, in nodes", minimum=1),
)


# Op types that move or describe data rather than compute: never guessed as the ``default``
# backend's ``ops``.
NOT_COMPUTE = frozenset((
    "Constant", "ConstantOfShape", "Identity", "Shape", "Size", "Cast", "CastLike", "Reshape",
    "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather", "GatherElements", "GatherND", "Slice",
    "Concat", "Split", "Expand", "Tile", "Range", "Where", "Equal", "Less", "Greater", "Not", "And",
    "Or", "If", "Loop", "Scan", "NonZero", "Pad", "Dropout", "Unique", "ScatterND", "ScatterElements"))


def suggested_ops(op_counts: dict[str, int], most: int = 3) -> list[str]:
    """The ``default`` backend's ops when the user gave none: the model's ``most`` most frequent
    compute op types (Conv, MatMul, Relu...), ties by name. The model page prefills its ops field
    with them and the command line uses them, so a first ``sglens partition m.onnx`` or a page
    only opened partitions something instead of failing with "needs the op types". A graph whose
    top level computes nothing (a float16 silero-VAD: Casts around one If holding the network)
    gets its most frequent op types but Constant and Identity."""
    def top(keep) -> list[str]:
        ranked = sorted((kv for kv in op_counts.items() if keep(kv[0])), key=lambda kv: (-kv[1], kv[0]))
        return [op for op, _ in ranked[:most]]
    return top(lambda op: op not in NOT_COMPUTE) or top(lambda op: op not in ("Constant", "Identity"))


def _single_consumer(node: NodeView, consumer: NodeView) -> bool:
    """Fusing is only sound when ``consumer`` is the one reader of ``node``'s output."""
    outs = [t for t in node.node.outputs if t]
    return (len(outs) >= 1 and len(node.graph.consumers(outs[0])) == 1
            and outs[0] not in node.graph.outputs and consumer.node.inputs[:1] == (outs[0],))


class ConvBNSelector(SubgraphSelector):
    """The subgraph API tutorial's example: start at a Conv, take one BatchNormalization after it."""

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


class MinSizeContainOpProperty(ContainOpProperty):
    """``ContainOpProperty`` that rejects subgraphs with fewer than ``min_size`` nodes."""

    def __init__(self, op_types: Iterable[str], min_size: int, property_name: str = "default") -> None:
        super().__init__(op_types, property_name)
        self.min_size = min_size

    def create_subgraph_node(self, subgraph: Graph, subgraph_id: int) -> Node | None:
        if len(subgraph.nodes) < self.min_size:
            return None
        return super().create_subgraph_node(subgraph, subgraph_id)


_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]*")


def _default_backend(ops: list[str], min_size: int) -> list[SubgraphProperty]:
    if not ops:
        raise LensError("backend 'default' needs the op types it supports, e.g. Conv,Relu: in the ops "
                        "field of the model page's toolbar, --ops on the command line, \"ops\": [...] "
                        "in the API")
    bad = [o for o in ops if not _OP_NAME.fullmatch(o)]
    if bad:
        raise LensError(f"--ops: {bad} are not op type names; pass them comma-separated, e.g. --ops Conv,Relu")
    if min_size > 1:
        return [MinSizeContainOpProperty(ops, min_size, "default")]
    return [ContainOpProperty(ops, "default")]


def register_builtins(registry: BackendRegistry) -> None:
    """Add ``default``, ``conv_bn``, ``conv_bn_relu`` and ``tensorrt`` to ``registry``."""
    registry.add_factory("default", _default_backend, DEFAULT_OPTIONS)
    registry.add_property("conv_bn", ConvBNProperty())
    registry.add_property("conv_bn_relu", ConvBNReluProperty())
    registry.add_factory("tensorrt", tensorrt_backend, TENSORRT_OPTIONS, TENSORRT_HINTS)


def builtin_registry() -> BackendRegistry:
    """A fresh registry holding only the built-in backends (what each web app starts from)."""
    registry = BackendRegistry()
    register_builtins(registry)
    return registry
