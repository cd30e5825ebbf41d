"""Model bundles (.onnx + external data) unpack safely and load only from themselves."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.executor import Executor
from partition import load_model
from partition.bundle import extract_archive, find_model, stage_files
from partition.errors import ModelError

from conftest import make_model


def _external_model(folder: Path, rng: np.random.Generator) -> Path:
    """y = x @ W with W (64x32) stored in model.onnx.data beside model.onnx."""
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W")
    model = make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])], [w])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _check_runs(model_path: Path, rng: np.random.Generator) -> None:
    g = load_model(str(model_path))
    x = {"x": rng.standard_normal((2, 64)).astype(np.float32)}
    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    with Executor(g) as ex:
        np.testing.assert_allclose(ex.run(x).numpy_outputs()["y"], want, rtol=1e-5, atol=1e-5)


def test_a_zip_bundle_loads_with_its_data(tmp_path, rng):
    src = _external_model(tmp_path / "src", rng)
    archive = _zip(tmp_path / "m.zip", {f"resnet/{p.name}": p.read_bytes() for p in src.parent.iterdir()})
    model = extract_archive(archive, tmp_path / "out", max_bytes=1 << 24)
    assert model == tmp_path / "out" / "resnet" / "model.onnx"
    _check_runs(model, rng)


def test_a_tar_gz_bundle_and_loose_files_load(tmp_path, rng):
    src = _external_model(tmp_path / "src", rng)
    archive = tmp_path / "m.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        for p in src.parent.iterdir():
            tf.add(p, arcname=p.name)
    _check_runs(extract_archive(archive, tmp_path / "t", max_bytes=1 << 24), rng)
    files = [(p.name, io.BytesIO(p.read_bytes())) for p in src.parent.iterdir()]
    _check_runs(stage_files(files, tmp_path / "loose", max_bytes=1 << 24), rng)


@pytest.mark.parametrize("name", ["../evil.onnx", "/etc/evil.onnx", "a/../../evil.onnx", "C:/evil.onnx"])
def test_members_pointing_outside_are_refused(tmp_path, name):
    archive = _zip(tmp_path / "slip.zip", {name: b"x"})
    with pytest.raises(ModelError, match="outside the bundle"):
        extract_archive(archive, tmp_path / "out", max_bytes=1 << 20)
    assert not (tmp_path / "evil.onnx").exists() and not (tmp_path / "out").exists()
    with pytest.raises(ModelError, match="outside the bundle"):
        stage_files([(name, io.BytesIO(b"x"))], tmp_path / "loose", max_bytes=1 << 20)


def test_links_in_a_tar_are_refused(tmp_path):
    archive = tmp_path / "link.tar"
    with tarfile.open(archive, "w") as tf:
        info = tarfile.TarInfo("model.onnx.data")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(ModelError, match="link"):
        extract_archive(archive, tmp_path / "out", max_bytes=1 << 20)


def test_a_zip_bomb_stops_at_the_budget(tmp_path):
    archive = _zip(tmp_path / "bomb.zip", {"model.onnx": b"\0" * (64 << 20)})
    assert archive.stat().st_size < 1 << 20
    with pytest.raises(ModelError, match="more than the upload limit"):
        extract_archive(archive, tmp_path / "out", max_bytes=8 << 20)
    assert not (tmp_path / "out").exists()


def test_not_an_archive_and_model_count_errors(tmp_path):
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="not a readable archive"):
        extract_archive(junk, tmp_path / "o1", max_bytes=1 << 20)
    two = _zip(tmp_path / "two.zip", {"a.onnx": b"1", "b/c.onnx": b"2"})
    with pytest.raises(ModelError, match="2 .onnx files"):
        extract_archive(two, tmp_path / "o2", max_bytes=1 << 20)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no .onnx file"):
        find_model(tmp_path / "empty")


def test_a_model_folder_is_searched_within_bounds(tmp_path, monkeypatch):
    """A folder on the command line is walked only as far as the answer needs: a home folder
    full of models is named by its first few, and a huge tree is refused, not walked whole."""
    import partition.bundle as bundle
    from partition.bundle import open_model_path
    one = tmp_path / "one"
    (one / "data").mkdir(parents=True)
    (one / "m.onnx").write_bytes(b"1")
    (one / "data" / "w.bin").write_bytes(b"2")
    assert open_model_path(one, 1 << 20) == (one / "m.onnx", one)
    many = tmp_path / "many"
    for i in range(30):
        (many / f"d{i:02d}").mkdir(parents=True)
        (many / f"d{i:02d}" / "model.onnx").write_bytes(b"x")
    with pytest.raises(ModelError) as err:
        open_model_path(many, 1 << 20)
    text = str(err.value)
    assert "more than 10 .onnx files" in text and "give the model's .onnx file itself" in text
    assert "d00/model.onnx" in text and "d09/model.onnx" in text and "d10/" not in text
    monkeypatch.setattr(bundle, "MAX_FILES", 25)
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(26):
        (wide / f"f{i:02d}.txt").write_bytes(b"")
    with pytest.raises(ModelError, match="more than 25 files under the folder"):
        open_model_path(wide, 1 << 20)


def _tar_with_header(tmp_path: Path, kind: str, size: int, chain: int = 1) -> Path:
    """A plain .tar whose model member is preceded by ``chain`` extended headers of ``size`` bytes."""
    blocks = b""
    for _ in range(chain):
        head = tarfile.TarInfo("././@LongLink")
        head.type = tarfile.GNUTYPE_LONGNAME if kind == "gnu" else tarfile.XHDTYPE
        head.size = size
        blocks += head.tobuf(tarfile.GNU_FORMAT) + b"model.onnx".ljust(size + (-size % 512), b"\0")
    data = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]).SerializeToString()
    member = tarfile.TarInfo("model.onnx")
    member.size = len(data)
    path = tmp_path / "m.tar"
    path.write_bytes(blocks + member.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512) + bytes(1024))
    return path


@pytest.mark.parametrize("kind", ["gnu", "pax"])
def test_tar_extended_headers_are_bounded_before_they_are_read(tmp_path, kind):
    from partition.bundle import MAX_HEADER_BYTES, MAX_HEADER_CHAIN
    ok = _tar_with_header(tmp_path, "gnu", 512)              # a real long name: fine
    assert extract_archive(ok, tmp_path / "ok", max_bytes=1 << 20).name == "model.onnx"
    big = _tar_with_header(tmp_path, kind, MAX_HEADER_BYTES + 512)
    with pytest.raises(ModelError, match="extended header.*declares"):
        extract_archive(big, tmp_path / "big", max_bytes=1 << 30)
    chained = _tar_with_header(tmp_path, kind, 512, chain=MAX_HEADER_CHAIN + 1)
    with pytest.raises(ModelError, match="too many tar extended headers"):
        extract_archive(chained, tmp_path / "chain", max_bytes=1 << 30)
    assert not (tmp_path / "big").exists() or not any((tmp_path / "big").iterdir())


def test_a_member_declaring_more_than_the_budget_is_refused_unread(tmp_path):
    member = tarfile.TarInfo("model.onnx.data")
    member.size = 1 << 30                                      # declared, never sent
    path = tmp_path / "m.tar"
    path.write_bytes(member.tobuf(tarfile.USTAR_FORMAT) + bytes(1024))
    with pytest.raises(ModelError, match="declares 1073741824 bytes"):
        extract_archive(path, tmp_path / "out", max_bytes=1 << 20)


def test_a_zip_with_too_many_entries_is_refused_from_its_end_record(tmp_path):
    from partition import bundle
    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(30):
            zf.writestr(f"d{i}/", b"")
    old = bundle.MAX_FILES
    bundle.MAX_FILES = 20
    try:
        with pytest.raises(ModelError, match="30 entries, more than 20"):
            extract_archive(path, tmp_path / "out", max_bytes=1 << 20)
    finally:
        bundle.MAX_FILES = old
