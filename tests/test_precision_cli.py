"""``sglens precision`` as a subprocess on real files: the answer, the exports, and bad input as
one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from engine.precision_export import pinned_nodes
from sample_models.builders_fp16 import build_fp16_trouble_transformer, fp16_trouble_inputs

ROOT = Path(__file__).resolve().parents[1]


def sglens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglens", *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("prec_cli")
    onnx.save(build_fp16_trouble_transformer(), d / "trouble.onnx")
    np.savez(d / "in.npz", **fp16_trouble_inputs())
    np.savez(d / "wrong.npz", nope=np.zeros(3, np.float32))
    return d


def test_json_pins_and_marked_model(files):
    out = files / "marked.onnx"
    r = sglens("precision", str(files / "trouble.onnx"), "--inputs", str(files / "in.npz"),
               "--atol", "0.01", "--rtol", "0.01", "--json", "--export-onnx", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert {"attn/scores", "attn/ln/pow"} <= set(report["pins"]) and report["verified"]["match"]
    assert report["runs"] <= 200 and not report["capped"]
    assert pinned_nodes(onnx.load(out)) == report["pins"]


def test_text_output_names_flags_and_suspects(files):
    r = sglens("precision", str(files / "trouble.onnx"), "--inputs", str(files / "in.npz"),
               "--atol", "0.01", "--rtol", "0.01", "--backend", "none")
    assert r.returncode == 0, r.stderr
    assert "trtexec:    --fp16 --precisionConstraints=obey --layerPrecisions=" in r.stdout
    assert "attention logits" in r.stdout and "must stay FP32" in r.stdout


def test_a_cnn_needs_no_pins():
    r = sglens("precision", str(ROOT / "sample_models" / "resnet_small.onnx"), "--atol", "0.01",
               "--rtol", "0.01", "--range=-3,3", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["no_pins_needed"] and report["pins"] == [] and report["candidates"] > 20


@pytest.mark.parametrize("args,needle", [
    (["--target", "fp8"], "invalid choice: 'fp8'"),
    (["--max-runs", "0"], "--max-runs 0"),
    (["--atol", "-1"], "atol"),
    (["--target", "int8"], "no QuantizeLinear nodes"),
    (["--inputs", "{d}/wrong.npz"], "nope"),
    (["--export-onnx", "/nonexistent-dir/x.onnx"], "--export-onnx"),
    (["--backend", "nope"], "nope"),
])
def test_bad_input_is_one_line_and_exit_2(files, args, needle):
    args = [a.format(d=files) for a in args]
    r = sglens("precision", str(files / "trouble.onnx"), "--inputs", str(files / "in.npz"), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model_is_one_line():
    r = sglens("precision", "/nonexistent/model.onnx")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_no_analysis_gives_the_same_pins(files):
    args = ["precision", str(files / "trouble.onnx"), "--inputs", str(files / "in.npz"), "--atol", "0.01",
            "--rtol", "0.01", "--json"]
    full, lean = json.loads(sglens(*args).stdout), json.loads(sglens(*args, "--no-analysis").stdout)
    assert lean["pins"] == full["pins"] and lean["nodes"] == [] and lean["analysis_runs"] == 0
    assert full["nodes"] and full["suspects"]
