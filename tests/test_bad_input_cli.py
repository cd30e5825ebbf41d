"""Bad input on the command line (issue 9): every case exits 2 with one line, never a traceback.

Run through the real installed ``sglens`` script as a subprocess, on real files.
Where an input is fine after a lossless cast (or a .npy for a one-input model),
the outputs are checked against onnxruntime on the same values.
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
from onnx import TensorProto, helper

from tests.conftest import make_model

ROOT = Path(__file__).resolve().parents[1]


def sglens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "sglens"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sglens"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def one_input_model() -> onnx.ModelProto:
    """y = Relu(x) * 2 over float32 [N, 4]."""
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mul", ["r", "two"], ["y"], name="mul")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [two])


def two_input_model() -> onnx.ModelProto:
    """y = float(i) + x, with i int64 [3] and x float32 [3]."""
    nodes = [helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["f", "x"], ["y"], name="add")]
    return make_model(nodes, [helper.make_tensor_value_info("i", TensorProto.INT64, [3]),
                              helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    onnx.save_model(one_input_model(), str(d / "one.onnx"))
    onnx.save_model(two_input_model(), str(d / "two.onnx"))
    ident = make_model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    onnx.save_model(ident, str(d / "ident.onnx"))
    custom = make_model([helper.make_node("Frob", ["x"], ["y"], domain="x.y", name="frob")],
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    custom.opset_import.append(helper.make_opsetid("x.y", 1))
    onnx.save_model(custom, str(d / "custom.onnx"))
    w = onnx.numpy_helper.from_array(np.ones((1, 1, 300), np.float32), "w")   # longer than any guessed length
    short = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="long_kernel")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "L"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save_model(short, str(d / "short.onnx"))
    (d / "empty.onnx").write_bytes(b"")
    (d / "trunc.onnx").write_bytes((d / "one.onnx").read_bytes()[:40])
    (d / "text.onnx").write_text("this is not a model\n")
    (d / "folder.onnx").mkdir()
    (d / "empty.npz").write_bytes(b"")
    (d / "junk.npz").write_bytes(b"PK\x03\x04 truncated zip")
    np.savez(d / "wrongkey.npz", z=np.ones((2, 4), np.float32))
    np.savez(d / "i64.npz", x=np.ones((2, 4), np.int64))
    np.savez(d / "f64.npz", x=np.ones((2, 4), np.float64))
    np.savez(d / "badshape.npz", i=np.ones(4, np.int64), x=np.ones(3, np.float32))
    np.save(d / "one.npy", np.ones((2, 4), np.float32))
    (d / "exit0.py").write_text("import sys\nsys.exit(0)\n")
    (d / "exit3.py").write_text("raise SystemExit(3)\n")
    (d / "boom.py").write_text("raise KeyError('nope')\n")
    (d / "late_exit.py").write_text(
        "import sys\nfrom partition import SubgraphProperty, SubgraphSelector, register_subgraph_property\n"
        "class S(SubgraphSelector):\n    def select(self, node):\n        sys.exit(0)\n"
        "class P(SubgraphProperty):\n    property_name = 'late_exit'\n"
        "    def create_subgraph_selector(self):\n        return S()\n"
        "register_subgraph_property('late_exit', P())\n")
    return {k: str(d / k) for k in ("one.onnx", "two.onnx", "ident.onnx", "short.onnx", "custom.onnx", "empty.onnx", "trunc.onnx", "text.onnx",
                                    "folder.onnx", "empty.npz", "junk.npz", "wrongkey.npz", "i64.npz",
                                    "f64.npz", "badshape.npz", "one.npy", "exit0.py", "exit3.py",
                                    "boom.py", "late_exit.py")} | {"dir": str(d)}


CASES = [
    # the model file
    (["partition", "{dir}/missing.onnx", "--ops", "Relu"], "no such model file"),
    (["partition", "{folder.onnx}", "--ops", "Relu"], "is a directory"),
    (["partition", "{empty.onnx}", "--ops", "Relu"], "the file is empty"),
    (["partition", "{trunc.onnx}", "--ops", "Relu"], "not a valid ONNX model"),
    (["run", "{text.onnx}"], "not a valid ONNX model"),
    # backend and selection options
    (["partition", "{one.onnx}", "--backend", "nope"], "unknown backend 'nope'"),
    (["partition", "{one.onnx}", "--ops", "Relu;Mul"], "are not op type names"),
    (["compare", "{one.onnx}", "--backend", "nope"], "unknown backend 'nope'"),
    (["run", "{one.onnx}", "--workers", "0"], "--workers 0: needs at least 1"),
    (["run", "{one.onnx}", "--workers", "-1"], "--workers -1: needs at least 1"),
    (["compare", "{one.onnx}", "--ops", "Relu", "--repeat", "0"], "--repeat 0: needs at least 1"),
    (["run", "{one.onnx}", "--memory-limit", "lots"], "expected a number with an optional unit"),
    (["run", "{one.onnx}", "--dim", "N=four"], "is not an integer"),
    (["run", "{one.onnx}", "--dim", "M=4"],
     "--dim names ['M'], which no graph input has as a symbolic axis; the symbolic axes are ['N']"),
    # a node that fails on inputs the user did not give says what was assumed of them
    (["run", "{short.onnx}"], "no output position. The inputs were not all given: input 'x': shape [1, 1, "),
    # argparse's own errors are one line too
    (["run", "{one.onnx}", "--seed", "abc"], "invalid int value: 'abc'"),
    (["run", "{one.onnx}", "--engine", "foo"], "invalid choice: 'foo'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["partition", "{one.onnx}", "--ops", "Relu", "--no-such-flag"], "unrecognized arguments"),
    # --inputs
    (["run", "{one.onnx}", "--inputs", "{dir}/missing.npz"], "no such file"),
    (["run", "{one.onnx}", "--inputs", "{dir}"], "is a directory"),
    (["run", "{one.onnx}", "--inputs", "{empty.npz}"], "the file is empty"),
    (["run", "{one.onnx}", "--inputs", "{junk.npz}"], "not a readable .npz or .npy file"),
    (["run", "{one.onnx}", "--inputs", "{one.onnx}"], "not an .npz or .npy file"),
    (["run", "{one.onnx}", "--inputs", "{wrongkey.npz}"], "missing graph input(s) ['x']"),
    (["run", "{one.onnx}", "--inputs", "{i64.npz}"],
     "input 'x' has dtype int64, but the graph declares FLOAT (float32)"),
    (["compare", "{one.onnx}", "--ops", "Relu", "--inputs", "{f64.npz}"],
     "input 'x' has dtype float64, but the graph declares FLOAT (float32)"),
    (["run", "{two.onnx}", "--inputs", "{badshape.npz}"], "input 'i' has size 4 on axis 0"),
    (["run", "{two.onnx}", "--inputs", "{one.npy}"], "a .npy file holds one array, but the graph has 2 inputs"),
    # outputs where nothing can be written
    (["run", "{one.onnx}", "--save-outputs", "{dir}/no/such/dir/out.npz"], "--save-outputs"),
    (["run", "{one.onnx}", "--report", "{dir}"], "--report"),
    (["partition", "{one.onnx}", "--ops", "Relu", "--export", "{dir}"], "cannot write the model to"),
    # a model onnxruntime refuses as the reference, and one our engine has no kernel for
    (["compare", "{custom.onnx}", "--ops", "Frob"], "no kernel in our engine or in onnxruntime for: x.y.Frob (node 'frob')"),
    (["run", "{custom.onnx}"], "no kernel in our engine or in onnxruntime for: x.y.Frob (node 'frob')"),
    # plugins that exit or raise
    (["partition", "{one.onnx}", "--ops", "Relu", "--plugin", "{exit0.py}"], "called sys.exit(0) on import"),
    (["partition", "{one.onnx}", "--ops", "Relu", "--plugin", "{exit3.py}"], "called sys.exit(3) on import"),
    (["run", "{one.onnx}", "--backend", "x", "--plugin", "{boom.py}"], "raised KeyError on import"),
    (["partition", "{one.onnx}", "--backend", "late_exit", "--plugin", "{late_exit.py}"],
     "plugin code called sys.exit(0)"),
]


def fill(arg: str, files: dict[str, str]) -> str:
    for key, value in files.items():
        arg = arg.replace("{" + key + "}", value)
    return arg


@pytest.mark.parametrize("args,needle", CASES, ids=[" ".join(a[:1] + a[2:4]) for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(files, args, needle) -> None:
    done = sglens(*[fill(a, files) for a in args])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def ort_outputs(model_path: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def test_lossless_dtypes_are_cast_and_match_onnxruntime(files, tmp_path, rng) -> None:
    i = rng.integers(-5, 5, size=3).astype(np.int32)        # int32 -> declared int64: lossless
    x = rng.standard_normal(3).astype(np.float16)            # float16 -> declared float32: lossless
    np.savez(tmp_path / "in.npz", i=i, x=x)
    done = sglens("run", files["two.onnx"], "--inputs", str(tmp_path / "in.npz"),
                  "--save-outputs", str(tmp_path / "out.npz"))
    assert done.returncode == 0, done.stderr
    want = ort_outputs(files["two.onnx"], {"i": i.astype(np.int64), "x": x.astype(np.float32)})["y"]
    got = np.load(tmp_path / "out.npz")["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    x16 = rng.integers(-300, 300, size=3).astype(np.int16)   # int16 -> declared float32: lossless
    np.savez(tmp_path / "in16.npz", x=x16)
    done = sglens("run", files["ident.onnx"], "--inputs", str(tmp_path / "in16.npz"),
                  "--save-outputs", str(tmp_path / "out16.npz"))
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "out16.npz")["y"]
    assert got.dtype == np.float32  # before: the int16 array ran through as it was
    np.testing.assert_array_equal(got, ort_outputs(files["ident.onnx"], {"x": x16.astype(np.float32)})["y"])


def test_npy_is_the_only_input_of_a_one_input_model(files, tmp_path, rng) -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = sglens("run", files["one.onnx"], "--inputs", str(tmp_path / "x.npy"),
                  "--save-outputs", str(tmp_path / "out.npz"))
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], ort_outputs(files["one.onnx"], {"x": x})["y"],
                               rtol=1e-6)
