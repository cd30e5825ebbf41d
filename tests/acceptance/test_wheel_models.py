"""The model cache of the acceptance suite: offline is a skip with pip's reason, never a pass or a
silent fall-back; a cached file with the wrong bytes is fetched again."""

from __future__ import annotations

import pytest

import wheel_models


def test_offline_is_reported_as_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLENS_TEST_MODELS", str(tmp_path / "cache"))
    # an index nobody answers on: what pip meets on a machine without network
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with pytest.raises(wheel_models.Unavailable, match="cannot download silero-vad==6.2.3"):
        wheel_models.fetch("silero_vad")
    assert not (tmp_path / "cache" / "silero_vad.onnx").exists()


def test_a_damaged_cached_file_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLENS_TEST_MODELS", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "silero_vad.onnx").write_bytes(b"not the model")
    # the checksum does not match, so it is fetched again (and here, offline, reported unavailable)
    with pytest.raises(wheel_models.Unavailable):
        wheel_models.fetch("silero_vad")
