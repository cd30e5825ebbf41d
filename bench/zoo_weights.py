"""The ONNX model zoo's classic CNNs as the onnx wheel ships them, with weights to compute with.

The onnx package carries nine model-zoo graphs for its own test suite
(``onnx/backend/test/data/light/light_*.onnx``: AlexNet, ZFNet-512, VGG-19, SqueezeNet,
Inception v1 and v2, ResNet-50, ShuffleNet, DenseNet-121; Caffe2 exports, opset 9, IR 3). To
keep the wheel small every weight is a ``ConstantOfShape`` filled with 0.02, so each model's
softmax is 0.001 everywhere whatever the image: timing them is fine, comparing their outputs
checks nothing (``sglens compare`` says so: "no output changes with the inputs").

``materialize`` turns each such fill into an initializer of random values that keep the
activations in a sane range, by what reads it: He-normal conv and Gemm weights, small biases,
BatchNormalization scale and variance near 1, per-channel Mul / Add vectors (DenseNet's and
Inception v2's Caffe2 "scale" layers, read through an Unsqueeze) near 1 and 0. The graph is
otherwise untouched: the same nodes, opset and IR version (an IR 3 model lists its initializers
as inputs, so each new one is listed too). A fill read by anything else stays as written.
Random BatchNormalization statistics do not normalise: ShuffleNet's logits grew until its softmax
was one-hot, the same class for every image. So ``calibrated`` then sets each one's mean and
variance from one pass over an image, as if trained on it (``bench/torch_models.py`` does the
same for its exports).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: (reader op, input index) -> how to draw the values there
_ROLES = {("Conv", 1): "weight", ("Gemm", 1): "weight", ("Conv", 2): "bias", ("Gemm", 2): "bias",
          ("BatchNormalization", 1): "near_one", ("BatchNormalization", 2): "small",
          ("BatchNormalization", 3): "small", ("BatchNormalization", 4): "near_one",
          ("Mul", 1): "near_one", ("Mul", 0): "near_one", ("Add", 1): "small", ("Add", 0): "small"}


def _role(name: str, readers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> str | None:
    """What the tensor ``name`` is to the nodes that read it (through Unsqueeze or Reshape:
    Inception v1's classifier weight is reshaped before its Gemm); None when its readers
    disagree or are none of the above."""
    roles = set()
    for node, k in readers.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape") and k == 0:
            roles.add(_role(node.output[0], readers))
        else:
            roles.add(_ROLES.get((node.op_type, k)))
    return roles.pop() if len(roles) == 1 else None


def _fan_in(shape: tuple[int, ...], gemm_trans_b: int | None) -> int:
    if gemm_trans_b is None:  # a conv weight: (out, in / group, *kernel)
        return max(1, math.prod(shape[1:]))
    return max(1, shape[1] if gemm_trans_b else shape[0])


def _draw(role: str, shape: tuple[int, ...], rng: np.random.Generator, trans_b: int | None) -> np.ndarray:
    if role == "weight":
        return rng.normal(0.0, math.sqrt(2.0 / _fan_in(shape, trans_b)), shape)
    if role == "bias":
        return rng.normal(0.0, 0.01, shape)
    if role == "near_one":
        return rng.uniform(0.5, 1.5, shape)
    return rng.normal(0.0, 0.1, shape)


def materialize(model_bytes: bytes, seed: int = 0) -> bytes:
    """``model_bytes`` with every ConstantOfShape of a constant shape that feeds a weight made
    an initializer of random values (see the module's docstring)."""
    model = onnx.load_from_string(model_bytes)
    g, rng = model.graph, np.random.default_rng(seed)
    inits = {t.name: t for t in g.initializer}
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in g.node:
        for k, t in enumerate(node.input):
            readers.setdefault(t, []).append((node, k))
    kept, made, shapes_used = [], [], set()
    for node in g.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            kept.append(node)
            continue
        role = _role(node.output[0], readers)
        if role is None:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        gemm = [n for n, k in readers[node.output[0]] if n.op_type == "Gemm"]
        trans_b = next((a.i for a in gemm[0].attribute if a.name == "transB"), 0) if gemm else None
        made.append(numpy_helper.from_array(_draw(role, shape, rng, trans_b).astype(np.float32),
                                            node.output[0]))
        shapes_used.add(node.input[0])
    still_read = {t for n in kept for t in n.input}
    unused = {s for s in shapes_used if s not in still_read}
    del g.node[:]
    g.node.extend(kept)
    survivors = [t for t in g.initializer if t.name not in unused]
    del g.initializer[:]
    g.initializer.extend(survivors + made)
    inputs = [vi for vi in g.input if vi.name not in unused]
    if model.ir_version < 4:  # IR 3: every initializer is also a graph input
        inputs += [helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, list(t.dims)) for t in made]
    del g.input[:]
    g.input.extend(inputs)
    return model.SerializeToString()


def calibrated(model_bytes: bytes, image: np.ndarray) -> bytes:
    """``model_bytes`` with every BatchNormalization's mean and variance (initializers) taken from
    its own input on one pass over ``image``, in graph order, so each one sees the statistics of
    the layers before it already set; the nodes run on our kernels, on the CPU."""
    from engine.kernels import kernel_attrs, kernel_for
    from partition import load_model
    model, graph = onnx.load_from_string(model_bytes), load_model(model_bytes)
    env: dict[str, np.ndarray] = {name: np.asarray(init.value) for name, init in graph.initializers.items()}
    (real,) = graph.inputs
    env[real] = image
    opsets = {("" if d == "ai.onnx" else d): int(v) for d, v in graph.opset.items()}
    stats: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        args = [env[t] if t else None for t in node.inputs]
        if node.op_type == "BatchNormalization" and len(args) == 5:
            x = args[0].astype(np.float64)
            axes = (0, *range(2, x.ndim))
            args[3] = stats[node.inputs[3]] = x.mean(axis=axes).astype(np.float32)
            args[4] = stats[node.inputs[4]] = x.var(axis=axes).astype(np.float32)
        outs = kernel_for(node.op_type, node.domain, opsets)(np, *args, **kernel_attrs(node))
        env.update((t, v) for t, v in zip(node.outputs, outs) if t)
    for t in model.graph.initializer:
        if t.name in stats:
            t.CopyFrom(numpy_helper.from_array(stats[t.name], t.name))
    return model.SerializeToString()
