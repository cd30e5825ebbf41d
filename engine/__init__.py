"""Subgraph Lens's dependency engine (seed 001): ``from engine import ...``."""

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
