"""The real TensorRT ONNX parser against our table (only where ``tensorrt`` imports)."""

from __future__ import annotations

import pytest

from partition import load_model, partition
from partition.tensorrt import real_trt, register

register()


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
