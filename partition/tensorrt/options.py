"""The ``tensorrt`` backend's options, declared once (``partition/registry.py`` explains the schema).

``partition.backends.register_builtins`` registers the factory with these; the
CLI flags, the API's validation and the web form are generated from them, and
``rules_for`` is the one way from validated values to a rule table (the
property, ``sglens groups`` and ``--check-parser`` all use it, so none can drop
an option).
"""

from __future__ import annotations

from typing import Any, Mapping

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
    BackendOption("trt_target", "str", "gpu", "gpu: TensorRT on the GPU; dla: the DLA with GPU fallback (each DLA "
                  "region is one loadable, at most 16 per core)", choices=("gpu", "dla")),
    BackendOption("assume_supported", "str_list", [], "op types to treat as supported (a plugin you would "
                  "write): see how the partition changes", flag="--assume-supported"),
    # The DLA builds one shape per input (the optimization profile's min = opt = max): a model exported
    # with a dynamic batch or image size would otherwise fall back to the GPU everywhere.
    BackendOption("trt_input_shapes", "str_list", [], "dla: the fixed shape of each dynamic network input the "
                  "engine is built for, NAME:1x3x224x224 (the DLA checks then see the inferred static shapes)",
                  flag="--trt-input-shape"),
)
#: why an option users try on this backend is not one of its options
TENSORRT_HINTS = {"ops": "it decides support from TensorRT's operator table and takes no --ops; "
                         "use fallback_ops to force ops out"}


def rules_for(values: Mapping[str, Any], **overrides: Any) -> Any:
    """The ``TRTRules`` of a validated tensorrt selection's values (``Selection.options``);
    ``overrides`` replace a value (``--check-parser`` judges data-dependent ops by the real parser)."""
    from .dla import DLARules  # both import the table, as this module does; no cycle, only later
    from .rules import TRTRules
    v = {**values, **overrides}
    rules_class = DLARules if v["trt_target"] == "dla" else TRTRules
    return rules_class(version=v["trt_version"], exclude_data_dependent=v["exclude_data_dependent"],
                       fallback_ops=v["fallback_ops"], plugins=v["trt_plugins"],
                       assume_supported=v["assume_supported"], input_shapes=parse_input_shapes(v["trt_input_shapes"]))


def parse_input_shapes(entries: Any) -> dict[str, tuple[int, ...]]:
    """``["x:1x3x224x224", ...]`` as {"x": (1, 3, 224, 224)}; a malformed entry is an error naming it."""
    from ..errors import BackendOptionError
    out: dict[str, tuple[int, ...]] = {}
    for entry in entries or ():
        name, sep, dims = str(entry).rpartition(":")
        parts = dims.lower().split("x")
        if not sep or not name or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise BackendOptionError(f"backend 'tensorrt': trt_input_shapes entry {entry!r} must be "
                                     "NAME:D1xD2x... with positive integers, e.g. images:1x3x224x224")
        out[name] = tuple(int(p) for p in parts)
    return out
