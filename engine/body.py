"""A lean runner for the bodies of If/Loop/Scan under the ``segments`` plan.

A body runs inline on the worker that runs its control-flow node, and nobody
reads its per-node times, peak memory or intermediates (the control-flow
kernel takes its outputs only). The general step loop (``_Run``: a lock,
byte counts, reference counts, timers per node) cost ~4 us per node there,
as much as the small kernels of a streaming model. A body is therefore bound
to one generated straight-line function (``compile_lean``) that keeps only
what it needs: its tensors as local variables, each released after its last
reader (found once, at bind time, by ``lean_plan``), and failures named as
``KernelFailure``.

On a device nothing is dropped before the body returns: a kernel queued on
the stream may still read it (the general loop defers such frees to events).
Bodies holding nested control flow or subgraph nodes use the general loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from partition.ir import Node

from .context import RunContext
from .run_errors import too_few_outputs


@dataclass(frozen=True)
class LeanStep:
    node: Node
    call: Callable[[Any, list, RunContext], tuple]
    inputs: tuple[str, ...]      # as declared ("" = omitted)
    outputs: tuple[str, ...]
    drops: tuple[str, ...]       # tensors whose last reader this is
    n_outputs: int


class _NoRun:
    """What a fused step looks at (``run.keep``) when run in a compiled body."""

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
                     s.n_outputs) for s, d in zip(steps, drops)]


LeanFn = Callable[[dict, Mapping[str, Any], RunContext], list]


def compile_lean(plan: list[LeanStep], outputs: Sequence[str],
                 named: Callable[[Node, list, BaseException], BaseException],
                 weights: Collection[str] = ()) -> LeanFn:
    """``plan`` as one straight-line Python function ``fn(env, w, rctx) -> [outputs]``:
    ``w`` holds the tensors named in ``weights`` (the executor's own dict, read at each
    call: a replaced weight is seen), ``env`` the others from outside the body.

    Each tensor the body produces is a local variable (``v0``, ``v1``, ...) instead
    of a dict entry: no per-step loop, list-of-names walk, zip or pops -- a third of
    the lean loop's cost per node. Tensors from outside (outer scope, weights, the
    body's inputs) are read from ``env`` at first use. Only generated identifiers and
    integer indices enter the source; names, kernels and nodes are passed in as
    constants, so no string from a model becomes code. A tensor is released after
    its last reader (when the plan drops it), a short result is a ``RunError``, a
    failure is named after its node (``named``).
    """
    local: dict[str, str] = {}     # tensor -> local variable
    names: list[str] = []          # env keys read, by index (K[i])
    reads: list[str] = []          # those reads, made before the first step
    lines: list[str] = []
    kept = set(outputs)

    def ref(t: str) -> str:
        if not t:
            return "None"
        v = local.get(t)
        if v is None:  # from outside the body: read once, then a local too
            v = local[t] = f"v{len(local)}"
            names.append(t)
            where = "w" if t in weights else "env"
            reads.append(f"    {v} = {where}[K[{len(names) - 1}]]")
        return v

    for i, st in enumerate(plan):
        args = ", ".join(ref(t) for t in st.inputs)
        lines.append(f"        k = {i}; a = [{args}]")
        lines.append(f"        r = C[{i}](run, a, rctx)")
        lines.append(f"        if len(r) < {st.n_outputs}: short(r, {len(st.outputs)})")
        for j, t in enumerate(st.outputs):
            if t:
                v = local[t] = f"v{len(local)}"
                lines.append(f"        {v} = r[{j}]")
        for t in st.drops:
            if t in local and t not in kept:
                lines.append(f"        {local[t]} = None")
    result = ", ".join(ref(t) for t in outputs)
    src = ("def body(env, w, rctx):\n" + "".join(r + "\n" for r in reads)
           + "    k = -1; a = None\n    try:\n"
           + "\n".join(lines or ["        pass"])
           + "\n    except Exception as exc:\n"
           "        err = named(P[k].node, a, exc)\n"
           "        if err is exc:\n            raise\n        raise err from exc\n"
           f"    return [{result}]\n")
    scope: dict[str, Any] = {"K": tuple(names), "C": tuple(st.call for st in plan),
                             "P": tuple(plan), "named": named, "short": _short, "run": _NO_RUN}
    exec(compile(src, "<lean body>", "exec"), scope)  # noqa: S102 - generated, identifiers only
    fn = scope["body"]
    fn.source = src  # for a reader (and the tests): what runs
    return fn


def _short(results: Sequence[Any], declared: int) -> None:
    raise too_few_outputs(results, declared)
