"""Bodies of If/Loop/Scan under the ``segments`` plan: one generated function each.

A body runs inline on the worker that runs its control-flow node, and nobody
reads its per-node times, peak memory or intermediates (the control-flow kernel
takes its outputs only). Its executor (``Executor.child``: one per body, cached)
plans, specialises and fuses the body once, like the main graph, and binds it to
one straight-line function (``engine/codegen.py``, form ``body``): its tensors as
local variables, each released after its last reader, failures named as
``KernelFailure``. Control flow nested in a body is one more step of that
function (its own bodies have executors of their own, planned once too).

On a device nothing is dropped before the body returns: a kernel queued on the
stream may still read it (the general loop defers such frees to events). Bodies
holding subgraph nodes (``sglens`` partitions) use the general loop.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

from partition.ir import Node

from .codegen import body_fail, code_steps, generate
from .context import RunContext

BodyFn = Callable[..., list]


def compile_body(steps: Sequence[Any], inputs: Sequence[str], outputs: Sequence[str],
                 keep: Collection[str], weights: Collection[str], free: bool, xp: Any,
                 named: Callable[[Node, list, BaseException], BaseException],
                 label: str = "body") -> BodyFn | None:
    """``steps`` (the executor's ``_Step``s) as ``fn(env, w, rctx, *inputs) -> [outputs]``,
    or None when one of them runs a subgraph node. The body's ``inputs`` come positionally
    (a Scan or Loop step is one call, no dict of them); ``keep``: tensors never released
    (what the body does not own); ``free``: release after the last reader; ``w`` holds
    the tensors named in ``weights`` (the executor's own dict, read at each call: a
    replaced weight is seen; an input that is one is read there too), ``env`` the
    outer scope."""
    plan = code_steps(steps)
    if plan is None:
        return None
    return generate(plan, form="body", inputs=inputs, outputs=outputs, keep=keep, weights=weights,
                    drop=free, xp=xp, fail=body_fail(named), label=label)
