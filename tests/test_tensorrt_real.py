"""The real TensorRT ONNX parser against our table (only where ``tensorrt`` imports)."""

from __future__ import annotations

import pytest

from partition import load_model, partition
from partition.tensorrt import real_trt



def test_available_reports_without_raising():
    assert real_trt.available() in (True, False)
    if not real_trt.available():
        assert real_trt.version() is None
        with pytest.raises(RuntimeError, match="tensorrt is not installed"):
            real_trt.parser_check([])


@pytest.mark.gpu
def test_parser_agrees_with_table_on_sample_models(tmp_path):
    pytest.importorskip("tensorrt")
    from sample_models.generate import build_all
    for name, proto in build_all().items():
        result = partition(load_model(proto.SerializeToString()), "tensorrt", min_size=1)
        report = real_trt.disagreements(result, tmp_path / name)
        assert report["checked"] == len(result.subgraphs)
        assert report["disagreements"] == [], (name, report)


def test_check_parser_without_tensorrt_is_one_clear_line(tmp_path):
    if real_trt.available():
        pytest.skip("tensorrt imports here")
    import subprocess
    import sys
    from sample_models.generate import build_all
    import onnx
    name, proto = next(iter(build_all().items()))
    path = tmp_path / f"{name}.onnx"
    onnx.save(proto, path)
    out = subprocess.run([sys.executable, "-m", "sglens", "partition", str(path), "--backend", "tensorrt",
                          "--check-parser"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().endswith("--check-parser needs TensorRT's Python package (tensorrt), which does not "
                                       "import here")


@pytest.mark.gpu
def test_check_parser_lists_no_disagreement_on_sample_models():
    pytest.importorskip("tensorrt")
    from sample_models.generate import build_all
    from partition.tensorrt.rules import TRTRules
    for name, proto in build_all().items():
        data = proto.SerializeToString()
        report = real_trt.check_parser(load_model(data), data, TRTRules(exclude_data_dependent=False))
        assert report["tensorrt_rules"] == "10.1"
        assert report["disagreements"] == [], (name, report)
