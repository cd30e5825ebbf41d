"""``compare`` and the ``sglens run`` / ``sglens compare`` commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from engine.compare import compare, errors
from engine.inputs import parse_dims, random_inputs
from engine.run_errors import InputError
from partition import load_model
from sglens.cli import main
from partition.runner import partition
from sample_models.generate import build_all

from conftest import make_model
from test_executor import KERNELS, vi


def _model():
    """x -> Relu -> Mul(x) -> Add(x) -> y: three nodes, three selectable stages."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "x"], ["b"], name="mul"),
             helper.make_node("Add", ["b", "x"], ["y"], name="add")]
    return make_model(nodes, [vi("x", [4, 3])], [vi("y", [4, 3])])


def _kernels(wrong_mul: bool):
    def find(node, opset):
        if wrong_mul and node.op_type == "Mul":
            return lambda xp, a, b, **_: (a * b + 0.5,)
        return KERNELS.get(node.op_type)
    return find


def test_errors_metric():
    e = errors(np.array([1.0, 2.0]), np.array([1.0, 2.0002]))
    assert e["max_abs"] == pytest.approx(2e-4) and e["max_rel"] == pytest.approx(1e-4, rel=1e-3)
    assert not errors(np.zeros(2), np.zeros(3))["match"]
    assert errors(np.array([np.nan]), np.array([np.nan]))["match"]


def test_compare_agrees_and_reports_boundaries(rng):
    model = _model()
    g = load_model(model.SerializeToString())
    part = partition(g, "default", ops=["Relu", "Add"])
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    c = compare(g, model, feeds, partitioned=part, executor="engine", kernels=_kernels(False), repeat=2)
    assert c.ok and c.first_divergent is None
    assert set(c.timings) == {"onnxruntime", "engine", "partitioned"}
    assert len(c.subgraphs) == 2
    assert {"a"} == set(c.subgraphs[0]["outputs"]) and "b" in c.subgraphs[1]["inputs"]
    json.dumps(c.to_json())
    assert "OK" in c.text()


def test_onnxruntime_is_timed_on_the_model_as_it_deploys(rng, monkeypatch):
    """The boundary tensors a partition needs (as extra outputs) come from a session of their own,
    run once; the session whose runs are timed is the model as given. Timing the one with the
    extra outputs had read onnxruntime 2.3x slow on a real OCR model's 73-subgraph partition."""
    import engine.compare as cmp
    made = []   # (extra outputs, runs) per reference session

    class Counted:
        def __init__(self, session, extra):
            self.session, self.entry = session, [list(extra), 0]
            made.append(self.entry)

        def run(self, *a, **k):
            self.entry[1] += 1
            return self.session.run(*a, **k)

        def __getattr__(self, name):
            return getattr(self.session, name)

    real = cmp.reference_session
    monkeypatch.setattr(cmp, "reference_session", lambda model, extra, device="cpu": Counted(real(model, extra, device), extra))
    model = _model()
    g = load_model(model.SerializeToString())
    part = partition(g, "default", ops=["Relu", "Add"])
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    c = compare(g, model, feeds, partitioned=part, executor="engine", kernels=_kernels(False), repeat=4, warmup=2)
    assert c.ok and len(c.subgraphs) == 2
    timed = [e for e in made if e[1] >= 6]                      # warm-up + repeats (+ the resampled check)
    assert len(timed) == 1 and timed[0][0] == []
    boundary = [e for e in made if e[0]]
    assert len(boundary) == 1 and boundary[0][1] == 1 and {"a", "b"} <= set(boundary[0][0])
    # without a partition there is no boundary: one session, timed
    made.clear()
    compare(g, model, feeds, kernels=_kernels(False), repeat=2, warmup=1)
    assert len(made) == 1 and made[0][0] == []


def test_compare_names_the_subgraph_that_introduced_a_difference(rng):
    model = _model()
    g = load_model(model.SerializeToString())
    part = partition(g, "default", ops=["Mul", "Add"])   # one subgraph: mul + add
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    c = compare(g, model, feeds, partitioned=part, executor="engine", kernels=_kernels(True), repeat=1)
    assert not c.ok
    (sg,) = c.subgraphs
    assert all(e["match"] for e in sg["inputs"].values())
    assert not sg["outputs"]["y"]["match"] if "y" in sg["outputs"] else True
    assert sg["introduces_difference"] and c.first_divergent == f"#{sg['id']} {sg['node']}"
    assert not c.outputs["y"]["engine"]["match"]


def test_parse_dims_and_symbolic_inputs():
    assert parse_dims(["N=4", " T=2"]) == {"N": 4, "T": 2}
    for bad in ("N", "N=x", "N=-1"):
        with pytest.raises(InputError):
            parse_dims([bad])
    g = load_model(build_all()["mlp.onnx"].SerializeToString())
    with pytest.raises(InputError, match="--dim N=VALUE"):
        random_inputs(g)
    assert random_inputs(g, {"N": 5})["input"].shape == (5, 64)
    notes: list[str] = []
    assert random_inputs(g, default_dim=1, notes=notes)["input"].shape == (1, 64)
    assert notes and "N" in notes[0]
    a, b = random_inputs(g, {"N": 2}, seed=3), random_inputs(g, {"N": 2}, seed=3)
    np.testing.assert_array_equal(a["input"], b["input"])


# ---------------------------------------------------------------- the CLI --
@pytest.fixture
def mlp_path(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(build_all()["mlp.onnx"].SerializeToString())
    return path


def _ops(path):
    return ",".join(sorted({n.op_type for n in load_model(str(path)).nodes}))


def test_cli_run_partitioned_with_inputs_outputs_report_and_trace(mlp_path, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    out, report, trace = tmp_path / "out.npz", tmp_path / "r.json", tmp_path / "t.json"
    rc = main(["run", str(mlp_path), "--backend", "default", "--ops", _ops(mlp_path),
               "--executor", "onnxruntime", "--inputs", str(tmp_path / "in.npz"),
               "--save-outputs", str(out), "--repeat", "2", "--report", str(report),
               "--trace", str(trace), "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["outputs"]["probs"]["shape"] == [3, 10]
    subs = printed["measurement"]["subgraphs"]
    assert subs and all(s["executor"] == "onnxruntime" for s in subs)
    with np.load(out) as saved:
        assert saved.files == ["probs"]
        import onnxruntime as ort
        sess = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(saved["probs"], sess.run(None, {"input": x})[0], rtol=1e-4, atol=1e-6)
    data = json.loads(report.read_text())
    assert data["measurement"]["repeat"] == 2 and "timeline" in data["measurement"]
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_cli_trace_has_every_node_of_a_generated_segment(tmp_path, capsys):
    """An unpartitioned run's main graph runs as generated code (engine/codegen.py); its
    nodes are still each on the timeline `--trace` writes (it was empty: the generated
    code timed nodes for the table but never told the timeline)."""
    nodes = [helper.make_node("MatMul", ["x", "x"], ["m"], name="matmul"),
             helper.make_node("Softmax", ["m"], ["s"], name="softmax", axis=-1),
             helper.make_node("Transpose", ["s"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("ReduceMean", ["t"], ["r"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Concat", ["r", "t"], ["y"], name="concat", axis=1)]
    path = tmp_path / "chain.onnx"
    path.write_bytes(make_model(nodes, [vi("x", [4, 4])], [vi("y", [4, 5])]).SerializeToString())
    trace = tmp_path / "t.json"
    assert main(["run", str(path), "--repeat", "2", "--trace", str(trace), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert [e["name"] for e in sorted(events, key=lambda e: e["ts"])] == [n.name for n in nodes]
    assert all(e["dur"] >= 0 for e in events)
    assert set(printed["measurement"]["node_seconds"]) == {n.name for n in nodes}


def test_cli_user_errors_exit_2(mlp_path, tmp_path, capsys):
    np.savez(tmp_path / "bad.npz", wrong_name=np.zeros((1, 64), np.float32))
    assert main(["run", str(mlp_path), "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "wrong_name" in capsys.readouterr().err
    assert main(["run", str(mlp_path), "--dim", "N"]) == 2
    assert main(["run", str(mlp_path), "--device", "gpu", "--backend", "default",
                 "--ops", _ops(mlp_path), "--executor", "onnxruntime"]) in (0, 2)


def test_cli_compare_json(mlp_path, capsys):
    from engine.executor import missing_ops
    assert not missing_ops(load_model(str(mlp_path))), "the engine lost a kernel mlp needs"
    rc = main(["compare", str(mlp_path), "--ops", _ops(mlp_path), "--executor", "onnxruntime",
               "--dim", "N=2", "--repeat", "1", "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and set(data["timings"]) == {"onnxruntime", "engine", "partitioned"}


def test_compare_reports_each_stage_in_order() -> None:
    from engine.compare import compare
    from engine.inputs import random_inputs
    from partition import partition
    from partition.onnx_io import from_model_proto
    from sample_models.generate import build_all
    model = build_all()["trt_cycle.onnx"]
    graph = from_model_proto(model)
    stages: list[str] = []
    result = partition(graph, "tensorrt")
    c = compare(graph, model, random_inputs(graph, {}, seed=1), partitioned=result, repeat=1,
                progress=stages.append)
    assert stages == ["onnxruntime", "engine", "partitioned"]
    assert c.ok


def test_cli_const_feeds_one_input_a_constant(tmp_path, capsys):
    """silero VAD's ``sr`` = 16000 from the command line: y = x * sr, saved and checked by onnxruntime."""
    import onnxruntime as ort
    model = make_model([helper.make_node("Mul", ["x", "sr"], ["y"], name="scale")],
                       [vi("x", [2, 3]), vi("sr", [1])], [vi("y", [2, 3])])
    path, out = tmp_path / "vad_like.onnx", tmp_path / "out.npz"
    path.write_bytes(model.SerializeToString())
    assert main(["run", str(path), "--const", "sr=16000", "--seed", "5", "--save-outputs", str(out)]) == 0
    from engine.input_spec import materialize, specs_from_options
    g = load_model(str(path))
    specs = specs_from_options(g, seed=5)
    specs[1].fill, specs[1].value = "constant", 16000.0
    feeds = materialize(g, specs)
    assert feeds["sr"].tolist() == [16000.0]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], want, rtol=1e-6)
    capsys.readouterr()
    for bad, message in (("sr", "expected INPUT=NUMBER"), ("sr=x", "expected INPUT=NUMBER"),
                         ("rate=1", "not graph inputs")):
        assert main(["run", str(path), "--const", bad]) == 2
        assert message in capsys.readouterr().err
