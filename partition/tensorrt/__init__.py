"""TensorRT partitioning as in seed 004: rules with reasons, incompatibility groups, cycle-safe growth.

``register()`` adds the ``tensorrt`` backend (options: ``min_size=2``,
``exclude_data_dependent=True``, ``mode="fast"|"teaching"``, ``fallback_ops=()``,
``trt_version=None`` (the newest rule table: 8.5, 8.6, 10.0, 10.1), ``trt_plugins=()``,
``target="gpu"|"dla"`` (``dla.py``: GPU fallback and DLA loadables), ``assume_supported=()``
(``gains.py`` ranks what supporting an op would gain)).
"""

from .algorithm import TensorRTProperty, TensorRTSelector, register, tensorrt_backend
from .groups import FastTracker, NaiveTracker, incompatibility_groups, naive_pairs
from .rules import TRTRules
from .table import available_versions, load_table, newest_version

__all__ = ["FastTracker", "NaiveTracker", "TRTRules", "TensorRTProperty", "TensorRTSelector", "available_versions",
           "incompatibility_groups", "load_table", "naive_pairs", "newest_version", "register", "tensorrt_backend"]
