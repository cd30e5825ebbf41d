"""The compiled conv kernels against the numpy path and onnxruntime, one Conv at a time.

    python bench/cores_kernels.py [--repeat 30] [--one-thread]

Layer shapes of the models ``bench/cores.py`` runs (MobileNetV2 and PP-OCR's
depthwise 3x3 / 5x5, ConvNeXt's depthwise 7x7, EfficientNet-B0's depthwise 5x5 on narrow planes, ResNet's 3x3, a grouped 3x3, a 1-D
STFT-like conv, ResNet's 3x3 MaxPool, YOLO's SPPF 5x5 and Inception's 3x3 MaxPools of stride 1). Per layer, interleaved run by run on the
same input: our kernel with the compiled module, the same kernel on its numpy
path (the compiled module switched off), onnxruntime's one-node model (its default
threads); medians in microseconds of wall time and of the process's CPU time (every
thread's: what a machine loaded beyond its cores inflates least). ``--one-thread``
gives BLAS and onnxruntime one thread each: per-core efficiency. What
``docs/kernels.md`` cites for keeping each compiled kernel. Never run from the tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from engine.kernels import native, nn  # noqa: E402

#: (name, op, x shape, w shape or None, attributes)
LAYERS = [
    ("mobilenet dw3x3 s1", "Conv", (1, 144, 56, 56), (144, 1, 3, 3), dict(group=144, pads=[1] * 4)),
    ("mobilenet dw3x3 s2", "Conv", (1, 96, 112, 112), (96, 1, 3, 3),
     dict(group=96, pads=[1] * 4, strides=[2, 2])),
    ("mobilenet dw3x3 7x7", "Conv", (1, 960, 7, 7), (960, 1, 3, 3), dict(group=960, pads=[1] * 4)),
    ("ppocr dw5x5 s1", "Conv", (1, 120, 40, 40), (120, 1, 5, 5), dict(group=120, pads=[2] * 4)),
    ("convnext dw7x7", "Conv", (1, 96, 56, 56), (96, 1, 7, 7), dict(group=96, pads=[3] * 4)),
    ("efficientnet dw5x5 28x28", "Conv", (1, 240, 28, 28), (240, 1, 5, 5), dict(group=240, pads=[2] * 4)),
    ("efficientnet dw5x5 14x14", "Conv", (1, 672, 14, 14), (672, 1, 5, 5), dict(group=672, pads=[2] * 4)),
    ("efficientnet dw5x5 7x7", "Conv", (1, 1152, 7, 7), (1152, 1, 5, 5), dict(group=1152, pads=[2] * 4)),
    ("grouped 3x3 g=8", "Conv", (1, 128, 28, 28), (128, 16, 3, 3), dict(group=8, pads=[1] * 4)),
    ("resnet 3x3", "Conv", (1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1] * 4)),
    ("resnet stem 7x7 s2", "Conv", (1, 3, 224, 224), (64, 3, 7, 7), dict(pads=[3] * 4, strides=[2, 2])),
    ("pointwise 1x1", "Conv", (1, 96, 56, 56), (24, 96, 1, 1), {}),
    ("1-D stft-like", "Conv", (1, 1, 4096), (258, 1, 256), dict(strides=[128])),
    ("resnet maxpool 3x3 s2", "MaxPool", (1, 64, 112, 112), None,
     dict(kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2])),
    ("yolo sppf maxpool 5x5 s1", "MaxPool", (1, 128, 20, 20), None, dict(kernel_shape=[5, 5], pads=[2] * 4)),
    ("inception maxpool 3x3 s1", "MaxPool", (1, 576, 14, 14), None, dict(kernel_shape=[3, 3], pads=[1] * 4)),
]


def _session(op: str, x: np.ndarray, w: np.ndarray | None, attrs: dict,
             threads: int) -> ort.InferenceSession:
    inits = [] if w is None else [numpy_helper.from_array(w, "w")]
    node = helper.make_node(op, ["x", *[i.name for i in inits]], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _ours(op: str, x: np.ndarray, w: np.ndarray | None, attrs: dict, compiled: bool):
    lib = native._lib
    if not compiled:
        native._lib = None
    try:
        if op == "MaxPool":
            return nn.max_pool(np, x, _n_outputs=1, **attrs)[0]
        return nn.conv(np, x, w, None, **attrs)
    finally:
        native._lib = lib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--one-thread", action="store_true")
    args = ap.parse_args(argv)
    if args.one_thread:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1, user_api="blas")
    rng = np.random.default_rng(0)
    print(f"{'layer':24s} {'compiled':>16s} {'numpy':>16s} {'ort':>16s}  (us, medians: wall / cpu)")
    for name, op, xs, ws, attrs in LAYERS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = None if ws is None else rng.standard_normal(ws).astype(np.float32)
        sess = _session(op, x, w, attrs, 1 if args.one_thread else 0)
        ref = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(_ours(op, x, w, attrs, True), ref, rtol=1e-3, atol=1e-3)
        runs = {"compiled": lambda: _ours(op, x, w, attrs, True),
                "numpy": lambda: _ours(op, x, w, attrs, False),
                "ort": lambda: sess.run(None, {"x": x})}
        wall: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeat):
            for key, fn in runs.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                cpu[key].append(time.process_time() - c0)
                wall[key].append(time.perf_counter() - t0)
        cells = [f"{statistics.median(wall[k]) * 1e6:7.0f} /{statistics.median(cpu[k]) * 1e6:7.0f}"
                 for k in runs]
        print(f"{name:24s} " + " ".join(f"{c:>16s}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
