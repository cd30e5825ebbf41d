"""Subgraph Lens's dependency engine (the dependency-engine design): ``from engine import ...``."""

from __future__ import annotations

import os
from typing import Any

from .context import Context, FnProperty, RunContext
from .core import Engine, Operator, Var
from .errors import (DeadlockError, EngineClosedError, EngineError, EngineTimeoutError,
                     NoGPUError, OnCompleteError, OperatorError, VariableError)
from .naive import NaiveEngine
from .profiling import EngineHooks, FnRecord, Profiler
from .threaded import ThreadedEngine

ENGINES: dict[str, type[Engine]] = {"naive": NaiveEngine, "threaded": ThreadedEngine}


def create_engine(name: str | None = None, **kw: Any) -> Engine:
    """An engine by name: ``name``, else env ``SGLENS_ENGINE``, else 'threaded'."""
    chosen = (name or os.environ.get("SGLENS_ENGINE") or "threaded").strip().lower()
    if chosen not in ENGINES:
        raise EngineError(
            f"unknown engine {chosen!r} (from {'argument' if name else 'SGLENS_ENGINE'}); "
            f"choose one of {sorted(ENGINES)}")
    return ENGINES[chosen](**kw)


__all__ = [
    "Context", "DeadlockError", "ENGINES", "Engine", "EngineClosedError", "EngineError",
    "EngineHooks", "EngineTimeoutError", "FnProperty", "FnRecord", "NaiveEngine",
    "NoGPUError", "OnCompleteError", "Operator", "OperatorError", "Profiler", "RunContext",
    "ThreadedEngine", "Var", "VariableError", "create_engine",
]

# --- executor, subgraph operators, measurements (engine/executor.py & co.) ---
# Imported lazily (PEP 562): they pull in partition/ and onnxruntime, which the
# bare dependency engine does not need.
_EXECUTOR_EXPORTS = {
    "Executor": "executor", "RunResult": "executor", "SubgraphRecord": "executor",
    "SubgraphOp": "subgraph_ops", "EXECUTORS": "subgraph_ops",
    "measure": "measure", "Measurement": "measure",
    "compare": "compare", "Comparison": "compare",
    "random_inputs": "inputs",
    "check_memory_budget": "budget", "MemoryBudgetError": "budget",
    "RunError": "run_errors", "KernelFailure": "run_errors", "DeviceError": "run_errors",
    "ExecutorUnavailableError": "run_errors", "MissingKernelError": "run_errors",
    "InputError": "run_errors",
}


def __getattr__(name: str) -> Any:
    module = _EXECUTOR_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ += sorted(_EXECUTOR_EXPORTS)
# --- end of executor exports ---
