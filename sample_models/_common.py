"""Shared helpers for the sample-model builders.

Every sample model is pinned to opset 17 / IR 8: onnx >= 1.23 would otherwise stamp
the newest opset and IR version, which the onnxruntime we test against rejects.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "subgraph-lens/sample_models"

Dim = int | str | None


def tensor_info(name: str, shape: Sequence[Dim] | None,
                elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """A typed value-info; str dims become symbolic (dim_param)."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(graph: onnx.GraphProto, doc: str = "") -> onnx.ModelProto:
    """Wrap a graph with the pinned opset / IR version every sample model uses."""
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        doc_string=doc,
    )
    model.ir_version = IR_VERSION
    return model


class GraphBuilder:
    """Accumulates nodes and initializers for one graph (or one control-flow body).

    Node names must be unique across the whole model, including subgraphs, so a
    body builder shares the parent's name registry (``names``).
    """

    def __init__(self, rng: np.random.Generator | None = None,
                 names: set[str] | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.names: set[str] = names if names is not None else set()
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def child(self) -> "GraphBuilder":
        """Builder for a control-flow body: same RNG stream and name registry."""
        return GraphBuilder(self.rng, self.names)

    def _claim(self, name: str) -> None:
        if name in self.names:
            raise ValueError(f"duplicate node/tensor name {name!r}")
        self.names.add(name)

    def const(self, name: str, value: np.ndarray | float | int | Iterable[Any],
              dtype: Any = np.float32) -> str:
        """Add an initializer holding ``value``; return its name."""
        self._claim(name)
        arr = np.asarray(value, dtype=dtype)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def weight(self, name: str, shape: Sequence[int], scale: float | None = None) -> str:
        """Seeded random float32 weight, He-style scaled so activations stay O(1)."""
        if scale is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
            scale = float(np.sqrt(2.0 / max(fan_in, 1)))
        return self.const(name, self.rng.standard_normal(shape) * scale)

    def op(self, op_type: str, inputs: Sequence[str], name: str,
           outputs: Sequence[str] | None = None, **attrs: Any) -> str:
        """Add one node; its single default output is called ``<name>_out``.

        Returns the first output name so calls chain naturally.
        """
        self._claim(name)
        outs = list(outputs) if outputs is not None else [f"{name}_out"]
        node = helper.make_node(op_type, list(inputs), outs, name=name, **attrs)
        self.nodes.append(node)
        return outs[0]

    def graph(self, name: str, inputs: Sequence[onnx.ValueInfoProto],
              outputs: Sequence[onnx.ValueInfoProto]) -> onnx.GraphProto:
        return helper.make_graph(self.nodes, name, list(inputs), list(outputs),
                                 initializer=self.initializers)

    # --- small composite blocks used by several builders -------------------

    def batchnorm(self, x: str, name: str, channels: int) -> str:
        """BatchNormalization (inference form) with seeded, well-conditioned stats."""
        scale = self.const(f"{name}/scale", 1.0 + 0.1 * self.rng.standard_normal(channels))
        bias = self.const(f"{name}/bias", 0.1 * self.rng.standard_normal(channels))
        mean = self.const(f"{name}/mean", 0.1 * self.rng.standard_normal(channels))
        # var is kept well away from 0 so the reference and ORT agree to rtol 1e-4.
        var = self.const(f"{name}/var", 0.5 + self.rng.random(channels))
        return self.op("BatchNormalization", [x, scale, bias, mean, var], name,
                       epsilon=1e-5)

    def conv(self, x: str, name: str, c_in: int, c_out: int, k: int = 3,
             stride: int = 1, bias: bool = True) -> str:
        """Same-padded Conv with seeded weights."""
        w = self.weight(f"{name}/W", [c_out, c_in, k, k])
        ins = [x, w]
        if bias:
            ins.append(self.const(f"{name}/B", 0.01 * self.rng.standard_normal(c_out)))
        pad = k // 2
        return self.op("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad])

    def dense(self, x: str, name: str, d_in: int, d_out: int) -> str:
        """MatMul + Add (the unfused form a partitioner sees in exported models)."""
        w = self.weight(f"{name}/W", [d_in, d_out], scale=float(np.sqrt(2.0 / d_in)))
        b = self.const(f"{name}/B", 0.01 * self.rng.standard_normal(d_out))
        y = self.op("MatMul", [x, w], f"{name}/matmul")
        return self.op("Add", [y, b], f"{name}/add")


def random_feeds(model: onnx.ModelProto, seed: int = 0,
                 symbolic_dim: int = 2) -> dict[str, np.ndarray]:
    """Random inputs for ``model``'s graph inputs (initializers excluded).

    Symbolic or unknown dims get ``symbolic_dim``. Only float/int/bool inputs
    are handled: that is all the sample models use.
    """
    rng = np.random.default_rng(seed)
    init_names = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else symbolic_dim
                 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.random(shape) > 0.5
        else:
            feeds[vi.name] = rng.integers(0, 5, size=shape).astype(dtype)
    return feeds
