"""The ``tensorrt`` backend's options, declared once (``partition/registry.py`` explains the schema).

``algorithm.register()`` and ``partition.backends.register_builtins`` both
register the factory with these; the CLI flags, the API's validation and the
web form are generated from them.
"""

from __future__ import annotations

from ..registry import BackendOption
from .table import available_versions

TENSORRT_OPTIONS = (
    BackendOption("min_size", "int", 2, "smallest subgraph kept, in compute nodes", minimum=1),
    BackendOption("exclude_data_dependent", "bool", True,
                  "leave out ops whose output shape depends on input values",
                  flag="--keep-data-dependent"),
    # The same names as algorithm.MODES (not imported: algorithm.py imports this module).
    BackendOption("mode", "str", "fast", "fast: incremental incompatibility groups; teaching: the "
                  "pairwise reference (same result, slower)", choices=("fast", "teaching")),
    BackendOption("fallback_ops", "str_list", [], "op types forced out of TensorRT subgraphs"),
    BackendOption("trt_version", "str", None, "rule table of this TensorRT release (default: the newest "
                  "we have the parser source for)", choices=tuple(available_versions())),
    BackendOption("trt_plugins", "str_list", [], "op types your own TensorRT plugin library implements",
                  flag="--trt-plugin"),
    # The DLA is a TensorRT build target, not another compiler: the parser's rules still decide first,
    # the groups, cycle checks and reports are the same, so it is an option of this backend.
    BackendOption("target", "str", "gpu", "gpu: TensorRT on the GPU; dla: the DLA with GPU fallback (each DLA "
                  "region is one loadable, at most 16 per core)", choices=("gpu", "dla"), flag="--trt-target"),
    BackendOption("assume_supported", "str_list", [], "op types to treat as supported (a plugin you would "
                  "write): see how the partition changes", flag="--assume-supported"),
)
#: why an option users try on this backend is not one of its options
TENSORRT_HINTS = {"ops": "it decides support from TensorRT's operator table and takes no --ops; "
                         "use fallback_ops to force ops out"}
