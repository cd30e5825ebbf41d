"""One option schema per backend: the API, the CLI flags and the web app all read it.

Also: backends registered by one app's plugins never reach another app (or the CLI's registry).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from onnx import TensorProto, helper

from app import create_app
from partition import (BackendOptionError, ContainOpProperty, LensError, UnknownBackendError, backend_names,
                       backend_options_schema, get_backend, partition, register_backend_factory,
                       register_subgraph_property, unregister_backend, validate_backend_options)
from partition.registry import BackendOption
from tests.conftest import chain_graph, make_model

BUILTINS = ("default", "conv_bn", "conv_bn_relu", "tensorrt")


def test_every_builtin_declares_its_options() -> None:
    names = {b: [o["name"] for o in backend_options_schema(b)] for b in BUILTINS}
    assert names == {"default": ["ops", "min_size"], "conv_bn": [], "conv_bn_relu": [],
                     "tensorrt": ["min_size", "exclude_data_dependent", "mode", "fallback_ops",
                                  "trt_version", "trt_plugins", "trt_target", "assume_supported",
                                  "trt_input_shapes"]}
    mode = next(o for o in backend_options_schema("tensorrt") if o["name"] == "mode")
    assert mode == {"name": "mode", "type": "str", "default": "fast", "help": mode["help"],
                    "choices": ["fast", "teaching"]} and mode["help"]


def test_validation_coerces_strings_and_fills_defaults() -> None:
    assert validate_backend_options("default", {"ops": "Relu, Add", "min_size": "3"}) == \
        {"ops": ["Relu", "Add"], "min_size": 3}
    assert validate_backend_options("tensorrt", {"exclude_data_dependent": "false"}) == \
        {"min_size": 2, "exclude_data_dependent": False, "mode": "fast", "fallback_ops": [],
         "trt_version": None, "trt_plugins": [], "trt_target": "gpu", "assume_supported": [],
         "trt_input_shapes": []}
    assert validate_backend_options("conv_bn", {}) == {}


@pytest.mark.parametrize("backend, options, message", [
    ("conv_bn", {"min_size": 2}, "backend 'conv_bn' has no option min_size; it takes no options"),
    ("tensorrt", {"bogus": 1}, "has no option bogus; its options are min_size, exclude_data_dependent, "
                               "mode, fallback_ops"),
    ("tensorrt", {"ops": ["Relu"]}, "takes no --ops"),
    ("default", {"ops": ["Relu"], "min_size": 0}, "min_size must be at least 1, got 0"),
    ("default", {"ops": ["Relu"], "min_size": "x"}, "min_size must be an integer, got 'x'"),
    ("default", {"ops": ["Relu"], "min_size": True}, "min_size must be an integer"),
    ("tensorrt", {"mode": "quick"}, "mode must be one of fast, teaching, got 'quick'"),
    ("tensorrt", {"exclude_data_dependent": "maybe"}, "must be true or false"),
])
def test_bad_options_are_errors_naming_them(backend: str, options: dict, message: str) -> None:
    with pytest.raises(BackendOptionError, match=message):
        validate_backend_options(backend, options)
    with pytest.raises(BackendOptionError, match=message):  # get_backend validates the same way
        get_backend(backend, **options)


def test_unknown_backend() -> None:
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'"):
        backend_options_schema("nope")


def test_default_min_size_is_honoured() -> None:
    graph = chain_graph([("r", "Relu", ["x"]), ("t", "Tanh", ["r"]), ("s", "Relu", ["t"]),
                         ("u", "Relu", ["s"])])
    assert [s.nodes for s in partition(graph, "default", ops=["Relu"]).subgraphs] == [["r"], ["s", "u"]]
    result = partition(graph, "default", ops=["Relu"], min_size=2)
    assert [s.nodes for s in result.subgraphs] == [["s", "u"]]
    assert "r" in result.excluded


def test_plugin_factory_declares_a_schema() -> None:
    name = f"schema_{uuid.uuid4().hex[:8]}"
    seen: list[dict] = []

    def factory(**options):
        seen.append(options)
        return [ContainOpProperty(options["ops"], name)]
    try:
        register_backend_factory(name, factory, [BackendOption("ops", "str_list", ["Relu"], "ops")])
        assert backend_options_schema(name) == [{"name": "ops", "type": "str_list", "default": ["Relu"],
                                                 "help": "ops"}]
        get_backend(name, ops="Tanh,Relu")
        assert seen == [{"ops": ["Tanh", "Relu"]}]
        with pytest.raises(LensError, match="no option min_size; its options are ops"):
            get_backend(name, min_size=2)
    finally:
        unregister_backend(name)


PLUGIN = '''
from partition import ContainOpProperty, register_subgraph_property
register_subgraph_property("{name}", ContainOpProperty({{"Relu"}}, "{name}"))
'''


def test_plugins_of_one_app_do_not_leak(tmp_path) -> None:
    name = f"leak_{uuid.uuid4().hex[:8]}"
    plugin = tmp_path / "plug.py"
    plugin.write_text(PLUGIN.format(name=name))
    first = create_app({"SGLENS_INSTANCE": str(tmp_path / "a"), "SGLENS_PLUGINS": (str(plugin),)})
    second = create_app({"SGLENS_INSTANCE": str(tmp_path / "b")})
    names_first = [b["name"] for b in first.test_client().get("/api/backends").get_json()["backends"]]
    names_second = [b["name"] for b in second.test_client().get("/api/backends").get_json()["backends"]]
    assert name in names_first
    assert name not in names_second
    assert name not in backend_names()  # nor the process-wide registry the CLI uses
    # The app's own registry still partitions with it.
    registry = first.extensions["sglens"].registry
    assert [p.property_name for p in registry.build(registry.select(name, {}))] == [name]


def test_backends_endpoint_carries_the_schemas(tmp_path) -> None:
    client = create_app({"SGLENS_INSTANCE": str(tmp_path / "i")}).test_client()
    data = client.get("/api/backends").get_json()
    assert data["options"]["tensorrt"] == backend_options_schema("tensorrt")
    assert data["options"]["conv_bn"] == []


def test_registered_in_process_only_when_asked() -> None:
    name = f"glob_{uuid.uuid4().hex[:8]}"
    try:
        register_subgraph_property(name, ContainOpProperty({"Relu"}, name))
        assert name in backend_names()
        assert backend_options_schema(name) == []
    finally:
        unregister_backend(name)
    assert name not in backend_names()


# --------------------------------------------------------------------- CLI --
def _sglens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def chain_model(tmp_path):
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="A"), helper.make_node("Tanh", ["a"], ["b"], name="B"),
             helper.make_node("Relu", ["b"], ["c"], name="C"), helper.make_node("Relu", ["c"], ["y"], name="D")]
    path = tmp_path / "chain.onnx"
    path.write_bytes(make_model(nodes, [vi("x")], [vi("y")]).SerializeToString())
    return str(path)


def test_cli_flags_and_opt_reach_the_schema(chain_model) -> None:
    for extra in (["--min-size", "2"], ["--opt", "min_size=2"]):
        out = _sglens("partition", chain_model, "--ops", "Relu", "--json", *extra)
        assert out.returncode == 0, out.stderr
        assert [s["nodes"] for s in json.loads(out.stdout)["subgraphs"]] == [["C", "D"]]


@pytest.mark.parametrize("args, message", [
    (["--backend", "conv_bn", "--min-size", "2"], "backend 'conv_bn' has no option min_size; it takes no options"),
    (["--backend", "tensorrt", "--opt", "colour=red"], "backend 'tensorrt' has no option colour; its options are"),
    (["--backend", "tensorrt", "--opt", "min_size"], "expected NAME=VALUE"),
    (["--backend", "tensorrt", "--mode", "quick"], "mode must be one of fast, teaching"),
    (["--ops", "Relu", "--min-size", "two"], "min_size must be an integer, got 'two'"),
])
def test_cli_bad_options_are_one_line_exit_2(chain_model, args: list[str], message: str) -> None:
    out = _sglens("partition", chain_model, *args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_cli_keep_data_dependent_alias(tmp_path) -> None:
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("NonZero", ["a"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["y"], name="c", to=TensorProto.FLOAT)]
    path = tmp_path / "nz.onnx"
    out_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path.write_bytes(make_model(nodes, [vi("x")], [out_vi]).SerializeToString())
    excluded = []
    for extra in ([], ["--keep-data-dependent"], ["--exclude-data-dependent", "false"]):
        out = _sglens("partition", str(path), "--backend", "tensorrt", "--min-size", "1", "--json", *extra)
        assert out.returncode == 0, out.stderr
        excluded.append("nz" in [e["node"] for e in json.loads(out.stdout)["excluded"]])
    assert excluded == [True, False, False]


def test_web_api_refuses_options_the_backend_does_not_declare(tmp_path) -> None:
    client = create_app({"SGLENS_INSTANCE": str(tmp_path / "i"), "SGLENS_SAMPLES": True}).test_client()
    url = "/api/models/sample-trt_cycle/partition"
    bad = client.post(url, json={"backend": "conv_bn", "min_size": 2})
    assert bad.status_code == 400 and "backend 'conv_bn' has no option min_size" in bad.get_json()["error"]
    bad = client.post(url, json={"backend": "tensorrt", "options": {"mode": "quick"}})
    assert bad.status_code == 400 and "mode must be one of fast, teaching" in bad.get_json()["error"]
    bad = client.post("/api/runs", json={"model": "sample-trt_cycle", "backend": "tensorrt",
                                         "options": {"colour": "red"}})
    assert bad.status_code == 400 and "has no option colour" in bad.get_json()["error"]
    good = client.post(url, json={"backend": "tensorrt", "options": {"min_size": "1", "mode": "teaching"}})
    assert good.status_code == 200, good.get_json()
    assert good.get_json()["subgraphs"]


def test_cli_list_options_repeat_or_take_commas(chain_model) -> None:
    left_out = []
    for extra in (["--fallback-ops", "Relu", "--fallback-ops", "Tanh"], ["--fallback-ops", "Relu,Tanh"],
                  ["--opt", "fallback_ops=Relu,Tanh"], []):
        out = _sglens("partition", chain_model, "--backend", "tensorrt", "--min-size", "1", "--json", *extra)
        assert out.returncode == 0, out.stderr
        left_out.append(sorted(e["node"] for e in json.loads(out.stdout)["excluded"]))
    assert left_out == [["A", "B", "C", "D"]] * 3 + [[]]
