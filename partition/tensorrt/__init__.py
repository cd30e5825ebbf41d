"""TensorRT partitioning as in the TensorRT integration design: rules with reasons, incompatibility groups, cycle-safe growth.

``register()`` adds the ``tensorrt`` backend (options: ``min_size=2``,
``exclude_data_dependent=True``, ``mode="fast"|"teaching"``, ``fallback_ops=()``,
``trt_version=None`` (the newest rule table), ``plugins=()``).
"""

from .algorithm import TensorRTProperty, TensorRTSelector, register, tensorrt_backend
from .groups import FastTracker, NaiveTracker, incompatibility_groups, naive_pairs
from .rules import TRTRules
from .table import available_versions, load_table, newest_version

__all__ = ["FastTracker", "NaiveTracker", "TRTRules", "TensorRTProperty", "TensorRTSelector", "available_versions",
           "incompatibility_groups", "load_table", "naive_pairs", "newest_version", "register", "tensorrt_backend"]
