"""What a run feeds the model: per graph input a shape, a dtype and how to fill it.

A real model declares symbolic dims (``batch``, ``height``, ``sequence``); forcing
them to 1 made YOLO and VAD runs fail and ran OCR on a 1x1 image. A run therefore
takes an ``InputSpec`` per input: the concrete shape, the dtype (the model's; shown,
not chosen) and the values: seeded uniform random in a range the user sets, zeros,
ones, or an uploaded array. The specs, with the seed, are stored with the run, so
``materialize(graph, specs)`` gives the same arrays again and a run can be repeated
exactly.

``suggest_specs`` prefills the form: a shape the user entered before for this model
(``remembered``), then example shapes the model carries in its metadata (key
``sglens.input_shapes``: JSON ``{"input": [1, 3, 640, 640]}``, written by our sample
generator and accepted from any exporter that sets it), then a default from the dim's
name (batch-like names 1, sequence-like 128, spatial 224, a waveform's samples 16000),
else 1. ``check_specs`` validates everything before anything runs and ``check_with_inference`` asks ONNX
shape inference whether the model can take those shapes, so a wrong size is a message
naming the input rather than a runtime error from deep inside a kernel.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from partition.dtypes import to_numpy
from partition.ir import Graph, TensorInfo

from .run_errors import InputError

FILLS = ("random", "zeros", "ones", "file", "constant")
METADATA_KEY = "sglens.input_shapes"
#: Ultralytics exports (YOLOv8 and later) write the image size they were exported for as
#: ``imgsz`` (``[640, 640]``, or one number) and the batch as ``batch``: read like ours.
IMGSZ_KEY, BATCH_KEY = "imgsz", "batch"
#: Largest number of elements one input may have (a typo like 2240 instead of 224 on
#: four axes should be a message, not an allocation).
MAX_ELEMENTS = 1 << 28

_NAME_DEFAULTS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("batch", "batch_size", "n", "b", "bs", "num_images"), 1),
    (("seq", "sequence", "seq_len", "sequence_length", "seqlen", "length", "len", "t", "time",
      "tokens", "num_tokens", "past_sequence_length", "total_sequence_length"), 128),
    (("h", "w", "height", "width", "image_height", "image_width", "img_h", "img_w"), 224),
    # a waveform's length: one second at 16 kHz (HuBERT's `samples` at 1 made its first conv
    # refuse a window longer than the input)
    (("samples", "num_samples", "audio_length", "wav_len", "waveform_length"), 16000),
)


@dataclass
class InputSpec:
    """How one graph input is made; JSON-serialisable, stored with the run."""

    name: str
    shape: list[int]
    dtype: str
    fill: str = "random"
    low: float = -1.0
    high: float = 1.0
    seed: int = 0
    #: the value of every element when ``fill`` is "constant" (silero VAD's ``sr`` = 16000)
    value: float = 0.0
    #: symbolic dim names per axis (None for a fixed or unnamed axis), for display
    dim_names: list[str | None] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "InputSpec":
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise InputError("an input spec must be an object with a 'name'")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise InputError(f"input '{data['name']}': unknown field(s) {unknown}")
        try:
            spec = cls(**known)
            spec.shape = [int(d) for d in spec.shape]
            spec.low, spec.high, spec.seed = float(spec.low), float(spec.high), int(spec.seed)
            spec.value = float(spec.value)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input '{data['name']}': {exc}") from None
        return spec


def default_dim(dim_name: str | None, axis: int, info: TensorInfo) -> int:
    if dim_name:
        key = dim_name.strip().lower()
        for names, value in _NAME_DEFAULTS:   # exporters prefix and suffix the names they
            # share: optimum's `encoder_sequence_length`, `sequence_length_out`, `batch_size_0`
            if key in names or any(key.startswith(n + "_") or key.endswith("_" + n)
                                   for n in names if len(n) > 2):
                return value
    rank = len(info.shape or ())
    if rank == 4 and axis in (2, 3) and info.dtype in ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"):
        return 224  # NCHW image
    return 1


def _metadata_shapes(metadata: Mapping[str, str]) -> dict[str, list[int]]:
    raw = metadata.get(METADATA_KEY)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): [int(d) for d in v] for k, v in data.items()}
    except (ValueError, TypeError, AttributeError):
        return {}  # a broken hint is ignored, never fatal: it only prefills a form


def _imgsz_shape(metadata: Mapping[str, str], info: TensorInfo) -> list[int] | None:
    """An NCHW image input's shape from Ultralytics' ``imgsz`` (and ``batch``) metadata, or None.

    Ultralytics writes Python literals (``[640, 640]``); both that and JSON parse here. Only a
    rank-4 input whose channel axis is fixed takes it: the hint is about images."""
    raw = metadata.get(IMGSZ_KEY)
    declared = list(info.shape or ())
    if not raw or len(declared) != 4 or not (isinstance(declared[1], int) and declared[1] > 0):
        return None
    try:
        size = json.loads(str(raw).replace("(", "[").replace(")", "]"))
        hw = [int(size), int(size)] if isinstance(size, (int, float)) else [int(d) for d in size]
        batch = int(json.loads(metadata.get(BATCH_KEY) or "1"))
    except (ValueError, TypeError):
        return None
    if len(hw) != 2 or min(hw) <= 0 or batch <= 0:
        return None
    return [batch, declared[1], *hw]


def graph_inputs(graph: Graph) -> list[str]:
    return [n for n in graph.inputs if n not in graph.initializers]


def suggest_specs(graph: Graph, remembered: Mapping[str, Sequence[int]] | None = None,
                  seed: int = 0) -> list[InputSpec]:
    """One prefilled spec per graph input (see the module docstring for the order)."""
    remembered = remembered or {}
    examples = _metadata_shapes(graph.metadata)
    specs = []
    for name in graph_inputs(graph):
        info = graph.info(name)
        declared = list(info.shape or ())
        dim_names = [d if isinstance(d, str) else None for d in declared]
        shape = [d if isinstance(d, int) and d >= 0 else default_dim(n, i, info)
                 for i, (d, n) in enumerate(zip(declared, dim_names))]
        for source in (_imgsz_shape(graph.metadata, info), examples.get(name), remembered.get(name)):
            if source is not None and len(source) == len(declared):
                shape = [int(d) for d in source]
        low, high = (0.0, 4.0) if _is_integer(info.dtype) else (-1.0, 1.0)
        spec = InputSpec(name, shape, info.dtype or "FLOAT", low=low, high=high, seed=seed,
                         dim_names=dim_names)
        spec.fill, spec.value = _fill_by_name(name, info.dtype, shape) or (spec.fill, spec.value)
        specs.append(spec)
    fill_lengths(graph, specs)
    return specs


#: Name parts that make an integer input a length (onnx-asr's ``waveforms_lens``, NeMo's
#: ``length``, ``input_lengths``, ``seq_lens``).
_LENGTH_PARTS = frozenset({"len", "lens", "length", "lengths"})


def _reads_as_lengths(name: str) -> bool:
    return bool(_LENGTH_PARTS & set(re.split(r"[^a-z0-9]+", name.lower())))


def fill_lengths(graph: Graph, specs: Sequence[InputSpec], notes: list[str] | None = None,
                 only: set[str] | None = None) -> None:
    """An integer input of rank 0 or 1 whose name says it holds lengths, beside one float input
    of rank 2 or more that shares its batch axis, is filled with that input's length: the size
    of its first variable axis after the batch (random 0..3 told a speech front end its
    16,000 samples were 2 long, and every output came out the same whatever the samples).
    Left random where the partner is not clear; ``notes`` says what was filled. ``only``: the
    inputs that may be filled (the others were set by the user)."""
    for spec in specs:
        allowed = spec.fill == "random" if only is None else spec.name in only
        if not (allowed and _is_integer(spec.dtype) and len(spec.shape) <= 1 and _reads_as_lengths(spec.name)):
            continue
        found = _length_of(graph, spec, specs)
        if found is None:
            continue
        partner, axis = found
        spec.fill, spec.value = "constant", float(partner.shape[axis])
        if notes is not None:
            notes.append(f"input '{spec.name}': {partner.shape[axis]}, the size of '{partner.name}' "
                         f"axis {axis}, as it reads as lengths (set with --const {spec.name}=VALUE)")


def length_links(graph: Graph, specs: Sequence[InputSpec]) -> dict[str, dict[str, Any]]:
    """Each input filled as lengths -> the input and axis it measures (``{"input", "axis"}``):
    the web form keeps the lengths in step with that axis until the user sets them."""
    links = {}
    for spec in specs:
        if spec.fill == "constant" and _is_integer(spec.dtype) and len(spec.shape) <= 1 \
                and _reads_as_lengths(spec.name):
            found = _length_of(graph, spec, specs)
            if found is not None and float(found[0].shape[found[1]]) == spec.value:
                links[spec.name] = {"input": found[0].name, "axis": found[1]}
    return links


def _length_of(graph: Graph, spec: InputSpec, specs: Sequence[InputSpec]) -> tuple[InputSpec, int] | None:
    """The input ``spec`` gives the lengths of, and the axis: one float input of rank 2 or more
    with the same batch size, the one whose name starts like ``spec``'s where several are."""
    batch = spec.shape[0] if spec.shape else 1
    candidates = [s for s in specs if s is not spec and len(s.shape) >= 2 and s.shape[0] == batch
                  and not _is_integer(s.dtype) and s.dtype != "BOOL"]
    stem = re.split(r"[^a-z0-9]+", spec.name.lower())[0]
    named = [s for s in candidates if s.name.lower().startswith(stem)] if stem else []
    chosen = named if len(named) == 1 else candidates
    if len(chosen) != 1:
        return None
    partner = chosen[0]
    declared = list(graph.info(partner.name).shape or ())
    variable = [a for a in range(1, len(partner.shape))
                if a >= len(declared) or not (isinstance(declared[a], int) and declared[a] >= 0)]
    return (partner, variable[0]) if variable else None


#: An integer scalar input by one of these names is a sample rate (silero VAD's ``sr``).
_SAMPLE_RATE_NAMES = frozenset({"sr", "sample_rate", "sampling_rate", "samplerate", "rate"})


def _fill_by_name(name: str, dtype: str | None, shape: Sequence[int]) -> tuple[str, float] | None:
    """Integer inputs whose name says what their values mean, where random 0..3 is wrong:
    a sample rate (silero VAD's ``sr``: no branch of the model takes 0..3) is 16000; an
    attention mask is all ones (no padding: random values 2 and 3 make an exporter's
    ``(1 - mask) * min`` a huge positive bias); token type / segment ids are zeros (BERT's
    table has 2 rows: 2 and 3 are out of range, and onnxruntime refused the run)."""
    if not (_is_integer(dtype) or dtype == "BOOL"):
        return None
    key = name.strip().lower()
    if key in _SAMPLE_RATE_NAMES and math.prod(shape) == 1 and dtype != "BOOL":
        return "constant", 16000.0
    if "mask" in key:
        return "ones", 0.0
    if "token_type" in key or key in ("segment_ids", "type_ids", "token_types"):
        return "zeros", 0.0
    return None


def _is_integer(dtype: str | None) -> bool:
    return bool(dtype) and dtype.startswith(("INT", "UINT"))


def check_specs(graph: Graph, specs: Sequence[InputSpec], files: Mapping[str, np.ndarray]) -> None:
    """Every input given once, shapes as declared, sizes sane, fills known: before anything runs."""
    wanted = graph_inputs(graph)
    names = [s.name for s in specs]
    for problem, which in (("missing", [n for n in wanted if n not in names]),
                           ("not graph inputs", [n for n in names if n not in wanted]),
                           ("given twice", sorted({n for n in names if names.count(n) > 1}))):
        if which:
            raise InputError(f"inputs {problem}: {which}; the model's inputs are {wanted}")
    for spec in specs:
        _check_one(graph.info(spec.name), spec, files)


def _check_one(info: TensorInfo, spec: InputSpec, files: Mapping[str, np.ndarray]) -> None:
    label = f"input '{spec.name}'"
    if spec.fill not in FILLS:
        raise InputError(f"{label}: fill {spec.fill!r} is not one of {list(FILLS)}")
    if spec.fill == "file":
        if spec.name not in files:
            raise InputError(f"{label}: fill 'file' but no array was uploaded for it")
        spec.shape = list(np.shape(files[spec.name]))
    if spec.fill == "constant" and not np.isfinite(spec.value):
        raise InputError(f"{label}: the constant value must be a finite number (got {spec.value})")
    if spec.fill == "random" and not spec.low < spec.high:
        raise InputError(f"{label}: the random range needs low < high (got {spec.low} .. {spec.high})")
    declared = info.shape
    if declared is not None:
        if len(spec.shape) != len(declared):
            raise InputError(f"{label}: shape {spec.shape} has rank {len(spec.shape)}; the model "
                             f"declares rank {len(declared)} {_show(declared)}")
        for axis, (want, got) in enumerate(zip(declared, spec.shape)):
            if isinstance(want, int) and want >= 0 and want != got:
                raise InputError(f"{label}: size {got} on axis {axis}, but the model fixes it to "
                                 f"{want} {_show(declared)}")
    if any(d < 0 for d in spec.shape):
        raise InputError(f"{label}: shape {spec.shape} has a negative size")
    if int(np.prod(spec.shape, dtype=np.int64)) > MAX_ELEMENTS:
        raise InputError(f"{label}: shape {spec.shape} has more than {MAX_ELEMENTS:,} elements")
    if info.dtype and spec.dtype != info.dtype:
        raise InputError(f"{label}: dtype {spec.dtype} given, the model declares {info.dtype}")


def _show(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def materialize(graph: Graph, specs: Sequence[InputSpec],
                files: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The arrays the specs describe (checked first); same specs, same arrays."""
    files = dict(files or {})
    check_specs(graph, specs, files)
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        try:
            dtype = to_numpy(spec.dtype)
        except KeyError:
            raise InputError(f"input '{spec.name}': dtype {spec.dtype} cannot be generated; "
                             "upload its values instead") from None
        feeds[spec.name] = _fill(spec, dtype, files.get(spec.name))
    return feeds


def _fill(spec: InputSpec, dtype: np.dtype, uploaded: np.ndarray | None) -> np.ndarray:
    shape = tuple(spec.shape)
    if spec.fill == "zeros":
        return np.zeros(shape, dtype)
    if spec.fill == "ones":
        return np.ones(shape, dtype)
    if spec.fill == "constant":
        return np.full(shape, spec.value, dtype)
    if spec.fill == "file":
        value = np.asarray(uploaded)
        if value.dtype != dtype and not np.can_cast(value.dtype, dtype, "safe"):
            raise InputError(f"input '{spec.name}': uploaded dtype {value.dtype} cannot be cast "
                             f"losslessly to the model's {dtype}")
        # Arrays that crossed to a Dask worker lie in its receive buffers, possibly unaligned (their
        # buffer format is then '=f', which the compiled kernels refuse): an aligned C copy then.
        return np.require(value.astype(dtype, copy=False), requirements=("C_CONTIGUOUS", "ALIGNED"))
    # One stream per input from one seed, independent of the order the inputs are listed in.
    rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode("utf-8"))])
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)  # a 0-d comparison gives a numpy scalar, not an array
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(np.ceil(spec.low)), int(np.ceil(spec.high)), size=shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.uniform(spec.low, spec.high, shape) + 1j * rng.uniform(spec.low, spec.high, shape)).astype(dtype)
    return rng.uniform(spec.low, spec.high, shape).astype(dtype)


def check_with_inference(model: Any, feeds: Mapping[str, np.ndarray]) -> None:
    """Ask ONNX shape inference (strict) whether the model takes these input shapes."""
    import onnx

    from partition.local_functions import expanded_size
    if getattr(model, "functions", None) and not expanded_size(model):  # onnx would walk every call path
        return
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in feeds and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape
            del dims.dim[:]
            for d in np.shape(feeds[vi.name]):
                dims.dim.add().dim_value = int(d)
    # A negative size is an exporter's "unknown" (Paddle writes -1 for the batch, and onnxruntime's
    # quantizer copies it into every tensor it annotates): unknown it is, or strict inference
    # refuses every real batch size against it.
    for vi in (*m.graph.value_info, *m.graph.output):
        for d in vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ():
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
    try:
        # No data_prop: it materialises ConstantOfShape values, so a 130-byte model asking for a
        # 1.3 GB constant made this check itself exhaust memory (std::bad_alloc, or the OOM killer).
        onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as exc:
        if _ELEM_TYPE.search(str(exc)):
            # An annotation's element type, not a size: onnxruntime's float16 converter leaves
            # float16 on tensors that its blocked ops keep in float32 (a float16 silero-VAD was
            # refused here while onnxruntime runs it); no input shape causes it or cures it.
            return
        if _has_op(m.graph, "STFT"):
            # ONNX infers an STFT's output from a [batch, samples, 1] signal; given the [batch,
            # samples] that onnxruntime also takes as real, it counts a two-sided spectrum (400
            # bins for a 400-point window, not 201), and the next MatMul "cannot" take it: onnx-asr's
            # kaldi, NeMo and GigaAM preprocessors were refused here while onnxruntime runs them.
            # Not the sizes' fault: a size such a model cannot take fails its run, naming the node.
            return
        raise InputError(plain_inference_error(str(exc))) from None
    except Exception:  # noqa: BLE001  inference gaps (custom domains, huge models) are not the user's fault
        return


def _has_op(graph: Any, op_type: str) -> bool:
    """Whether ``op_type`` is a node of ``graph`` (a GraphProto) or of a body inside it."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            if node.op_type == op_type:
                return True
            stack.extend(a.g for a in node.attribute if a.HasField("g"))
            stack.extend(sub for a in node.attribute for sub in a.graphs)
    return False


_ELEM_TYPE = re.compile(r"elem type differs|elem_type differs")
_NODE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\)")
_DIFFER = (re.compile(r"Inferred shape and existing shape differ in dimension (\d+): \((\d+)\) vs \((\d+)\)"),
           re.compile(r"Inferred=(\d+) Declared=(\d+) Dimension=(\d+)"))
_PHRASES = (("Incompatible dimensions for matrix multiplication",
             "gets two inputs whose inner sizes do not match for a matrix product"),
            ("Incompatible dimensions", "gets inputs whose sizes cannot be broadcast together"))


def plain_inference_error(message: str) -> str:
    """ONNX shape inference's refusal in plain words: which node, what does not fit, what to do.
    The raw text ("Can't merge shape info ...") follows in brackets for whoever wants it."""
    raw = " ".join(message.split())[:400]
    node = _NODE.search(raw)
    where = f"node '{node.group(2).strip()}' ({node.group(1).strip()})" if node else "a node"
    what = None
    m = _DIFFER[0].search(raw)
    if m:
        what = f"would make axis {m.group(1)} of its output {m.group(2)} long where the model declares {m.group(3)}"
    m = _DIFFER[1].search(raw)
    if what is None and m:
        what = f"would make axis {m.group(3)} of its output {m.group(1)} long where the model declares {m.group(2)}"
    if what is None:
        what = next((text for key, text in _PHRASES if key in raw), None)
    if what is None:
        return f"the model cannot take these input shapes (ONNX shape inference: {raw})"
    return (f"the model cannot take these input shapes: with them, {where} {what}. Use the sizes the model "
            f"was exported for (the prefilled shape, or the sizes its layers expect) "
            f"[ONNX shape inference: {raw}]")


def parse_shape(text: str) -> tuple[str, list[int]]:
    """``images=1x3x640x640`` (or ``1,3,640,640``; ``scalar=`` for rank 0) -> name and dims."""
    name, sep, dims = text.partition("=")
    if not sep or not name.strip():
        raise InputError(f"--shape {text!r}: expected INPUT=DIMS, e.g. --shape images=1x3x640x640")
    parts = [p for p in dims.replace(",", "x").split("x") if p.strip()]
    try:
        shape = [int(p) for p in parts]
    except ValueError:
        raise InputError(f"--shape {text!r}: dims must be integers separated by x") from None
    return name.strip(), shape


def parse_constant(text: str) -> tuple[str, float]:
    """``sr=16000`` -> ("sr", 16000.0): one input fed a constant."""
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not name.strip() or not np.isfinite(number):
        raise InputError(f"--const {text!r}: expected INPUT=NUMBER, e.g. --const sr=16000")
    return name.strip(), number


def specs_from_options(graph: Graph, *, dims: Mapping[str, int] | None = None,
                       shapes: Mapping[str, Sequence[int]] | None = None, fill: str = "random",
                       value_range: tuple[float, float] | None = None, seed: int = 0,
                       constants: Mapping[str, float] | None = None,
                       notes: list[str] | None = None) -> list[InputSpec]:
    """Specs from command-line style options on top of ``suggest_specs``.

    ``dims`` sets symbolic dims by name (``--dim batch=4``), ``shapes`` whole inputs
    (``--shape images=1x3x640x640``), ``constants`` an input's every value
    (``--const sr=8000``). Every axis that kept a suggested size is listed in ``notes`` so
    the user sees what was assumed and how to change it, and so is a length filled from
    another input's size (``fill_lengths``).
    """
    dims, shapes, constants = dict(dims or {}), dict(shapes or {}), dict(constants or {})
    for option, names in (("--shape", shapes), ("--const", constants)):
        unknown = sorted(set(names) - set(graph_inputs(graph)))
        if unknown:
            raise InputError(f"{option} names {unknown}, which are not graph inputs; the inputs are "
                             f"{graph_inputs(graph)}")
    specs = suggest_specs(graph, seed=seed)
    # lengths prefilled from the suggested shapes: made again from the final ones below
    by_length = {s.name for s in specs if s.fill == "constant" and _reads_as_lengths(s.name)
                 and s.name not in constants} if fill == "random" else set()
    named = {d for spec in specs for d in spec.dim_names if d}
    stray = sorted(set(dims) - named)
    if stray:   # a mistyped --dim once left the axis at its guess without a word
        raise InputError(f"--dim names {stray}, which no graph input has as a symbolic axis; "
                         + (f"the symbolic axes are {sorted(named)}" if named else "no input has a named axis")
                         + " (or set a whole input with --shape INPUT=DIMS)")
    for spec in specs:
        if spec.name in constants:
            spec.fill, spec.value = "constant", float(constants[spec.name])
        elif fill != "random" or spec.fill == "random":
            spec.fill = fill   # an explicit --fill wins; by default a name's prefill stays
        elif notes is not None and spec.name not in by_length:
            what = f"the constant {spec.value:g}" if spec.fill == "constant" else spec.fill
            notes.append(f"input '{spec.name}': {what}, by its name (set with --const "
                         f"{spec.name}=VALUE or --fill)")
        if value_range is not None:
            spec.low, spec.high = value_range
        if spec.name in shapes:
            spec.shape = [int(d) for d in shapes[spec.name]]
            continue
        guessed = []
        for axis, dim_name in enumerate(spec.dim_names):
            declared = (graph.info(spec.name).shape or ())[axis]
            if isinstance(declared, int) and declared >= 0:
                continue
            if dim_name and dim_name in dims:
                spec.shape[axis] = int(dims[dim_name])
            else:
                guessed.append(f"{dim_name or f'axis {axis}'}={spec.shape[axis]}")
        if guessed and notes is not None:
            notes.append(f"input '{spec.name}': shape {spec.shape} ({', '.join(guessed)} assumed; "
                         f"set with --dim NAME=VALUE or --shape {spec.name}=DIMS)")
    fill_lengths(graph, specs, notes, only=by_length | {s.name for s in specs
                                                       if s.fill == "random" and s.name not in constants})
    return specs
