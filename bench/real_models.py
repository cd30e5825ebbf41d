"""Real-shaped models for ``bench/run.py``, built here with random weights (no downloads).

Each builder returns ``(onnx.ModelProto, feeds)``; opset 17, IR 8 (what the
onnxruntime we compare with accepts). Shapes follow the public architectures:

- ``resnet18``: torchvision's ResNet-18 as exported by ``torch.onnx`` in eval
  mode (BatchNorm folded into the convs' biases), input 1x3x224x224;
- ``transformer2``: a 2-layer post-LayerNorm encoder (BERT-style export: MatMul,
  Reshape/Transpose heads, Softmax, Erf GELU), sequence 128, hidden 256, 4
  heads, FFN 1024, token + position embeddings gathered from int64 ids;
- ``lstm_tagger``: embeddings -> bidirectional LSTM (hidden 256) -> linear
  tagger over 100 steps, batch 1;
- ``vad_stream``: one streaming step of a silero-VAD-like model: an ``If`` on
  the sample rate picks a branch; STFT as a strided Conv1d, magnitude, four
  small Conv1d encoders, one LSTM step carrying its state, Conv1d + Sigmoid
  decoder. Many tiny nodes: the per-node floor of the engine.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET, IR = 17, 8
F = TensorProto.FLOAT


class _G:
    """A tiny graph builder: unique names, float32 random weights."""

    def __init__(self, prefix: str, rng: np.random.Generator) -> None:
        self.prefix, self.rng = prefix, rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{self.prefix}{base}_{self.n}"

    def w(self, shape: tuple[int, ...], scale: float | None = None, base: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), base)

    def const(self, arr: np.ndarray, base: str = "c") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def op(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> Any:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs


def _model(g: _G, inputs: list, outputs: list, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="subgraph-lens/bench")
    model.ir_version = IR
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------- ResNet-18 --
def _conv(g: _G, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
    y = g.op("Conv", [x, g.w((cout, cin, k, k)), g.w((cout,), 0.01)], kernel_shape=[k, k],
             strides=[stride, stride], pads=[k // 2] * 4)
    return g.op("Relu", [y]) if relu else y


def _basic_block(g: _G, x: str, cin: int, cout: int, stride: int) -> str:
    y = _conv(g, x, cin, cout, 3, stride, True)
    y = _conv(g, y, cout, cout, 3, 1, False)
    skip = _conv(g, x, cin, cout, 1, stride, False) if (stride != 1 or cin != cout) else x
    return g.op("Relu", [g.op("Add", [y, skip])])


def build_resnet18(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict]:
    g = _G("r18_", rng)
    x = _conv(g, "input", 3, 64, 7, 2, True)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = _basic_block(g, x, cin, cout, stride)
        x = _basic_block(g, x, cout, cout, 1)
        cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    y = g.op("Gemm", [x, g.w((1000, 512)), g.w((1000,), 0.01)], transB=1)
    g.nodes[-1].output[0] = "logits"
    model = _model(g, [helper.make_tensor_value_info("input", F, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("logits", F, [1, 1000])], "resnet18")
    del y
    return model, {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


# -------------------------------------------------------------- transformer --
def _linear(g: _G, x: str, din: int, dout: int) -> str:
    return g.op("Add", [g.op("MatMul", [x, g.w((din, dout), (1.0 / din) ** 0.5)]),
                        g.w((dout,), 0.02)])


def _layer_norm(g: _G, x: str, d: int) -> str:
    return g.op("LayerNormalization", [x, g.const(np.ones(d, np.float32)),
                                       g.const(np.zeros(d, np.float32))], axis=-1, epsilon=1e-12)


def _encoder_layer(g: _G, x: str, seq: int, d: int, heads: int, ffn: int) -> str:
    hd = d // heads
    split = g.const(np.array([1, seq, heads, hd], np.int64), "shape")
    merge = g.const(np.array([1, seq, d], np.int64), "shape")

    def heads_of(t: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)
    q = heads_of(_linear(g, x, d, d), [0, 2, 1, 3])
    k = heads_of(_linear(g, x, d, d), [0, 2, 3, 1])
    v = heads_of(_linear(g, x, d, d), [0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.array(hd ** 0.5, np.float32))])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    attn = _linear(g, g.op("Reshape", [ctx, merge]), d, d)
    x = _layer_norm(g, g.op("Add", [x, attn]), d)
    h = _linear(g, x, d, ffn)   # GELU as BERT exports it: x * 0.5 * (1 + erf(x / sqrt 2))
    erf = g.op("Erf", [g.op("Div", [h, g.const(np.array(2 ** 0.5, np.float32))])])
    h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, g.const(np.array(1, np.float32))])]),
                     g.const(np.array(0.5, np.float32))])
    return _layer_norm(g, g.op("Add", [x, _linear(g, h, ffn, d)]), d)


def build_transformer2(rng: np.random.Generator, seq: int = 128, d: int = 256,
                       heads: int = 4, ffn: int = 1024, vocab: int = 8000
                       ) -> tuple[onnx.ModelProto, dict]:
    g = _G("tf_", rng)
    tok = g.op("Gather", [g.w((vocab, d), 0.02), "input_ids"], axis=0)
    pos = g.op("Gather", [g.w((seq, d), 0.02), g.const(np.arange(seq, dtype=np.int64)[None])],
               axis=0)
    x = _layer_norm(g, g.op("Add", [tok, pos]), d)
    for _ in range(2):
        x = _encoder_layer(g, x, seq, d, heads, ffn)
    g.nodes[-1].output[0] = "hidden"
    model = _model(g, [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
                   [helper.make_tensor_value_info("hidden", F, [1, seq, d])], "transformer2")
    return model, {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64)}


# ---------------------------------------------------------------- LSTM tagger --
def _lstm_weights(g: _G, dirs: int, din: int, h: int) -> list[str]:
    s = (1.0 / h) ** 0.5
    return [g.w((dirs, 4 * h, din), s), g.w((dirs, 4 * h, h), s), g.w((dirs, 8 * h), s)]


def build_lstm_tagger(rng: np.random.Generator, seq: int = 100, emb: int = 128,
                      hidden: int = 256, tags: int = 20, vocab: int = 5000
                      ) -> tuple[onnx.ModelProto, dict]:
    g = _G("lstm_", rng)
    x = g.op("Gather", [g.w((vocab, emb), 0.1), "tokens"], axis=0)       # [seq, 1, emb]
    y = g.op("LSTM", [x, *_lstm_weights(g, 2, emb, hidden)], n_out=3,
             hidden_size=hidden, direction="bidirectional")[0]             # [seq, 2, 1, h]
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3])                          # [seq, 1, 2, h]
    y = g.op("Reshape", [y, g.const(np.array([seq, 2 * hidden], np.int64), "shape")])
    y = g.op("LogSoftmax", [_linear(g, y, 2 * hidden, tags)], axis=-1)
    g.nodes[-1].output[0] = "tag_scores"
    model = _model(g, [helper.make_tensor_value_info("tokens", TensorProto.INT64, [seq, 1])],
                   [helper.make_tensor_value_info("tag_scores", F, [seq, tags])], "lstm_tagger")
    return model, {"tokens": rng.integers(0, vocab, (seq, 1)).astype(np.int64)}


# -------------------------------------------------------------- VAD stream --
def _vad_branch(g: _G, chunk: int, hidden: int, window: int) -> tuple[list, list, list]:
    """The body of one sample-rate branch: returns (nodes, initializers) appended to g."""
    start = len(g.nodes)
    nfreq = window // 2 + 1
    x = g.op("Pad", ["audio", g.const(np.array([0, 0, 0, window // 2], np.int64), "pads")],
             mode="reflect")                                                 # [1, chunk+w/2]
    x = g.op("Unsqueeze", [x, g.const(np.array([1], np.int64), "axes")])   # [1, 1, L]
    spec = g.op("Conv", [x, g.w((2 * nfreq, 1, window), 0.05)], kernel_shape=[window],
                strides=[window // 2])                                       # [1, 2F, T]
    re = g.op("Slice", [spec, *(g.const(np.array([v], np.int64)) for v in (0, nfreq, 1))])
    im = g.op("Slice", [spec, *(g.const(np.array([v], np.int64)) for v in (nfreq, 2 * nfreq, 1))])
    mag = g.op("Sqrt", [g.op("Add", [g.op("Mul", [re, re]), g.op("Mul", [im, im])])])
    x, cin = mag, nfreq
    for cout, stride in ((hidden, 1), (hidden // 2, 2), (hidden // 2, 2), (hidden, 1)):
        x = g.op("Relu", [g.op("Conv", [x, g.w((cout, cin, 3)), g.w((cout,), 0.01)],
                               kernel_shape=[3], strides=[stride], pads=[1, 1])])
        cin = cout
    x = g.op("ReduceMean", [x], axes=[2], keepdims=0)                       # [1, hidden]
    x = g.op("Unsqueeze", [x, g.const(np.array([0], np.int64), "axes")])   # [1, 1, hidden]
    h0 = g.op("Gather", ["state", g.const(np.array(0, np.int64))], axis=0)  # [1, hidden]
    c0 = g.op("Gather", ["state", g.const(np.array(1, np.int64))], axis=0)
    h0 = g.op("Unsqueeze", [h0, g.const(np.array([0], np.int64), "axes")])
    c0 = g.op("Unsqueeze", [c0, g.const(np.array([0], np.int64), "axes")])
    y, h1, c1 = g.op("LSTM", [x, *_lstm_weights(g, 1, hidden, hidden), "", h0, c0], n_out=3,
                     hidden_size=hidden)
    new_state = g.op("Concat", [h1, c1], axis=0)                            # [2, 1, hidden]
    y = g.op("Relu", [g.op("Squeeze", [y, g.const(np.array([0, 1], np.int64), "axes")])])
    y = g.op("Unsqueeze", [y, g.const(np.array([2], np.int64), "axes")])   # [1, hidden, 1]
    y = g.op("Sigmoid", [g.op("Conv", [y, g.w((1, hidden, 1)), g.w((1,), 0.01)],
                              kernel_shape=[1])])
    prob = g.op("ReduceMean", [y], axes=[1, 2], keepdims=0)                 # [1]
    nodes, inits = g.nodes[start:], list(g.inits)
    del g.nodes[start:]
    g.inits.clear()
    return nodes, inits, [prob, new_state]


def build_vad_stream(rng: np.random.Generator, chunk: int = 512, hidden: int = 128
                     ) -> tuple[onnx.ModelProto, dict]:
    g = _G("vad_", rng)
    branches = []
    for tag, window in (("16k", 256), ("8k", 128)):
        nodes, inits, outs = _vad_branch(g, chunk, hidden, window)
        # Weights live as Constant nodes in the body, as exporters write them.
        consts = [helper.make_node("Constant", [], [t.name], name=f"{t.name}_const", value=t)
                  for t in inits]
        branches.append(helper.make_graph(
            consts + nodes, f"vad_{tag}", [],
            [helper.make_tensor_value_info(outs[0], F, [1]),
             helper.make_tensor_value_info(outs[1], F, [2, 1, hidden])]))
    is16k = g.op("Equal", ["sr", g.const(np.array(16000, np.int64))])
    cond = g.op("Squeeze", [is16k])
    g.nodes.append(helper.make_node("If", [cond], ["prob", "state_out"], name="vad_if",
                                    then_branch=branches[0], else_branch=branches[1]))
    model = _model(g, [helper.make_tensor_value_info("audio", F, [1, chunk]),
                       helper.make_tensor_value_info("state", F, [2, 1, hidden]),
                       helper.make_tensor_value_info("sr", TensorProto.INT64, [1])],
                   [helper.make_tensor_value_info("prob", F, [1]),
                    helper.make_tensor_value_info("state_out", F, [2, 1, hidden])], "vad_stream")
    feeds = {"audio": (rng.standard_normal((1, chunk)) * 0.1).astype(np.float32),
             "state": np.zeros((2, 1, hidden), np.float32), "sr": np.array([16000], np.int64)}
    return model, feeds


REAL_MODELS: dict[str, Callable[[np.random.Generator], tuple[onnx.ModelProto, dict]]] = {
    "resnet18": build_resnet18,
    "transformer2": build_transformer2,
    "lstm_tagger": build_lstm_tagger,
    "vad_stream": build_vad_stream,
}


def build(name: str, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    return REAL_MODELS[name](np.random.default_rng(seed))


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes including those inside bodies (the If's branches count once each)."""
    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += count_nodes(attr.g)
    return total
