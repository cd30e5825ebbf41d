"""Subgraph operators (the subgraph API design, "step 2"): a subgraph node runs its body with a chosen executor.

Executors (``EXECUTORS``):

- ``engine``: the body's nodes on our engine and kernels, nested on the *same*
  engine as the graph around it (a child ``Executor``);
- ``onnxruntime``: the body exported as a standalone ONNX model (weights as
  initializers) in an onnxruntime session; CPU provider, CUDA provider where
  onnxruntime has it and the device is ``gpu``;
- ``tensorrt``: a TensorRT engine built from that ONNX model with TensorRT's
  ONNX parser; serialized plans cached on disk, keyed by the sha256 of the ONNX
  bytes, the GPU name, TensorRT's version, the precision and the input shapes;
- ``auto``: tensorrt if it imports and the device is a GPU, else onnxruntime if
  a session builds for this body, else engine.

Whatever was asked for, the ``SubgraphRecord`` of every call says which
executor *actually* ran and why; an executor asked for by name that cannot run
is an ``ExecutorUnavailableError``, never a silent substitution.

Weights (the subgraph API design): the subgraph node's weight inputs are persistent engine
variables. An operator converts them once (an onnxruntime session or TensorRT
engine with the weights baked in) and remembers their variables' versions; when
a version changes (``Executor.set_weight``) it rebuilds before running.

The TensorRT path is written against TensorRT 10's documented Python API and
has not been run here (no GPU, no TensorRT on the development machine).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from partition.ir import Initializer, Node

from .context import RunContext
from .float16 import float16_tensors, narrowed, widen
from .gpu_plan import MAX_HOST_ELEMENTS
from .kernels.device import resident
from .run_errors import ExecutorUnavailableError, RunError
from .values import SubgraphRecord, nbytes, to_numpy

# The executor binds these operators and imports this module; this module never
# imports the executor (its ``parent`` and ``run`` arguments are an ``Executor``
# and its ``_Run``, typed ``Any`` here to keep the import graph one-way).
Executor = Any
_Run = Any

EXECUTORS = ("auto", "engine", "onnxruntime", "tensorrt")

DEFAULT_PLAN_CACHE = Path(os.environ.get("SGLENS_PLAN_CACHE", "~/.cache/subgraph-lens/trt-plans")).expanduser()


# ------------------------------------------------------------ availability --
def tensorrt_available() -> tuple[bool, str]:
    """Whether ``import tensorrt`` works; the reason when it does not."""
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        return False, f"tensorrt does not import ({type(exc).__name__}: {exc})"
    return True, f"tensorrt {getattr(tensorrt, '__version__', '?')}"


def ort_providers(device: str) -> list[str]:
    import onnxruntime as ort
    have = ort.get_available_providers()
    if device == "gpu" and "CUDAExecutionProvider" in have:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


# -------------------------------------------------------------- operator --
class SubgraphOp:
    """The stateful operator of one subgraph node (bound once, called per run)."""

    def __init__(self, node: Node, parent: "Executor") -> None:
        self.node = node
        self.parent = parent
        self.body = node.body
        self.requested = parent.options.runtime_for(str(node.attrs.get("property", "")))
        self.label = f"'{node.name}' (Subgraph {node.attrs.get('property', '')}#{node.attrs.get('subgraph_id', '')})"
        # Inputs that are weights of the graph around it: converted once, versioned.
        self.weight_inputs = [t for t in node.inputs if t in parent._weight_vars]
        self._impl: _Impl | None = None
        self._reason = ""
        self._versions: dict[str, int] | None = None
        self._lock = threading.Lock()
        self.builds = 0  # how many times weights were converted (tests read it)
        # the body's declared float16 tensors: onnxruntime and TensorRT get them as float16 from
        # a host that computes in float32 (engine/float16.py)
        self.float16 = float16_tensors(self.body.tensors) if parent.xp is np else frozenset()

    # called from the executor's pushed function
    def call(self, run: "_Run", args: list, rctx: "RunContext") -> tuple:
        start = time.perf_counter()
        stream = rctx.stream
        e0 = self.parent._gpu_event(stream, timing=True) if stream is not None else None
        feeds = dict(zip(self.node.inputs, args))
        with self._lock:  # one call at a time per operator: its cache is shared
            rebuilt = self._ensure(feeds)
            impl = self._impl
            assert impl is not None
            if impl.name == "tensorrt" and self.parent.xp is not np:   # host shape facts: device pointers
                feeds = {t: self.parent._upload(v) if isinstance(v, np.ndarray) else v for t, v in feeds.items()}
            foreign = impl.name != "engine" and self.parent.xp is np
            if foreign and self.float16:  # its declared float16 inputs, not the host's float32
                feeds = narrowed(feeds, self.float16)
            outs, peak, inner = impl.run(feeds, run, rctx)
            if foreign:
                outs = [widen(v) for v in outs]
        device_s = None  # GPU: read when the run ends (Executor._result), not here: no wait mid-run
        boundary = sum(nbytes(v) for v in args if v is not None) + sum(nbytes(v) for v in outs)
        record = SubgraphRecord(
            node=self.node.name, subgraph_id=self.node.attrs.get("subgraph_id"),
            property=str(self.node.attrs.get("property", "")), requested=self.requested,
            executor=impl.name, reason=self._reason, seconds=time.perf_counter() - start,
            peak_bytes=max(peak, boundary), boundary_bytes=boundary, weights_rebuilt=rebuilt,
            device_seconds=device_s, extra=dict(impl.details))
        if run.pool is not None:  # GPU: cupy's pool high-water mark (the body's own run's, when ours)
            record.extra["pool_peak_bytes"] = max(impl.pool_peak or 0, run.pool.used_bytes())
        if e0 is not None:
            run.subgraph_spans.append((record, e0, self.parent._gpu_event(stream, timing=True)))
        run.subgraphs.extend(inner)
        run.subgraphs.append(record)
        return tuple(outs)

    # --- choosing and (re)building -------------------------------------------

    def _ensure(self, feeds: dict[str, Any]) -> bool:
        versions = {t: self.parent._weight_vars[t].version for t in self.weight_inputs}
        if self._impl is not None and versions == self._versions:
            return False
        weights = {t: feeds[t] for t in self.weight_inputs}
        if self._impl is None:
            self._impl, self._reason = self._choose(weights, feeds)
        else:
            self._impl.rebuild(weights, feeds)
        self._versions = versions
        self.builds += 1
        return True

    def _choose(self, weights: dict[str, Any], feeds: dict[str, Any]) -> tuple["_Impl", str]:
        want, device = self.requested, self.parent.device
        if want == "engine":
            return _EngineImpl(self, weights, feeds), "requested"
        if want == "onnxruntime":
            try:
                return _OrtImpl(self, weights, feeds), "requested"
            except Exception as exc:  # noqa: BLE001 - named, never substituted
                raise ExecutorUnavailableError(
                    f"subgraph {self.label}: onnxruntime could not build a session for it "
                    f"({type(exc).__name__}: {_first_line(exc)}); choose the subgraph runtime engine or auto (--subgraph-runtime on the CLI)") from None
        if want == "tensorrt":
            ok, why = tensorrt_available()
            if not ok:
                raise ExecutorUnavailableError(f"subgraph {self.label}: the subgraph runtime is tensorrt, but {why}; "
                                               "choose the subgraph runtime auto to fall back with a reason "
                                               "(--subgraph-runtime on the CLI)")
            if device != "gpu":
                raise ExecutorUnavailableError(f"subgraph {self.label}: the subgraph runtime tensorrt needs "
                                               "the device gpu (--device gpu on the CLI)")
            try:
                return _TrtImpl(self, weights, feeds), "requested"
            except Exception as exc:  # noqa: BLE001
                raise ExecutorUnavailableError(
                    f"subgraph {self.label}: TensorRT could not build an engine for it "
                    f"({type(exc).__name__}: {_first_line(exc)})") from None
        # auto: the best that works, with the reason for each step down.
        notes: list[str] = []
        ok, why = tensorrt_available()
        if ok and device == "gpu":
            try:
                return _TrtImpl(self, weights, feeds), f"auto: {why} on gpu"
            except Exception as exc:  # noqa: BLE001
                notes.append(f"tensorrt build failed ({type(exc).__name__}: {_first_line(exc)})")
        else:
            notes.append(why if not ok else "tensorrt needs --device gpu")
        try:
            impl = _OrtImpl(self, weights, feeds)
            return impl, "auto: " + "; ".join(notes + [f"onnxruntime session built ({impl.details['provider']})"])
        except Exception as exc:  # noqa: BLE001
            notes.append(f"onnxruntime session failed ({type(exc).__name__}: {_first_line(exc)})")
        missing = self.parent.missing_kernels(self.body)
        if missing:
            raise ExecutorUnavailableError(f"subgraph {self.label}: no executor can run it: "
                                           + "; ".join(notes) + f"; no kernel for {missing}")
        return _EngineImpl(self, weights, feeds), "auto: " + "; ".join(notes + ["engine"])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


# ----------------------------------------------------------- executors --
class _Impl:
    name = "?"

    def __init__(self) -> None:
        self.details: dict[str, Any] = {}
        self.pool_peak: int | None = None  # GPU: cupy pool high-water mark of the last run, if known

    def rebuild(self, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        """Convert changed weights (the subgraph API design); default: nothing to convert."""

    def run(self, feeds: dict[str, Any], run: "_Run", rctx: "RunContext") -> tuple[list, int, list]:
        """Outputs (on the parent's device), peak bytes, records of nested subgraphs."""
        raise NotImplementedError


class _EngineImpl(_Impl):
    """The body on our engine, nested: weights are used in place (already on the device)."""

    name = "engine"

    def __init__(self, op: SubgraphOp, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        super().__init__()
        self.op = op
        parent, plan = op.parent, op.parent.device_plan
        # On a device, what the enclosing graph knows on the host stays there: the shape facts
        # it computed on the host, and its small weights the body takes as inputs (a sample
        # rate's 16000), handed over as the enclosing executor's host copies (which its
        # set_weight refreshes).
        self.small_weights = [t for t in op.body.inputs if parent.xp is not np and t in parent._weights
                              and getattr(parent._weights[t], "size", MAX_HOST_ELEMENTS + 1) <= MAX_HOST_ELEMENTS]
        fed = frozenset(t for t in op.body.inputs if t in plan.host_tensors or t in plan.host_inputs) \
            | frozenset(self.small_weights)
        # The outputs the enclosing plan made host facts (gpu_plan._body_host_outputs) stay there.
        self.host_out = frozenset(t for t in op.body.outputs if t in plan.host_tensors)
        # On the host, the body binds on the enclosing graph's weights it is fed (fusions and
        # specialisations as in the whole graph's run); a device plan keeps its own host facts.
        inherited = frozenset(op.weight_inputs) if parent.xp is np else frozenset()
        self.child = parent.child(op.body, op.label, host_fed=fed, host_out=self.host_out,
                                  inherited=inherited, subgraph_runtime="engine")
        # The body's plan keeps on the host only what no device kernel of it wants as data:
        # the rest goes up, a host fact once per value (kernels/device.py:resident), a weight as is.
        kept = self.child.device_plan.host_inputs
        self.small_weights = [t for t in self.small_weights if t in kept]
        for t in self.small_weights:
            parent._host_weights.setdefault(t, to_numpy(parent._weights[t]))
        self.lifted = [t for t in fed if t not in kept and t not in parent._weights]
        self.details = {"peak_scope": "live tensors of the body"}

    def run(self, feeds: dict[str, Any], run: "_Run", rctx: "RunContext") -> tuple[list, int, list]:
        body = self.op.body
        mine = {t: feeds[t] for t in body.inputs}
        host = self.op.parent._host_weights
        for t in self.small_weights:
            mine[t] = host[t]
        for t in self.lifted:
            if isinstance(mine[t], np.ndarray):
                mine[t] = resident(self.child.xp, mine[t])
        if self.child.xp is not np:
            # On a device, inline on this engine function's stream: a nested engine run
            # would push the body's nodes, then block this worker on a barrier (a partitioned
            # GPU run took twice the unpartitioned one's time); and a CUDA Graph capture
            # (engine/gpu_graphs.py) records it with the rest.
            result = self.child.run_inline(mine, {}, rctx.stream, within=run)
        else:
            result = self.child.run(mine)
        self.pool_peak = result.pool_peak_bytes
        run.node_seconds.update(result.node_seconds)
        outs = [result.outputs[t] for t in body.outputs]
        if self.host_out:   # the enclosing plan reads these on the host: where the body's own
            # plan kept one on the device after all (the estimate missed), it is read back here
            outs = [to_numpy(v) if t in self.host_out and not isinstance(v, np.ndarray) else v
                    for t, v in zip(body.outputs, outs)]
        return outs, result.peak_bytes, result.subgraphs


def _standalone_bytes(op: SubgraphOp, weights: dict[str, Any]) -> bytes:
    from partition.onnx_io import standalone_model
    host = narrowed({t: to_numpy(v) for t, v in weights.items()}, op.float16)  # engine/float16.py
    inits = {t: Initializer.from_array(t, v) for t, v in host.items()}
    opset = op.parent.graph.opset or op.body.opset
    model = standalone_model(op.body, inits, opset, name=f"subgraph_{op.node.attrs.get('subgraph_id', 0)}")
    return model.SerializeToString()


class _OrtImpl(_Impl):
    """The body as an ONNX model in an onnxruntime session (weights baked in)."""

    name = "onnxruntime"

    def __init__(self, op: SubgraphOp, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        super().__init__()
        self.op = op
        self.inputs = [t for t in op.body.inputs if t not in weights]
        self._build(weights)

    def _build(self, weights: dict[str, Any]) -> None:
        import onnxruntime as ort
        data = _standalone_bytes(self.op, weights)
        opts = ort.SessionOptions()
        # fatal only: a failing run raises, and the run reports that once; at 3 onnxruntime also
        # wrote each error to stderr in colour, three more lines beside the CLI's one
        opts.log_severity_level = 4
        # A graph holds one session per subgraph (and per host region, engine/host_regions.py), each
        # with its own intra-op pool, called in turn from the engine's workers. Pools that spin while
        # idle then take the cores from every other session and from the engine: on a loaded 2-core
        # machine a 36-node transformer block with 18 sessions took 200+ ms instead of ~10 ms
        # (interleaved medians; bench/host_runtime.py --spin, docs/running.md "Host runtime"). Idle threads sleep.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ort_providers(self.op.parent.device)
        self.session = ort.InferenceSession(data, opts, providers=providers)
        used = self.session.get_providers()
        self.details = {"provider": used[0] if used else providers[0],
                        "peak_scope": "boundary tensors (onnxruntime's arena is not visible)"}
        self.out_names = [o.name for o in self.session.get_outputs()]

    def rebuild(self, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        self._build(weights)

    def run(self, feeds: dict[str, Any], run: "_Run", rctx: "RunContext") -> tuple[list, int, list]:
        host = {t: to_numpy(feeds[t]) for t in self.inputs}
        got = dict(zip(self.out_names, self.session.run(self.out_names, host)))
        up = self.op.parent._upload
        return [up(got[t]) for t in self.op.body.outputs], 0, []


class _TrtImpl(_Impl):
    """A TensorRT engine built from the body's ONNX model (TensorRT 10 API; unverified here).

    Plans are cached on disk under ``plan_cache_dir`` keyed by sha256 over the
    ONNX bytes (weights included), the GPU's name, ``tensorrt.__version__``, the
    precision and the input shapes, so a changed weight, GPU or TensorRT builds
    a new plan.  Execution: ``set_input_shape`` / ``set_tensor_address`` for
    every I/O tensor, then ``execute_async_v3`` on the engine worker's cupy
    stream (the stream the engine orders this function on).
    """

    name = "tensorrt"

    def __init__(self, op: SubgraphOp, weights: dict[str, Any], feeds: dict[str, Any],
                 precision: str | None = None) -> None:
        super().__init__()
        import tensorrt as trt  # lazily: optional dependency
        self.trt = trt
        self.op = op
        self.precision = precision or os.environ.get("SGLENS_TRT_PRECISION", "fp32")
        if self.precision not in ("fp32", "fp16"):
            raise RunError(f"TensorRT precision {self.precision!r}: choose fp32 or fp16")
        self.inputs = [t for t in op.body.inputs if t not in weights]
        self.cache_dir = Path(op.parent.plan_cache_dir or DEFAULT_PLAN_CACHE)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self._shapes: tuple | None = None
        self._weights = weights
        self._build(weights, feeds)

    def _key(self, data: bytes, shapes: tuple) -> str:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(self.op.parent.device_id)
        gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        h = hashlib.sha256()
        for part in (data, gpu_name.encode(), self.trt.__version__.encode(), self.precision.encode(),
                     repr(shapes).encode()):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()

    def _build(self, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        trt = self.trt
        shapes = tuple((t, tuple(feeds[t].shape), str(feeds[t].dtype)) for t in self.inputs)
        data = _standalone_bytes(self.op, weights)
        key = self._key(data, shapes)
        path = self.cache_dir / f"{key}.plan"
        cached = path.is_file()
        plan = path.read_bytes() if cached else self._build_plan(data, shapes)
        if not cached:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(plan)
            os.replace(tmp, path)  # atomic: concurrent builders never see half a plan
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RunError(f"TensorRT could not deserialize plan {path}")
        self.context = self.engine.create_execution_context()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self._shapes = shapes
        self.details = {"plan": str(path), "plan_cached": cached, "precision": self.precision,
                        "tensorrt": trt.__version__,
                        "peak_scope": "boundary tensors (TensorRT's workspace is not visible)"}

    def _build_plan(self, data: bytes, shapes: tuple) -> bytes:
        trt = self.trt
        builder = trt.Builder(self.logger)
        network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(data):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RunError("TensorRT's ONNX parser refused the subgraph: " + "; ".join(errors[:3]))
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
        if self.precision == "fp16":
            flag = getattr(trt.BuilderFlag, "FP16", None)
            if flag is None or not getattr(builder, "platform_has_fast_fp16", True):
                raise RunError(f"fp16 is not available in TensorRT {trt.__version__} on this GPU")
            config.set_flag(flag)
        profile = builder.create_optimization_profile()
        given = {t: s for t, s, _ in shapes}
        for i in range(network.num_inputs):
            inp = network.get_input(i)
            shape = given[inp.name]
            profile.set_shape(inp.name, shape, shape, shape)
        config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RunError("TensorRT's builder returned no plan (see its log above)")
        return bytes(plan)

    def rebuild(self, weights: dict[str, Any], feeds: dict[str, Any]) -> None:
        self._weights = weights
        self._build(weights, feeds)

    def run(self, feeds: dict[str, Any], run: "_Run", rctx: "RunContext") -> tuple[list, int, list]:
        import cupy
        trt = self.trt
        shapes = tuple((t, tuple(feeds[t].shape), str(feeds[t].dtype)) for t in self.inputs)
        if shapes != self._shapes:  # a plan is built for fixed shapes
            self._build(self._weights, feeds)
        ctx = self.context
        keep: list[Any] = []
        for t in self.inputs:
            arr = cupy.ascontiguousarray(cupy.asarray(feeds[t]))
            keep.append(arr)
            ctx.set_input_shape(t, tuple(arr.shape))
            ctx.set_tensor_address(t, arr.data.ptr)
        outs: dict[str, Any] = {}
        for name in self.names:
            if self.engine.get_tensor_mode(name) != trt.TensorIOMode.OUTPUT:
                continue
            shape = tuple(ctx.get_tensor_shape(name))
            dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            outs[name] = cupy.empty(shape, dtype)
            ctx.set_tensor_address(name, outs[name].data.ptr)
        stream = rctx.stream or cupy.cuda.get_current_stream()
        if not ctx.execute_async_v3(stream.ptr):
            raise RunError("TensorRT execute_async_v3 failed (see its log above)")
        result = []
        for t in self.op.body.outputs:
            if t not in outs:
                raise RunError(f"TensorRT engine has no output '{t}' (it has {sorted(outs)})")
            result.append(outs[t])
        return result, 0, []
