"""Plain-word explanations of trace events, and the guided walkthrough of the TensorRT integration design's cycle example.

``explain(event, graph)`` turns one ``TraceEvent`` into a sentence; the
debugger's log and the walkthrough both use it, so what a newcomer reads is
what the partitioner really did. The walkthrough runs the real partitioner on
``trt_cycle`` (A=Relu -> B=Sigmoid -> C=Add, A -> D=Det -> C) with the
``default`` backend and ops Relu, Sigmoid, Add: D is unsupported, and growing
{A, B, C} would close the cycle A -> D -> C.
"""

from __future__ import annotations

from typing import Any

from partition.ir import Graph
from partition.trace import EventKind as E, TraceEvent

WALKTHROUGH_MODEL = "trt_cycle.onnx"
WALKTHROUGH_BACKEND = "default"
WALKTHROUGH_OPS = ["Relu", "Sigmoid", "Add"]


def _op(graph: Graph | None, name: str | None) -> str:
    if graph is None or not name or name not in graph.node_by_name:
        return ""
    return f" ({graph.node_by_name[name].op_type})"


def _names(names: Any) -> str:
    names = list(names or [])
    if not names:
        return "nothing"
    if len(names) > 8:
        return ", ".join(names[:8]) + f" and {len(names) - 8} more"
    return ", ".join(names)


def explain(e: TraceEvent, graph: Graph | None = None) -> str:
    """One event in plain words."""
    n, nb = e.node, e.neighbour
    if e.kind is E.PASS_START:
        return (f"Pass '{e.property}' begins ({e.reason}). The partitioner visits the nodes in graph "
                "order and asks the selector, for each node not yet taken, whether a subgraph may start there.")
    if e.kind is E.SEED:
        if e.result:
            return (f"{n}{_op(graph, n)} is selected as a seed: select({n}) answered yes, so a new "
                    "subgraph starts growing from it.")
        why = f" ({e.reason})" if e.reason else ""
        return f"select({n}) answered no{why}: no subgraph starts at {n}{_op(graph, n)}."
    if e.kind in (E.SELECT_INPUT, E.SELECT_OUTPUT):
        rel = "reads an output of" if e.kind is E.SELECT_OUTPUT else "produces an input of"
        if e.result:
            return (f"{nb}{_op(graph, nb)} joins through {e.kind}: it {rel} {n} and the selector accepts it. "
                    f"Candidates now: {_names(e.candidates)}.")
        return (f"{e.kind}({n}, {nb}) answered no: {nb}{_op(graph, nb)} {rel} {n} but stays out of "
                "the subgraph.")
    if e.kind is E.REFUSE:
        return f"{nb} is not offered to the selector from {n}: {e.reason}."
    if e.kind is E.CYCLE:
        path = " -> ".join(e.path)
        outside = [p for p in e.path[1:-1] if p not in e.candidates]
        mid = f"{_names(outside)} {'is' if len(outside) == 1 else 'are'} outside the candidates, so " if outside else ""
        return (f"Cycle check: contracting {{{_names(e.candidates)}}} into one node would close the cycle "
                f"{path}: {mid}the new node would have to run both before and after "
                f"{'it' if len(outside) == 1 else 'them'}. One candidate must go.")
    if e.kind is E.EXCLUDE:
        return (f"{n} is excluded ({e.reason}) so the subgraph cannot close the cycle, and the selector "
                "starts again from the seed without it.")
    if e.kind is E.RESET:
        return f"The selector is reset: growth restarts from {n}, never offering the excluded nodes again."
    if e.kind is E.FILTER:
        kept = list(e.result or [])
        dropped = [c for c in e.candidates if c not in kept]
        tail = f"; it drops {_names(dropped)}" if dropped else ""
        why = f" ({e.reason})" if e.reason else ""
        return f"filter() receives the candidates {{{_names(e.candidates)}}} and keeps {{{_names(kept)}}}{tail}{why}."
    if e.kind is E.SPLIT:
        return f"The filtered candidates were not connected, so they are split into connected pieces{': ' + e.reason if e.reason else ''}."
    if e.kind is E.REJECT:
        return f"The subgraph {{{_names(e.candidates)}}} is rejected: {e.reason or 'create_subgraph_node returned None'}."
    if e.kind is E.SUBGRAPH:
        ins, outs = (e.result or [[], []]) if isinstance(e.result, (list, tuple)) and len(e.result) == 2 else ([], [])
        return (f"Subgraph {e.subgraph_id} is created from {{{_names(e.candidates)}}}: they will be replaced "
                f"by one node, {n}, reading {_names(ins)} and writing {_names(outs)}.")
    if e.kind is E.PASS_END:
        return f"Pass '{e.property}' is over: {e.result} subgraph(s) found."
    return f"{e.kind} {n or ''} {nb or ''} {e.reason}".strip()


def selector_call(e: TraceEvent) -> str:
    """The call and its answer, as the debugger's log shows it."""
    if e.kind is E.SEED:
        return f"select({e.node}) -> {bool(e.result)}"
    if e.kind in (E.SELECT_INPUT, E.SELECT_OUTPUT):
        return f"{e.kind}({e.node}, {e.neighbour}) -> {bool(e.result)}"
    if e.kind is E.FILTER:
        return f"filter([{', '.join(e.candidates)}]) -> [{', '.join(e.result or [])}]"
    if e.kind is E.RESET:
        return "reset()"
    if e.kind is E.CYCLE:
        return f"cycle check: {' -> '.join(e.path)}"
    if e.kind is E.SUBGRAPH:
        return f"create_subgraph_node(#{e.subgraph_id}) -> {e.node}"
    if e.kind is E.REFUSE:
        return f"refuse {e.node} -> {e.neighbour}"
    if e.kind is E.EXCLUDE:
        return f"exclude {e.node}"
    if e.kind in (E.PASS_START, E.PASS_END):
        return f"{e.kind} {e.property}"
    if e.kind in (E.SPLIT, E.REJECT):
        return f"{e.kind} [{', '.join(e.candidates)}]"
    return e.kind


def walkthrough(graph: Graph) -> list[dict[str, Any]]:
    """The real trace of the walkthrough model with an explanation per step."""
    from partition.runner import PartitionRun

    from .serialize import event_json
    run = PartitionRun(graph, WALKTHROUGH_BACKEND, ops=WALKTHROUGH_OPS)
    steps = []
    for e in run.events():
        data = event_json(e, explain(e, graph))
        data["call"] = selector_call(e)
        steps.append(data)
    return steps


def walkthrough_result(graph: Graph) -> dict[str, Any]:
    """The walkthrough's last step: the subgraphs it ends with (drawn as boxes) and why the other
    nodes stay outside, in plain words."""
    from partition.runner import partition
    result = partition(graph, WALKTHROUGH_BACKEND, ops=WALKTHROUGH_OPS)
    parts = [f"subgraph {s.id} = {{{_names(s.nodes)}}}" for s in result.subgraphs]
    outside = [f"{n}{_op(graph, n)}: {r.text}" for n, r in result.reasons.items()]
    text = (f"The result: {'; '.join(parts) or 'no subgraph'}. Each box becomes one node of the "
            f"partitioned graph and runs on the backend. Outside: {'; '.join(outside) or 'nothing'}. "
            "No box both feeds and waits for a node outside it, so the partitioned graph has no cycle.")
    return {"assignment": result.subgraph_of(), "text": text,
            "call": f"result: {len(result.subgraphs)} subgraph(s)",
            "subgraphs": [{"id": s.id, "nodes": list(s.nodes)} for s in result.subgraphs]}
