"""The DLA target: which nodes the parser imports *and* the DLA runs, which fall back to the GPU, and why.

A node first passes the ONNX parser's rules of the chosen release (``TRTRules``);
then the layer TensorRT makes of it must meet that layer's "on DLA" notes in
NVIDIA/TensorRT's ``include/NvInfer.h`` of the same release branch (cited line by
line in ``partition/data/tensorrt_dla.json``) and the general limits of TensorRT's
"DLA Supported Layers and Restrictions" page (static dimensions, batch <= 4096,
non-batch dimensions <= 8192, FP16/INT8). A node the parser imports but the DLA
refuses runs on the GPU (``kGPU_FALLBACK``): it is left out of the DLA regions with
the reason ``GPU fallback: ...``. Each maximal DLA region is one DLA loadable; at
most 16 loadables can be loaded per DLA core.

Which ONNX ops run on the DLA at all comes from NVIDIA/Deep-Learning-Accelerator-SW's
operator matrix for Orin (``Native`` through TensorRT; ``Native (as of TensorRT
8.6.12)`` counts from 10.0 on, not for the 8.6 GA parser; request-for-enhancement and
"reconstruction" ops run on the GPU); the NvInfer.h notes give the parameter limits.
What stays emulated: no DLA or TensorRT runs here. The matrix is Orin's at one commit
(JetPack 6), used for every release; ops it does not list fall back to the NvInfer.h
layer notes (activation, unary and element-wise sets) or run on the GPU.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable

from ..ir import Graph, Node
from .rules import TRTRules
from .rules_constants import Scope
from .table import DATA_DIR

#: TensorRT "DLA Supported Layers and Restrictions", General Restrictions
MAX_BATCH, MAX_DIM, LOADABLES_PER_CORE = 4096, 8192, 16
DLA_TYPES = frozenset(("FLOAT", "FLOAT16", "INT8"))  # FLOAT built as FP16
ACTIVATIONS = {"Relu", "Sigmoid", "Tanh", "Clip"}
ELEMENTWISE = {"Add", "Sub", "Mul", "Max", "Min", "Sum"}
FREE = {"Constant", "Identity"}  # no layer of their own


@lru_cache(maxsize=1)
def dla_table() -> dict[str, Any]:
    return json.loads((DATA_DIR / "tensorrt_dla.json").read_text())


class _FixedScope(Scope):
    """The top-level graph's tensors with the shapes inferred from the build's fixed input shapes."""

    def __init__(self, graph: Graph, shapes: dict[str, tuple[Any, ...]]) -> None:
        super().__init__(graph, None)
        self.fixed = shapes

    def shape(self, t: str) -> tuple[Any, ...] | None:
        return self.fixed.get(t) or super().shape(t)


#: the last two (graph, input shapes) -> inferred shapes: ``sglens gains`` partitions one graph once per row
_FIXED: list[tuple[Graph, tuple, dict[str, tuple[Any, ...]]]] = []


def fixed_shapes(graph: Graph, inputs: dict[str, tuple[int, ...]]) -> dict[str, tuple[Any, ...]]:
    """Every tensor's shape once ``inputs`` fix the network inputs' dimensions: ONNX shape inference
    (with data propagation, so Shape -> Reshape chains resolve) over the exported graph."""
    key = tuple(sorted(inputs.items()))
    for known, known_key, shapes in _FIXED:
        if known is graph and known_key == key:
            return shapes
    shapes = _infer_fixed(graph, inputs)
    _FIXED.insert(0, (graph, key, shapes))
    del _FIXED[2:]
    return shapes


def _infer_fixed(graph: Graph, inputs: dict[str, tuple[int, ...]]) -> dict[str, tuple[Any, ...]]:
    import onnx

    from ..errors import BackendOptionError
    from ..onnx_io import to_model_proto
    unknown = sorted(set(inputs) - set(graph.inputs))
    if unknown:
        raise BackendOptionError(f"backend 'tensorrt': trt_input_shapes names {', '.join(map(repr, unknown))}, not a "
                                 f"network input; the inputs are {', '.join(graph.inputs) or 'none'}")
    proto = to_model_proto(graph)
    for value in proto.graph.input:
        if value.name not in inputs:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(inputs[value.name]):
            raise BackendOptionError(f"backend 'tensorrt': trt_input_shapes gives '{value.name}' "
                                     f"{len(inputs[value.name])} dimensions; the input has {len(dims)}")
        value.type.tensor_type.shape.Clear()
        for d in inputs[value.name]:
            value.type.tensor_type.shape.dim.add().dim_value = d
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx's inference errors have no common base
        raise BackendOptionError(f"backend 'tensorrt': ONNX shape inference with trt_input_shapes failed: {exc}")
    out: dict[str, tuple[Any, ...]] = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if value.type.tensor_type.HasField("shape"):
            out[value.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                    for d in value.type.tensor_type.shape.dim)
    return out


def matrix_of(version: str) -> dict[str, dict[str, str]]:
    """The Orin operator matrix at the commit written for ``version`` (8.5: JetPack 5.1.1's; later: JetPack 6's)."""
    table = dla_table()
    key = table["matrix_of_release"].get(version, table["matrix_of_release"]["10.1"])
    return table["orin_matrices"][key]


def _native(support: str, version: str) -> bool:
    """The matrix cell says the op runs on the DLA through this TensorRT release: "Native", or "Native
    (as of TensorRT 8.6.12)" from 10.0 on (a later 8.6 patch than the 8.6 GA parser)."""
    return support == "Native" or (support.startswith("Native (as of TensorRT 8.6") and not version.startswith("8."))


def dla_release_changes(version: str) -> dict[str, Any]:
    """Which ops the Orin matrix lets onto the DLA in ``version`` and not in the release before, and back."""
    from .table import available_versions
    versions = available_versions()
    index = versions.index(version) if version in versions else len(versions) - 1
    if index == 0:
        return {"previous": None, "now_on_dla": [], "no_longer_on_dla": []}

    def native(v: str) -> set[str]:
        return {op for op, e in matrix_of(v).items() if _native(e["support"], v)}
    before, after = native(versions[index - 1]), native(versions[index])
    return {"previous": versions[index - 1], "now_on_dla": sorted(after - before),
            "no_longer_on_dla": sorted(before - after)}


def _pair(values: Any, default: int) -> list[int]:
    return [int(v) for v in values] if values else [default, default]


class DLARules(TRTRules):
    """``TRTRules`` for the DLA: a parser refusal stays a refusal; a DLA refusal is a GPU fallback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        table = dla_table()
        self.dla_cites: dict[str, str] = table["releases"].get(self.version, table["releases"]["10.1"])
        self.general_cite = table["general_cite"]
        self.layers_cite = table["layers_cite"]
        #: NVIDIA/Deep-Learning-Accelerator-SW's Orin operator matrix of this release: op -> {"support", "cite"}
        self.matrix: dict[str, dict[str, str]] = matrix_of(self.version)
        #: node -> reason, for the nodes the parser imports and the DLA refuses (they run on the GPU)
        self.gpu_fallback: dict[str, str] = {}
        self.dynamic_inputs: dict[str, list[Any]] = {}

    def compat(self, graph: Graph) -> dict[str, str]:
        out = super().compat(graph)
        self.gpu_fallback = {}
        scope = _FixedScope(graph, fixed_shapes(graph, self.input_shapes)) if self.input_shapes else Scope(graph, None)
        #: network inputs with dynamic dimensions: on the DLA every layer they reach falls back
        self.dynamic_inputs = {t: list(shape) for t in graph.inputs
                               if (shape := scope.shape(t)) is not None and not all(isinstance(d, int) for d in shape)}
        for node in graph.nodes:
            if node.name in out or node.op_type in FREE or node.op_type in self.assume_supported or \
                    node.name in self.assume_nodes:
                continue
            verdict = self.dla_check(scope, node)
            if verdict:
                reason = f"GPU fallback: {verdict[0]}"
                out[node.name], self.cites[node.name] = reason, verdict[1]
                self.gpu_fallback[node.name] = reason
        return out

    def cite(self, name: str) -> str | None:
        cite = self.cites.get(name)
        return cite if cite is None or cite.startswith(("NVIDIA/", "https://")) else super().cite(name)

    # ------------------------------------------------------------------ one node --
    def dla_check(self, scope: Scope, node: Node) -> tuple[str, str] | None:
        """Why ``node``'s layer cannot run on the DLA (reason, citation), or None."""
        verdict = self._general(scope, node)
        if verdict:
            return verdict
        op = node.op_type
        entry = self.matrix.get(op)
        if entry is not None:  # the Orin operator matrix decides which ops run on the DLA at all
            support = entry["support"]
            native = _native(support, self.version)
            if support.startswith("Can be inferred"):
                return None  # folded at build time (Shape, ConstantOfShape)
            if not native:
                return (f"{op}: Orin DLA support through TensorRT is '{support}' (runs on the GPU)", entry["cite"])
            check = _PARAMETERS.get(op)
            return check(self, scope, node) if check is not None else None
        check = _LAYERS.get(op)
        if check is None:
            return f"{op}: no DLA layer for it in TensorRT {self.version} (runs on the GPU)", self.layers_cite
        return check(self, scope, node)

    def c(self, rule: str) -> str:
        return self.dla_cites.get(rule, self.layers_cite)

    def _general(self, scope: Scope, node: Node) -> tuple[str, str] | None:
        for t in (*node.inputs, *node.outputs):
            if not t or scope.weights_value(t) is not False:
                continue  # weights are not DLA tensors
            dtype = self._dtype(scope, t)
            if dtype is not None and dtype not in DLA_TYPES:
                return f"{node.op_type}: tensor '{t}' is {dtype}; the DLA runs FP16 and INT8 only", self.general_cite
            shape = scope.shape(t)
            if shape is None:
                continue
            if not all(isinstance(d, int) for d in shape):
                return (f"{node.op_type}: tensor '{t}' has dynamic dimensions {list(shape)}; the DLA needs static "
                        "ones", self.general_cite)
            batch = 1
            for d in shape[:-3]:
                batch *= d
            if batch > MAX_BATCH or any(d > MAX_DIM for d in shape[-3:]):
                return (f"{node.op_type}: tensor '{t}' {list(shape)} exceeds the DLA's batch {MAX_BATCH} or "
                        f"non-batch dimension {MAX_DIM}", self.general_cite)
        return None


def _rank(scope: Scope, node: Node) -> int | None:
    shape = scope.shape(node.inputs[0]) if node.inputs and node.inputs[0] else None
    return len(shape) if shape is not None else None


def _in_range(name: str, values: list[int], lo: int, hi: int) -> str | None:
    bad = [v for v in values if not lo <= v <= hi]
    return f"{name} {values} outside [{lo}, {hi}]" if bad else None


def _conv(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    a, op = node.attrs, node.op_type
    weights = scope.shape(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    kernel = list(a.get("kernel_shape") or (weights[2:] if weights else []))
    if kernel and len(kernel) != 2:
        return f"{op}: {len(kernel)}-D kernel; the DLA takes 2-D only", rules.c("conv_kernel")
    checks = [("conv_kernel", _in_range("kernel", kernel, 1, 32)),
              ("conv_stride", _in_range("stride", _pair(a.get("strides"), 1), 1, 8)),
              ("conv_padding", _in_range("padding", [int(p) for p in a.get("pads") or []], 0, 31)),
              ("conv_dilation", _in_range("dilation", _pair(a.get("dilations"), 1), 1, 32)),
              ("conv_groups", _in_range("groups", [int(a.get("group", 1))], 1, 8192))]
    if weights and isinstance(weights[0], int):
        checks.append(("conv_maps", _in_range("output maps", [weights[0]], 1, 8192)))
    if kernel and any(p >= k for p, k in zip([int(p) for p in a.get("pads") or []], kernel * 2)):
        checks.append(("conv_padding", f"padding {list(a['pads'])} not less than the kernel {kernel}"))
    return _first(rules, op, checks)


def _deconv(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    a, op = node.attrs, node.op_type
    weights = scope.shape(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    kernel = list(a.get("kernel_shape") or (weights[2:] if weights else []))

    def wide(values: list[int]) -> bool:  # [1,32], or 64/96/128 in one dimension and 1 in the other
        return all(1 <= v <= 32 for v in values) or (sorted(values)[0] == 1 and max(values) in (64, 96, 128))
    checks = [("deconv_kernel", None if not kernel or (len(kernel) == 2 and wide(kernel)) else f"kernel {kernel}"),
              ("deconv_stride", None if wide(_pair(a.get("strides"), 1)) else f"stride {list(a['strides'])}"),
              ("deconv_padding", None if not any(a.get("pads") or []) else f"padding {list(a['pads'])} (must be 0)"),
              ("deconv_groups", None if int(a.get("group", 1)) == 1 else f"groups {a['group']} (must be 1)")]
    return _first(rules, op, checks)


def _pool(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    a, op = node.attrs, node.op_type
    if op.startswith("Global"):
        shape = scope.shape(node.inputs[0])
        window = list(shape[2:]) if shape is not None else []
        strides, pads = [1, 1], []
    else:
        window, strides, pads = list(a.get("kernel_shape") or []), _pair(a.get("strides"), 1), list(a.get("pads") or [])
    if window and len(window) != 2:
        return f"{op}: {len(window)}-D window; the DLA pools 2-D only", rules.c("pool_window")
    checks = [("pool_window", _in_range("window", [w for w in window if isinstance(w, int)], 1, 8)),
              ("pool_stride", _in_range("stride", strides, 1, 16)),
              ("pool_padding", _in_range("padding", [int(p) for p in pads], 0, 7))]
    return _first(rules, op, checks)


def _activation(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    if node.op_type not in ACTIVATIONS:
        return (f"{node.op_type}: not one of the DLA's activations (ReLU, Sigmoid, TanH, Clip)",
                rules.c("activation"))
    return None


def _unary(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    if node.op_type != "Abs":
        return f"{node.op_type}: the DLA runs only the Abs unary operation", rules.c("unary")
    return None


def _concat(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    rank = _rank(scope, node)
    axis = int(node.attrs.get("axis", 0))
    if rank is not None and axis % rank != rank - 3:
        return f"Concat: axis {axis} of a rank-{rank} tensor; the DLA concatenates along C (third to last) only", \
            rules.c("concat_axis")
    return None


def _softmax(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    shape = scope.shape(node.inputs[0])
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    axis = int(node.attrs.get("axis", -1)) % len(shape)
    if len(shape) >= 4 and axis < len(shape) - 3:
        return f"Softmax: axis {axis} is a batch axis; the DLA takes channel or spatial axes", rules.c("softmax_axis")
    others = [d for i, d in enumerate(shape) if i != axis and i >= len(shape) - 3]
    limit = 8192 if all(d == 1 for d in others) else 1024
    if shape[axis] > limit:
        return f"Softmax: axis size {shape[axis]} > {limit}", rules.c("softmax_size")
    return None


def _slice(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    rank = _rank(scope, node)
    if rank is not None and rank != 4:
        return f"Slice: input of rank {rank}; the DLA slices 4-D tensors only", rules.c("slice_rank")
    for index, rule in ((1, "slice_strides"), (2, "slice_strides"), (3, "slice_first"), (4, "slice_strides")):
        if index < len(node.inputs) and node.inputs[index] and scope.weights_value(node.inputs[index]) is False:
            return f"Slice: input {index} is computed; the DLA needs build-time constants", rules.c(rule)
    axes = scope.weights_value(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    if axes is not None and axes is not False and rank and any(int(x) % rank == 0 for x in list(axes.reshape(-1))):
        return "Slice: slices the first dimension; the DLA does not", rules.c("slice_first")
    steps = scope.weights_value(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else None
    if steps is not None and steps is not False and any(int(x) != 1 for x in list(steps.reshape(-1))):
        return "Slice: steps other than 1; the DLA slices with stride 1 only", rules.c("slice_strides")
    return None


def _prelu(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    if len(node.inputs) > 1 and scope.weights_value(node.inputs[1]) is False:
        return "PRelu: the slopes are computed; the DLA needs them as build-time constants", rules.c("prelu_slopes")
    return None


def _resize(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    index = 1 if node.op_type == "Upsample" or (scope.opset or 99) < 11 else 2
    value = scope.weights_value(node.inputs[index]) if len(node.inputs) > index and node.inputs[index] else None
    if value is None or value is False or getattr(value, "size", 0) == 0:
        return f"{node.op_type}: the DLA needs constant scales (sizes or computed scales are not checked)", \
            rules.c("resize_scales")
    scales = [float(v) for v in value.reshape(-1)]
    mode = _text(node.attrs.get("mode", "nearest"))
    combination = _resize_combination(scope, node, mode)
    if combination is not None:
        return combination, rules.c("resize_modes")
    top = 4 if mode in ("linear", "bilinear") else 32
    if len(scales) != 4 or scales[:2] != [1.0, 1.0]:
        return f"{node.op_type}: scales {scales}; the DLA takes 4 scales with batch and channel 1", \
            rules.c("resize_scales")
    if any(s != int(s) or not 1 <= s <= top for s in scales[2:]):
        return f"{node.op_type}: scales {scales[2:]} must be integers in [1, {top}] in {mode} mode", \
            rules.c("resize_range")
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _resize_combination(scope: Scope, node: Node, mode: str) -> str | None:
    """The parser's (coordinate transformation, selector, rounding) for the node, if the DLA does not take it.

    The parser's mapping (every release alike, e.g. onnx-tensorrt 8.5-GA builtin_op_importers.cpp:3713-3816,
    10.1-GA onnxOpImporters.cpp:4429-4576): opset < 11 and Upsample -> asymmetric, nearest rounding floor;
    else coordinate_transformation_mode half_pixel/asymmetric/align_corners as named, pytorch_half_pixel ->
    half_pixel with the kUPPER selector, tf_half_pixel_for_nn -> half_pixel rounding ceil; nearest_mode
    floor/ceil/round_prefer_floor (kHALF_DOWN)/round_prefer_ceil (kHALF_UP). The DLA takes, in nearest mode,
    (asymmetric, formula, floor), (half_pixel, formula, half down) and (half_pixel, formula, half up); in
    linear mode (half_pixel, formula or upper) -- IResizeLayer's note in NvInfer.h.
    """
    if node.op_type == "Upsample" or (scope.opset or 99) < 11:
        transform, selector, rounding = "asymmetric", "formula", "floor"
    else:
        transform = _text(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
        nearest = _text(node.attrs.get("nearest_mode", "round_prefer_floor"))
        rounding = {"floor": "floor", "ceil": "ceil", "round_prefer_floor": "half down",
                    "round_prefer_ceil": "half up"}.get(nearest, "half down")
        selector = "upper" if transform == "pytorch_half_pixel" else "formula"
        if transform == "tf_half_pixel_for_nn":
            transform, rounding = "half_pixel", "ceil"
        elif transform == "pytorch_half_pixel":
            transform = "half_pixel"
    if mode == "nearest":
        ok = (transform, selector, rounding) in {("asymmetric", "formula", "floor"),
                                                 ("half_pixel", "formula", "half down"),
                                                 ("half_pixel", "formula", "half up")}
        what = f"({transform}, {selector}, rounding {rounding})"
    elif mode in ("linear", "bilinear"):
        ok, what = transform == "half_pixel", f"({transform}, {selector})"
    else:
        return f"{node.op_type}: {mode} mode; the DLA resizes in nearest and linear modes only"
    return None if ok else (f"{node.op_type}: {mode} mode with {what}; the DLA takes only the combinations "
                            "its IResizeLayer note lists")


def _lrn(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    size = int(node.attrs.get("size", 0))
    return None if size in (3, 5, 7, 9) else (f"LRN: size {size}; the DLA takes 3, 5, 7 or 9", rules.c("lrn_window"))


def _elementwise(rules: DLARules, scope: Scope, node: Node) -> tuple[str, str] | None:
    if node.op_type not in ELEMENTWISE:
        return (f"{node.op_type}: the DLA's element-wise layer takes only Sum, Prod, Max, Min and Sub",
                rules.c("elementwise_ops"))
    return None


def _ok(rules: DLARules, scope: Scope, node: Node) -> None:
    return None


def _first(rules: DLARules, op: str, checks: list[tuple[str, str | None]]) -> tuple[str, str] | None:
    for rule, problem in checks:
        if problem:
            return f"{op}: {problem} (DLA limit)", rules.c(rule)
    return None


Check = Callable[[DLARules, Scope, Node], "tuple[str, str] | None"]
_LAYERS: dict[str, Check] = {
    "Conv": _conv, "ConvTranspose": _deconv,
    "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _pool, "GlobalMaxPool": _pool,
    **{op: _activation for op in ("Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
                                  "Softplus", "Softsign", "ThresholdedRelu")},
    **{op: _unary for op in ("Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Floor", "Ceil",
                             "Erf", "Not")},
    **{op: _elementwise for op in ("Add", "Sub", "Mul", "Max", "Min", "Sum", "Div", "Pow", "Equal", "Greater",
                                   "Less")},
    "Concat": _concat, "Softmax": _softmax, "Slice": _slice, "PRelu": _prelu, "Resize": _resize,
    "Upsample": _resize, "LRN": _lrn, "BatchNormalization": _ok,
}


#: the layer limits (NvInfer.h) checked for ops the Orin matrix calls native
_PARAMETERS: dict[str, Check] = {
    "Conv": _conv, "ConvTranspose": _deconv, "MaxPool": _pool, "AveragePool": _pool, "GlobalMaxPool": _pool,
    "Concat": _concat, "Softmax": _softmax, "Slice": _slice, "PRelu": _prelu, "Resize": _resize,
    "Upsample": _resize, "LRN": _lrn, "MatMul": lambda r, s, n: _constant_weights(r, s, n, 1),
    "Gemm": lambda r, s, n: _constant_weights(r, s, n, 1),
}


def _constant_weights(rules: DLARules, scope: Scope, node: Node, index: int) -> tuple[str, str] | None:
    """MatMul/Gemm run on the DLA as a fully connected layer: the weights must be constant."""
    if len(node.inputs) > index and scope.weights_value(node.inputs[index]) is False:
        entry = rules.matrix.get(node.op_type, {})
        return (f"{node.op_type}: input {index} is computed; on the DLA it must be constant weights",
                entry.get("cite", rules.layers_cite))
    return None


def loadable_report(rules: DLARules, loadables: int) -> dict[str, Any]:
    """The DLA part of the partition summary: loadables against the per-core limit, the GPU fallbacks."""
    error = None
    if loadables > LOADABLES_PER_CORE:
        error = (f"{loadables} DLA loadables; at most {LOADABLES_PER_CORE} can be loaded per DLA core "
                 f"({rules.general_cite}): the build fails -- let fewer layers fall back, or support the ops that "
                 "split the DLA regions (see the ranking)")
    fallback = rules.gpu_fallback
    dynamic = sum("dynamic dimensions" in why for why in fallback.values())
    advice = None
    if rules.dynamic_inputs:
        shown = "; ".join(f"{t} {shape}" for t, shape in list(rules.dynamic_inputs.items())[:4])
        advice = (f"the network inputs have dynamic dimensions ({shown}): {dynamic} node(s) fall back to the GPU for "
                  "that alone. The DLA builds one shape (the optimization profile's min = opt = max): fix the input "
                  "shapes in the model (e.g. onnxruntime's make_dynamic_shape_fixed, or polygraphy surgeon sanitize "
                  "--override-input-shapes) and partition again")
    return {"dynamic_inputs": dict(list(rules.dynamic_inputs.items())[:20]), "dynamic_fallback_count": dynamic,
            "dynamic_advice": advice,"loadables": loadables, "loadables_per_core": LOADABLES_PER_CORE, "error": error,
            "gpu_fallback_count": len(fallback), "gpu_fallback": dict(list(fallback.items())[:2000]),
            "gpu_fallback_cite": rules.dla_cites.get("gpu_fallback"),
            "release_changes": dla_release_changes(rules.version)}
