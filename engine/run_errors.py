"""Errors of running a graph: all ``LensError``, so the CLI prints one line and exits 2.

(``engine/errors.py`` holds the dependency engine's own errors, which are not
user errors; the executor turns the ones a user can cause, like asking for a
GPU where there is none, into the errors below.)
"""

from __future__ import annotations

from typing import Any, Sequence

from partition.errors import LensError

from .values import shape_of


class RunError(LensError):
    """Base class of the errors of running a graph."""


class InputError(RunError):
    """Bad inputs: a missing graph input, a wrong shape, an unknown --dim."""


class InputsRefused(InputError):
    """onnxruntime, the reference, refused to run the model on these inputs."""


class SizesFound(InputError):
    """A run failed on its sizes, and onnxruntime runs the model at others (``size_probe``):
    ``hint`` is ``{"inputs": {input: shape}}``, which the web's run page offers to run with.
    (Pickled with its ``hint``: an exception's ``__dict__`` crosses from a Dask worker.)"""

    def __init__(self, message: str, hint: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class DeviceError(RunError):
    """The device asked for is not there (no cupy, no CUDA GPU)."""


class MissingKernelError(RunError):
    """The graph holds operators that no kernel implements."""


class ExecutorUnavailableError(RunError):
    """A subgraph executor asked for by name cannot run (not installed, no GPU, build failed)."""


#: Input shapes a KernelFailure's message lists (all are kept in ``input_shapes``): silero-VAD's
#: one subgraph node took 45 inputs, mostly weights, and its one-line error ran to 1,800 characters.
SHAPES_SHOWN = 12


class KernelFailure(RunError):
    """A node failed while running: names the node, its op and its input shapes.

    ``path`` lists the enclosing nodes (subgraph or control-flow nodes) from the
    outermost in, so an error deep inside a Loop body inside a subgraph still
    says where it is.
    """

    def __init__(self, node: str, op_type: str, input_shapes: Sequence[Any], cause: BaseException,
                 path: Sequence[str] = ()) -> None:
        self.node = node
        self.op_type = op_type
        self.input_shapes = [None if s is None else list(s) for s in input_shapes]
        self.cause = cause
        self.path = list(path)
        super().__init__(self._message())

    def _message(self) -> str:
        where = "".join(f"{p} > " for p in self.path)
        shown = self.input_shapes[:SHAPES_SHOWN]
        shapes = ", ".join("omitted" if s is None else str(s) for s in shown)
        if len(self.input_shapes) > SHAPES_SHOWN:   # a subgraph node takes every weight it reads
            shapes += f", ... (+{len(self.input_shapes) - SHAPES_SHOWN} more)"
        return (f"node {where}'{self.node}' ({self.op_type}) failed on input shapes [{shapes}]: "
                f"{type(self.cause).__name__}: {self.cause}")

    def inside(self, outer: str) -> "KernelFailure":
        """The same failure, seen from the node ``outer`` that holds it."""
        err = KernelFailure(self.node, self.op_type, [], self.cause, [outer, *self.path])
        err.input_shapes = self.input_shapes
        err.args = (err._message(),)
        return err

    def __reduce__(self):  # picklable despite the custom constructor
        return (KernelFailure, (self.node, self.op_type, self.input_shapes, self.cause, self.path))


def too_few_outputs(results: Sequence[Any], declared: int) -> ValueError:
    """A kernel returned fewer outputs than its node declares (one message for every step loop).
    Not a RunError: the step loops' ``named_failure`` wraps it in a KernelFailure naming the node
    (as a RunError it passed through unnamed: "the kernel returned 0 output(s)" said not whose)."""
    return ValueError(f"the kernel returned {len(results)} output(s) for {declared} declared")


def named_failure(node: Any, args: Sequence[Any], exc: BaseException) -> BaseException:
    """``exc`` as a KernelFailure naming ``node``; a nested failure keeps its own node.

    Our own user errors that are not kernel failures (an executor that cannot
    run, bad inputs of a body) already say where they are: passed on as they are.
    """
    if isinstance(exc, RunError) and not isinstance(exc, KernelFailure):
        return exc
    cur: BaseException | None = exc
    seen = 0
    while cur is not None and seen < 8:
        if isinstance(cur, KernelFailure):
            return cur.inside(f"'{node.name}' ({node.op_type})")
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return KernelFailure(node.name, node.op_type, [shape_of(a) for a in args], exc)
