"""One driver, typed records: event kinds, reason kinds and their data, read without parsing text."""

from __future__ import annotations

import json

from partition import Graph, Node, PartitionRun, check_partition, partition
from partition.report import describe
from partition.trace import EVENT_KINDS, REASON_KINDS, EventKind, ReasonKind, TraceEvent




def graph_of(spec: list[tuple[str, str, tuple[str, ...]]]) -> Graph:
    nodes = [Node(name, op, tuple(ins), (name,)) for name, op, ins in spec]
    used = {i for _, _, ins in spec for i in ins}
    return Graph("g", nodes, ["x"], [n for n, _, _ in spec if n not in used], opset={"": 17})


# A -> D(Det) -> C and A -> B -> C: {A, B, C} would close A -> D -> C.
CYCLE = [("A", "Relu", ("x",)), ("B", "Sigmoid", ("A",)), ("D", "Det", ("A",)), ("C", "Add", ("B", "D"))]
# Found for test_tensorrt_partition: the groups allow {n0, n5}; a path runs through an earlier subgraph.
CYCLIC = [("n0", "Relu", ("x",)), ("n1", "Add", ("x", "x")), ("n2", "Det", ("n0",)),
          ("n3", "Sum", ("n1", "x", "x")), ("n4", "Det", ("n1",)), ("n5", "Sum", ("n4", "n0", "n1")),
          ("n6", "Sum", ("x", "n2", "n1"))]


def events_of(graph: Graph, backend: str, **options) -> tuple[list[TraceEvent], object]:
    run = PartitionRun(graph, backend, trace=True, **options)
    events = list(run.events())
    return events, run.result


def test_event_kinds_are_the_enum_and_keep_their_strings() -> None:
    events, _ = events_of(graph_of(CYCLE), "default", ops=["Relu", "Sigmoid", "Add"])
    assert all(isinstance(e.kind, EventKind) for e in events)
    assert {e.to_json()["kind"] for e in events} <= set(EVENT_KINDS)
    assert json.loads(json.dumps(events[0].to_json()))["kind"] == "pass_start"
    assert EventKind("cycle") is EventKind.CYCLE and EventKind.CYCLE == "cycle"


def test_reasons_carry_kind_and_data_in_the_json() -> None:
    result = partition(graph_of(CYCLE), "default", ops=["Relu", "Sigmoid", "Add"])
    check_partition(result)
    assert result.reasons["D"].kind is ReasonKind.UNSUPPORTED
    assert result.cycles == [{"property": "default", "seed": "A", "path": ["A", "D", "C"], "excluded": "C"}]
    out = {e["node"]: e for e in json.loads(json.dumps(result.to_json()))["excluded"]}
    assert out["D"] == {"node": "D", "reason": "op Det is not in the backend's op set", "kind": "unsupported"}
    # conv_bn's filter drops a Conv without its BatchNormalization
    lone = partition(graph_of([("c", "Conv", ("x",)), ("r", "Relu", ("c",))]), "conv_bn")
    c = lone.reasons["c"]
    assert c.kind is ReasonKind.FILTERED and c.data == {"seed": "c"}
    assert lone.excluded["c"] == c.text == "dropped by filter of the subgraph grown from c"
    r = lone.reasons["r"]  # refused first from c, and never a seed: the first reason stays
    assert r.kind is ReasonKind.REFUSED and r.data == {"call": "select_output", "from": "c"}
    assert {e["kind"] for e in lone.to_json()["excluded"]} <= set(REASON_KINDS)


def test_below_min_size_keeps_the_earlier_refusal_as_data() -> None:
    result = partition(graph_of(CYCLE), "tensorrt")
    c = result.reasons["C"]
    assert c.kind is ReasonKind.BELOW_MIN_SIZE and c.data["compute_nodes"] == 1 and c.data["min_size"] == 2
    earlier = c.data["earlier"]
    assert earlier.kind is ReasonKind.INCOMPATIBLE_GROUP
    assert (earlier.data["incompatible"], earlier.data["group"], earlier.data["seed"]) == ("D", "descendants", "A")
    js = next(e for e in result.to_json()["excluded"] if e["node"] == "C")
    assert js["data"]["earlier"]["kind"] == "incompatible_group"


def test_report_counts_by_kind() -> None:
    summary = describe(partition(graph_of(CYCLE), "tensorrt"))["summary"]
    assert summary["left_out_by_kind"] == {"below_min_size": 1, "unsupported": 1}
    assert summary["left_out_supported"] == {"subgraph below --min-size": 1}
    assert [u["op_type"] for u in summary["unsupported"]] == ["Det"]


def test_both_growers_report_a_cycle_the_same_way() -> None:
    generic, _ = events_of(graph_of(CYCLE), "default", ops=["Relu", "Sigmoid", "Add"])
    trt, result = events_of(graph_of(CYCLIC), "tensorrt", min_size=1)
    for events in (generic, trt):
        kinds = [e.kind for e in events]
        i = kinds.index(EventKind.CYCLE)
        cycle, exclude = events[i], events[i + 1]
        assert exclude.kind is EventKind.EXCLUDE and cycle.extra == {"excluded": exclude.node}
        assert list(cycle.path)[-1] == exclude.node
    assert result.cycles[0]["excluded"] == "n5"


def test_refusals_say_their_cause_as_data() -> None:
    events, _ = events_of(graph_of(CYCLE), "tensorrt", min_size=1)
    causes = {e.neighbour: e.extra.get("cause") for e in events if e.kind is EventKind.REFUSE}
    assert causes["D"] == "incompatible" and causes["C"] == "group"


def test_kinds_are_served_to_the_front_end(tmp_path) -> None:
    from app import create_app
    client = create_app({"SGLENS_INSTANCE": str(tmp_path), "TESTING": True}).test_client()
    data = client.get("/api/kinds").get_json()
    assert data["events"] == list(EVENT_KINDS) and data["reasons"] == list(REASON_KINDS)
    assert set(data["reason_labels"]) == set(REASON_KINDS)
