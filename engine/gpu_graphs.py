"""One launch per run: a bound graph captured as a CUDA Graph per input signature, replayed.

Thin and **unverified on a GPU** (none is lent to this project); only the decision of
what can be captured is tested (on the fake cupy). Written against cupy's documented
stream capture: ``Stream.begin_capture()``, ``Stream.end_capture()`` -> ``cupy.cuda.Graph``,
``Graph.launch(stream)``.

A graph is captured when every top-level node's device work is the same for a given
input signature (names, shapes, dtypes): no control flow (``If``/``Loop``/``Scan`` pick
their work from values), no subgraph operator (another runtime), no device value read
on the host (``DevicePlan.host_reads``: a sync cannot be captured). Host-planned shape
arithmetic is fine: for one signature its values are the same every run, so what the
capture baked in stays true. Anything else runs eagerly, and ``report()`` says why.

Replay writes the feeds into the captured input buffers and launches the graph: the
outputs are the captured output arrays, overwritten by the next replay (copy them if
they must outlive it). Allocations made during capture are kept alive with the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .gpu_plan import HOST_READ_INPUTS, DevicePlan
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


def decide(nodes: list[Any], plan: DevicePlan) -> CaptureDecision:
    """Whether a graph of ``nodes`` (top level, bound) can be captured once per signature."""
    eager = []
    reads = {r.node: r for r in plan.host_reads}
    for node in nodes:
        keep = HOST_READ_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        lifted = [t for i, t in enumerate(node.inputs) if t in plan.host_inputs and i not in keep
                  and node.name not in plan.host_nodes]
        if lifted:  # an upload from pageable host memory cannot be captured
            eager.append((node.name, f"uploads the host-kept graph input '{lifted[0]}' in the run"))
        elif node.name in reads:
            eager.append((node.name, f"reads '{reads[node.name].tensor}' from the device on the host"))
        elif node.is_subgraph:
            eager.append((node.name, "a subgraph operator: another runtime runs it"))
        elif node.subgraphs or node.op_type in DATA_DEPENDENT:
            eager.append((node.name, f"{node.op_type}: its work depends on values, not shapes"))
    return CaptureDecision(not eager, tuple(eager))


class GraphReplay:
    """``run(feeds)`` of a bound device ``Executor`` through captured CUDA Graphs."""

    def __init__(self, executor: Any) -> None:
        self.ex = executor
        self.decision = decide([s.node for s in executor._steps], executor.device_plan)
        self._graphs: dict[tuple, tuple[Any, dict[str, Any], dict[str, Any]]] = {}
        self.replays = 0

    def report(self) -> dict[str, Any]:
        return {**self.decision.describe(), "signatures_captured": len(self._graphs),
                "replays": self.replays}

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        if not self.decision.captured:
            return self.ex.run(feeds).outputs
        # Host-kept inputs (small integers) decide shape facts baked into the capture: by value.
        host = self.ex.device_plan.host_inputs
        key = tuple((k, tuple(v.shape), str(v.dtype), to_numpy(v).tobytes() if k in host else None)
                    for k, v in sorted(feeds.items()))
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(feeds)
        graph, inputs, outputs = entry
        for name, buf in inputs.items():
            buf[...] = self.ex.xp.asarray(feeds[name])
        graph.launch(self._stream)
        self.replays += 1
        return outputs

    def _capture(self, feeds: Mapping[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        ex, xp = self.ex, self.ex.xp
        ex.run(feeds)  # warm: resident constants uploaded, libraries tuned, pool grown
        inputs = {k: xp.array(xp.asarray(v)) for k, v in feeds.items()
                  if k not in ex.device_plan.host_inputs}
        fixed = {**feeds, **inputs}
        self._stream = stream = xp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                result = ex.run_inline(fixed, {}, stream)
            finally:
                graph = stream.end_capture()
        return graph, inputs, dict(result.outputs)
