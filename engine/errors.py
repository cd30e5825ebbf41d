"""The engine's one small error hierarchy.

Every error the engine itself raises is an ``EngineError``.  Errors raised by
the functions pushed to the engine are *not* wrapped: ``wait_for_var`` and
``wait_for_all`` re-raise the original exception object, with its original
traceback and a note naming the engine function that raised it.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error raised by the engine itself."""


class NoGPUError(EngineError):
    """A GPU context was asked for where there is no GPU (or no cupy)."""


class VariableError(EngineError):
    """A variable was misused: deleted, foreign to this engine, or not a Var."""


class OperatorError(EngineError):
    """An operator was misused: pushed after delete_operator, or malformed."""


class OnCompleteError(EngineError):
    """An async function called its ``on_complete`` callback more than once."""


class DeadlockError(EngineError):
    """A wait that could never return: a function waiting for itself."""


class EngineTimeoutError(EngineError, TimeoutError):
    """``wait_for_var`` / ``wait_for_all`` ran past the timeout given."""


class EngineClosedError(EngineError):
    """Work was pushed to an engine after ``shutdown()``."""
