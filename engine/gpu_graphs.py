"""One launch per run: a bound graph captured as a CUDA Graph per input signature, replayed.

A graph is captured when every node's device work is the same for a given input
signature (names, shapes, dtypes, and the values of host-kept inputs): no ``Loop``/
``Scan`` or data-dependent op, no subgraph operator run by another runtime (one our
engine runs is captured with its body, which runs inline), no device value
read on the host (``DevicePlan.host_reads``: a sync cannot be captured). Host-planned
shape arithmetic is fine: for one signature its values are the same every run, so what
the capture baked in stays true. An ``If`` whose condition the plan computes on the host
(a sample rate fed as a host input) is captured with the branch it took, when that
branch's body is capturable in turn: the condition is part of the signature. Anything
else runs eagerly, and ``report()`` says why; so does a signature whose capture failed
(a product ``kernels/gemm.py`` cannot record, a cupy routine that syncs).

How a capture is made (the rules are CUDA's, enforced by the fake cupy in the tests):

- on a stream of its own, through ``Executor.run_inline`` with no engine stream, so no
  event is recorded or queried and nothing waits (both invalidate a capture);
- from a **private memory pool**, as PyTorch's graph pools do: every array the captured
  kernels read or write, intermediates and kernel temporaries included, stays owned by the
  graph. With cupy's default pool, an intermediate freed during the capture would go back
  to the pool and be handed to other work, which each replay would then overwrite;
- with the kernels' matrix products calling cuBLAS directly (``kernels/gemm.py``: cupy
  refuses any cuBLAS call while a stream captures);
- after one uncaptured run on that stream and pool, so kernels are compiled, cuBLAS is
  set up and the pool already holds blocks of every size the capture asks for.

Replay copies the feeds into the captured input buffers on the graph's stream and
launches the graph: the outputs are the captured output arrays, overwritten by the next
replay (copy them if they must outlive it). ``Executor.set_weight`` installs a new array,
which a graph captured earlier would not read: the graphs are dropped and captured again.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Mapping

from .gpu_plan import HOST_READ_INPUTS, DevicePlan
from .kernels import gemm
from .values import to_numpy

#: Ops whose device work depends on values, not shapes: never captured.
DATA_DEPENDENT = frozenset({"If", "Loop", "Scan", "NonZero", "Unique", "NonMaxSuppression", "Compress",
                            "TopK"})


@dataclass(frozen=True)
class CaptureDecision:
    captured: bool
    eager_nodes: tuple[tuple[str, str], ...]  # (node, why) that keep the graph eager

    def describe(self) -> dict[str, Any]:
        return {"captured": self.captured,
                "eager_because": [{"node": n, "why": w} for n, w in self.eager_nodes]}


def decide(executor: Any) -> CaptureDecision:
    """Whether ``executor``'s bound graph can be captured once per input signature."""
    eager = []
    plan: DevicePlan = executor.device_plan
    reads = {r.node: r for r in plan.host_reads}
    for node in (s.node for s in executor._steps):
        keep = HOST_READ_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        lifted = [t for i, t in enumerate(node.inputs) if t in plan.fresh_inputs and i not in keep
                  and node.name not in plan.host_nodes and not node.is_subgraph]  # a body takes host arrays
        if lifted:  # an upload from pageable host memory cannot be captured
            eager.append((node.name, f"uploads the host-kept graph input '{lifted[0]}' in the run"))
        elif node.name in reads:
            eager.append((node.name, f"reads '{reads[node.name].tensor}' from the device on the host"))
        elif node.is_subgraph:
            why = _subgraph_why(executor, node)
            if why:
                eager.append((node.name, why))
        elif node.op_type == "If" and node.domain in ("", "ai.onnx"):
            why = _branch_why(executor, node)   # its condition is host-known (not in reads)
            if why:
                eager.append((node.name, why))
        elif node.subgraphs or node.op_type in DATA_DEPENDENT:
            eager.append((node.name, f"{node.op_type}: its work depends on values, not shapes"))
    return CaptureDecision(not eager, tuple(eager))


def _branch_why(executor: Any, node: Any) -> str:
    """Why an ``If`` with a host-known condition cannot be captured ('' when it can): a
    branch body that cannot be, itself."""
    for body in node.subgraphs.values():
        why = _inner_why(executor.body_child(node, body), f"its branch '{body.name}'")
        if why:
            return why
    return ""


def _subgraph_why(executor: Any, node: Any) -> str:
    """Why a subgraph operator cannot be captured ('' when it can): our engine runs its
    body inline on the device (``subgraph_ops._EngineImpl``), and that body can be."""
    op = executor.subgraph_ops.get(node.name)
    impl = getattr(op, "_impl", None)
    if impl is None:
        return "a subgraph operator whose runtime is chosen at its first run (run once first)"
    if impl.name != "engine":
        return f"a subgraph operator run by {impl.name}: another runtime"
    return _inner_why(impl.child, "its body")


def _inner_why(inner_executor: Any, what: str) -> str:
    """'' when a nested graph can be captured; else why not, naming its first eager node."""
    inner = decide(inner_executor)
    if inner.captured:
        return ""
    where, why = inner.eager_nodes[0]
    return f"{what} cannot be captured: '{where}' {why}"


class GraphReplay:
    """``run(feeds)`` of a bound device ``Executor`` through captured CUDA Graphs."""

    def __init__(self, executor: Any) -> None:
        self.ex = executor
        self.decision = decide(executor)
        self._graphs: dict[tuple, _Captured] = {}
        self.failed: dict[tuple, str] = {}   # signature -> why its capture failed (it runs eagerly)
        self._epoch = executor.weights_epoch
        self._stream: Any = None
        self.replays = 0

    def report(self) -> dict[str, Any]:
        return {**self.decision.describe(), "signatures_captured": len(self._graphs),
                "replays": self.replays, "capture_failed": sorted(set(self.failed.values()))}

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        if not self.decision.captured:
            return self.ex.run(feeds).outputs
        if self.ex.weights_epoch != self._epoch:   # a weight was replaced: recapture
            self._graphs.clear()
            self.failed.clear()
            self._epoch = self.ex.weights_epoch
        # Host-kept inputs (small integers) decide shape facts baked into the capture: by value.
        host = self.ex.device_plan.host_inputs
        key = tuple((k, tuple(v.shape), str(v.dtype), to_numpy(v).tobytes() if k in host else None)
                    for k, v in sorted(feeds.items()))
        captured = self._graphs.get(key)
        if captured is None:
            if key in self.failed:
                return self.ex.run(feeds).outputs
            try:
                captured = self._graphs[key] = self._capture(feeds)
            except Exception as exc:  # noqa: BLE001 - this signature runs eagerly, and says why
                self.failed[key] = f"{type(exc).__name__}: {exc}"
                return self.ex.run(feeds).outputs
        # Ordered against the caller's stream both ways, without a host wait: the feeds
        # (device arrays made there) are copied in after it, and what the caller does
        # next with the outputs waits for the replay.
        xp, stream = self.ex.xp, self._stream
        caller = xp.cuda.get_current_stream()
        stream.wait_event(caller.record())
        with stream:
            for name, buf in captured.inputs.items():
                buf[...] = xp.asarray(feeds[name])
        captured.graph.launch(stream)
        caller.wait_event(stream.record())
        self.replays += 1
        return captured.outputs

    def _capture(self, feeds: Mapping[str, Any]) -> "_Captured":
        ex, xp = self.ex, self.ex.xp
        ex.run(feeds)  # resident constants uploaded, weight preparations memoized
        if self._stream is None:
            self._stream = xp.cuda.Stream(non_blocking=True)
        stream, pool = self._stream, xp.cuda.MemoryPool()
        with xp.cuda.using_allocator(pool.malloc), stream, gemm.capturing_on(stream.ptr):
            inputs = {k: xp.array(xp.asarray(v)) for k, v in feeds.items()
                      if k not in ex.device_plan.host_inputs}
            fixed = {**feeds, **inputs}
            ex.run_inline(fixed, {})   # warm, uncaptured: same stream, pool and GEMM path
            stream.synchronize()
            stream.begin_capture()
            try:
                result = ex.run_inline(fixed, {})
            finally:
                graph = stream.end_capture()
        return _Captured(graph, inputs, dict(result.outputs), pool)


@dataclass(frozen=True)
class _Captured:
    graph: Any
    inputs: dict[str, Any]    # the buffers the graph reads its feeds from
    outputs: dict[str, Any]   # the arrays the graph writes its outputs to
    pool: Any                 # owns every block the graph touches: lives as long as it


def measure_replays(executor: Any, feeds: Mapping[str, Any], repeat: int,
                    eager_outputs: Mapping[str, Any]) -> dict[str, Any]:
    """A device run measured as CUDA Graph replays, for run reports (``engine/measure.py``):
    the capture decision and why, and where captured, the median wall time of ``repeat``
    replays (each waited for) and whether their outputs match the eager run's
    (``eager_outputs``, within the comparison tolerance)."""
    from .tolerance import Tolerance, compare_arrays  # noqa: PLC0415 - GPU reports only

    replay = GraphReplay(executor)
    if not replay.decision.captured:
        return replay.report()
    wait = executor.xp.cuda.Device(executor.device_id).synchronize
    outputs = replay.run(feeds)   # captured now (or failed: then eager, and the report says why)
    wait()
    if replay.failed:
        return replay.report()
    walls = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        outputs = replay.run(feeds)
        wait()
        walls.append(time.perf_counter() - t0)
    matches = all(compare_arrays(to_numpy(outputs[k]), to_numpy(v), Tolerance())["match"]
                  for k, v in eager_outputs.items())
    return {**replay.report(), "seconds": statistics.median(walls), "all_seconds": walls,
            "matches_eager": matches}
