"""Shape inference in a forked child beside the node import (``partition/onnx_io.py``) gives the same graph.

The fork is taken only in a process running one Python thread, for models of
``FORK_MIN_NODES`` nodes or more; each check runs in a fresh interpreter with the
threshold lowered to 1 so that small real models take it, and compares with the
in-process import of the same file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from conftest import make_model

ROOT = Path(__file__).resolve().parent.parent

_COMPARE = r"""
import json, os, sys
from partition import onnx_io, onnx_inference
from partition.onnx_io import load_model

def shape(g):
    # every field of the graph and of its bodies, recursively
    return {"name": g.name, "inputs": list(g.inputs), "outputs": list(g.outputs),
            "tensors": {k: [v.dtype, list(v.shape) if v.shape is not None else None]
                        for k, v in g.tensors.items()},
            "initializers": sorted(g.initializers), "opset": g.opset, "metadata": g.metadata,
            "nodes": [[n.name, n.op_type, list(n.inputs), list(n.outputs), n.domain, sorted(n.attrs),
                       {k: shape(b) for k, b in n.subgraphs.items()}] for n in g.nodes]}

forked = []
start = onnx_inference.InferenceChild.start
def recording_start(model):
    beside = start(model)
    forked.append(beside is not None)
    return beside
onnx_inference.InferenceChild.start = recording_start
out = {}
for path in sys.argv[1:]:
    onnx_inference.FORK_MIN_NODES = 10 ** 9
    alone = shape(load_model(path))
    onnx_inference.FORK_MIN_NODES = 1
    beside = shape(load_model(path))
    out[os.path.basename(path)] = {"same": alone == beside, "forked": forked[-1],
                                   "typed": len(alone["tensors"])}
print(json.dumps(out))
"""


def _function_model(path: Path) -> Path:
    """A model calling a model-local function (imported from the inferred model after waiting)."""
    body = [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["b"], ["c"])]
    fn = helper.make_function("local", "ReluNeg", ["a"], ["c"], body, [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
                        helper.make_node("ReluNeg", ["s"], ["y"], name="call", domain="local")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model.functions.append(fn)
    model.opset_import.append(helper.make_opsetid("local", 1))
    onnx.save_model(model, str(path))
    return path


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_the_forked_inference_gives_the_in_process_graph(tmp_path) -> None:
    from sample_models.synthetic import synthetic_model
    chain = tmp_path / "chain.onnx"
    onnx.save_model(synthetic_model(3000, 0.2, seed=1), str(chain))
    paths = [chain, _function_model(tmp_path / "function.onnx"),
             *sorted((ROOT / "sample_models").glob("*.onnx"))]
    done = _run(_COMPARE, *map(str, paths))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result) == len(paths) >= 10
    for name, r in result.items():
        assert r["same"] and r["forked"], (name, r)
    # inference did run: the chain's 3000 intermediate tensors are typed (the file declares none)
    assert result["chain.onnx"]["typed"] > 3000
    assert result["if_model.onnx"]["typed"] and result["loop_model.onnx"]["typed"]


def test_a_bad_model_is_the_same_error_and_leaves_no_child(tmp_path) -> None:
    bad = make_model([helper.make_node("Relu", ["x"], ["a"], name="r1"),
                      helper.make_node("Add", ["a", "ghost"], ["y"], name="add")],
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "bad.onnx"
    onnx.save_model(bad, str(path))
    code = r"""
import os, sys
from partition import onnx_io, onnx_inference
from partition.errors import ModelError
messages = []
for threshold in (10 ** 9, 1):
    onnx_inference.FORK_MIN_NODES = threshold
    try:
        onnx_io.load_model(sys.argv[1])
    except ModelError as exc:
        messages.append(str(exc))
try:
    os.waitpid(-1, os.WNOHANG)
    print("a child is left")
except ChildProcessError:
    print(messages[0] == messages[1], messages[0])
"""
    done = _run(code, str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True node 'add' (Add) reads tensor 'ghost'"), done.stdout
