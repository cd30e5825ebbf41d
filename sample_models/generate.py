"""Write the deterministic sample ONNX models.

    python -m sample_models.generate [--out DIR]

DIR defaults to this package's folder. Models are rebuilt from seeded numpy
weights, so the bytes are identical on every run with the same onnx version.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import onnx

from ._common import random_feeds
from .builders_cnn import (build_conv_bn_relu_chain, build_mlp, build_resnet_small,
                           build_trt_cycle)
from .builders_control import build_if_model, build_loop_model, build_scan_rnn
from .builders_dynamic import build_cnn_dynamic, build_transformer_dynamic
from .builders_transformer import build_transformer_block

__all__ = ["BUILDERS", "CONTROL_FLOW_MODELS", "build_all", "write_all", "random_feeds", "main"]

# File name -> builder. Order is the order files are written and listed.
BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet_small.onnx": build_resnet_small,
    "mlp.onnx": build_mlp,
    "conv_bn_relu_chain.onnx": build_conv_bn_relu_chain,
    "trt_cycle.onnx": build_trt_cycle,
    "transformer_block.onnx": build_transformer_block,
    "if_model.onnx": build_if_model,
    "loop_model.onnx": build_loop_model,
    "scan_rnn.onnx": build_scan_rnn,
    "cnn_dynamic.onnx": build_cnn_dynamic,
    "transformer_dynamic.onnx": build_transformer_dynamic,
}

CONTROL_FLOW_MODELS = frozenset({"if_model.onnx", "loop_model.onnx", "scan_rnn.onnx"})

DEFAULT_OUT = Path(__file__).resolve().parent


def build_all() -> dict[str, onnx.ModelProto]:
    """Every sample model, keyed by its file name; nothing touches the disk."""
    return {name: build() for name, build in BUILDERS.items()}


def write_all(out_dir: str | Path = DEFAULT_OUT, check: bool = True) -> list[Path]:
    """Build, optionally check, and save every model into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, model in build_all().items():
        if check:
            onnx.checker.check_model(model, full_check=True)
        path = out / name
        onnx.save_model(model, str(path))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output folder (default: the sample_models package folder)")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(f"{path}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
