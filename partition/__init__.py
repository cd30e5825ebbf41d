"""Subgraph Lens partitioning: the model IR, the subgraph API and its algorithm.

``from partition import ContainOpSelector, SubgraphProperty, register_subgraph_property, ...``
"""

from .api import (ContainOpProperty, ContainOpSelector, NodeView, SubgraphProperty, SubgraphSelector,
                  backend_names, default_subgraph_node, get_backend, register_backend_factory,
                  register_subgraph_property, unregister_backend)
from .backends import (ConvBNProperty, ConvBNReluProperty, ConvBNReluSelector, ConvBNSelector,
                       register_builtins)
from .check import check_partition
from .errors import (GraphCycleError, LensError, ModelError, ModelTooLargeError, PartitionCheckError,
                     PluginError, SelectorError, UnknownBackendError)
from .ir import Graph, Initializer, Node, TensorInfo
from .onnx_io import load_model, save_model, standalone_model, to_model_proto
from .runner import PartitionRun, partition
from .trace import PartitionResult, SubgraphInfo, TraceEvent

register_builtins()

from .tensorrt import register as _register_tensorrt  # noqa: E402 - needs the API above

_register_tensorrt()

__all__ = [
    "ContainOpProperty", "ContainOpSelector", "ConvBNProperty", "ConvBNReluProperty", "ConvBNReluSelector",
    "ConvBNSelector", "Graph", "GraphCycleError", "Initializer", "LensError", "ModelError",
    "ModelTooLargeError", "Node", "NodeView", "PartitionCheckError", "PartitionResult", "PartitionRun",
    "PluginError", "SelectorError", "SubgraphInfo", "SubgraphProperty", "SubgraphSelector", "TensorInfo",
    "TraceEvent", "UnknownBackendError", "backend_names", "check_partition", "default_subgraph_node",
    "get_backend", "load_model", "partition", "register_backend_factory", "register_subgraph_property",
    "save_model", "standalone_model", "to_model_proto", "unregister_backend",
]
