"""TensorRT partitioning as in the TensorRT integration design: rules with reasons, incompatibility groups, cycle-safe growth.

``partition.backends.register_builtins`` registers the ``tensorrt`` backend with the options
declared in ``options.py`` (``min_size``, ``exclude_data_dependent``, ``mode``, ``fallback_ops``,
``trt_version`` (the rule table: 8.5, 8.6, 10.0, 10.1), ``trt_plugins``, ``trt_target="gpu"|"dla"``
(``dla.py``: GPU fallback and DLA loadables) and ``assume_supported`` (``gains.py`` ranks what
supporting an op would gain)).
"""

from .algorithm import TensorRTProperty, TensorRTSelector, tensorrt_backend
from .groups import FastTracker, NaiveTracker, incompatibility_groups, naive_pairs
from .rules import TRTRules
from .table import available_versions, load_table, newest_version

__all__ = ["FastTracker", "NaiveTracker", "TRTRules", "TensorRTProperty", "TensorRTSelector", "available_versions",
           "incompatibility_groups", "load_table", "naive_pairs", "newest_version", "tensorrt_backend"]
