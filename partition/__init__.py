"""Subgraph Lens partitioning: the model IR, the subgraph API and its algorithm."""

from .errors import (GraphCycleError, LensError, ModelError, ModelTooLargeError, PartitionCheckError,
                     PluginError, SelectorError, UnknownBackendError)
from .ir import Graph, Initializer, Node, TensorInfo
from .onnx_io import load_model, save_model, standalone_model, to_model_proto
