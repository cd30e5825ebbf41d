"""Subgraph Lens partitioning: the model IR, the subgraph API and its algorithm.

``from partition import ContainOpSelector, SubgraphProperty, register_subgraph_property, ...``
"""

from .api import (BackendOption, BackendRegistry, ContainOpProperty, ContainOpSelector, NodeView,
                  SubgraphProperty, SubgraphSelector, backend_names, backend_options_schema,
                  current_registry, default_subgraph_node, get_backend, register_backend_factory, select,
                  register_subgraph_property, unregister_backend, use_registry, validate_backend_options)
from .backends import (ConvBNProperty, ConvBNReluProperty, ConvBNReluSelector, ConvBNSelector,
                       builtin_registry, register_builtins)
from .check import check_partition
from .errors import (BackendOptionError, GraphCycleError, LensError, ModelError, ModelTooLargeError, PartitionCheckError,
                     PluginError, SelectorError, UnknownBackendError)
from .ir import Graph, Initializer, Node, TensorInfo
from .onnx_io import load_model, save_model, standalone_model, to_model_proto
from .runner import PartitionRun, partition
from .trace import PartitionResult, SubgraphInfo, TraceEvent

from .registry import DEFAULT_REGISTRY

register_builtins(DEFAULT_REGISTRY)

__all__ = [
    "BackendOption", "BackendOptionError", "BackendRegistry", "DEFAULT_REGISTRY", "backend_options_schema",
    "builtin_registry", "current_registry", "use_registry", "validate_backend_options",
    "ContainOpProperty", "ContainOpSelector", "ConvBNProperty", "ConvBNReluProperty", "ConvBNReluSelector",
    "ConvBNSelector", "Graph", "GraphCycleError", "Initializer", "LensError", "ModelError",
    "ModelTooLargeError", "Node", "NodeView", "PartitionCheckError", "PartitionResult", "PartitionRun",
    "PluginError", "SelectorError", "SubgraphInfo", "SubgraphProperty", "SubgraphSelector", "TensorInfo",
    "TraceEvent", "UnknownBackendError", "backend_names", "check_partition", "default_subgraph_node",
    "get_backend", "load_model", "partition", "register_backend_factory", "register_subgraph_property", "select",
    "save_model", "standalone_model", "to_model_proto", "unregister_backend",
]
