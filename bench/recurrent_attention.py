"""Our engine against onnxruntime on recurrent and attention models (issue 23), each
pair timed interleaved in this one process (median of ``--repeat`` runs, same
inputs, onnxruntime with its default threads).

Models: a 2-layer bidirectional GRU and LSTM exported here with torch.onnx.export
(opset 17, IR 8, random weights, input 1 x 100 x 80, hidden 128) into a temporary
directory -- skipped where torch is not installed -- and every model of
``~/.cache/sglens-bench/models`` named on the command line (with its ``.npz`` of
inputs), e.g. gru_bidir lstm_bidir bert_mini distilbert gpt2_small.

    PYTHONPATH=$PWD python bench/recurrent_attention.py --repeat 20 gru_bidir distilbert
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort

from engine.executor import Executor
from partition import load_model

CACHE = Path.home() / ".cache" / "sglens-bench" / "models"


def _torch_exports(folder: Path) -> dict[str, tuple[bytes, dict]]:
    """The torch GRU and LSTM (2 layers, bidirectional) as ONNX, opset 17, IR 8."""
    try:
        import torch
    except ImportError:
        print("torch not installed: no torch exports")
        return {}
    torch.manual_seed(0)
    out = {}
    for name, cls in (("torch_gru2_bidir", torch.nn.GRU), ("torch_lstm2_bidir", torch.nn.LSTM)):
        net = cls(80, 128, num_layers=2, bidirectional=True, batch_first=True).eval()
        x = torch.randn(1, 100, 80)
        path = folder / f"{name}.onnx"
        torch.onnx.export(net, (x,), str(path), input_names=["x"], opset_version=17,
                          dynamo=False)
        model = onnx.load(str(path))
        model.ir_version = 8
        out[name] = (model.SerializeToString(), {"x": x.numpy()})
    return out


def _cached(names: list[str]) -> dict[str, tuple[bytes, dict]]:
    out = {}
    for name in names:
        path = CACHE / f"{name}.onnx"
        if not path.exists():
            print(f"{name}: not in {CACHE}, skipped")
            continue
        feeds = dict(np.load(CACHE / f"{name}.npz"))
        out[name] = (path.read_bytes(), feeds)
    return out


def _time_ms(fn: Callable[[], Any], samples: list[float]) -> None:
    start = time.perf_counter()
    fn()
    samples.append((time.perf_counter() - start) * 1e3)


def _unfused(data: bytes) -> Executor:
    """An executor of the model without the attention fusion (what it replaced)."""
    try:
        from engine import fuse_attention
    except ImportError:  # a checkout before the fusion (a baseline run)
        return Executor(load_model(data))
    real = fuse_attention.fuse_attention
    fuse_attention.fuse_attention = lambda graph, nodes, kernel_of: (nodes, [])
    try:
        return Executor(load_model(data))
    finally:
        fuse_attention.fuse_attention = real


def compare(name: str, data: bytes, feeds: dict, repeat: int) -> None:
    """Ours (and ours without the attention fusion, where it fused) against onnxruntime,
    median milliseconds, the three timed turn about."""
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    with Executor(load_model(data)) as ex, _unfused(data) as plain:
        ours_out = ex(feeds)
        ref = sess.run(None, feeds)
        worst = max(float(np.max(np.abs(np.asarray(ours_out[n], np.float64) - r)))
                    for n, r in zip(names, ref) if r.size)
        attention = sum(f.node.op_type == "Attention" for f in ex._fused.values())
        runs: dict[str, list[float]] = {"ours": [], "unfused": [], "onnxruntime": []}
        plain(feeds)
        calls = [("ours", lambda: ex(feeds)), ("unfused", lambda: plain(feeds)),
                 ("onnxruntime", lambda: sess.run(None, feeds))]
        if not attention:
            del calls[1]
        for i in range(repeat):
            # the order turns each round: onnxruntime's threads spin on after a run and
            # slowed whichever ran next (the fused model 1.4x, always right after it)
            for key, fn in calls[i % len(calls):] + calls[:i % len(calls)]:
                _time_ms(fn, runs[key])
    a, b = statistics.median(runs["ours"]), statistics.median(runs["onnxruntime"])
    extra = (f"  (attention fused x{attention}; unfused {statistics.median(runs['unfused']):.2f}"
             " ms)" if attention else "")
    print(f"{name:20s} ours {a:8.2f} ms  onnxruntime {b:8.2f} ms  ratio {a / b:5.2f}x"
          f"  max |diff| {worst:.1e}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names in ~/.cache/sglens-bench/models")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = {**_torch_exports(Path(tmp)), **_cached(args.models)}
        for name, (data, feeds) in models.items():
            compare(name, data, feeds, args.repeat)


if __name__ == "__main__":
    main()
