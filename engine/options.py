"""What an ``Executor`` is bound with: its options (``ExecOptions``), the device's
context and array module, and the kernel lookup (with ``missing_ops``, the check
made before binding). Split from ``engine/executor.py``, which re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from partition.ir import Graph, Node
from partition.local_functions import FUNCTION_KEY

from . import kernels as _kernel_pkg
from .context import Context
from .errors import NoGPUError
from .kernels.functions import local_function_kernel
from .run_errors import DeviceError

__all__ = ["DEVICES", "ExecOptions", "device_context", "find_kernel", "missing_ops"]

DEVICES = ("cpu", "gpu")


# --------------------------------------------------------------- devices --
def device_context(device: str, device_id: int = 0) -> tuple[Context, Any]:
    """The engine ``Context`` and array module (numpy or cupy) of ``device``."""
    if device == "cpu":
        return Context.cpu(0), np
    if device == "gpu":
        try:
            ctx = Context.gpu(device_id)
        except NoGPUError as exc:
            raise DeviceError(f"device gpu: {exc}") from None   # words the page and the CLI share
        import cupy  # present: Context.gpu checked it
        return ctx, cupy
    raise DeviceError(f"unknown device {device!r}; choose one of {list(DEVICES)}")


# --------------------------------------------------------------- kernels --
def find_kernel(node: Node, opset: Mapping[str, int]) -> Callable[..., tuple] | None:
    """The registry's kernel for ``node`` at the graph's opset, or None."""
    if FUNCTION_KEY in node.subgraphs:  # a model-local function call runs its body
        return local_function_kernel
    try:  # the one lookup the interpreter uses too ("" and "ai.onnx" are one domain)
        return _kernel_pkg.kernel_for(node.op_type, node.domain, opset)
    except _kernel_pkg.KernelNotFound:
        return None


def missing_ops(graph: Graph, skip_subgraph_nodes: bool = False,
                finder: Callable[[Node, Mapping[str, int]], Any] | None = None) -> list[str]:
    """``domain.op`` names in ``graph`` (bodies included) that no kernel implements."""
    missing: dict[str, None] = {}
    finder = finder or find_kernel

    def walk(g: Graph) -> None:
        for node in g.nodes:
            if node.is_subgraph:
                if not skip_subgraph_nodes:
                    walk(node.body)
                continue
            if finder(node, g.opset or graph.opset) is None:
                missing[f"{node.domain + '.' if node.domain else ''}{node.op_type}"] = None
            for body in node.subgraphs.values():
                walk(body)
    walk(graph)
    return list(missing)


# ----------------------------------------------------------------- options --
@dataclass(frozen=True)
class ExecOptions:
    """How an ``Executor`` binds and runs a graph (one object instead of a dozen keywords).

    ``subgraph_runtime`` chooses what runs subgraph nodes: ``engine``, ``onnxruntime``,
    ``tensorrt`` or ``auto`` (see ``engine/subgraph_ops.py``); ``runtime_by_property``
    overrides it for the subgraph nodes of the named properties (``engine/run.py`` runs
    the ``host`` regions of ``--host-runtime onnxruntime`` so). ``node_times(name, start,
    end)`` (host ``perf_counter`` seconds) is told about every top-level node that ran,
    under any plan: the dependency timeline of a measured run (``engine/measure.py``),
    without the ``nodes`` plan a profiler forces. ``plan`` cuts the
    graph into engine functions (``engine/plan.py``): ``segments`` (default) or
    ``nodes``; with ``hooks`` (a profiler) the plan is ``nodes`` so its timeline
    shows every node. ``timing`` records per-node wall time (CUDA events on
    GPU). ``kernels(node, opset) -> kernel | None`` replaces the kernel registry
    (tests, experiments); nested executors inherit it. ``engine_name``,
    ``workers`` and ``hooks`` only matter when the executor makes its own engine.
    ``blas_threads`` sets the process's BLAS threads (``engine/kernels/blas.py``).
    """

    device: str = "cpu"
    device_id: int = 0
    subgraph_runtime: str = "engine"
    plan: str = "segments"
    keep_intermediates: bool = False
    timing: bool = True
    plan_cache_dir: str | None = None
    engine_name: str | None = None
    workers: int | None = None
    hooks: Any = None
    kernels: Callable[[Node, Mapping[str, int]], Any] | None = None
    blas_threads: int | None = None   # None: 1 + split large kernels (blas.py); 0: leave BLAS alone
    runtime_by_property: tuple[tuple[str, str], ...] = ()
    node_times: Callable[[str, float, float], None] | None = None

    def runtime_for(self, prop: str) -> str:
        """The runtime of a subgraph node of property ``prop``."""
        return dict(self.runtime_by_property).get(prop, self.subgraph_runtime)

    def effective_plan(self) -> str:
        return "nodes" if self.hooks is not None else self.plan
