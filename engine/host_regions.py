"""The host part of a partitioned graph on onnxruntime (``--host-runtime onnxruntime``).

In a deployment the part of a model TensorRT does not take runs on a framework runtime
(ONNX Runtime with the TensorRT execution provider runs it on its CUDA or CPU provider), not
on our engine. To time a partitioned graph that way, every node left *outside* the subgraphs
is grouped into ``host`` regions, and each region runs as one subgraph node on the
``onnxruntime`` subgraph runtime (``ExecOptions.runtime_by_property``), beside the real
subgraphs on the runtime the run asked for.

Why regions and not one onnxruntime session for the whole host part: the host nodes sit
between subgraphs (a host node may read a subgraph's output and feed another subgraph), so
one session would have to call back into our subgraph runtime in the middle. The regions are
found by the partitioner itself (a property selecting every host node, the generic pass), so
they are maximal, connected and never form a cycle with the subgraphs (the partitioner's
cycle check), and the dependency engine still runs independent regions side by side.

Nodes onnxruntime cannot run as a standalone model stay on our engine and are named: nodes
of a custom domain (a plugin's op) and, of course, the subgraph nodes themselves.
"""

from __future__ import annotations

from partition.api import SubgraphProperty
from partition.ir import Graph, Node
from partition.runner import partition
from partition.selectors import NodeView, SubgraphSelector
from partition.trace import PartitionResult

#: ``RunSpec.host_runtime``: our engine (the reference, with its dependency timeline) or onnxruntime.
HOST_RUNTIMES = ("ours", "onnxruntime")
#: The property name of a host region's subgraph node (``SubgraphRecord.property``).
HOST_PROPERTY = "host"
#: Domains an onnxruntime session runs without a custom-op library.
_ORT_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


def runs_on_host_runtime(node: Node) -> bool:
    """A node outside the subgraphs that onnxruntime can run."""
    return not node.is_subgraph and node.domain in _ORT_DOMAINS


class _HostSelector(SubgraphSelector):
    def select(self, node: NodeView) -> bool:
        return runs_on_host_runtime(node.node)

    def select_input(self, node: NodeView, input_node: NodeView) -> bool:
        return runs_on_host_runtime(input_node.node)

    def select_output(self, node: NodeView, output_node: NodeView) -> bool:
        return runs_on_host_runtime(output_node.node)


class HostProperty(SubgraphProperty):
    """Every node outside the subgraphs that onnxruntime can run, in maximal acyclic regions."""

    property_name = HOST_PROPERTY

    def create_subgraph_selector(self) -> SubgraphSelector:
        return _HostSelector()


def host_regions(graph: Graph) -> PartitionResult:
    """``graph`` (already partitioned) with its host nodes contracted into ``host`` subgraph nodes."""
    return partition(graph, HOST_PROPERTY, properties=[HostProperty()])


def left_on_engine(graph: Graph) -> list[Node]:
    """Host nodes of ``graph`` (after ``host_regions``) that still run on our engine."""
    return [n for n in graph.nodes if not n.is_subgraph]
