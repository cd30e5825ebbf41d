"""Classical models converted by skl2onnx, for ``bench/real_engine.py``: what a scikit-learn user
deploys as ONNX, and a producer no other benchmark model has.

Each model is fitted (seed 0) on a dataset scikit-learn ships (no download), converted by
``skl2onnx.to_onnx`` at opset 17 (ai.onnx.ml as skl2onnx picks it), stamped IR version 8, and
fed 16 rows of that dataset. Their shapes are what runs a fresh path of ours:

- ``sk_knn``: ``KNeighborsClassifier`` as skl2onnx writes it, a ``Scan`` over the 569 training
  rows (each step a Sub and a ReduceSumSquare), then TopK and the vote: per-iteration cost of a
  control-flow body;
- ``sk_svc_pca``: StandardScaler, PCA and an RBF ``SVC`` (``SVMClassifier``, ``ZipMap``);
- ``sk_forest``: StandardScaler and a random forest (``TreeEnsembleClassifier``);
- ``sk_gbr``: gradient-boosted regression trees (``TreeEnsembleRegressor``).

The ``ai.onnx.ml`` nodes have no kernel of ours: they run on onnxruntime, one node a session
(``engine/ort_fallback.py``), as every user's run does; the row says how many. The export and its
inputs are cached beside the torch exports (``torch_models.cache_dir()``); scikit-learn and
skl2onnx are the ``bench`` extra.

    python bench/sklearn_models.py [NAME ...]     # convert what is missing, print the cache
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

import torch_models

ROWS = 16


@dataclass(frozen=True)
class Converted:
    name: str
    about: str
    fit: Callable[[], tuple[Any, np.ndarray]]   # -> (fitted estimator, its input rows)


def _cancer() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer
    x, y = load_breast_cancer(return_X_y=True)
    return x.astype(np.float32), y


def _knn() -> tuple[Any, np.ndarray]:
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = _cancer()
    return make_pipeline(StandardScaler(), KNeighborsClassifier(5)).fit(x, y), x


def _svc_pca() -> tuple[Any, np.ndarray]:
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    x, y = _cancer()
    return make_pipeline(StandardScaler(), PCA(8, random_state=0), SVC(random_state=0)).fit(x, y), x


def _forest() -> tuple[Any, np.ndarray]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = _cancer()
    forest = RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0)
    return make_pipeline(StandardScaler(), forest).fit(x, y), x


def _gbr() -> tuple[Any, np.ndarray]:
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import GradientBoostingRegressor
    x, y = load_diabetes(return_X_y=True)
    x = x.astype(np.float32)
    return GradientBoostingRegressor(n_estimators=100, random_state=0).fit(x, y), x


MODELS = {m.name: m for m in [
    Converted("sk_knn", "scikit-learn KNeighborsClassifier(5) on breast-cancer (569 rows x 30), "
              "a Scan over the training rows; 16 rows", _knn),
    Converted("sk_svc_pca", "StandardScaler + PCA(8) + SVC(rbf) on breast-cancer; 16 rows", _svc_pca),
    Converted("sk_forest", "StandardScaler + RandomForestClassifier(50 trees, depth 8) on "
              "breast-cancer; 16 rows", _forest),
    Converted("sk_gbr", "GradientBoostingRegressor(100 trees) on diabetes (10 features); 16 rows", _gbr),
]}


def convert(name: str) -> tuple[Path, Path]:
    """The cached conversion of ``name``, made now if missing (needs scikit-learn and skl2onnx)."""
    if (hit := torch_models.cached(name)) is not None:
        return hit
    from skl2onnx import to_onnx
    estimator, rows = MODELS[name].fit()
    feed = rows[:ROWS]
    model = to_onnx(estimator, feed, target_opset={"": torch_models.OPSET, "ai.onnx.ml": 3})
    model.ir_version = torch_models.IR
    onnx_path, npz_path = torch_models.paths(name)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    onnx_path.write_bytes(model.SerializeToString())
    np.savez(npz_path, **{model.graph.input[0].name: feed})
    return onnx_path, npz_path


if __name__ == "__main__":
    for model_name in sys.argv[1:] or list(MODELS):
        print(model_name, *convert(model_name))
