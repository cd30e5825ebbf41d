"""The executor: a ``Graph`` bound to the dependency engine.

Binding (``Executor(graph, ...)``) decides everything that does not depend on
the inputs: the kernel or subgraph operator of every node, the tensors each node
depends on (``Graph.reads``: its inputs plus the outer-scope tensors its bodies
read), reference counts for freeing, and one persistent engine variable per
weight. A run (``Executor.run(feeds)``) then:

1. pushes one operator per node (made at bind time, as the seed's
   ``NewOperator``), reading the variables of its inputs and writing those of
   its outputs -- one engine variable per tensor a node produces -- so the
   engine runs independent branches in parallel;
2. pushes one barrier reading every produced variable and waits for it alone;
3. after a failure, takes the errors off every variable (``_drain``), so the
   next run and a shared engine start clean.

The operators read the run's state from ``self._current``; runs of one
executor are therefore serialized by a lock (nested bodies have executors of
their own, so nesting never waits on that lock).

Values live in the run's ``values`` dict next to the variables; a tensor is
dropped when its last consumer finishes (unless ``keep_intermediates``, for the
debugger). Graph inputs and outer-scope values are ready before the first push
and need no variable.

Nodes with bodies run them as nested graphs (seed 003, approach 2):
control-flow kernels get ``run_graph(body, values)``, which runs the body on a
child executor of the *same* engine, with the body's outer-scope tensors taken
from this run. The nested wait happens on a worker thread; the threaded engine
compensates a worker blocked in a wait with a spare (seed 003's deadlock), so
this is safe with one worker. Subgraph nodes (``node.is_subgraph``) run through
a ``SubgraphOp`` (``engine/subgraph_ops.py``) with the chosen executor.

Errors: a failing kernel becomes ``KernelFailure`` naming the node, its op and
its input shapes (and the enclosing nodes when nested); it is raised by
``run``. No GPU -> ``DeviceError``; unknown ops -> ``MissingKernelError`` at
bind time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from partition.ir import Graph, Node

from .context import Context, RunContext
from .core import Engine, Var
from .errors import NoGPUError
from .kernels import kernel_attrs
from .run_errors import DeviceError, KernelFailure, MissingKernelError, RunError

DEVICES = ("cpu", "gpu")


# --------------------------------------------------------------- devices --
def device_context(device: str, device_id: int = 0) -> tuple[Context, Any]:
    """The engine ``Context`` and array module (numpy or cupy) of ``device``."""
    if device == "cpu":
        return Context.cpu(0), np
    if device == "gpu":
        try:
            ctx = Context.gpu(device_id)
        except NoGPUError as exc:
            raise DeviceError(f"--device gpu: {exc}") from None
        import cupy  # present: Context.gpu checked it
        return ctx, cupy
    raise DeviceError(f"unknown device {device!r}; choose one of {list(DEVICES)}")


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a numpy or cupy array."""
    if isinstance(value, np.ndarray):
        return value
    get = getattr(value, "get", None)  # cupy.ndarray.get() copies to the host
    return np.asarray(get() if callable(get) else value)


def nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or 0)


def shape_of(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


# --------------------------------------------------------------- kernels --
def _kernels():
    from . import kernels  # imported late: the kernel package loads many modules
    return kernels


def find_kernel(node: Node, opset: Mapping[str, int]) -> Callable[..., tuple] | None:
    """The registry's kernel for ``node`` at the graph's opset, or None."""
    k = _kernels()
    try:  # the one lookup the interpreter uses too ("" and "ai.onnx" are one domain)
        return k.kernel_for(node.op_type, node.domain, opset)
    except getattr(k, "KernelNotFound", LookupError):
        return None


def missing_ops(graph: Graph, skip_subgraph_nodes: bool = False,
                finder: Callable[[Node, Mapping[str, int]], Any] | None = None) -> list[str]:
    """``domain.op`` names in ``graph`` (bodies included) that no kernel implements."""
    missing: dict[str, None] = {}
    finder = finder or find_kernel

    def walk(g: Graph) -> None:
        for node in g.nodes:
            if node.is_subgraph:
                if not skip_subgraph_nodes:
                    walk(node.body)
                continue
            if finder(node, g.opset or graph.opset) is None:
                missing[f"{node.domain + '.' if node.domain else ''}{node.op_type}"] = None
            for body in node.subgraphs.values():
                walk(body)
    walk(graph)
    return list(missing)


# ------------------------------------------------------------ run records --
@dataclass
class SubgraphRecord:
    """How one subgraph node ran: the executor that *actually* ran it, and why."""

    node: str
    subgraph_id: Any
    property: str
    requested: str
    executor: str
    reason: str
    seconds: float = 0.0
    peak_bytes: int = 0
    boundary_bytes: int = 0
    weights_rebuilt: bool = False
    device_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {"node": self.node, "subgraph_id": self.subgraph_id, "property": self.property,
                "requested": self.requested, "executor": self.executor, "reason": self.reason,
                "seconds": self.seconds, "peak_bytes": self.peak_bytes,
                "boundary_bytes": self.boundary_bytes, "weights_rebuilt": self.weights_rebuilt,
                "device_seconds": self.device_seconds}
        data.update(self.extra)
        return data


@dataclass
class RunResult:
    """What one run produced and measured."""

    outputs: dict[str, Any]
    node_seconds: dict[str, float]
    subgraphs: list[SubgraphRecord]
    peak_bytes: int
    weight_bytes: int
    seconds: float
    values: dict[str, Any] = field(default_factory=dict)   # every tensor, if kept
    device: str = "cpu"
    pool_peak_bytes: int | None = None   # GPU: cupy memory-pool used_bytes high-water mark

    def numpy_outputs(self) -> dict[str, np.ndarray]:
        return {k: to_numpy(v) for k, v in self.outputs.items()}


# ------------------------------------------------------------------- steps --
@dataclass
class _Step:
    """One node, bound: what it reads, what it writes, what runs it."""

    node: Node
    reads: tuple[str, ...]              # distinct tensors it depends on
    frees: tuple[str, ...]              # of those, the ones this run may drop
    call: Callable[["_Run", list, RunContext], tuple]
    weights: tuple[str, ...]            # weights among its reads (persistent vars)


class _Run:
    """The state of one run: values, variables, counts, measurements."""

    def __init__(self, ex: "Executor", outer: Mapping[str, Any], keep: bool) -> None:
        self.ex = ex
        self.keep = keep
        self.outer = outer
        self.values: dict[str, Any] = {}
        self.refs: dict[str, int] = dict(ex._refcounts)
        self.lock = threading.Lock()
        self.live = 0
        self.peak = 0
        self.node_seconds: dict[str, float] = {}
        self.node_events: dict[str, tuple[Any, Any]] = {}
        self.subgraphs: list[SubgraphRecord] = []
        self.error: BaseException | None = None
        self.deferred: list[tuple[Any, Any]] = []  # GPU: (array, event) freed once event done
        self.pool = ex.xp.get_default_memory_pool() if ex.xp is not np else None
        self.pool_peak = self.pool.used_bytes() if self.pool is not None else None

    def get(self, name: str) -> Any:
        if not name:
            return None
        v = self.values.get(name, _MISSING)
        if v is not _MISSING:
            return v
        w = self.ex._weights.get(name, _MISSING)
        if w is not _MISSING:
            return w
        v = self.outer.get(name, _MISSING)
        if v is not _MISSING:
            return v
        raise KeyError(f"tensor '{name}' has no value (freed too early, or never produced)")

    def put(self, name: str, value: Any) -> None:
        size = nbytes(value)
        with self.lock:
            self.values[name] = value
            self.live += size
            if self.live > self.peak:
                self.peak = self.live
            if self.pool is not None:
                self.pool_peak = max(self.pool_peak, self.pool.used_bytes())
            if self.refs.get(name) == 0 and not self.keep \
                    and name not in self.ex._outputs:
                self._drop_locked(name, None)

    def release(self, names: Sequence[str], stream: Any) -> None:
        if self.keep:
            return
        with self.lock:
            for t in names:
                n = self.refs[t] - 1
                self.refs[t] = n
                if n == 0 and t not in self.ex._outputs:
                    self._drop_locked(t, stream)

    def _drop_locked(self, name: str, stream: Any) -> None:
        value = self.values.pop(name, None)
        if value is None:
            return
        self.live -= nbytes(value)
        if stream is not None:
            # Kernels reading it may still be queued on this stream: keep the
            # array alive until they are done, or the pool could hand it out.
            self.deferred.append((value, self.ex._gpu_event(stream)))
            self.deferred = [(a, e) for a, e in self.deferred if not e.done]


_MISSING = object()


# ---------------------------------------------------------------- executor --
class Executor:
    """A graph bound to an engine; ``run(feeds)`` any number of times.

    ``executor`` chooses how subgraph nodes run: ``engine``, ``onnxruntime``,
    ``tensorrt`` or ``auto`` (see ``engine/subgraph_ops.py``). ``engine`` may be
    shared (nested executors share their parent's); one made here is closed by
    ``close()``. ``timing`` records per-node wall time (CUDA events on GPU).
    ``kernels(node, opset) -> kernel | None`` replaces the kernel registry
    (tests, experiments); nested executors inherit it.
    """

    def __init__(self, graph: Graph, engine: Engine | None = None, *, device: str = "cpu",
                 device_id: int = 0, executor: str = "engine", keep_intermediates: bool = False,
                 timing: bool = True, plan_cache_dir: str | None = None,
                 engine_name: str | None = None, workers: int | None = None,
                 hooks: Any = None, kernels: Callable[[Node, Mapping[str, int]], Any] | None = None,
                 _path: tuple[str, ...] = (), _parent: "Executor | None" = None) -> None:
        from .subgraph_ops import EXECUTORS, SubgraphOp  # subgraph_ops imports this module
        if executor not in EXECUTORS:
            raise RunError(f"unknown subgraph executor {executor!r}; choose one of {list(EXECUTORS)}")
        self.graph = graph
        self.device, self.device_id = device, device_id
        self.ctx, self.xp = device_context(device, device_id)
        self.executor = executor
        self.keep_intermediates = keep_intermediates
        self.timing = timing
        self.plan_cache_dir = plan_cache_dir
        self.path = _path
        self.find_kernel = kernels or find_kernel
        self.parent = _parent
        self._own_engine = engine is None
        if engine is None:
            from . import create_engine
            kw: dict[str, Any] = {"hooks": hooks}
            if workers is not None:
                kw["num_cpu_workers"] = workers
            engine = create_engine(engine_name, **kw)
        self.engine = engine
        self._children: dict[int, Executor] = {}
        self._children_lock = threading.Lock()
        self._outputs = frozenset(graph.outputs)
        missing = missing_ops(graph, skip_subgraph_nodes=executor != "engine", finder=self.find_kernel)
        if missing:
            raise MissingKernelError(
                f"no kernel for operator(s) {missing} in graph '{graph.name}'; run it with "
                "--executor onnxruntime after partitioning, or add the kernels")
        # Weights: uploaded once, one persistent variable each (seed 000 versions).
        self._weights: dict[str, Any] = {n: self._upload(w.value) for n, w in graph.initializers.items()}
        self._weight_vars: dict[str, Var] = {n: engine.new_variable(f"w:{n}") for n in self._weights}
        self.weight_bytes = sum(nbytes(v) for v in self._weights.values())
        produced = {t for n in graph.nodes for t in n.outputs if t}
        local = produced | {t for t in graph.inputs if t not in self._weights}
        self._produced = [t for n in graph.nodes for t in n.outputs if t]
        self._refcounts: dict[str, int] = {t: 0 for t in local}
        self._steps: list[_Step] = []
        for node in graph.nodes:
            reads = tuple(t for t in graph.reads(node) if t)
            frees = tuple(t for t in reads if t in local)
            for t in frees:
                self._refcounts[t] += 1
            weights = tuple(t for t in reads if t in self._weight_vars and t not in local)
            if node.is_subgraph:
                call = SubgraphOp(node, self).call
            elif node.subgraphs:
                call = self._control_flow_call(node)
            else:
                call = self._kernel_call(node)
            self._steps.append(_Step(node, reads, frees, call, weights))
        # One persistent variable per produced tensor and one operator per node,
        # made once (the seed's NewOperator: no per-run object creation).
        self._vars: dict[str, Var] = {t: engine.new_variable(t) for t in self._produced}
        self._current: _Run | None = None
        self._run_lock = threading.Lock()
        self._ops = []
        for step in self._steps:
            const = [self._vars[t] for t in step.reads if t in self._vars]
            const += [self._weight_vars[t] for t in step.weights]
            mutable = [self._vars[t] for t in step.node.outputs if t]
            self._ops.append(engine.new_operator(self._fn(step), const, mutable, is_async=False,
                                                 name=step.node.name))
        self._done = engine.new_variable(f"{graph.name}:done")
        self._barrier = engine.new_operator(_noop, list(self._vars.values()), [self._done],
                                            is_async=False, name=f"{graph.name}:barrier")

    # --- public -----------------------------------------------------------

    def run(self, feeds: Mapping[str, Any], *, outer: Mapping[str, Any] | None = None,
            keep_intermediates: bool | None = None) -> RunResult:
        """Run once on ``feeds`` (graph input name -> array); outputs stay on the device.

        ``keep_intermediates`` overrides the executor's setting for this run:
        every tensor's value is then in ``RunResult.values``.
        """
        g = self.graph
        start = time.perf_counter()
        keep = self.keep_intermediates if keep_intermediates is None else keep_intermediates
        run = _Run(self, outer or {}, keep)
        missing = [t for t in g.inputs if t not in feeds and t not in self._weights]
        if missing:
            from .run_errors import InputError
            raise InputError(f"graph '{g.name}': no value for input(s) {missing}")
        for name in g.inputs:
            if name in feeds and name not in self._weights:
                run.put(name, self._upload(feeds[name]))
        eng, ctx = self.engine, self.ctx
        with self._run_lock:  # the bound operators serve one run at a time
            self._current = run
            try:
                for op in self._ops:
                    eng.push(op, ctx)
                # A CPU barrier: its start waits (on the host) for GPU producers too.
                eng.push(self._barrier, Context.cpu(0))
                try:
                    eng.wait_for_var(self._done)
                except BaseException as exc:
                    self._drain()
                    raise self._user_error(run, exc) from None
                if run.error is not None:  # a failed node no output depends on
                    self._drain()
                    raise self._user_error(run) from None
            finally:
                self._current = None
        outputs = {t: run.get(t) for t in g.outputs}
        if self.timing and run.node_events:
            for name, (a, b) in run.node_events.items():
                run.node_seconds[name] = _elapsed_s(a, b)
        run.deferred.clear()
        values = dict(run.values) if keep else {}
        return RunResult(outputs, run.node_seconds, run.subgraphs, run.peak, self.weight_bytes,
                         time.perf_counter() - start, values, self.device, run.pool_peak)

    def __call__(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run and return host (numpy) outputs."""
        return self.run(feeds).numpy_outputs()

    def set_weight(self, name: str, value: Any) -> None:
        """Replace a weight through the engine: its variable's version goes up, so
        subgraph operators that cached a converted copy rebuild it (seed 000)."""
        if name not in self._weights:
            raise RunError(f"'{name}' is not a weight of graph '{self.graph.name}'")
        new = self._upload(np.asarray(value) if not hasattr(value, "__cuda_array_interface__") else value)
        old = self._weights[name]
        if shape_of(new) != shape_of(old):
            raise RunError(f"weight '{name}' has shape {list(shape_of(old) or [])}; "
                           f"got {list(shape_of(new) or [])}")

        def write(_rctx: RunContext) -> None:
            self._weights[name] = new
        var = self._weight_vars[name]
        self.engine.push_sync(write, self.ctx, [], [var], name=f"set_weight({name})")
        self.engine.wait_for_var(var)

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

    def child(self, body: Graph, label: str, **overrides: Any) -> "Executor":
        """The executor of a body (cached): same engine, device and options."""
        key = id(body)
        ex = self._children.get(key)
        if ex is None:
            with self._children_lock:
                ex = self._children.get(key)
                if ex is None:
                    opts = dict(device=self.device, device_id=self.device_id, executor=self.executor,
                                keep_intermediates=False, timing=self.timing,
                                plan_cache_dir=self.plan_cache_dir, kernels=self.find_kernel)
                    opts.update(overrides)
                    ex = Executor(body, self.engine, _path=(*self.path, label), _parent=self, **opts)
                    self._children[key] = ex
        return ex

    # --- binding of one node -----------------------------------------------

    def _kernel_call(self, node: Node) -> Callable[[_Run, list, RunContext], tuple]:
        kernel = self.find_kernel(node, self.graph.opset)
        attrs = kernel_attrs(node)  # attributes, plus the output count for the ops that need it
        xp = self.xp

        def call(run: _Run, args: list, rctx: RunContext) -> tuple:
            return kernel(xp, *args, **attrs)
        return call

    def _control_flow_call(self, node: Node) -> Callable[[_Run, list, RunContext], tuple]:
        kernel = self.find_kernel(node, self.graph.opset)
        attrs = kernel_attrs(node)
        subgraphs = dict(node.subgraphs)
        xp = self.xp
        label = f"'{node.name}' ({node.op_type})"

        def call(run: _Run, args: list, rctx: RunContext) -> tuple:
            scope_cache: dict[int, dict[str, Any]] = {}

            def run_graph(body: Graph, values: Sequence[Any]) -> list:
                scope = scope_cache.get(id(body))
                if scope is None:
                    scope = scope_cache[id(body)] = {t: run.get(t) for t in body.free_tensors}
                if len(values) != len(body.inputs):
                    raise RunError(f"{label}: body '{body.name}' takes {len(body.inputs)} inputs, "
                                   f"got {len(values)}")
                child = self.child(body, label)
                result = child.run(dict(zip(body.inputs, values)), outer=scope)
                return [result.outputs[t] for t in body.outputs]
            return kernel(xp, *args, subgraphs=subgraphs, run_graph=run_graph, **attrs)
        return call

    def _fn(self, step: _Step) -> Callable[[RunContext], None]:
        node = step.node
        outs = node.outputs
        timing = self.timing

        def fn(rctx: RunContext) -> None:
            run = self._current
            assert run is not None
            args = [run.get(t) for t in node.inputs]
            stream = rctx.stream
            if timing:
                if stream is not None:
                    e0 = self._gpu_event(stream, timing=True)
                t0 = time.perf_counter()
            try:
                results = step.call(run, args, rctx)
                if len(results) < sum(1 for t in outs if t):
                    raise RunError(f"the kernel returned {len(results)} output(s) for "
                                   f"{len(outs)} declared")
            except Exception as exc:  # noqa: BLE001 - re-raised, named
                err = _named_failure(node, args, exc)
                with run.lock:
                    if run.error is None:
                        run.error = err
                if err is exc:
                    raise
                raise err from exc
            if timing:
                if stream is not None:
                    run.node_events[node.name] = (e0, self._gpu_event(stream, timing=True))
                else:
                    run.node_seconds[node.name] = time.perf_counter() - t0
            for t, value in zip(outs, results):
                if t:
                    run.put(t, value)
            run.release(step.frees, stream)
        return fn

    # --- helpers ------------------------------------------------------------

    def _upload(self, value: Any) -> Any:
        if self.xp is np:
            return np.asarray(value)
        return self.xp.asarray(value)

    def _gpu_event(self, stream: Any, timing: bool = False) -> Any:
        from . import gpu
        return gpu.record_event(stream, timing=timing)

    def _drain(self) -> None:
        """Take every error a failed run left on the variables, so none leaks into
        the next run or a later ``wait_for_all`` of a shared engine."""
        for var in [*self._vars.values(), self._done]:
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


def _noop(_rctx: RunContext) -> None:
    pass


def _elapsed_s(start: Any, end: Any) -> float:
    from . import gpu
    return gpu.elapsed_ms(start, end) / 1e3


def _named_failure(node: Node, args: list, exc: BaseException) -> BaseException:
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
