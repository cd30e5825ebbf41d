"""A web run's ``RunSpec`` (``engine/run.py``), made once at submission, and its properties.

The spec holds plain, picklable data: which run (id, label), the selection (a backend plus its
options *after* the registry validated and coerced them, or ``Selection("rule", {"rule": JSON})``
for a rule), how to run, the checked inputs and the limits. It never holds live partition
objects: a backend's properties may keep weak references, compiled rule tables or plugin
classes that do not pickle (issue 20: every ``tensorrt`` run failed with "Could not serialize
object of type LLGExpr"). The side that runs the spec builds the properties again from the
selection with its own registry (``properties``): the web process's for in-process runs, the
worker's for Dask runs (built-ins plus the server's ``--plugin`` files, shipped by
``app.dask_runs.PluginShipper``).
"""

from __future__ import annotations

from typing import Any

from engine.run import RunSpec
from engine.run_errors import RunError
from partition.errors import LensError
from partition.registry import Selection

from .errors import ApiError

__all__ = ["RunSpec", "make_spec", "properties"]

#: the backend name of a rule made in the browser (``app/rules.py``), not a registry backend
RULE = "rule"


def properties(selection: Selection, registry: Any) -> list[Any]:
    """The selection's properties, built from plain data with ``registry`` (this side's)."""
    if selection.backend == RULE:
        from .rules import rule_property
        return [rule_property(selection.options["rule"])]
    try:
        return registry.build(selection)   # validated once, at submission
    except LensError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's factory raised
        raise LensError(f"backend '{selection.backend}' could not be set up: {type(exc).__name__}: {exc}") from None


def make_spec(selection: Selection, *, id: str, label: str, device: str, subgraph_runtime: str,
              host_runtime: str, repeat: int, run_inputs: Any, memory_limit: int | None = None,
              time_limit: float | None = None, kernels: Any = None) -> RunSpec:
    """The ``RunSpec`` of a validated selection; a bad field is the request's error (400)."""
    from .limits import HINT
    try:
        return RunSpec(id=id, label=label, selection=selection, device=device,
                       subgraph_runtime=subgraph_runtime, host_runtime=host_runtime, repeat=repeat,
                       run_inputs=run_inputs, memory_limit=memory_limit, memory_hint=HINT,
                       time_limit=time_limit, kernels=kernels)
    except RunError as exc:
        raise ApiError(str(exc)) from None
