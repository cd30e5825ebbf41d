"""How an ``Executor`` binds its graph: the nodes it runs (constants folded, weights of weights
evaluated, chains fused, bidirectional LSTMs split), the call of each node (its kernel,
specialised on constant inputs; a fused chain; a control-flow or subgraph operator) and the
function of each segment (generated straight-line code, or the general step loop).

``Binding`` is the ``Executor``'s half that turns nodes into steps; ``engine/executor.py`` holds
the other half (options, weights and their variables, the engine operators, runs, nested
executors) and the state both read, set in ``Executor._bind`` before ``_bind_steps`` runs:
``graph``, ``options``, ``xp``, ``ctx``, ``engine``, ``parent``, ``find_kernel``, ``timing``,
``_codegen``, ``_weights``, ``_weight_vars``, ``_inherited``, ``_host_fed``, ``_host_out``,
``_outputs``, ``_node_times``. ``_bind_steps`` sets what a run reads: ``_steps``, ``_fused``,
``_derived``, ``_folded``, ``_visible``, ``_stable``, ``_refcounts``, ``_produced``,
``device_plan``, ``subgraph_ops``.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

import numpy as np

from partition.ir import Graph, Node

from . import gpu_plan
from .chain_parts import scalar_safe
from .codegen import code_steps, generate
from .context import RunContext
from .fuse import FUSED_DOMAIN, Fused, fuse
from .fuse_elementwise import fuse_elementwise
from .inplace import bind_in_place
from .kernels import control_flow, kernel_attrs
from .kernels.registry import HOST_INPUTS, is_control_flow
from .kernels.rnn import directions_in_parallel
from .memo import memoizable, memoized, shape_memoizable, shape_memoized
from .options import find_kernel
from .rewrite import Derived, direction_slice, split_bidirectional_lstm
from .run_errors import RunError, named_failure, too_few_outputs
from .run_state import RunResult, _Run, _Step
from .specialize import fold_node, specialized_call
from .subgraph_ops import SubgraphOp
from .values import to_numpy

if TYPE_CHECKING:
    from .executor import Executor


class Binding:
    """The node-to-step half of ``Executor`` (a mixin: it has no state of its own; see above)."""

    def _fold_constants(self, graph: Graph) -> list[Node]:
        """Evaluate Constant nodes once, at bind time: their values join the
        weights (no variable: nothing writes them). Exporters write every
        weight of an If/Loop body this way; running them per call costs a node
        each. Returns the nodes left to run."""
        left = []
        for node in graph.nodes:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") \
                    and not node.inputs and len(node.outputs) == 1:
                kernel = self.find_kernel(node, graph.opset)
                if kernel is not None:
                    self._weights[node.outputs[0]] = kernel(self.xp, **kernel_attrs(node))[0]
                    self._folded.add(node.outputs[0])
                    continue
            left.append(node)
        if self.options.effective_plan() == "segments" and self._codegen:
            find = lambda n: self.find_kernel(n, graph.opset)  # noqa: E731
            left = [n for n in left if not (self._runs_ours(n, graph) and
                                            fold_node(n, self._weights, self._folded, find, self.xp))]
        return left

    def _bind_steps(self, graph: Graph) -> None:
        # Tensors evaluated at bind time (never user weights): a body sees its
        # enclosing graphs' as constants of its own, so it folds what it derives from them.
        self._folded: set[str] = set()
        if self.parent is not None:
            for t in graph.free_tensors:
                if t in self.parent._folded and t not in self._weights:
                    self._weights[t] = self.parent._weights[t]
                    self._folded.add(t)
        nodes = self._fold_constants(graph)
        # Outputs the enclosing graph reads on the host that folding made weights (on the device).
        self._host_out_folded = {t: to_numpy(self._weights[t]) for t in self._host_out if t in self._folded}
        self._fused: dict[str, Fused] = {}
        self._derived: dict[str, Derived] = {}  # weights made at bind time from others
        self._bound_weights: set[str] = set()   # the model's tensors among them (_weights_of_weights)
        made: set[str] = set()
        if self.options.effective_plan() == "segments":  # "nodes" shows every node as written
            if self.xp is np and self.parent is None:  # before fusing: a Conv sees a float weight
                nodes = self._weights_of_weights(graph, nodes)
            inherited = self._inherited
            # A subgraph body's weights are its inputs, fed from the enclosing graph's weights on
            # every run: its chains fuse on them as the whole graph's do (a partitioned PP-LCNet on
            # our engine fused 5 steps where the unpartitioned one fused 32). Fused steps read them
            # as inputs each run, so a replaced weight still reaches them.
            const = self._weights.get if not inherited else \
                (lambda t: self._weights[t] if t in self._weights else inherited.get(t))
            nodes, fusions = fuse(graph, nodes, const,
                                  lambda n: self.find_kernel(n, graph.opset), host=self.xp is np)
            self._fused = {f.node.name: f for f in fusions}
            if not directions_in_parallel(self.xp):
                nodes, made = self._split_nodes(graph, nodes)
        # The weights a node may plan on (engine/specialize.py checks each call that they
        # are still the same objects): a body's own and its enclosing graphs' it reads.
        self._visible: dict[str, Any] = self._weights
        if self.parent is not None:
            outer = self.parent._visible
            self._visible = {**{t: outer[t] for t in graph.free_tensors if t in outer}, **self._inherited,
                             **self._weights}
        # On a device: shape arithmetic on the host, reads of device values named (engine/gpu_plan.py).
        # A body plans on its enclosing graphs' weights too: a Pad's pads or a Reshape's shape
        # that the body reads from an outer initializer is a host fact, not a device read.
        self.device_plan = gpu_plan.EMPTY if self.xp is np else gpu_plan.plan_device_run(
            graph, nodes, self._visible, self.parent is not None, self._host_fed, self._host_out,
            lambda n: self.options.runtime_for(str(n.attrs.get("property", ""))) == "engine")
        if self.xp is not np and self.options.effective_plan() == "segments":
            # elementwise chains as one generated kernel each; the host's shape arithmetic stays
            nodes, chains = fuse_elementwise(
                graph, nodes, lambda n: self.find_kernel(n, graph.opset) if self._runs_ours(n, graph) else None,
                self.device_plan.host_nodes)
            self._fused.update((f.node.name, f) for f in chains)
        produced = dict.fromkeys(t for n in nodes for t in n.outputs if t)  # ordered set
        self._produced_names = set(produced) | set(graph.inputs) - set(self._weights)
        self._host_weights: dict[str, Any] = {}  # host copies of weights read on the host
        local = set(produced) | {t for t in graph.inputs if t not in self._weights}
        self._produced = produced
        self._refcounts: dict[str, int] = {t: 0 for t in local}
        self._steps: list[_Step] = []
        self.subgraph_ops: dict[str, SubgraphOp] = {}   # node name -> its operator (gpu_graphs.py reads)
        # Tensors the same object on every run until a weight is replaced (engine/memo.py).
        self._stable: set[str] = set(self._weights) | set(self._inherited)
        if self.parent is not None:
            self._stable.update(t for t in graph.free_tensors if t in self.parent._stable)
        for node in nodes:
            fused = node.domain == FUSED_DOMAIN
            reads = tuple(t for t in (node.inputs if fused or node.name in made
                                      else graph.reads(node)) if t)
            frees = tuple(t for t in reads if t in local)
            for t in frees:
                self._refcounts[t] += 1
            weights = tuple(t for t in reads if t in self._weight_vars and t not in local)
            if fused:
                call = self._fused_call(self._fused[node.name])
            elif node.is_subgraph:
                op = self.subgraph_ops[node.name] = SubgraphOp(node, self)
                call = op.call
            elif node.subgraphs or is_control_flow(node.op_type, node.domain):
                # (a FlexAttention without its optional score_mod / prob_mod bodies still
                # takes the control-flow kernel's arguments)
                call = self._control_flow_call(node)
            else:
                call = self._kernel_call(node)
            if self.device_plan is not gpu_plan.EMPTY:
                call = gpu_plan.bind_call(self.device_plan, node, call,
                                          self.find_kernel(node, graph.opset), self.xp)
            if not self._outputs.isdisjoint(node.outputs):
                pass  # never a value handed out of the graph: a caller may write into it
            elif memoizable(node, self._stable):
                # weight preparation: once per weight version
                call = memoized(call, node.op_type, self._memo_budget)
                self._stable.update(t for t in node.outputs if t)
            elif shape_memoizable(node):  # shape arithmetic: once per input shape
                call = shape_memoized(call)
                self._stable.update(t for t in node.outputs if t)
            self._steps.append(_Step(node, reads, frees, call, weights,
                                     sum(1 for t in node.outputs if t)))
        if self.xp is np:  # Linear's bias into its product (our kernels' steps only)
            bind_in_place(self._steps, graph.outputs, lambda n: self._runs_ours(n, graph))

    def _split_nodes(self, graph: Graph, nodes: list[Node]) -> tuple[list[Node], set[str]]:
        """Bidirectional LSTMs as two directions the engine can run in parallel
        (``engine/rewrite.py``); their weight slices become weights with variables."""
        taken = {*self._weights, *graph.inputs, *graph.outputs}
        for n in nodes:
            taken.update((n.name, *n.inputs, *n.outputs))
        nodes, made = split_bidirectional_lstm(nodes, self._weights, taken, direction_slice,
                                               self._derived)
        for name in self._derived:
            if name not in self._weight_vars:
                self._weight_vars[name] = self.engine.new_variable(f"w:{name}")
        return nodes, made

    def _weights_of_weights(self, graph: Graph, nodes: list[Node]) -> list[Node]:
        """A DequantizeLinear or an Identity of weights only evaluated now: its result is a
        derived weight that ``set_weight`` of its sources makes again, so the node reading it
        plans and fuses on a constant as on the weight itself. A DequantizeLinear: a QDQ
        model's, TensorRT's explicit INT8, every Conv and MatMul weight an int8 initializer
        behind one (ResNet-18 in QDQ: no conv took its chain's epilogue while its weights
        arrived at run time). An Identity: torch's exporter writes one for each use of a weight
        it shares (DETR's backbone reads 140 scales and shifts of its frozen batch norms that
        way, so none of its 54 convs took its epilogue, and each Identity ran per call)."""
        left = []
        for node in nodes:
            out = node.outputs[0] if len(node.outputs) == 1 else ""
            if node.op_type not in ("DequantizeLinear", "Identity") or node.domain not in ("", "ai.onnx") \
                    or not out \
                    or out in self._outputs or not all(not t or t in self._weights for t in node.inputs) \
                    or not self._runs_ours(node, graph):
                left.append(node)
                continue
            kernel, attrs, xp = self.find_kernel(node, graph.opset), kernel_attrs(node), self.xp

            def make(weights: Mapping[str, Any], kernel=kernel, attrs=attrs, ins=node.inputs) -> Any:
                return kernel(xp, *(weights[t] if t else None for t in ins), **attrs)[0]
            try:
                self._weights[out] = make(self._weights)
            except Exception:  # noqa: BLE001 - it runs as written and fails naming itself
                left.append(node)
                continue
            self._derived[out] = (tuple(t for t in node.inputs if t in self._weight_vars), make)
            self._weight_vars[out] = self.engine.new_variable(f"w:{out}")
            self._bound_weights.add(out)
        return left

    def _runs_ours(self, node: Node, graph: Graph) -> bool:
        """Whether ``node`` runs our registry's kernel, for which the bind-time plans
        (folding, specialised calls, in-place forms) are made. A caller's kernel finder
        that returns ours for most nodes (``OrtFallback``, which every CLI, web and
        bench run uses) keeps them for those: gating on the finder alone ran every
        user's run unplanned, twice as slow as the engine's own figures (silero-VAD
        3.2 vs 1.6 ms). A kernel the caller supplies runs as it is."""
        return self.options.kernels is None or \
            self.find_kernel(node, graph.opset) is find_kernel(node, graph.opset)

    def _kernel_call(self, node: Node) -> Callable[[_Run, list, RunContext], tuple]:
        kernel = self.find_kernel(node, self.graph.opset)
        if hasattr(kernel, "with_constants"):  # e.g. onnxruntime's session for one node
            kernel = kernel.with_constants(
                {i: self._visible[t] for i, t in enumerate(node.inputs)
                 if t and t in self._visible and t not in self._produced_names})
        attrs = kernel_attrs(node)  # attributes, plus the output count for the ops that need it
        xp = self.xp
        host = self._host_inputs(node)
        if host:
            host_weights = self._host_weights

            def call(run: _Run, args: list, rctx: RunContext) -> tuple:
                for i, t in host:  # shape / axes weights: their host copy, no device read
                    args[i] = host_weights[t]
                return kernel(xp, *args, **attrs)
        else:
            def call(run: _Run, args: list, rctx: RunContext) -> tuple:
                return kernel(xp, *args, **attrs)
            call.direct = (kernel, attrs)  # type: ignore[attr-defined] # generated code calls it as is
        if not self._runs_ours(node, self.graph):  # the caller's kernels run as they are
            return call
        # Constant axes, shapes, indices: planned once (engine/specialize.py).
        return specialized_call(node, attrs, self._visible, self._produced_names, xp, call) or call

    def _host_inputs(self, node: Node) -> tuple[tuple[int, str], ...]:
        """On a device: the (position, weight) inputs of ``node`` its kernel reads on
        the host (``HOST_INPUTS``), each given a host copy once, here."""
        if self.xp is np or node.domain not in ("", "ai.onnx"):
            return ()
        found = []
        for i in HOST_INPUTS.get(node.op_type, ()):
            t = node.inputs[i] if i < len(node.inputs) else ""
            if t and t in self._visible and t not in self._produced_names:
                if t not in self._host_weights:
                    self._host_weights[t] = to_numpy(self._visible[t])
                found.append((i, t))
        return tuple(found)

    def _fused_call(self, fused: Fused) -> Callable[[_Run, list, RunContext], tuple]:
        kernel, xp, out = fused.kernel, self.xp, fused.node.outputs[0]
        if xp is np:
            kernel = scalar_safe(kernel)
        parts = [_Step(p, tuple(t for t in p.inputs if t), (), self._kernel_call(p), (), 1)
                 for p in fused.parts]

        def call(run: _Run, args: list, rctx: RunContext) -> tuple:
            if not run.keep:
                return kernel(xp, *args)
            for part in parts:  # the debugger wants every tensor: run the chain as written
                self._exec_step(part, run, rctx)
            return (run.get(out),)
        call.direct = (kernel, {})  # type: ignore[attr-defined] # generated code: never keeps
        return call

    def _control_flow_call(self, node: Node) -> Callable[[_Run, list, RunContext], tuple]:
        kernel = self.find_kernel(node, self.graph.opset)
        attrs = kernel_attrs(node)
        subgraphs = dict(node.subgraphs)
        xp = self.xp
        label = f"'{node.name}' ({node.op_type})"
        inline = self.options.effective_plan() == "segments"
        if inline and getattr(kernel, "raw", None) is control_flow.if_:
            return self._if_call(node)

        bodies: dict[int, Executor] = {}   # id(body) -> its executor, looked up once

        def call(run: _Run, args: list, rctx: RunContext) -> tuple:
            # id(body) -> its step function (outer scope bound), made once a call: a Scan or
            # Loop binds its body once (control_flow.body_step) and calls it each iteration
            found: dict[int, Callable[..., list]] = {}

            def bind(body: Graph) -> Callable[..., list]:
                step = found.get(id(body))
                if step is None:
                    child = bodies.get(id(body))
                    if child is None:
                        child = bodies[id(body)] = self.body_child(node, body)
                    scope = {t: run.get(t) for t in body.free_tensors}
                    step = found[id(body)] = child.body_step(scope, rctx.stream) if inline else _graph_step(
                        body, lambda feeds, child=child, scope=scope: child.run(feeds, outer=scope))
                return step

            def run_graph(body: Graph, values: Sequence[Any]) -> list:
                if len(values) != len(body.inputs):
                    raise RunError(f"{label}: body '{body.name}' takes {len(body.inputs)} inputs, "
                                   f"got {len(values)}")
                return bind(body)(*values)
            run_graph.bind = bind  # type: ignore[attr-defined]
            return kernel(xp, *args, subgraphs=subgraphs, run_graph=run_graph, **attrs)
        return call

    def _if_call(self, node: Node) -> Callable[[_Run, list, RunContext], tuple]:
        """An If run inline, bound once: the registry's ``if_`` (branch by the condition, run it)
        without the generic control-flow path around it -- a ``run_graph`` closure, the keyword
        call and a body lookup a call, a third of an If's cost. silero-VAD runs six to eight
        Ifs a chunk whose branches are one Squeeze or Identity: twenty chained Ifs of one-node
        branches 148-281 -> 93-193 us a run, silero-VAD (half) 542-600 -> 510-519 us of CPU a
        chunk (before and after alternately; docs/engine.md)."""
        xp, found = self.xp, {}   # branch -> (its executor, its free tensors), made on first use
        branches = (node.subgraphs["else_branch"], node.subgraphs["then_branch"])

        def call(run: _Run, args: list, rctx: RunContext) -> tuple:
            body = branches[control_flow.truth(xp, args[0])]
            hit = found.get(id(body))
            if hit is None:
                hit = found[id(body)] = (self.body_child(node, body), body.free_tensors)
            child, free = hit
            return tuple(child.run_body((), {t: run.get(t) for t in free}, rctx.stream))
        return call

    def _segment_fn(self, steps: list[_Step],
                    exports: Collection[str]) -> Callable[[RunContext], None]:
        """The engine function of a segment: its generated code (``engine/codegen.py``)
        for a host run that keeps no intermediates, else the general step loop."""
        slow = self._step_loop(steps)
        plan = self._code_plan(steps)
        if plan is None:
            return slow
        made: list[Callable] = []
        index = len(self._codes)

        def code() -> Callable:
            """Generated at the first run that takes it (compiling costs ~0.1 ms a node:
            a mode the executor never runs is never compiled)."""
            if not made:
                made.append(self._generate(plan, steps, exports, index))
            return made[0]
        self._codes.append(code)

        def fn(rctx: RunContext) -> None:
            run = self._current
            if rctx.stream is None and not run.keep:  # type: ignore[union-attr]
                (made[0] if made else code())(run, rctx)
            else:
                slow(rctx)
        return fn

    def _code_plan(self, steps: list[_Step]) -> list | None:
        """The code steps of a segment, or None where the general loop must run it (a
        device, a subgraph node, a body: bodies run as their body function)."""
        if self.xp is not np or not self._codegen:
            return None
        if self.parent is not None and self.options.effective_plan() == "segments":
            return None
        return code_steps(steps)

    def _generate(self, plan: list, steps: list[_Step], exports: Collection[str],
                  index: int) -> Callable:
        """``steps`` as one generated ``segment(run, rctx)`` (``engine/codegen.py``)."""
        produced = {t for s in steps for t in s.node.outputs if t}
        exports = {t for t in exports if t in produced}
        # The run's reference counts cover the tensors it holds: inputs from outside
        # this segment and the ones it publishes; the others live in locals only.
        frees = [t for s in steps for t in s.frees if t not in produced or t in exports]
        code = generate(plan, form="segment", exports=sorted(exports, key=self._order),
                        frees=frees, xp=self.xp, fail=self._record_failure, timed=self.timing,
                        told=self._node_times,
                        weights={t for s in steps for t in s.reads
                                 if t in self._weights and t not in self._refcounts},
                        weight_dict=self._weights,
                        label=f"segment {index}")
        return code

    def code(self) -> str:
        """The generated source of every segment (generated now if no run has yet)
        and of the bodies bound so far (like torch.fx's ``GraphModule.code``): what a
        run executes, for a reader."""
        parts = [c().source for c in self._codes]
        if self._body_fn is not None:
            parts.append(self._body_fn.source)
        for child in list(self._children.values()):
            parts.append(child.code())
        return "\n".join(p for p in parts if p)

    def _step_loop(self, steps: list[_Step]) -> Callable[[RunContext], None]:
        exec_step = self._exec_step
        if len(steps) == 1:
            step = steps[0]

            def fn(rctx: RunContext) -> None:
                run = self._current
                if rctx.stream is not None:
                    run.order_after_inputs(rctx.stream)  # type: ignore[union-attr]
                exec_step(step, run, rctx)  # type: ignore[arg-type]
            return fn

        exec_host = self._exec_host

        def fn_many(rctx: RunContext) -> None:
            run = self._current
            if rctx.stream is None:
                exec_host(steps, run, rctx)  # type: ignore[arg-type]
                return
            run.order_after_inputs(rctx.stream)  # type: ignore[union-attr]
            for step in steps:
                exec_step(step, run, rctx)  # type: ignore[arg-type]
        return fn_many

    def _exec_host(self, steps: Sequence[_Step], run: "_Run", rctx: RunContext) -> None:
        """``_exec_step`` over ``steps`` on the host (no stream), its lookups hoisted
        out of the loop: the same calls, errors, times and ``store``s."""
        get, seconds, timing, clock = run.get, run.node_seconds, self.timing, time.perf_counter
        store, told = run.store, self._node_times
        for step in steps:
            node = step.node
            args = [get(t) for t in node.inputs]
            t0 = clock() if timing else 0.0
            try:
                results = step.call(run, args, rctx)
                if len(results) < step.n_outputs:
                    raise too_few_outputs(results, len(node.outputs))
            except Exception as exc:  # noqa: BLE001 - re-raised, named
                self._record_failure(run, node, args, exc)
            if timing:
                t1 = clock()
                seconds[node.name] = t1 - t0
                if told is not None:
                    told(node.name, t0, t1)
            store(node.outputs, results, step.frees, None)

    def _exec_step(self, step: _Step, run: "_Run", rctx: RunContext) -> None:
        """Run one node: its kernel on its inputs, outputs stored, inputs released."""
        node = step.node
        outs = node.outputs
        args = [run.get(t) for t in node.inputs]
        stream = rctx.stream
        timing = self.timing
        e1 = None
        if timing:
            if stream is not None:
                # Consecutive nodes on one stream share an event: this node starts where
                # the last one timed here ended (nothing else is queued between them).
                e0 = rctx.last_event if rctx.last_event is not None else self._gpu_event(stream, timing=True)
            t0 = time.perf_counter()
        try:
            results = step.call(run, args, rctx)
            if len(results) < step.n_outputs:
                raise too_few_outputs(results, len(outs))
        except Exception as exc:  # noqa: BLE001 - re-raised, named
            rctx.last_event = None
            self._record_failure(run, node, args, exc)
        if timing:
            if stream is not None:
                e1 = rctx.last_event = self._gpu_event(stream, timing=True)
                run.node_events[node.name] = (e0, e1)
            else:
                run.node_seconds[node.name] = time.perf_counter() - t0
            if self._node_times is not None:   # host times: a timeline of what ran when
                self._node_times(node.name, t0, time.perf_counter())
        run.store(outs, results, step.frees, stream, e1)

    @staticmethod
    def _record_failure(run: "_Run", node: Node, args: list, exc: Exception) -> None:
        """Name ``exc`` after ``node``, keep the run's first error, raise it."""
        err = named_failure(node, args, exc)
        with run.lock:
            if run.error is None:
                run.error = err
        if err is exc:
            raise exc
        raise err from exc


def _graph_step(g: Graph, run: Callable[[dict], RunResult]) -> Callable[..., list]:
    """A body's step as a run of its graph (``run(feeds)``: a full run under the ``nodes``
    plan, or inline where the body has no generated function): its outputs in order."""
    def step(*values: Any) -> list:
        result = run(dict(zip(g.inputs, values)))
        return [result.outputs[t] for t in g.outputs]
    return step
