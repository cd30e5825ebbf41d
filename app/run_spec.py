"""What one run needs, frozen at submission: the only thing that travels to a Dask worker.

A ``RunSpec`` holds plain, picklable data: which run (id, label), the selection (backend name
plus its options *after* the registry validated and coerced them, or a rule's JSON), how to
run (device, subgraph runtime, repeats), the checked inputs and the limits. It never holds
live partition objects: a backend's properties may keep weak references, compiled rule
tables or plugin classes that do not pickle (issue 20: every ``tensorrt`` run failed with
"Could not serialize object of type LLGExpr"). The side that runs the spec builds the
properties again from the selection with its own registry (``properties``): the web
process's for in-process runs, the worker's for Dask runs (built-ins plus the server's
``--plugin`` files, shipped by ``app.dask_runs.PluginShipper``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from partition.errors import LensError
from partition.registry import Selection


@dataclass(frozen=True)
class RunSpec:
    """One run as plain data (see the module docstring)."""

    id: str
    label: str
    #: the backend and its options as the submitting side's registry validated them (a frozen,
    #: picklable ``partition.registry.Selection``); None for a rule
    selection: Selection | None
    #: the rule JSON (``app/rules.py``) when the run partitions by a rule, else None
    rule: Any
    device: str
    executor: str
    repeat: int
    run_inputs: Any = None           # app.run_inputs.RunInputs (specs, uploaded arrays, tolerance)
    memory_limit: int | None = None  # --run-memory-limit: the engine's estimate-based budget
    time_limit: float | None = None  # --run-time-limit: seconds of wall clock on the worker
    kernels: Any = None              # a kernel finder (tests); None = the engine's registry

    @property
    def backend(self) -> str:
        return "rule" if self.selection is None else self.selection.backend

    def properties(self, registry: Any) -> list[Any]:
        """The selection's properties, built from plain data with ``registry`` on the running side."""
        if self.backend == "rule":
            from .rules import rule_property
            return [rule_property(self.rule)]
        try:
            return registry.build(self.selection)   # validated once, at submission
        except LensError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's factory raised
            raise LensError(f"backend '{self.backend}' could not be set up: {type(exc).__name__}: {exc}") from None


def make_spec(registry: Any, *, id: str, label: str, backend: str, options: dict[str, Any], rule: Any,
              device: str, executor: str, repeat: int, run_inputs: Any = None, memory_limit: int | None = None,
              time_limit: float | None = None, kernels: Any = None) -> RunSpec:
    """Validate the selection once, here, with the submitting side's registry, into a ``RunSpec``."""
    if backend == "rule":
        if isinstance(rule, str):
            rule = json.loads(rule)
        from .rules import rule_property
        rule_property(rule)      # a bad rule is the request's error (400), not the worker's
        selection = None
    else:
        selection = registry.select(backend, options)
        rule = None
    return RunSpec(id=id, label=label, selection=selection, rule=rule,
                   device=device, executor=executor, repeat=int(repeat), run_inputs=run_inputs,
                   memory_limit=memory_limit, time_limit=time_limit, kernels=kernels)
