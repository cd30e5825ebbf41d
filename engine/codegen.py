"""One generated straight-line Python function per planned segment (as torch.fx's
``GraphModule`` generates its ``forward``).

Per node, the step loop of ``engine/executor.py`` pays for a list of input names
walked through a dict, a ``store`` under a lock with reference counts, and two or
three closure layers before the kernel runs: 3-10 us, more than a small tensor's
kernel. A segment (``engine/plan.py``) is therefore bound, once, to one function
whose source is written here:

- every tensor the segment produces is a local variable (``v0``, ``v1``, ...);
  tensors from outside (weights, graph inputs, other segments, the outer scope
  of a body) are read once, into locals, when the function starts;
- the registry's Identity is an assignment (``v4 = v1``: the object its kernel returns),
  no call -- exporters write one between each body input and output they pass through;
- a plain kernel is called directly with its attributes bound once as constants
  (``f3(xp, v1, v2, **a3)``; for a one-output node, the registry's kernel function
  itself, without the wrapper that makes a tuple of its result); specialised, fused and in-place calls
  (``engine/specialize.py``, ``engine/fuse.py``, ``engine/inplace.py``) and
  control flow keep their bound call (``c3(run, [v1, v2], rctx)``);
- a tensor is deleted right after its last reader in the segment; it never enters
  the run's dict unless another segment or the caller reads it (``publish``);
- a failure is named after its node (``KernelFailure``) from the failing step's
  index; the argument list is rebuilt only then, from the function's locals.

Two forms share the generator: ``segment(run, rctx)`` for the main graph (reads and
publishes through ``_Run``, tracks the segment's live bytes for the peak) and
``body(env, w, rctx, *inputs) -> [outputs]`` for If/Loop/Scan bodies (``engine/body.py``:
the body's inputs by position, its outer scope in ``env``).
Only generated identifiers and integer indices enter the source; tensor names,
kernels, attributes and nodes are passed in as constants, so no string from a
model becomes code. ``source`` on the function is what runs (``Executor.code()``).
The per-node timing, ``keep_intermediates`` (the debugger), hooks (plan ``nodes``)
and device streams keep the general step loop.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

from partition.ir import Node

from .kernels.elementwise import identity
from .run_errors import too_few_outputs

#: Read when a top-level executor binds (its bodies follow it): False binds the step
#: loop and runs nodes of constants per call, as before this module
#: (``bench/dispatch.py`` measures both).
ENABLED = True
#: ``_raw_call``'s answer for the registry's Identity: an assignment, no call.
_IDENTITY = "identity"
#: Functions generated in this process (a test counts that bodies are planned once).
_built = [0]


def builds() -> int:
    """How many segment or body functions this process has generated."""
    return _built[0]


@dataclass(frozen=True)
class CodeStep:
    """One bound node as the generator sees it."""

    node: Node
    call: Callable[[Any, list, Any], tuple]
    n_outputs: int                                   # outputs the kernel must return
    scope: tuple[str, ...] = ()                      # control flow: the tensors its bodies read


class Scope(dict):
    """What a control-flow call or a fused step reads from its ``run`` in generated
    code: ``get`` of the tensors its bodies read (from the function's locals), and
    ``keep`` (intermediates are never kept here)."""

    keep = False


NO_RUN = Scope()


def code_steps(steps: Sequence[Any]) -> list[CodeStep] | None:
    """The executor's ``_Step``s as code steps, or None when one runs a subgraph
    node (its operator records into the run: the general loop runs it)."""
    out = []
    for s in steps:
        if s.node.is_subgraph:
            return None
        scope = tuple(t for t in s.reads if t) if s.node.subgraphs else ()
        out.append(CodeStep(s.node, s.call, s.n_outputs, scope))
    return out


def generate(plan: Sequence[CodeStep], *, form: str, outputs: Sequence[str] = (),
             inputs: Sequence[str] = (), keep: Collection[str] = (), exports: Collection[str] = (),
             frees: Sequence[str] = (), weights: Collection[str] = (), drop: bool = True,
             weight_dict: Mapping[str, Any] | None = None,
             xp: Any = None, fail: Callable[..., Any] | None = None, timed: bool = False,
             told: Callable[[str, float, float], None] | None = None,
             label: str = "segment") -> Callable[..., Any]:
    """``plan`` as one function (see the module's docstring).

    ``form``: ``"body"`` -> ``fn(env, w, rctx, *inputs) -> [outputs]`` (the body's
    ``inputs`` positional, in order, except those named in ``weights``, read from ``w`` like
    the other weights -- their argument is ignored; ``env`` the outer scope); ``"segment"`` -> ``fn(run, rctx)``
    (reads ``weights`` from ``weight_dict``, the rest through ``run.get``, then
    ``run.publish(exports, values, frees, peak)``).
    ``keep``: tensors never deleted early; ``drop``: delete after the last reader
    (off on a device, where a queued kernel may still read them). ``fail(run, node,
    args, exc)`` raises the named error. ``timed`` (segment form): each node's wall
    time into ``run.node_seconds``, as the step loop records it, and with ``told`` (the
    executor's ``node_times``) each node's start and end handed to it too."""
    w = _Writer(plan, form, set(keep) | set(outputs) | set(exports), set(weights), drop,
                timed and form == "segment", told)
    params = "".join(f", {w.param(t, j)}" for j, t in enumerate(inputs)) if form == "body" else ""
    produced = {t for st in plan for t in st.node.outputs if t}
    if form == "segment":  # outside tensors are released after their last reader here
        w.released = dict(Counter(t for t in frees if t not in produced))
    body = w.steps()
    if form == "body":
        tail = [f"    return [{', '.join(w.ref(t) for t in outputs)}]"]
        head = f"def body(env, w, rctx{params}):"
    else:
        names = [t for t in dict.fromkeys(exports) if t in w.local]
        tail = [f"    run.publish(X, ({''.join(w.local[t] + ', ' for t in names)}), FREES, "
                "base + pk)"]
        w.consts["X"] = tuple(names)
        w.consts["FREES"] = tuple(t for t in frees if t in produced)
        head = "def segment(run, rctx, w=W):"
        w.consts["W"] = weight_dict
    src = "\n".join([head, *w.reads, *w.prologue(), "    try:", *(body or ["        pass"]),
                     "    except Exception as exc:",
                     "        fail(run, P[k].node, args_of(IN[k], locals()), exc)",
                     "        raise", *tail]) + "\n"
    scope: dict[str, Any] = dict(w.consts)
    scope.update({"P": tuple(plan), "IN": tuple(w.arg_names), "short": _short, "first": _first, "xp": xp,
                  "Scope": Scope, "fail": fail, "ga": getattr, "args_of": _args_of,
                  "clock": time.perf_counter})
    if form == "body":
        scope["run"] = NO_RUN  # what fused and in-place calls look at (``keep``)
    exec(compile(src, f"<{form} {label}>", "exec"), scope)  # noqa: S102 - identifiers only
    fn = scope[form]
    fn.source = src
    _built[0] += 1
    return fn


class _Writer:
    """The lines of one generated function, written step by step."""

    def __init__(self, plan: Sequence[CodeStep], form: str, keep: set[str], weights: set[str],
                 drop: bool, timed: bool, told: Callable[[str, float, float], None] | None) -> None:
        self.plan, self.form, self.keep, self.weights, self.drop = plan, form, keep, weights, drop
        self.timed = timed
        self.told = told if timed else None
        self.keys: dict[str, str] = {}      # outside tensor -> its constant's name
        self.released: dict[str, int] = {}  # outside tensor -> reads the run counts here
        self.local: dict[str, str] = {}      # tensor -> local variable
        self.reads: list[str] = []           # outside tensors read at the start
        self.consts: dict[str, Any] = {} if self.told is None else {"told": self.told}
        self.arg_names: list[tuple[str | None, ...]] = []
        self.last = self._last_readers()
        self.peak = form == "segment"

    def prologue(self) -> list[str]:
        lines = ["    k = -1", "    live = pk = 0", "    base = run.live"] if self.peak \
            else ["    k = -1"]
        return lines + ["    ns = run.node_seconds", "    t0 = clock()"] if self.timed else lines

    def _last_readers(self) -> dict[int, list[str]]:
        last: dict[str, int] = {}
        for i, st in enumerate(self.plan):
            for t in (*st.node.inputs, *st.scope, *st.node.outputs):
                if t:
                    last[t] = i
        by_step: dict[int, list[str]] = {}
        for t, i in last.items():
            by_step.setdefault(i, []).append(t)
        return by_step

    def param(self, t: str, j: int) -> str:
        """The body's ``j``-th input as a parameter ``i<j>``; one that is a weight is read
        from ``w`` where it is used, like the others (its parameter stays unread)."""
        if t and t not in self.weights and t not in self.local:
            self.local[t] = f"i{j}"
        return f"i{j}"

    def _key(self, t: str) -> str:
        return self.keys[t]

    def ref(self, t: str) -> str:
        if not t:
            return "None"
        v = self.local.get(t)
        if v is None:  # from outside: read once, into a local
            v = self.local[t] = f"v{len(self.local)}"
            key = self.keys[t] = f"K{len(self.reads)}"
            self.consts[key] = t
            if t in self.weights:  # the executor's own dict: a replaced weight is seen
                self.reads.append(f"    {v} = w[{key}]")
            elif self.form == "segment":
                self.reads.append(f"    {v} = run.get({key})")
            else:
                self.reads.append(f"    {v} = env[{key}]")
        return v

    def steps(self) -> list[str]:
        lines: list[str] = []
        produced: set[str] = set()
        for i, st in enumerate(self.plan):
            args = [self.ref(t) for t in st.node.inputs]
            self.arg_names.append(tuple(None if a == "None" else a for a in args))
            lines.append(f"        k = {i}")
            raw = self._raw_call(i, st, args)
            if raw is _IDENTITY:  # the same object, as the kernel returns it, without a call
                v = self.local[st.node.outputs[0]] = f"v{len(self.local)}"
                lines.append(f"        {v} = {args[0]}")
            elif raw is not None:  # one array back, as the registry's kernel function returns it
                v = self.local[st.node.outputs[0]] = f"v{len(self.local)}"
                lines.append(f"        {v} = {raw}")
                lines.append(f"        if isinstance({v}, tuple): {v} = first({v})")
            else:
                lines.append(f"        r = {self._call(i, st, args)}")
                lines.append(f"        if len(r) < {st.n_outputs}: short(r, {len(st.node.outputs)})")
            if self.timed:
                self.consts[f"n{i}"] = st.node.name
                # one clock read per node: from the previous node's end to this one's
                # the timeline hook too, where one is given: `sglens run --trace` and the run
                # card's timeline and memory chart are drawn from it
                told = f"told(n{i}, t0, t1); " if self.told is not None else ""
                lines.append(f"        t1 = clock(); ns[n{i}] = t1 - t0; {told}t0 = t1")
            for j, t in enumerate(st.node.outputs):
                if t:
                    if raw is None:
                        v = self.local[t] = f"v{len(self.local)}"
                        lines.append(f"        {v} = r[{j}]")
                    produced.add(t)
                    if self.peak:
                        lines.append(f"        live += ga({v}, 'nbytes', 0)")
            if self.peak and any(st.node.outputs):
                lines.append("        if live > pk: pk = live")
            lines.extend(self._drops(i, produced))
        return lines

    def _raw_call(self, i: int, st: CodeStep, args: list[str]) -> str | None:
        """A one-output node whose kernel is the registry's: the kernel function itself,
        without the wrapper that makes every result a tuple (a Python frame, a tuple and
        a length check per node: 5-6% of a silero-VAD step by py-spy; 2.41 -> 2.31 us
        per node on bench/engine.py's Relu chain, 0-5% on real models, A/B in one process)."""
        direct = getattr(st.call, "direct", None)
        raw = getattr(direct[0], "raw", None) if direct is not None else None
        if raw is None or st.scope or st.n_outputs != 1 or len(st.node.outputs) != 1 \
                or not st.node.outputs[0]:
            return None
        if raw is identity and len(args) == 1 and not direct[1]:
            return _IDENTITY  # exporters write Identity between a body's inputs and outputs
        self.consts[f"f{i}"] = raw
        listed = "".join(", " + a for a in args)
        if direct[1]:
            self.consts[f"a{i}"] = direct[1]
            return f"f{i}(xp{listed}, **a{i})"
        return f"f{i}(xp{listed})"

    def _call(self, i: int, st: CodeStep, args: list[str]) -> str:
        direct = getattr(st.call, "direct", None)
        listed = ", ".join(args)
        if direct is not None and not st.scope:
            kernel, attrs = direct
            self.consts[f"f{i}"] = kernel
            if attrs:
                self.consts[f"a{i}"] = attrs
                return f"f{i}(xp, {listed}{', ' if listed else ''}**a{i})"
            return f"f{i}(xp{', ' if listed else ''}{listed})"
        self.consts[f"c{i}"] = st.call
        if st.scope:  # a control-flow node: its bodies read these tensors by name
            self.consts[f"s{i}"] = st.scope
            values = "".join(self.ref(t) + ", " for t in st.scope)
            return f"c{i}(Scope(zip(s{i}, ({values}))), [{listed}], rctx)"
        return f"c{i}(run, [{listed}], rctx)"

    def _drops(self, i: int, produced: set[str]) -> list[str]:
        if not self.drop:
            return []
        gone = [t for t in self.last.get(i, ()) if t in self.local and t not in self.keep]
        lines = []
        for t in self.last.get(i, ()):
            if t in self.released:  # the run drops it if no other segment reads it
                lines.append(f"        live -= run.release({self._key(t)}, {self.released[t]})")
        for t in gone:
            v = self.local[t]
            if self.peak and t in produced:
                lines.append(f"        live -= ga({v}, 'nbytes', 0)")
            lines.append(f"        del {v}")
        return lines


def _args_of(names: Sequence[str | None], scope: Mapping[str, Any]) -> list:
    """The failing step's arguments, from the generated function's locals."""
    return [None if v is None else scope.get(v) for v in names]


def _short(results: Sequence[Any], declared: int) -> None:
    raise too_few_outputs(results, declared)


def _first(results: tuple) -> Any:
    """A one-output kernel that returned a tuple (the registry lets a kernel): its first item."""
    if not results:
        _short(results, 1)
    return results[0]


def body_fail(named: Callable[[Node, list, BaseException], BaseException]) -> Callable[..., None]:
    """``fail`` for the body form: raise ``named(node, args, exc)`` (from ``exc``)."""
    def fail(_run: Any, node: Node, args: list, exc: BaseException) -> None:
        err = named(node, args, exc)
        if err is exc:
            raise exc
        raise err from exc
    return fail



__all__ = ["CodeStep", "NO_RUN", "Scope", "body_fail", "builds", "code_steps", "generate"]
