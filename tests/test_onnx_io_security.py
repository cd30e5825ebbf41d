"""External data: no model makes us read a file outside its own folder (issue 9, critical).

Real ONNX files made with onnx.helper + onnx.external_data_helper; each attack
is tried on every kind of tensor that can carry external data (initializer,
Constant value, TENSORS and sparse attributes, If/Loop/Scan bodies, model-local
functions). The legit case (data files inside the model's folder) must still
load and give onnxruntime's values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from engine.executor import Executor
from partition import ModelError, load_model
from partition import onnx_io
from tests.conftest import IR_VERSION, OPSET

F = TensorProto.FLOAT
SECRET = np.arange(6, dtype=np.float32).reshape(2, 3) * 7 + 1
#: The secret file is padded to this distinctive size: no message may quote it.
SECRET_SIZE = 1_000_003
UPLOAD_MESSAGE = "model uses external data file '{}'; upload the model together with its data files"


# ----------------------------------------------------------------- builders --
def ext_tensor(name: str, value: np.ndarray, location: str, offset: int = 0) -> TensorProto:
    t = numpy_helper.from_array(value, name)
    external_data_helper.set_external_data(t, location, offset=offset, length=value.nbytes)
    t.ClearField("raw_data")
    return t


def const_node(out: str, location: str) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [out], value=ext_tensor("c", SECRET, location))


def vi(name: str, shape=(2, 3), dtype=F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(shape))


def model_of(nodes, inputs, outputs, inits=(), functions=(), domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = IR_VERSION
    return model


def build(kind: str, location: str) -> onnx.ModelProto:
    """A model whose tensor of ``kind`` keeps its data in ``location``; y = x + that tensor."""
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    io = ([vi("x")], [vi("y")])
    if kind == "initializer":
        return model_of([add], *io, inits=[ext_tensor("c", SECRET, location)])
    if kind == "constant":
        return model_of([const_node("c", location), add], *io)
    if kind == "if_body":
        then = helper.make_graph([const_node("t", location)], "then", [], [vi("t")])
        other = helper.make_graph([helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(
            np.zeros((2, 3), np.float32)))], "else", [], [vi("e")])
        cond = helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True)))
        iff = helper.make_node("If", ["cond"], ["c"], then_branch=then, else_branch=other, name="if")
        return model_of([cond, iff, add], *io)
    if kind == "loop_body":
        body = helper.make_graph(
            [const_node("k", location), helper.make_node("Add", ["acc", "k"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), vi("acc")],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), vi("acc_out")])
        trip = helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(np.array(1, np.int64)))
        loop = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="loop")
        return model_of([trip, loop], *io)
    if kind == "scan_body":
        body = helper.make_graph([const_node("k", location), helper.make_node("Add", ["s", "k"], ["s_out"])],
                                 "body", [vi("s")], [vi("s_out")])
        scan = helper.make_node("Scan", ["x"], ["y"], body=body, num_scan_inputs=0, name="scan")
        return model_of([scan], *io)
    if kind == "function":
        fn = helper.make_function("custom.fn", "AddSecret", ["a"], ["b"],
                                  [const_node("k", location), helper.make_node("Add", ["a", "k"], ["b"])],
                                  [helper.make_opsetid("", OPSET)])
        call = helper.make_node("AddSecret", ["x"], ["y"], domain="custom.fn", name="call")
        return model_of([call], *io, functions=[fn], domains=["custom.fn"])
    if kind == "tensors_attr":
        node = helper.make_node("Frob", ["x"], ["y"], domain="custom.op", name="frob",
                                tables=[ext_tensor("c", SECRET, location)])
        return model_of([node], *io, domains=["custom.op"])
    if kind == "sparse_attr":
        values = ext_tensor("v", SECRET.ravel(), location)
        indices = numpy_helper.from_array(np.arange(6, dtype=np.int64), "i")
        sparse = helper.make_sparse_tensor(values, indices, [2, 3])
        node = helper.make_node("Constant", [], ["c"], sparse_value=sparse)
        return model_of([node, add], *io)
    raise AssertionError(kind)


KINDS = ["initializer", "constant", "if_body", "loop_body", "scan_body", "function", "tensors_attr",
         "sparse_attr"]


def write_secret(path: Path) -> None:
    data = SECRET.tobytes()
    path.write_bytes(data + b"\x00" * (SECRET_SIZE - len(data)))


def assert_quiet(message: str) -> None:
    """No size and no content of the secret file in a message."""
    assert str(SECRET_SIZE) not in message and "977 KiB" not in message
    assert repr(SECRET.tobytes()[:8])[2:-1] not in message


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """tmp/model/ (the model's folder), tmp/cwd/ (the current directory), tmp/secret.bin."""
    (tmp_path / "model").mkdir()
    (tmp_path / "cwd").mkdir()
    write_secret(tmp_path / "secret.bin")
    write_secret(tmp_path / "cwd" / "secret.bin")
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


# ------------------------------------------------------------------ attacks --
@pytest.mark.parametrize("kind", KINDS)
def test_upload_never_follows_external_data(layout, kind) -> None:
    """A model as bytes whose data file sits in the current directory: refused, nothing read."""
    data = build(kind, "secret.bin").SerializeToString()
    with pytest.raises(ModelError) as err:
        load_model(data)
    assert str(err.value) == UPLOAD_MESSAGE.format("secret.bin")
    with pytest.raises(ModelError, match="upload the model together with its data files"):
        onnx_io.parse_model_bytes(data, "upload")  # the run path (onnxruntime from bytes) is covered too


def _path_attack(layout: Path, kind: str, location: str, pattern: str) -> None:
    path = layout / "model" / "m.onnx"
    path.write_bytes(build(kind, location).SerializeToString())
    for call in (load_model, lambda p: onnx_io.read_model_proto(p)):
        with pytest.raises(ModelError, match=pattern) as err:
            call(path)
        assert "\n" not in str(err.value)
        assert_quiet(str(err.value))


@pytest.mark.parametrize("kind", KINDS)
def test_relative_file_in_cwd_is_not_read(layout, kind) -> None:
    _path_attack(layout, kind, "secret.bin", r"missing \(or not a regular file\) in the model's folder")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "./../secret.bin"])
def test_dotdot_is_refused(layout, kind, location) -> None:
    _path_attack(layout, kind, location, r"outside the model's folder \(a path going up with '\.\.'\)")


@pytest.mark.parametrize("kind", KINDS)
def test_absolute_location_is_refused(layout, kind) -> None:
    _path_attack(layout, kind, str(layout / "secret.bin"), r"outside the model's folder \(an absolute path\)")


@pytest.mark.parametrize("kind", KINDS)
def test_symlink_out_is_refused(layout, kind) -> None:
    (layout / "model" / "link.bin").symlink_to(layout / "secret.bin")
    _path_attack(layout, kind, "link.bin", r"outside the model's folder \(through a symlink\)")


def test_symlinked_folder_inside_model_is_refused_too(layout) -> None:
    (layout / "model" / "sub").symlink_to(layout, target_is_directory=True)
    _path_attack(layout, "constant", "sub/secret.bin", r"through a symlink")


def test_read_past_the_end_names_no_size(layout) -> None:
    folder = layout / "model"
    write_secret(folder / "w.bin")
    (folder / "m.onnx").write_bytes(build("initializer", "w.bin").SerializeToString())
    model = build("constant", "w.bin")
    model.graph.node[0].attribute[0].t.external_data[1].value = str(SECRET_SIZE - 4)  # offset
    (folder / "m2.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelError, match="beyond the end of its external data file 'w.bin'") as err:
        load_model(folder / "m2.onnx")
    assert_quiet(str(err.value))


def test_swapped_for_a_symlink_after_loading_is_refused(layout) -> None:
    """Weights load lazily: the rules are checked again when the bytes are read."""
    folder = layout / "model"
    (folder / "w.bin").write_bytes(SECRET.tobytes())
    (folder / "m.onnx").write_bytes(build("initializer", "w.bin").SerializeToString())
    graph = load_model(folder / "m.onnx")
    (folder / "w.bin").unlink()
    (folder / "w.bin").symlink_to(layout / "secret.bin")
    with pytest.raises(ModelError, match="through a symlink"):
        graph.initializers["c"].value


def test_data_root_is_the_only_folder(layout) -> None:
    bundle = layout / "bundle"
    bundle.mkdir()
    (bundle / "w.bin").write_bytes(SECRET.tobytes())
    data = build("constant", "w.bin").SerializeToString()
    graph = load_model(data, data_root=bundle)   # a bundle upload names its folder
    np.testing.assert_array_equal(graph.nodes[0].attrs["value"], SECRET)
    (layout / "model" / "m.onnx").write_bytes(data)  # beside it: no w.bin; data_root wins
    with pytest.raises(ModelError, match="missing"):
        load_model(layout / "model" / "m.onnx", data_root=layout / "cwd")
    with pytest.raises(ModelError, match="going up"):
        load_model(build("constant", "../secret.bin").SerializeToString(), data_root=bundle)


# -------------------------------------------------------------------- legit --
def legit_model(folder: Path) -> Path:
    """Weights in a subfolder, a Constant and an If body's Constant in data files beside the model."""
    (folder / "data").mkdir()
    w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    k = np.full((2, 3), 0.5, np.float32)
    blob = w.tobytes() + k.tobytes()
    (folder / "data" / "weights.bin").write_bytes(blob)
    (folder / "consts.bin").write_bytes(b"\x00" * 16 + blob)
    then = helper.make_graph([helper.make_node("Constant", [], ["t"], value=ext_tensor("t", k, "consts.bin", 16 + 24))],
                             "then", [], [vi("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    nodes = [helper.make_node("Constant", [], ["k"], value=ext_tensor("k", w, "consts.bin", 16)),
             helper.make_node("Mul", ["x", "w"], ["a"], name="mul"),
             helper.make_node("Add", ["a", "k"], ["b"], name="add"),
             helper.make_node("ReduceSum", ["b"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["c"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Sub", ["b", "c"], ["y"], name="sub")]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    model = model_of(nodes, [vi("x")], [vi("y")], inits=[ext_tensor("w", w, "data/weights.bin"), zero])
    path = folder / "m.onnx"
    onnx.save_model(model, str(path))
    return path


def ort_run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_folder_local_external_data_loads_and_runs(layout, rng) -> None:
    path = legit_model(layout / "model")   # the cwd is another folder
    graph = load_model(path)
    for _ in range(3):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        with Executor(graph) as ex:
            got = ex({"x": x})["y"]
        np.testing.assert_allclose(got, ort_run(path, x), rtol=1e-6, atol=1e-6)
    inline = onnx_io.read_model_proto(path)      # what onnxruntime gets in `sglens compare`
    x = rng.standard_normal((2, 3)).astype(np.float32)
    got = ort.InferenceSession(inline.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ort_run(path, x), rtol=1e-6)


def sglens_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "sglens"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sglens"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def test_cli_resolves_against_the_model_folder_not_the_cwd(layout, rng) -> None:
    path = legit_model(layout / "model")
    out = layout / "cwd" / "out.onnx"
    done = sglens_cli("partition", str(path), "--ops", "Mul,Add", "--export", str(out), cwd=layout / "cwd")
    assert done.returncode == 0, done.stderr
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(ort_run(out, x), ort_run(path, x), rtol=1e-6, atol=1e-6)
    for command in ("run", "compare"):
        done = sglens_cli(command, str(path), "--ops", "Mul,Add", cwd=layout / "cwd")
        assert done.returncode == 0, done.stderr
    assert "DIFFERENT" not in done.stdout and "OK" in done.stdout


def test_cli_refuses_an_attack_in_one_line(layout) -> None:
    path = layout / "model" / "m.onnx"
    path.write_bytes(build("constant", "../secret.bin").SerializeToString())
    for command in ("partition", "run", "compare"):
        done = sglens_cli(command, str(path), cwd=layout / "cwd")
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "going up" in done.stderr


def test_large_export_keeps_its_weights_beside_it_and_loads_again(layout, rng) -> None:
    """Past the size limit an export writes '<name>.data' in its own folder (relative location)."""
    from partition.onnx_io import save_model
    path = legit_model(layout / "model")
    out_dir = layout / "export"
    out_dir.mkdir()
    (out_dir / "out.onnx.data").write_bytes(b"stale" * 100)  # from an earlier export
    save_model(load_model(path), out_dir / "out.onnx", external_above=0)
    assert (out_dir / "out.onnx.data").is_file()
    reloaded = load_model(out_dir / "out.onnx")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with Executor(reloaded) as ex:
        np.testing.assert_allclose(ex({"x": x})["y"], ort_run(path, x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ort_run(out_dir / "out.onnx", x), ort_run(path, x), rtol=1e-6, atol=1e-6)
