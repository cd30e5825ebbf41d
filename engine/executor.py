"""The executor: a ``Graph`` bound to the dependency engine.

Binding (``Executor(graph, engine=None, options=None, **changes)``; the options
are one ``ExecOptions``, ``engine/options.py``) decides everything that does not
depend on the inputs: on the host, float16 computed in float32 (``engine/float16.py``:
float16 feeds widened as a run starts, outputs and kept values the model declares float16
rounded back as it ends); the kernel or subgraph operator of every node (specialised
on constant inputs where it pays, ``engine/specialize.py``), Constant nodes
evaluated once, fused GELU chains (``engine/fuse.py``), the tensors each node
depends on (``Graph.reads``: its inputs plus the outer-scope tensors its bodies
read), reference counts for freeing, one persistent engine variable per weight,
and the plan (``engine/plan.py``): the nodes cut into straight-line segments, one
engine operator each (made at bind time, as the engine design's ``NewOperator``). A run
(``Executor.run(feeds)``) then:

1. pushes one operator per segment, reading the variables of the tensors it
   takes from other segments (and its weights) and writing its own variable
   plus those of the tensors other segments read -- so the engine runs
   independent branches in parallel; a run that is one function (one segment,
   or the serial function) runs on the calling thread: on the host called
   directly (``_call_direct``: the run lock, which ``set_weight`` takes too, leaves
   no one else to order it against), else pushed ``inline=True`` and waited for
   through its own variable;
2. otherwise pushes one barrier reading every segment's variable and waits for it;
3. after a failure, takes the errors off every variable (``_drain``), so the
   next run and a shared engine start clean.

The operators read the run's state from ``self._current``; runs of one
executor are therefore serialized by a lock (nested bodies have executors of
their own, so nesting never waits on that lock). Values live in the run's
``values`` dict (``engine/run_state.py``); a tensor is dropped when its last
consumer finishes (unless ``keep_intermediates``, for the debugger).

Nodes with bodies run them as nested graphs (the control-flow design, approach 2):
control-flow kernels get ``run_graph(body, values)``, which runs the body on a
child executor of the *same* engine, with the body's outer-scope tensors taken
from this run. Under the ``segments`` plan the body runs inline on the calling
worker, compiled into one function (``engine/body.py``); under ``nodes`` its
nodes are pushed and the nested wait happens on a worker thread, which the
threaded engine compensates with a spare (the control-flow design's deadlock). Subgraph nodes
(``node.is_subgraph``) run through a ``SubgraphOp`` (``engine/subgraph_ops.py``).

How nodes become steps and steps become segment functions is ``engine/binding.py`` (the
``Binding`` half of this class); this module holds the executor's state, its engine operators
and its runs.

Errors: a failing kernel becomes ``KernelFailure`` naming the node, its op and
its input shapes (and the enclosing nodes when nested); it is raised by
``run``. No GPU -> ``DeviceError``; unknown ops -> ``MissingKernelError`` at
bind time.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from partition.ir import Graph, Node

from . import codegen, create_engine, gpu
from .binding import Binding, _graph_step
from .body import compile_body
from .context import Context, RunContext
from .core import Engine, Var
from .float16 import float16_tensors, narrowed, widen, widened
from .fuse import Fused
from .kernels import blas
from .memo import MemoBudget
from .options import DEVICES, ExecOptions, device_context, find_kernel, missing_ops
from .plan import PLANS, ModeChooser, segments
from .run_errors import InputError, MissingKernelError, RunError, named_failure
from .run_state import RunResult, _Run
from .subgraph_ops import EXECUTORS
from .values import SubgraphRecord, nbytes, shape_of, to_numpy

__all__ = ["DEVICES", "ExecOptions", "Executor", "RunResult", "SubgraphRecord", "find_kernel",
           "missing_ops", "nbytes", "shape_of", "to_numpy"]

# ---------------------------------------------------------------- executor --
class Executor(Binding):
    """A graph bound to an engine; ``run(feeds)`` any number of times.

    ``Executor(graph, engine=None, options=None, **changes)``: ``options`` is an
    ``ExecOptions`` (default: all defaults); ``changes`` are ``ExecOptions``
    fields to override, e.g. ``Executor(g, device="gpu", subgraph_runtime="auto")``.
    ``engine`` may be shared (nested executors share their parent's); one made
    here is closed by ``close()``.
    """

    def __init__(self, graph: Graph, engine: Engine | None = None,
                 options: ExecOptions | None = None, **changes: Any) -> None:
        if "executor" in changes:   # the older spelling of subgraph_runtime (docs/architecture.md)
            changes["subgraph_runtime"] = changes.pop("executor")
        opts = replace(options or ExecOptions(), **changes)  # unknown names: TypeError
        self._host_fed: frozenset[str] = frozenset()   # a subgraph body's host-computed inputs (child())
        self._host_out: frozenset[str] = frozenset()   # its outputs the enclosing graph reads on the host
        self._inherited: dict[str, Any] = {}   # a subgraph body's inputs that are its parent's weights
        self._bind(graph, engine, opts, (), None)

    @classmethod
    def _nested(cls, body: Graph, parent: "Executor", label: str, opts: ExecOptions,
                host_fed: frozenset[str] = frozenset(), host_out: frozenset[str] = frozenset(),
                inherited: frozenset[str] = frozenset()) -> "Executor":
        ex = cls.__new__(cls)
        ex._host_fed, ex._host_out = host_fed, host_out
        ex._inherited = {t: parent._weights[t] for t in inherited if t in parent._weights}
        ex._bind(body, parent.engine, opts, (*parent.path, label), parent)
        return ex

    def _bind(self, graph: Graph, engine: Engine | None, opts: ExecOptions,
              path: tuple[str, ...], parent: "Executor | None") -> None:
        if opts.subgraph_runtime not in EXECUTORS:
            raise RunError(f"unknown subgraph runtime {opts.subgraph_runtime!r}; "
                           f"choose one of {list(EXECUTORS)}")
        if opts.plan not in PLANS:
            raise RunError(f"unknown plan {opts.plan!r}; choose one of {list(PLANS)}")
        self.device, self.device_id = opts.device, opts.device_id
        self.ctx, self.xp = device_context(opts.device, opts.device_id)
        if self.xp is np:  # float16 computed in float32 on the host (engine/float16.py)
            graph = widened(graph)
        self.graph, self.options = graph, opts
        # what the model declares float16 leaves a host run as float16 (outputs, kept values)
        self._float16_out = float16_tensors(graph.tensors) if self.xp is np and parent is None \
            else frozenset()
        self.executor = opts.subgraph_runtime
        # per-node times of a measured run: top-level nodes only (a body's nodes are inside its node)
        self._node_times = opts.node_times if parent is None else None
        self.keep_intermediates = opts.keep_intermediates
        self.timing = opts.timing
        self.weights_epoch = 0   # set_weight counts up: what captured a weight's array recaptures
        self.plan_cache_dir = opts.plan_cache_dir
        self.path, self.parent = path, parent
        # engine/codegen.py's switch, read once per executor tree (bodies bind later)
        self._codegen = codegen.ENABLED if parent is None else parent._codegen
        # what memoized weight preparation may keep beyond its arguments' size (engine/memo.py)
        self._memo_budget = MemoBudget() if parent is None else parent._memo_budget
        self.find_kernel = opts.kernels or find_kernel
        self._own_engine = engine is None
        if engine is None:
            kw: dict[str, Any] = {"hooks": opts.hooks}
            if opts.workers is not None:
                kw["num_cpu_workers"] = opts.workers
            engine = create_engine(opts.engine_name, **kw)
        self.engine = engine
        if parent is None and self.xp is np:
            blas.apply(opts.blas_threads, getattr(engine, "num_cpu_workers", 1))
        self._children: dict[int, Executor] = {}
        self._children_lock = threading.Lock()
        self._outputs = frozenset(graph.outputs)
        missing = self.missing_kernels(graph, skip_subgraph_nodes=opts.subgraph_runtime != "engine")
        if missing:
            raise MissingKernelError(
                f"no kernel for operator(s) {missing} in graph '{graph.name}'; run it with "
                "the subgraph runtime onnxruntime after partitioning (--subgraph-runtime onnxruntime), "
                "or add the kernels")
        # Weights: uploaded once, one persistent variable each, versioned as in the subgraph API design.
        self._weights: dict[str, Any] = {n: self._upload(w.value) for n, w in graph.initializers.items()}
        self._weight_vars: dict[str, Var] = {n: engine.new_variable(f"w:{n}") for n in self._weights}
        self.weight_bytes = sum(nbytes(v) for v in self._weights.values())
        self._bind_steps(graph)
        self._codes: list[Callable] = []  # each segment's generated function, made on first use
        order = {t: i for i, t in enumerate(self._produced)}
        self._order = lambda t: order.get(t, -1)
        self._body_fn = None
        self._host_rctx: RunContext | None = None   # run_body's context on the host, made once
        self._bind_operators(opts.effective_plan())
        # Bodies (run inline by their control-flow node): one generated function (engine/body.py).
        # Under "nodes" a body runs as a graph (``run``) instead.
        if parent is not None and opts.effective_plan() == "segments" and self._codegen:
            self._body_fn = compile_body(
                self._steps, graph.inputs, graph.outputs, {*self._weights, *graph.free_tensors},
                set(self._weights), self.xp is np, self.xp, named_failure)

    def _bind_operators(self, plan: str) -> None:
        """One engine operator per segment (``engine/plan.py``), made once (the
        seed's NewOperator: no per-run object creation). A segment writes one
        variable of its own and one per tensor another segment reads."""
        eng = self.engine
        groups = segments([s.reads for s in self._steps], [s.node.outputs for s in self._steps],
                          self._produced, plan)
        seg_of = {t: k for k, g in enumerate(groups) for i in g for t in self._steps[i].node.outputs if t}
        exported = {t for k, g in enumerate(groups) for i in g for t in self._steps[i].reads
                    if t in seg_of and seg_of[t] != k}
        self._vars: dict[str, Var] = {t: eng.new_variable(t) for t in self._produced if t in exported}
        self._seg_vars: list[Var] = []
        self._ops = []
        for k, group in enumerate(groups):
            steps = [self._steps[i] for i in group]
            const = dict.fromkeys(self._vars[t] for s in steps for t in s.reads
                                  if t in exported and seg_of[t] != k)
            const.update(dict.fromkeys(self._weight_vars[t] for s in steps for t in s.weights))
            done = eng.new_variable(f"seg:{steps[0].node.name}")
            self._seg_vars.append(done)
            mutable = [done, *(self._vars[t] for s in steps for t in s.node.outputs if t in exported)]
            name = steps[0].node.name if len(steps) == 1 else \
                f"{steps[0].node.name} (+{len(steps) - 1} nodes)"
            exports = {t for s in steps for t in s.node.outputs if t in exported or t in self._outputs}
            self._ops.append(eng.new_operator(self._segment_fn(steps, exports), list(const), mutable,
                                              is_async=False, name=name))
        self._done = eng.new_variable(f"{self.graph.name}:done")
        self._barrier = eng.new_operator(lambda _rctx: None, self._seg_vars, [self._done],
                                         is_async=False, name=f"{self.graph.name}:barrier")
        # "nodes" keeps the first version's behaviour: every node through a worker.
        self._inline_single = plan == "segments" and len(self._ops) == 1
        # The whole graph as one function, for graphs whose last run was too short
        # for parallel branches to pay for the hand-offs between threads.
        self._serial_op = None
        if plan == "segments" and len(self._ops) > 1:
            weights = dict.fromkeys(self._weight_vars[t] for s in self._steps for t in s.weights)
            self._serial_op = eng.new_operator(
                self._segment_fn(self._steps, self._outputs), list(weights),
                [*self._seg_vars, *self._vars.values()],
                is_async=False, name=f"{self.graph.name} (all {len(self._steps)} nodes)")
        self._last_seconds = float("inf")
        self._modes = ModeChooser()  # parallel segments or the serial function: measured
        self._current: _Run | None = None
        self._run_lock = threading.Lock()
        self._direct_rctx = RunContext(self.ctx, None)   # what the engine hands a CPU function

    # --- public -----------------------------------------------------------

    def run(self, feeds: Mapping[str, Any], *, outer: Mapping[str, Any] | None = None,
            keep_intermediates: bool | None = None) -> RunResult:
        """Run once on ``feeds`` (graph input name -> array); outputs stay on the device.

        ``keep_intermediates`` overrides the executor's setting for this run:
        every tensor's value is then in ``RunResult.values``.
        """
        start = time.perf_counter()
        keep = self.keep_intermediates if keep_intermediates is None else keep_intermediates
        run = self._start_run(feeds, outer, keep)
        if self.xp is not np:
            # The feeds were copied in on this thread's stream; the workers' streams are
            # non-blocking, so nothing orders them after it: each waits for this event (on
            # the device, no host wait) before its first node of the run. (An inline run
            # stays on the caller's stream: it needs none.)
            run.inputs_ready = self.xp.cuda.get_current_stream().record()
        eng = self.engine
        with self._run_lock:  # the bound operators serve one run at a time
            self._current = run
            try:
                # One segment: nothing can run beside it and this thread would only
                # wait, so it runs here if its inputs are ready (no hand-off). A
                # graph whose last run took under SERIAL_BELOW_S runs likewise, as one
                # function in graph order: its branches cost less than the hand-offs;
                # others run so when the ModeChooser measured that faster.
                serial = self._serial_op is not None and (
                    self._last_seconds < SERIAL_BELOW_S or self._modes.serial())
                one = self._serial_op if serial else self._ops[0] if self._inline_single else None
                if one is not None and self.xp is np and eng.calls_direct():
                    self._call_direct(one, run)
                else:
                    self._push_run(serial, run)
            finally:
                self._current = None
        result = self._result(run, keep, start)
        self._last_seconds = result.seconds
        if self._serial_op is not None:
            self._modes.record(serial, result.seconds)
        return result

    def _call_direct(self, op: Any, run: "_Run") -> None:
        """The run's one function called here, outside the engine. It holds the run lock, and
        nothing else pushes on this executor's variables (``set_weight`` takes that lock too),
        so every variable would grant at once: the push, grants, completion and wait cost
        ~11 us of a one-Relu run's 25 (measured), and a sub-millisecond model pays them each
        run. ``Engine.calls_direct`` says when nothing would see the difference (no hooks
        recording functions, no GPU events to order after)."""
        try:
            op.fn(self._direct_rctx)
        except Exception as exc:  # noqa: BLE001 - the node's error, as the engine would pass it on
            raise self._user_error(run, exc) from None
        if run.error is not None:  # a failed node no output depends on
            raise self._user_error(run) from None

    def _push_run(self, serial: bool, run: "_Run") -> None:
        """The run through the engine: its segments (or the serial function) pushed, then
        waited for through the one function's variable or a barrier."""
        eng, ctx = self.engine, self.ctx
        if serial:
            eng.push(self._serial_op, ctx, inline=True)
        else:
            inline = self._inline_single
            for op in self._ops:
                eng.push(op, ctx, inline=inline)
        if (serial or self._inline_single) and self.xp is np:
            done = self._seg_vars[0]  # one function wrote it: no barrier needed
        else:  # a CPU barrier: its start waits (on the host) for GPU producers too
            eng.push(self._barrier, _CPU, inline=True)
            done = self._done
        try:
            eng.wait_for_var(done)
        except BaseException as exc:
            self._drain()
            raise self._user_error(run, exc) from None
        if run.error is not None:  # a failed node no output depends on
            self._drain()
            raise self._user_error(run) from None

    def run_inline(self, feeds: Mapping[str, Any], outer: Mapping[str, Any],
                   stream: Any = None, within: "_Run | None" = None) -> RunResult:
        """Run every node on the calling thread, in order, without the engine.

        Bodies of If/Loop/Scan run this way under the ``segments`` plan: the
        caller is already an engine function, and pushing a body's microsecond
        nodes (then waiting for them from a worker) costs more than they do.
        A failing node raises its ``KernelFailure`` at once.

        ``within``: the enclosing run of a subgraph body run inline on a device
        (``subgraph_ops._EngineImpl``): its CUDA events are handed to that run and read
        when it ends, so the body adds no host wait in the middle of it.
        """
        start = time.perf_counter()
        run = self._start_run(feeds, outer, False)
        rctx = RunContext(self.ctx, stream)
        if stream is None:
            self._exec_host(self._steps, run, rctx)
        else:
            for step in self._steps:
                self._exec_step(step, run, rctx)
        if within is not None:
            within.node_events.update(run.node_events)
            within.subgraph_spans.extend(run.subgraph_spans)
            within.deferred.extend(run.deferred)   # kept alive until the enclosing run's end
            run.node_events, run.subgraph_spans = {}, []
            run.deferred.clear()
        return self._result(run, False, start)

    def run_body(self, values: Sequence[Any], outer: Mapping[str, Any], stream: Any = None) -> list:
        """The outputs of this body on ``values`` (its inputs, in order)."""
        return self.body_step(outer, stream)(*values)

    def body_step(self, outer: Mapping[str, Any], stream: Any = None) -> Callable[..., list]:
        """``step(*inputs) -> [outputs]``: this body with its outer scope ``outer`` bound,
        for a control-flow node's calls in one run (a Scan or Loop calls it once a step).
        Its generated function (``engine/body.py``) where it applies, called straight on
        the host (the inputs are kernel results or views of them: the run's own values),
        each input uploaded first on a device; else ``run_inline``."""
        fn = self._body_fn
        if fn is None:
            return _graph_step(self.graph, lambda feeds: self.run_inline(feeds, outer, stream))
        if stream is not None or self.xp is not np:
            rctx, upload, w = RunContext(self.ctx, stream), self._upload, self._weights

            def step_uploaded(*values: Any) -> list:
                return fn(outer, w, rctx, *[upload(v) for v in values])
            return step_uploaded
        if self._host_rctx is None:
            self._host_rctx = RunContext(self.ctx, None)  # read, never written: one per body
        return partial(fn, outer, self._weights, self._host_rctx)

    @property
    def calibrating(self) -> bool:
        """Whether the next run may still be one of the ``ModeChooser``'s trial runs (parallel
        segments against the serial function, ``plan.CALIBRATION_RUNS`` each, the first of each
        also planning and generating its code): runs until then are not this executor's steady
        time, so ``measure`` warms up past them. A graph that runs under ``SERIAL_BELOW_S``
        runs serially without trials. A nested executor's trials count too: a subgraph run on
        our engine is a full run of its own (``subgraph_ops._EngineImpl``), and a partitioned
        run's median once held them (a single-subgraph PP-LCNet: 60-236 ms against the
        unpartitioned 21 ms). Bodies run inline never start trials, so they never hold this up."""
        return self._trials_pending(started=False) or any(
            ex._trials_pending(started=True) for ex in self._descendants())

    def _trials_pending(self, started: bool) -> bool:
        """This executor's own trials are not over (``started``: and have begun)."""
        return (self._serial_op is not None and self._modes.choice is None
                and self._last_seconds >= SERIAL_BELOW_S
                and (not started or any(self._modes.times.values())))

    def __call__(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run and return host (numpy) outputs."""
        return self.run(feeds).numpy_outputs()

    def missing_kernels(self, graph: Graph, skip_subgraph_nodes: bool = False) -> list[str]:
        """``domain.op`` names in ``graph`` this executor's kernel finder lacks."""
        return missing_ops(graph, skip_subgraph_nodes, finder=self.find_kernel)

    def set_weight(self, name: str, value: Any) -> None:
        """Replace a weight through the engine: its variable's version goes up, so
        subgraph operators that cached a converted copy rebuild it (the subgraph API design)."""
        if name not in self._weight_vars or name in self._derived:
            raise RunError(f"'{name}' is not a weight of graph '{self.graph.name}'")
        if self.xp is np:
            value = widen(np.asarray(value))   # as the weights were bound (engine/float16.py)
        new = self._upload(np.asarray(value) if not hasattr(value, "__cuda_array_interface__") else value)
        if self.xp is not np:  # copied on this thread's stream: landed before any worker's stream reads it
            self.xp.cuda.get_current_stream().synchronize()
        old = self._weights[name]
        if shape_of(new) != shape_of(old):
            raise RunError(f"weight '{name}' has shape {list(shape_of(old) or [])}; "
                           f"got {list(shape_of(new) or [])}")

        # weights made from this one at bind time: a split LSTM's per-direction slices, a QDQ
        # model's dequantized weights
        made = {w: make for w, (sources, make) in self._derived.items() if name in sources}

        def write(_rctx: RunContext) -> None:
            self._weights[name] = new
            self.weights_epoch += 1
            for w, make in made.items():
                self._weights[w] = make(self._weights)
            self._refresh_host_copies(name, new)
        var = self._weight_vars[name]
        with self._run_lock:   # after the run in flight, before the next (a direct run has no vars)
            self.engine.push_sync(write, self.ctx, [], [var, *(self._weight_vars[w] for w in made)],
                                  name=f"set_weight({name})")
            self.engine.wait_for_var(var)

    def _refresh_host_copies(self, name: str, new: Any) -> None:
        """The host copies of weight ``name`` (shape arithmetic, host-read inputs) here and
        in every body bound so far that reads it from this graph."""
        for ex in [self, *self._descendants()]:
            if ex is not self and name in ex._weights:
                continue   # a body's own tensor of the same name shadows this one
            if name in ex._host_weights:
                ex._host_weights[name] = to_numpy(new)
            if name in ex.device_plan.host_weights:  # a device run's host-side shape arithmetic
                ex.device_plan.host_weights[name] = to_numpy(new)  # type: ignore[index]

    def _descendants(self) -> list["Executor"]:
        found, todo = [], list(self._children.values())
        while todo:   # iterative: nesting depth is the model's to choose
            ex = todo.pop()
            found.append(ex)
            todo.extend(ex._children.values())
        return found

    def weight_version(self, name: str) -> int:
        return self._weight_vars[name].version

    def close(self) -> None:
        for child in list(self._children.values()):
            child.close()
        if self._own_engine:
            self.engine.shutdown()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- nested graphs ------------------------------------------------------

    def child(self, body: Graph, label: str, host_fed: frozenset[str] = frozenset(),
              host_out: frozenset[str] = frozenset(), inherited: frozenset[str] = frozenset(),
              **overrides: Any) -> "Executor":
        """The executor of a body (cached): same engine, device and options. ``host_fed``:
        body inputs this graph computes on the host (a subgraph body's shape tensors), fed
        to it as host arrays on a device; ``host_out``: body outputs this graph reads there;
        ``inherited``: body inputs that are this graph's weights, fed on every run (a subgraph
        body's): the body fuses and plans on them as on weights of its own."""
        key = id(body)
        ex = self._children.get(key)
        if ex is None:
            with self._children_lock:
                ex = self._children.get(key)
                if ex is None:
                    opts = replace(self.options, keep_intermediates=False, **overrides)
                    ex = Executor._nested(body, self, label, opts, host_fed, host_out, inherited)
                    self._children[key] = ex
        return ex

    def body_child(self, node: Node, body: Graph) -> "Executor":
        """The executor of an If/Loop/Scan ``body`` of ``node``. In a subgraph body on a
        device, the host-fed facts it reads stay host facts in there too (its plan lifts them
        where its kernels want them as data; a Pad's pads read there need no sync)."""
        plan = self.device_plan
        fed = frozenset(t for t in body.free_tensors if t in plan.host_inputs) if plan.is_body else frozenset()
        return self.child(body, f"'{node.name}' ({node.op_type})", host_fed=fed)

    # --- one run --------------------------------------------------------------

    def _start_run(self, feeds: Mapping[str, Any], outer: Mapping[str, Any] | None,
                   keep: bool) -> "_Run":
        g = self.graph
        missing = [t for t in g.inputs if t not in feeds and t not in self._weights]
        if missing:
            raise InputError(f"graph '{g.name}': no value for input(s) {missing}")
        run = _Run(self, outer or {}, keep)
        host = self.xp is np
        for name in g.inputs:
            if name in feeds and name not in self._weights:
                value = widen(feeds[name]) if host else feeds[name]
                run.put(name, self.device_plan.feed(name, value, self._upload))
        return run

    def _result(self, run: "_Run", keep: bool, start: float) -> RunResult:
        outputs = {t: run.get(t) for t in self.graph.outputs}
        if self._host_out_folded:   # host facts folded at bind time: their host copies
            outputs.update(self._host_out_folded)
        if self.timing and run.node_events:  # one host wait per stream (engine/gpu.py)
            run.node_seconds.update(gpu.elapsed_seconds(run.node_events))
        if self._fused and run.node_seconds:
            _share_fused_times(run.node_seconds, self._fused)
        if run.subgraph_spans:  # subgraph operators' device times, read now that the run is done
            spans = {str(i): (a, b) for i, (_, a, b) in enumerate(run.subgraph_spans)}
            for (record, _, _), seconds in zip(run.subgraph_spans, gpu.elapsed_seconds(spans).values()):
                record.device_seconds = seconds
        run.deferred.clear()
        values = {**{t: self._weights[t] for t in (*self._folded, *self._bound_weights)}, **run.values} \
            if keep else {}
        if self._float16_out:
            outputs, values = narrowed(outputs, self._float16_out), narrowed(values, self._float16_out)
        return RunResult(outputs, run.node_seconds, run.subgraphs, run.peak, self.weight_bytes,
                         time.perf_counter() - start, values, self.device, run.pool_peak)

    # --- helpers ------------------------------------------------------------

    def _upload(self, value: Any) -> Any:
        """A fed value as the run holds it: an array of the device's module; a sequence (a
        list: ONNX's sequence type) element by element, an absent optional (None) as None; a
        map (a dict: ZipMap's elements) as it is (no device holds one)."""
        if value.__class__ is np.ndarray and self.xp is np:  # the common case: a body's inputs
            return value
        if value is None or isinstance(value, dict):
            return value
        if isinstance(value, list):
            return [self._upload(v) for v in value]
        if self.xp is np:
            return np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype == object:
            return value   # strings: a device has no string arrays, their kernels run on the host
        return self.xp.asarray(value)

    def _gpu_event(self, stream: Any, timing: bool = False) -> Any:
        return gpu.record_event(stream, timing=timing)

    def _drain(self) -> None:
        """Take every error a failed run left on the variables, so none leaks into
        the next run or a later ``wait_for_all`` of a shared engine."""
        for var in [*self._vars.values(), *self._seg_vars, self._done]:
            try:
                self.engine.wait_for_var(var)
            except BaseException:  # noqa: BLE001 - reported once, by run()
                pass

    def _user_error(self, run: _Run, cause: BaseException | None = None) -> BaseException:
        err = run.error
        if err is None:  # the engine itself failed (not a kernel): say what it raised
            what = f": {type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}" if cause else ""
            return RunError(f"graph '{self.graph.name}' failed without a node error{what}")
        return err


_CPU = Context.cpu(0)

#: Below this wall time a run's graph runs as one function on the calling thread
#: (hand-offs to workers cost ~10-50 us each on a shared 2-CPU machine).
SERIAL_BELOW_S = 1e-3


def _share_fused_times(seconds: dict[str, float], fused: Mapping[str, Fused]) -> None:
    """Per-node times name the graph's own nodes, every one of them (the app colours and sums the
    model's nodes by time; a step named ``...+silu`` or ``...+gelu`` matched none, and a YOLO
    layer's sum lost its SiLUs). A step named after one of its nodes -- a conv chain after its
    conv, an affine chain after its head -- gives that node its time and the others 0: they ride
    in its pass (shared equally, each Conv+Relu's ReLU took half of a conv's time, and a
    SqueezeNet profile read "Relu 1.43 ms" of 9.6). Other chains (GELU, a hard swish, attention)
    are passes of like cost: shared equally."""
    for name, f in fused.items():
        t = seconds.pop(name, None)
        if t is None:
            continue
        anchored = any(part.name == name for part in f.parts)
        share = 0.0 if anchored else t / len(f.parts)
        for part in f.parts:
            seconds[part.name] = t if part.name == name else share
