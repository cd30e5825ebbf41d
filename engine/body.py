"""A lean runner for the bodies of If/Loop/Scan under the ``segments`` plan.

A body runs inline on the worker that runs its control-flow node, and nobody
reads its per-node times, peak memory or intermediates (the control-flow
kernel takes its outputs only). The general step loop (``_Run``: a lock,
byte counts, reference counts, timers per node) cost ~4 us per node there,
as much as the small kernels of a streaming model. This runner keeps what a
body needs: one dict of values, each tensor dropped after its last reader
(computed once, at bind time), and failures named as ``KernelFailure``.

On a device nothing is dropped before the body returns: a kernel queued on
the stream may still read it (the general loop defers such frees to events).
Bodies holding nested control flow or subgraph nodes use the general loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from partition.ir import Node

from .context import RunContext
from .run_errors import RunError


@dataclass(frozen=True)
class LeanStep:
    node: Node
    call: Callable[[Any, list, RunContext], tuple]
    inputs: tuple[str, ...]      # as declared ("" = omitted)
    outputs: tuple[str, ...]
    drops: tuple[str, ...]       # tensors whose last reader this is
    n_outputs: int
    single: str                  # the one output's name when it has one, else ""


class _NoRun:
    """What a fused step looks at (``run.keep``) when run by the lean loop."""

    keep = False


_NO_RUN = _NoRun()


def lean_plan(steps: Sequence[Any], keep: set[str], free: bool) -> list[LeanStep] | None:
    """``steps`` (the executor's ``_Step``s) as lean steps, or None when one of them
    runs a body or a subgraph. ``keep``: tensors never dropped (the body's outputs
    and what it does not own); ``free``: drop tensors after their last reader."""
    if any(s.node.subgraphs or s.node.is_subgraph for s in steps):
        return None
    last: dict[str, int] = {}
    for i, s in enumerate(steps):
        for t in (*s.node.inputs, *s.node.outputs):
            if t and t not in keep:
                last[t] = i
    drops: list[list[str]] = [[] for _ in steps]
    if free:
        for t, i in last.items():
            drops[i].append(t)
    return [LeanStep(s.node, s.call, tuple(s.node.inputs), tuple(s.node.outputs), tuple(d),
                     s.n_outputs, s.node.outputs[0] if len(s.node.outputs) == 1 else "")
            for s, d in zip(steps, drops)]


def run_lean(plan: list[LeanStep], env: dict[str, Any], rctx: RunContext,
             named: Callable[[Node, list, BaseException], BaseException]) -> None:
    """Run ``plan`` over ``env`` (tensor name -> value), in place."""
    run = _NO_RUN
    for st in plan:
        args = [env[t] if t else None for t in st.inputs]
        try:
            results = st.call(run, args, rctx)
            if len(results) < st.n_outputs:
                raise RunError(f"the kernel returned {len(results)} output(s) for "
                               f"{len(st.outputs)} declared")
        except Exception as exc:  # noqa: BLE001 - re-raised, named
            err = named(st.node, args, exc)
            if err is exc:
                raise
            raise err from exc
        if st.single:
            env[st.single] = results[0]
        else:
            for t, v in zip(st.outputs, results):
                if t:
                    env[t] = v
        if st.drops:
            for t in st.drops:
                env.pop(t, None)
