"""TensorRT partitioning as in the TensorRT integration design: rules with reasons, incompatibility groups, cycle-safe growth.

``partition.backends.register_builtins`` registers the ``tensorrt`` backend with the options
declared in ``options.py`` (``min_size``, ``exclude_data_dependent``, ``mode``, ``fallback_ops``,
``trt_version``, ``trt_plugins``).
"""

from .algorithm import TensorRTProperty, TensorRTSelector, tensorrt_backend
from .groups import FastTracker, NaiveTracker, incompatibility_groups, naive_pairs
from .rules import TRTRules
from .table import available_versions, load_table, newest_version

__all__ = ["FastTracker", "NaiveTracker", "TRTRules", "TensorRTProperty", "TensorRTSelector", "available_versions",
           "incompatibility_groups", "load_table", "naive_pairs", "newest_version", "tensorrt_backend"]
