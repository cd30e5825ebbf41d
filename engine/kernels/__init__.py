"""ONNX kernels written once against an array module ``xp`` (numpy or cupy).

``kernel_for(op, domain, opset_imports)`` (the one lookup every runner uses) and
``lookup(op, domain, opset)`` return ``fn(xp, *inputs, **attrs) -> tuple``;
``missing_kernels(graph)`` says before a run which nodes have none. Importing
this package registers every op family module.
"""

from __future__ import annotations

from .registry import (CONTROL_FLOW_OPS, KernelError, KernelNotFound, graph_opset, has_kernel,
                       host_ints, is_control_flow, kernel_attrs, kernel_for, lookup, missing_kernels, register,
                       register_control_flow, registered_ops, to_host)
from . import (activations, control_flow, elementwise, indexing, linalg, nn, norm,  # noqa: F401
               quant, integer, reduce, resize, rnn, detection, attention, ml, sampling, sequence, signal, strings, tensor, training, functions)

__all__ = [
    "CONTROL_FLOW_OPS", "KernelError", "KernelNotFound", "graph_opset", "has_kernel", "host_ints",
    "is_control_flow", "kernel_attrs", "kernel_for", "lookup", "missing_kernels", "register",
    "register_control_flow", "registered_ops", "to_host",
]
