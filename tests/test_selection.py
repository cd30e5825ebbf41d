"""A backend and its options are validated once, at the edge, into a frozen ``Selection`` that every
consumer reads unchanged: the factory, the TensorRT rules of the property, ``sglens groups`` and
``--check-parser`` (which once read ``plugins`` where the schema says ``trt_plugins``)."""

from __future__ import annotations

import argparse
import dataclasses
import pickle

import pytest

from partition import select
from partition.errors import BackendOptionError
from partition.registry import BackendOption, BackendRegistry, Selection, current_registry
from partition.runner import PartitionRun
from partition.selection import add_selection_options, selection_from_args
from partition.tensorrt import real_trt
from partition.tensorrt.node_report import groups_report
from partition.tensorrt.options import TENSORRT_OPTIONS
from partition.tensorrt.table import available_versions

from conftest import chain_graph

#: A non-default value for every tensorrt option, and how it shows on the rules or the property.
NON_DEFAULTS = {
    "min_size": (3, lambda prop, rules: prop.min_size == 3),
    "exclude_data_dependent": (False, lambda prop, rules: rules.exclude_data_dependent is False),
    "mode": ("teaching", lambda prop, rules: prop.mode == "teaching"),
    "fallback_ops": (["Relu"], lambda prop, rules: rules.fallback_ops == {"Relu"}),
    "trt_version": (available_versions()[0], lambda prop, rules: rules.version == available_versions()[0]),
    "trt_plugins": (["MyOp"], lambda prop, rules: "MyOp" in rules.user_plugins),
    "trt_target": ("dla", lambda prop, rules: prop.target == "dla" and type(rules).__name__ == "DLARules"),
    "assume_supported": (["Det"], lambda prop, rules: "Det" in rules.assume_supported),
    "trt_input_shapes": (["x:1x4"], lambda prop, rules: rules.input_shapes == {"x": (1, 4)}),
}
#: partition choices --check-parser leaves out of the parser's rules (real_trt.IGNORED_OPTIONS), as they show
CHECK_IGNORES = {
    "exclude_data_dependent": lambda rules: rules.exclude_data_dependent is False,
    "fallback_ops": lambda rules: rules.fallback_ops == frozenset(),
    "assume_supported": lambda rules: rules.assume_supported == frozenset(),
    "trt_target": lambda rules: type(rules).__name__ == "TRTRules",
    "trt_input_shapes": lambda rules: rules.input_shapes == {},
    "min_size": lambda rules: True, "mode": lambda rules: True,   # growth only: no rule to show
}
#: options that only shape the growth, not a node's verdict
GROWTH_ONLY = {"min_size", "mode"}


def test_every_tensorrt_option_has_a_probe_here() -> None:
    assert {o.name for o in TENSORRT_OPTIONS} == set(NON_DEFAULTS), "add the new option to NON_DEFAULTS"


def _cli_selection(argv: list[str]) -> Selection | None:
    parser = argparse.ArgumentParser()
    add_selection_options(parser)
    return selection_from_args(parser.parse_args(argv))


def test_a_selection_holds_coerced_values_with_defaults_and_is_frozen() -> None:
    sel = _cli_selection(["m.onnx", "--backend", "tensorrt", "--min-size", "4", "--fallback-ops", "Relu,Add"])
    assert sel.backend == "tensorrt"
    assert sel.options["min_size"] == 4 and sel.options["fallback_ops"] == ("Relu", "Add")
    assert sel.options["mode"] == "fast" and sel.options["trt_plugins"] == ()   # defaults filled in once
    with pytest.raises(dataclasses.FrozenInstanceError):
        sel.backend = "default"  # type: ignore[misc]
    with pytest.raises(TypeError):
        sel.options["min_size"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(sel)) == sel  # plain data: it crosses to a Dask worker as it is
    assert sel.to_json() == {"backend": "tensorrt", "options": {**sel.values()}}


def test_bad_options_are_refused_at_the_edge() -> None:
    with pytest.raises(BackendOptionError, match="min_size must be at least 1"):
        select("tensorrt", min_size=0)
    with pytest.raises(BackendOptionError, match="mode must be one of fast, teaching"):
        _cli_selection(["m.onnx", "--backend", "tensorrt", "--mode", "slow"])
    parser = argparse.ArgumentParser()
    add_selection_options(parser, backend_default=None)
    assert selection_from_args(parser.parse_args(["m.onnx"])) is None          # sglens run: unpartitioned
    assert selection_from_args(parser.parse_args(["m.onnx", "--ops", "Relu"])).backend == "default"
    with pytest.raises(BackendOptionError, match="backend 'default' has no option mode"):
        selection_from_args(parser.parse_args(["m.onnx", "--mode", "teaching"]))


def test_the_factory_gets_validated_values_and_checks_nothing_again() -> None:
    seen: list[dict] = []
    registry = BackendRegistry()
    registry.add_factory("probe", lambda **values: seen.append(values) or [],
                         [BackendOption("n", "int", 1, minimum=1), BackendOption("names", "str_list", [])])
    sel = registry.select("probe", {"n": "5", "names": "a,b"})
    registry.build(sel)
    assert seen == [{"n": 5, "names": ["a", "b"]}]


def test_options_beside_explicit_properties_are_an_error_not_ignored() -> None:
    graph = chain_graph([("a", "Relu", ["x"])])
    props = current_registry().build(select("default", ops=["Relu"]))
    with pytest.raises(BackendOptionError, match="explicit properties take no backend options"):
        PartitionRun(graph, "default", properties=props, ops=["Add"])
    with pytest.raises(BackendOptionError, match="already holds its options"):
        PartitionRun(graph, select("default", ops=["Relu"]), ops=["Add"])


@pytest.mark.parametrize("name", sorted(NON_DEFAULTS))
def test_every_consumer_honours_every_tensorrt_option(name: str, monkeypatch, tmp_path) -> None:
    value, shows = NON_DEFAULTS[name]
    sel = select("tensorrt", **{name: value})
    prop, = current_registry().build(sel)
    assert shows(prop, prop.rules), f"the tensorrt property dropped {name}"
    graph = chain_graph([("a", "Relu", ["x"]), ("b", "Relu", ["a"])])
    if name not in GROWTH_ONLY:
        # sglens groups: the report says which table decided and reads every rule option
        report = groups_report(graph, "a", sel)
        assert report["tensorrt_rules"] == prop.rules.version
        if name == "fallback_ops":
            assert report["compatible"] is False and "Relu" in report["reason"]
    # --check-parser compares the parser's facts: the parser options reach its rules, the partition
    # choices are listed as ignored (the report says so); nothing is dropped silently
    check = real_trt.rules_for_check(sel)
    if name in real_trt.IGNORED_OPTIONS:
        assert CHECK_IGNORES[name](check), f"--check-parser should ignore the partition choice {name}"
    else:
        assert shows(prop, check), f"--check-parser dropped {name}"
    # and the command hands the selection itself on (TensorRT cannot be installed here: the seam past
    # the rules is stubbed)
    handed: list = []
    monkeypatch.setattr(real_trt, "available", lambda: True)
    monkeypatch.setattr(real_trt, "real_parser", lambda libraries: None)
    monkeypatch.setattr(real_trt, "run_check", lambda g, s, parse, out_dir=None:
                        handed.append(s) or {"disagreements": [], "subgraphs": []})
    args = argparse.Namespace(model=str(tmp_path / "m.onnx"), backend="tensorrt", export_dir=None)
    assert real_trt.cli_check_parser(args, sel, graph) == 0
    assert handed == [sel]


def test_suggested_ops_are_the_most_frequent_compute_types_ties_by_name() -> None:
    from partition.backends import suggested_ops
    counts = {"Constant": 50, "Reshape": 40, "Conv": 9, "Relu": 9, "Add": 9, "Mul": 3, "Clip": 9}
    assert suggested_ops(counts) == ["Add", "Clip", "Conv"]           # 9 each: by name; no data movement
    # a top level that computes nothing of its own (Casts around an If holding the network)
    assert suggested_ops({"Cast": 4, "Constant": 9, "If": 1, "Identity": 7}) == ["Cast", "If"]
    assert suggested_ops({"Constant": 2, "Identity": 1}) == []         # nothing: the backend's error stands


def test_the_default_backend_without_ops_takes_the_graph_guess(capsys) -> None:
    from partition.ir import Graph, Node
    parser = argparse.ArgumentParser()
    add_selection_options(parser)
    g = Graph(name="g", nodes=[Node("r", "Relu", ["x"], ["a"]), Node("s", "Sigmoid", ["a"], ["b"]),
                               Node("t", "Transpose", ["b"], ["y"])], inputs=["x"], outputs=["y"])
    sel = selection_from_args(parser.parse_args(["m.onnx"]), g)
    assert sel.backend == "default" and sorted(sel.options["ops"]) == ["Relu", "Sigmoid"]
    assert "Relu,Sigmoid" in capsys.readouterr().err
    given = selection_from_args(parser.parse_args(["m.onnx", "--ops", "Relu"]), g)
    assert list(given.options["ops"]) == ["Relu"] and capsys.readouterr().err == ""   # what the user gave stands
    tensorrt = selection_from_args(parser.parse_args(["m.onnx", "--backend", "tensorrt"]), g)
    assert "ops" not in tensorrt.options
