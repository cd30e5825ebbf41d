"""The composition root: every package's commands in one parser, imported normally."""

from __future__ import annotations

import subprocess
import sys

from sglens.cli import COMMAND_MODULES, build_parser


def test_every_command_is_registered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == ["check", "compare", "groups", "partition", "run", "serve", "trace"]
    assert [m.__name__ for m in COMMAND_MODULES] == ["partition.cli", "engine.run_cli", "app.cli"]


def test_subgraph_runtime_keeps_the_executor_spelling() -> None:
    parser = build_parser()
    new = parser.parse_args(["run", "m.onnx", "--subgraph-runtime", "onnxruntime"])
    old = parser.parse_args(["run", "m.onnx", "--executor", "onnxruntime"])
    assert new.executor == old.executor == "onnxruntime"


def test_python_dash_m_sglens_and_unknown_model_is_one_line(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "sglens", "partition", str(tmp_path / "none.onnx"), "--ops", "Relu"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("sglens: error:")
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_older_spelling_python_dash_m_partition_cli_still_works(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "partition.cli", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and "serve" in out.stdout and "run" in out.stdout, out.stderr
