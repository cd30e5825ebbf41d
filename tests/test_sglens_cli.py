"""The composition root: every package's commands in one parser; a command imports only its own package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sglens.cli import GROUPS, build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_command_is_registered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == ["check", "compare", "gains", "groups", "partition", "precision", "run", "serve",
                                   "trace"]
    assert [g.load().__name__ for g in GROUPS] == [g.module for g in GROUPS] == \
        ["partition.cli", "engine.run_cli", "engine.precision_cli", "app.cli"]


def _helps(parser) -> dict[str, str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return {action.dest: action.help for action in sub._choices_actions}


def test_the_placeholders_help_lines_are_the_packages_own() -> None:
    # `sglens --help` shows GROUPS' copies without importing the packages: they must not drift.
    full = _helps(build_parser())
    assert _helps(build_parser(None, full=False)) == full
    assert {name: text for g in GROUPS for name, text in g.commands.items()} == full
    for group in GROUPS:  # each command's own group is registered, the others stay placeholders
        for name in group.commands:
            assert _helps(build_parser(name, full=False)) == full


def _fresh(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_partition_imports_neither_flask_nor_onnxruntime_nor_the_engine(tmp_path) -> None:
    model = ROOT / "sample_models" / "conv_bn_relu_chain.onnx"
    code = ("import sys, json\n"
            "from sglens.cli import main\n"
            f"rc = main(['partition', {str(model)!r}, '--ops', 'Conv,Relu', '--json'])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'flask', 'werkzeug', 'onnxruntime', "
            "'engine', 'app', 'distributed'})\n"
            "print(json.dumps({'rc': rc, 'heavy': heavy}))\n")
    done = _fresh(code, tmp_path)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert last == {"rc": 0, "heavy": []}, done.stderr
    assert '"subgraphs"' in done.stdout


def test_a_missing_dependency_is_one_line_naming_it(tmp_path) -> None:
    # sys.modules[name] = None makes `import name` fail as if it were not installed.
    code = ("import sys\nsys.modules['flask'] = None\n"
            "from sglens.cli import main\nsys.exit(main(['serve', '--port', '0']))\n")
    done = _fresh(code, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("sglens serve: error: needs the Python package 'flask', which is not "
                                   "installed (pip install flask)"), done.stderr
    code = ("import sys\nsys.modules['onnxruntime'] = None\n"
            "from sglens.cli import main\nsys.exit(main(['--help']))\n")
    done = _fresh(code, tmp_path)  # the help needs no package at all
    assert done.returncode == 0 and "serve" in done.stdout and "compare" in done.stdout, done.stderr


def test_subgraph_runtime_keeps_the_executor_spelling() -> None:
    parser = build_parser()
    new = parser.parse_args(["run", "m.onnx", "--subgraph-runtime", "onnxruntime"])
    old = parser.parse_args(["run", "m.onnx", "--executor", "onnxruntime"])
    assert new.subgraph_runtime == old.subgraph_runtime == "onnxruntime"


def test_python_dash_m_sglens_and_unknown_model_is_one_line(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "sglens", "partition", str(tmp_path / "none.onnx"), "--ops", "Relu"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("sglens: error:")
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_program_ends_at_once_with_all_its_output(tmp_path) -> None:
    # `sglens partition|check` end the process when done (sglens.cli.exit_now): the output must be
    # whole through a pipe (a few MB, many pipe buffers) and the exit code the command's.
    import onnx

    from sample_models.synthetic import synthetic_model
    path = tmp_path / "chain.onnx"
    onnx.save_model(synthetic_model(5000, 0.2, seed=3), str(path))
    ops = "Add,Mul,Relu,Sigmoid,Tanh"
    done = subprocess.run([sys.executable, "-m", "sglens", "partition", str(path), "--ops", ops, "--json"],
                          capture_output=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert len(done.stdout) > 200_000 and data["summary"]["nodes"] == 5000
    from partition import load_model, partition
    from partition.report import result_json
    expected = result_json(partition(load_model(str(path)), "default", ops=ops.split(",")))
    assert {**data, "seconds": 0} == json.loads(json.dumps({**expected, "seconds": 0}))
    done = subprocess.run([sys.executable, "-m", "sglens", "check", str(path), "--ops", ops],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stderr
    # in Python, main() returns (and frees) as before: the caller's process goes on
    from sglens.cli import main
    assert main(["check", str(path), "--ops", ops]) == 0
