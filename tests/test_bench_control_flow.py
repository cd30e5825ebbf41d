"""``bench/control_flow.py``'s probes compute what onnxruntime computes (the script checks each
before timing it) and report a step's cost for each side; no timing is asserted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "control_flow.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_control_flow", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("probe", ["scan_add", "scan_knn", "loop_add", "if_chain"])
def test_each_probe_matches_onnxruntime_and_reports_both_sides(probe, rng):
    bench = _bench()
    row = bench.time_probe(probe, steps=int(rng.integers(3, 9)), runs=1, rng=rng)
    assert row["probe"] == probe and row["steps"] >= 3
    assert row["ours_us"] > 0 and row["ort_us"] > 0
    assert np.isclose(row["ratio"], row["ours_us"] / row["ort_us"])


def test_an_unknown_probe_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(["no_such_probe"])
    assert exc.value.code == 2 and "no_such_probe" in capsys.readouterr().err
