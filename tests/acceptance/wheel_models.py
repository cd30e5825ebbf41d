"""Third-party ONNX models for the acceptance tests, fetched once as a user would get them.

The models are the ones real packages ship inside their wheels on PyPI: ``pip download --no-deps``
of a pinned version, the ``.onnx`` member unpacked, its SHA-256 checked against the pin. They are
kept in a cache folder (``SGLENS_TEST_MODELS``, default ``~/.cache/sglens-test-models``), so a
second run needs no network. When the wheel cannot be downloaded (offline), ``fetch`` raises
``Unavailable`` with pip's reason and the tests skip with it; a wrong checksum is an error.

``python tests/acceptance/wheel_models.py`` fills the cache and prints what it holds.

Also built here from a fetched model: ``zipped_bundle``, a ``.zip`` of the model's folder with
every weight moved to an external-data file (what a user uploads for a model with external data).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


@dataclass(frozen=True)
class RealModel:
    name: str            # the cached file is <name>.onnx
    wheel: str           # pip requirement, pinned
    member: str          # the .onnx inside the wheel
    sha256: str          # of the .onnx
    about: str


MODELS: dict[str, RealModel] = {m.name: m for m in (
    RealModel("ppocr_det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
              "PP-OCRv4 text detection (DBNet, 672 nodes, opset 12, dynamic H and W)"),
    RealModel("ppocr_rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
              "PP-OCRv4 text recognition (SVTR-LCNet, 860 nodes, 420 of them Constant)"),
    RealModel("ppocr_cls", "rapidocr-onnxruntime==1.4.4",
              "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
              "PP-OCR mobile v2.0 text direction classifier (Conv + BatchNormalization)"),
    RealModel("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
              "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
              "silero VAD v6 (an If on the sample rate, LSTM decoder in nested bodies)"),
    RealModel("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
              "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
              "Magika v3.3 file-type classifier (int32 bytes in, ai.onnx.ml opset imported)"),
)}

#: pip's time to fetch one wheel before we call the registry unreachable
PIP_TIMEOUT_S = 300


class Unavailable(RuntimeError):
    """The model could not be fetched (no network, registry down): a reason to skip, not to fail."""


def cache_dir() -> Path:
    return Path(os.environ.get("SGLENS_TEST_MODELS") or Path.home() / ".cache" / "sglens-test-models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One fetcher at a time (pytest-xdist workers share the cache)."""
    import fcntl
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _download_wheel(requirement: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(into), requirement]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"pip download {requirement} took over {PIP_TIMEOUT_S} s (offline?)") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise Unavailable(f"cannot download {requirement} from the package index (offline?): {last}")
    return wheels[0]


def fetch(name: str) -> Path:
    """The cached ``<name>.onnx``, downloaded from its wheel the first time; checked by SHA-256."""
    model = MODELS[name]
    folder = cache_dir()
    target = folder / f"{name}.onnx"
    with _locked(folder):
        if target.is_file() and _sha256(target) == model.sha256:
            return target
        with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as tmp:
            wheel = _download_wheel(model.wheel, Path(tmp))
            with zipfile.ZipFile(wheel) as zf, zf.open(model.member) as src, open(Path(tmp) / "m.onnx", "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            got = _sha256(Path(tmp) / "m.onnx")
            if got != model.sha256:
                raise AssertionError(f"{model.wheel}:{model.member} has SHA-256 {got}, pinned {model.sha256}")
            os.replace(Path(tmp) / "m.onnx", target)
    return target


def zipped_bundle(name: str, out_dir: Path) -> Path:
    """``<out_dir>/<name>_ext.zip``: the fetched model with every weight over 1 KiB (initializers and Constant values) moved to
    ``weights.bin`` beside it (ONNX external data), zipped as a folder ``<name>/``."""
    import onnx
    from onnx import external_data_helper
    model = onnx.load(str(fetch(name)))
    folder = out_dir / f"{name}_ext"
    folder.mkdir(parents=True, exist_ok=True)
    external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                                        location="weights.bin", size_threshold=1024,
                                                        convert_attribute=True)  # PP-OCR keeps weights in Constant nodes
    onnx.save_model(model, str(folder / f"{name}.onnx"))
    archive = out_dir / f"{name}_ext.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, f"{name}/{path.name}")
    return archive


if __name__ == "__main__":
    for key, m in MODELS.items():
        try:
            print(f"{fetch(key)}  {m.wheel}  {m.about}")
        except Unavailable as exc:
            print(f"{key}: unavailable: {exc}")
