"""The one validator of every windowed kernel's geometry: Conv, ConvTranspose,
MaxPool, AveragePool and LpPool (kernel, strides, dilations, pads, output size),
Resize's output shape, the recurrent ops' sizes (RNN, GRU, LSTM), and the axes of
the ops that take one (``axis``, ``axes``).

Why one place: a model is untrusted input, and these numbers become memory
offsets in the compiled kernels (``_native_conv.c``) and allocation sizes in the
numpy ones. A stride of 2^53 with a pad of 2^63 - 9 is accepted by ONNX shape
inference, yet overflowed int64 in the C conv (a write before its buffer) and in
the C MaxPool (heap bytes returned as the output). Every kernel that reads these
attributes asks here first, and uses the numbers it gets back: the same numbers
for the compiled path, the numpy path and the planner, computed once.

The arithmetic is Python's exact ints, and every value is bounded before it is
combined with another: each spatial size, pad, stride, dilation, kernel size,
padded extent and output size lies in ``[0, MAX_EXTENT]`` and every output holds
at most ``MAX_ELEMENTS`` elements, so nothing computed from them downstream (a
product of two, a sum of a few) leaves int64. What onnxruntime refuses is refused
(pads not smaller than a pool's kernel, a ``kernel_shape`` or ``hidden_size``
that contradicts the weights, channels that do not divide into groups, an axis
out of range), with a ``GeometryError`` that says which value is wrong; the
executor and the interpreter name the node.

Results are cached per (shapes, attributes): a node is checked once per input
signature, not once per call.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any, Sequence

from partition.errors import ModelError

#: Largest spatial size, pad, stride, dilation, kernel size, padded extent or output
#: size along one axis (2^31 - 1: a 1-D audio conv over 12 hours at 48 kHz fits).
MAX_EXTENT = 2**31 - 1
#: Largest number of elements one output may hold (before the memory budget, which
#: bounds the bytes; this keeps every flat index of an output inside int64).
MAX_ELEMENTS = 2**48

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class GeometryError(ModelError):
    """A node's geometry that no kernel may run: says which value is wrong and why."""

    def at(self, node: str, op_type: str) -> "GeometryError":
        """The same error, naming the node it belongs to."""
        return GeometryError(f"node '{node}' ({op_type}): {self}")


@dataclass(frozen=True)
class Window:
    """A validated window geometry; pads are (begin..., end...)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    k_eff: tuple[int, ...]     # (kernel - 1) * dilation + 1
    out_sp: tuple[int, ...]
    extra: tuple[int, ...]     # end padding beyond ``pads`` that a ceil-mode window reaches


@dataclass(frozen=True)
class TransposeWindow:
    """A validated ConvTranspose geometry."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    out_sp: tuple[int, ...]
    full: tuple[int, ...]      # the uncropped buffer the kernel accumulates into


# ------------------------------------------------------------ value checks --
def _hashable(value: Any) -> Any:
    """Attribute values as cache keys (lists and arrays become tuples)."""
    if value is None or isinstance(value, (int, str, float)):
        return value
    try:
        return tuple(value)
    except TypeError:
        return value


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise GeometryError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise GeometryError(f"{name} must be an integer, got {value!r}") from None


def _ints(name: str, value: Any, n: int, default: Sequence[int]) -> tuple[int, ...]:
    """``value`` as n ints (``default`` when absent or empty)."""
    if value is None or (isinstance(value, tuple) and not value):
        return tuple(default)
    if not isinstance(value, tuple):
        raise GeometryError(f"{name} must be a list of integers, got {value!r}")
    out = tuple(_int(f"{name}[{i}]", v) for i, v in enumerate(value))
    if len(out) != n:
        raise GeometryError(f"{name} has {len(out)} values {list(out)}; expected {n}")
    return out


def _bounded(name: str, values: Sequence[int], low: int, high: int = MAX_EXTENT) -> None:
    for i, v in enumerate(values):
        if not low <= v <= high:
            raise GeometryError(f"{name}[{i}] = {v} is outside [{low}, {high}]")


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    dims = tuple(_int(f"{name} dim", d) for d in shape)
    if any(d < 0 for d in dims):
        raise GeometryError(f"{name} has a negative dimension {list(dims)}")
    return dims


def _elements(what: str, shape: Sequence[int]) -> None:
    if math.prod(shape) > MAX_ELEMENTS:
        raise GeometryError(f"{what} would hold {math.prod(shape)} elements "
                            f"(shape {list(shape)}); the limit is {MAX_ELEMENTS}")


def _auto_pad(value: Any) -> str:
    text = value.decode() if isinstance(value, bytes) else str(value)
    if text not in AUTO_PADS:
        raise GeometryError(f"auto_pad '{text}' is not one of {', '.join(AUTO_PADS)}")
    return text


# ----------------------------------------------------------------- windows --
def _pads(in_sp: Sequence[int], k_eff: Sequence[int], strides: Sequence[int], pads: Any,
          auto_pad: str) -> tuple[int, ...]:
    nsp = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s in zip(in_sp, k_eff, strides):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
        return tuple(begin + end)
    if auto_pad == "VALID":
        return (0,) * (2 * nsp)
    out = _ints("pads", pads, 2 * nsp, (0,) * (2 * nsp))
    _bounded("pads", out, 0)
    return out


def _window(in_sp: tuple[int, ...], kernel: tuple[int, ...], strides: Any, dilations: Any,
            pads: Any, auto_pad: str, ceil_mode: int, pool: bool) -> Window:
    nsp = len(in_sp)
    _bounded("input spatial size", in_sp, 0)
    _bounded("kernel_shape", kernel, 1)
    strides = _ints("strides", strides, nsp, (1,) * nsp)
    _bounded("strides", strides, 1)
    dilations = _ints("dilations", dilations, nsp, (1,) * nsp)
    _bounded("dilations", dilations, 1)
    k_eff = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    _bounded("dilated kernel size", k_eff, 1)
    pads = _pads(in_sp, k_eff, strides, pads, auto_pad)
    if pool and auto_pad == "NOTSET":
        for i in range(2 * nsp):  # onnxruntime's rule: a window is never all padding
            if pads[i] >= kernel[i % nsp]:
                raise GeometryError(f"pads[{i}] = {pads[i]} must be smaller than the kernel "
                                    f"({kernel[i % nsp]} on spatial axis {i % nsp})")
    padded = tuple(in_sp[i] + pads[i] + pads[i + nsp] for i in range(nsp))
    _bounded("padded input size", padded, 0)
    out_sp = tuple(_out_size(in_sp[i], padded[i], k_eff[i], strides[i], pads[i], i, auto_pad,
                             ceil_mode, pool) for i in range(nsp))
    extra = tuple(max((out_sp[i] - 1) * strides[i] + k_eff[i] - padded[i], 0) if out_sp[i] else 0
                  for i in range(nsp))
    return Window(kernel, strides, dilations, pads, k_eff, out_sp, extra)


def _out_size(n: int, padded: int, k_eff: int, stride: int, pad_begin: int, axis: int,
              auto_pad: str, ceil_mode: int, pool: bool) -> int:
    if n == 0:
        return 0  # an empty axis: an empty output (a batch of nothing), never a window
    span = padded - k_eff
    if pool and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-n // stride)
    if not pool:
        if span < 0:
            raise GeometryError(f"the kernel spans {k_eff} positions on spatial axis {axis} "
                                f"(dilations included) but the padded input has only {padded}: "
                                "no output position")
        return span // stride + 1
    # A pool's window may stick out of the padded input by less than a stride: onnxruntime
    # divides rounding toward zero (and ceils in ceil mode), and so do we, to agree with it.
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= n + pad_begin:
            out -= 1  # the last window must start inside the input or its left padding
    else:
        out = (span // stride if span >= 0 else -(-span // stride)) + 1
    if out < 0:
        raise GeometryError(f"the kernel spans {k_eff} positions on spatial axis {axis} "
                            f"(dilations included) but the padded input has only {padded}: "
                            "no output position")
    return out


@functools.lru_cache(maxsize=4096)
def _conv(x_shape: tuple, w_shape: tuple, b_shape: tuple | None, kernel_shape: Any,
          strides: Any, dilations: Any, pads: Any, auto_pad: Any, group: Any) -> Window:
    x_shape, w_shape = _shape("input X", x_shape), _shape("weight W", w_shape)
    if len(x_shape) < 3:
        raise GeometryError(f"input X has shape {list(x_shape)}; Conv needs (N, C, spatial...)")
    if len(w_shape) != len(x_shape):
        raise GeometryError(f"weight W has shape {list(w_shape)} (rank {len(w_shape)}) but input X "
                            f"has rank {len(x_shape)}: they must agree")
    nsp = len(x_shape) - 2
    kernel = _ints("kernel_shape", kernel_shape, nsp, w_shape[2:])
    if kernel != w_shape[2:]:
        raise GeometryError(f"kernel_shape {list(kernel)} disagrees with the weight W's "
                            f"spatial shape {list(w_shape[2:])}")
    group = _int("group", 1 if group is None else group)
    m, c = w_shape[0], x_shape[1]
    if group < 1 or c != w_shape[1] * group:
        raise GeometryError(f"input X has {c} channels but the weight W takes {w_shape[1]} "
                            f"per group x group {group}")
    if m % group:
        raise GeometryError(f"the weight W has {m} output channels, not a multiple of group {group}")
    if b_shape is not None and tuple(b_shape) != (m,):
        raise GeometryError(f"bias B has shape {list(b_shape)}; expected [{m}]")
    window = _window(x_shape[2:], kernel, strides, dilations, pads, _auto_pad(auto_pad), 0, False)
    _elements("the output", (x_shape[0], m, *window.out_sp))
    return window


def conv(x_shape: Sequence[int], w_shape: Sequence[int], b_shape: Sequence[int] | None = None, *,
         kernel_shape: Any = None, strides: Any = None, dilations: Any = None, pads: Any = None,
         auto_pad: Any = "NOTSET", group: Any = 1) -> Window:
    """Conv's validated geometry for an input X and a weight W of these shapes."""
    return _conv(tuple(x_shape), tuple(w_shape), None if b_shape is None else tuple(b_shape),
                 _hashable(kernel_shape), _hashable(strides), _hashable(dilations),
                 _hashable(pads), auto_pad, group)


@functools.lru_cache(maxsize=4096)
def _pool(op: str, x_shape: tuple, kernel_shape: Any, strides: Any, dilations: Any, pads: Any,
          auto_pad: Any, ceil_mode: Any) -> Window:
    x_shape = _shape("input X", x_shape)
    if not kernel_shape:
        raise GeometryError(f"{op} needs the kernel_shape attribute")
    if len(x_shape) < 3:
        raise GeometryError(f"input X has shape {list(x_shape)}; {op} needs (N, C, spatial...)")
    nsp = len(x_shape) - 2
    kernel = _ints("kernel_shape", kernel_shape, nsp, ())
    window = _window(x_shape[2:], kernel, strides, dilations, pads, _auto_pad(auto_pad),
                     _int("ceil_mode", ceil_mode or 0), True)
    _elements("the output", (*x_shape[:2], *window.out_sp))
    return window


def pool(op: str, x_shape: Sequence[int], *, kernel_shape: Any, strides: Any = None,
         dilations: Any = None, pads: Any = None, auto_pad: Any = "NOTSET",
         ceil_mode: Any = 0) -> Window:
    """MaxPool's, AveragePool's or LpPool's validated geometry for an input of this shape."""
    return _pool(op, tuple(x_shape), _hashable(kernel_shape), _hashable(strides),
                 _hashable(dilations), _hashable(pads), auto_pad, ceil_mode)


@functools.lru_cache(maxsize=1024)
def _conv_transpose(x_shape: tuple, w_shape: tuple, b_shape: tuple | None, kernel_shape: Any,
                    strides: Any, dilations: Any, pads: Any, auto_pad: Any, group: Any,
                    output_padding: Any, output_shape: Any) -> TransposeWindow:
    x_shape, w_shape = _shape("input X", x_shape), _shape("weight W", w_shape)
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise GeometryError(f"input X {list(x_shape)} and weight W {list(w_shape)}: ConvTranspose "
                            "needs (N, C, spatial...) and (C, M / group, kernel...)")
    nsp = len(x_shape) - 2
    kernel = _ints("kernel_shape", kernel_shape, nsp, w_shape[2:])
    if kernel != w_shape[2:]:
        raise GeometryError(f"kernel_shape {list(kernel)} disagrees with the weight W's "
                            f"spatial shape {list(w_shape[2:])}")
    group = _int("group", 1 if group is None else group)
    if group < 1 or x_shape[1] != w_shape[0] or x_shape[1] % group:
        raise GeometryError(f"input X has {x_shape[1]} channels; the weight W takes {w_shape[0]} "
                            f"in groups of {group}")
    m = w_shape[1] * group
    if b_shape is not None and tuple(b_shape) != (m,):
        raise GeometryError(f"bias B has shape {list(b_shape)}; expected [{m}]")
    in_sp = x_shape[2:]
    _bounded("input spatial size", in_sp, 0)
    _bounded("kernel_shape", kernel, 1)
    strides = _ints("strides", strides, nsp, (1,) * nsp)
    _bounded("strides", strides, 1)
    dilations = _ints("dilations", dilations, nsp, (1,) * nsp)
    _bounded("dilations", dilations, 1)
    out_pad = _ints("output_padding", output_padding, nsp, (0,) * nsp)
    _bounded("output_padding", out_pad, 0)
    natural = tuple(strides[i] * max(in_sp[i] - 1, 0) + out_pad[i] + (kernel[i] - 1) * dilations[i]
                    + 1 for i in range(nsp))
    _bounded("uncropped output size", natural, 1)
    pads, out_sp = _transpose_pads(natural, nsp, pads, _auto_pad(auto_pad), output_shape, in_sp,
                                   strides)
    full = tuple(max(natural[i], pads[i] + out_sp[i]) for i in range(nsp))
    _elements("the output", (x_shape[0], m, *full))
    return TransposeWindow(kernel, strides, dilations, pads, out_sp, full)


def _transpose_pads(natural: tuple[int, ...], nsp: int, pads: Any, auto_pad: str,
                    output_shape: Any, in_sp: tuple[int, ...],
                    strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if output_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = tuple(n * s for n, s in zip(in_sp, strides))
    if output_shape is not None:
        shape = _ints("output_shape", tuple(output_shape)[-nsp:], nsp, ())
        _bounded("output_shape", shape, 1)
        begin, end = [], []
        for i in range(nsp):
            total = natural[i] - shape[i]  # negative: the output extends past the sums (zeros)
            half = total // 2
            upper = auto_pad == "SAME_UPPER"  # otherwise the begin takes the larger half (ONNX)
            begin.append(half if upper else total - half)
            end.append(total - half if upper else half)
            if begin[-1] < 0:  # the output would start before the first sum: no kernel does that
                raise GeometryError(f"output_shape[{i}] = {shape[i]} is larger than ConvTranspose "
                                    f"produces on spatial axis {i} ({natural[i]}) with "
                                    f"auto_pad {auto_pad}")
        return tuple(begin + end), shape
    pads = (0,) * (2 * nsp) if auto_pad == "VALID" else _ints("pads", pads, 2 * nsp, (0,) * (2 * nsp))
    _bounded("pads", pads, 0)
    out_sp = tuple(natural[i] - pads[i] - pads[i + nsp] for i in range(nsp))
    for i, n in enumerate(out_sp):
        if n < 1:
            raise GeometryError(f"pads crop spatial axis {i} to {n} positions (pads {list(pads)}, "
                                f"uncropped size {natural[i]})")
    return pads, out_sp


def conv_transpose(x_shape: Sequence[int], w_shape: Sequence[int],
                   b_shape: Sequence[int] | None = None, *, kernel_shape: Any = None,
                   strides: Any = None, dilations: Any = None, pads: Any = None,
                   auto_pad: Any = "NOTSET", group: Any = 1, output_padding: Any = None,
                   output_shape: Any = None) -> TransposeWindow:
    """ConvTranspose's validated geometry for an input X and a weight W of these shapes."""
    return _conv_transpose(tuple(x_shape), tuple(w_shape),
                           None if b_shape is None else tuple(b_shape), _hashable(kernel_shape),
                           _hashable(strides), _hashable(dilations), _hashable(pads), auto_pad,
                           group, _hashable(output_padding), _hashable(output_shape))


@functools.lru_cache(maxsize=1024)
def _max_unpool(x_shape: tuple, kernel_shape: Any, strides: Any, pads: Any,
                output_shape: Any) -> tuple[int, ...]:
    x_shape = _shape("input X", x_shape)
    if len(x_shape) < 3 or not kernel_shape:
        raise GeometryError(f"input X {list(x_shape)} and kernel_shape {kernel_shape}: MaxUnpool "
                            "needs (N, C, spatial...) and one kernel size per spatial axis")
    nsp = len(x_shape) - 2
    kernel = _ints("kernel_shape", kernel_shape, nsp, ())
    _bounded("kernel_shape", kernel, 1)
    strides = _ints("strides", strides, nsp, (1,) * nsp)
    _bounded("strides", strides, 1)
    pads = _ints("pads", pads, 2 * nsp, (0,) * (2 * nsp))
    _bounded("pads", pads, 0)
    inferred = (*x_shape[:2], *((x_shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + nsp]
                                + kernel[i] for i in range(nsp)))
    _bounded("unpooled size", inferred[2:], 0)
    shape = inferred
    if output_shape is not None:
        shape = tuple(_int(f"output_shape[{i}]", v) for i, v in enumerate(output_shape))
        if len(shape) != len(inferred) or any(a < b for a, b in zip(shape, inferred)):
            raise GeometryError(f"output_shape {list(shape)} is smaller than the unpooled "
                                f"shape {list(inferred)}")
        _bounded("output_shape", shape[2:], 0)
    _elements("the output", shape)
    return inferred


def max_unpool(x_shape: Sequence[int], *, kernel_shape: Any, strides: Any = None,
               pads: Any = None, output_shape: Any = None) -> tuple[int, ...]:
    """MaxUnpool's validated unpooled shape (what MaxPool's indices address); an
    ``output_shape`` given must hold it."""
    return _max_unpool(tuple(x_shape), _hashable(kernel_shape), _hashable(strides),
                       _hashable(pads), _hashable(output_shape))


# -------------------------------------------------------------------- axes --
def axis(name: str, value: Any, rank: int, *, inclusive_end: bool = False) -> int:
    """An axis attribute or input of a tensor of ``rank`` as a non-negative axis,
    refused as onnxruntime refuses it when outside ``[-rank, rank - 1]`` (``[-rank,
    rank]`` where the op allows the end: Flatten). A negative axis wrapped twice by
    ``%`` used to compute on some other axis instead."""
    a = _int(name, value)
    top = rank if inclusive_end else rank - 1
    if not -rank <= a <= top:
        raise GeometryError(f"{name} = {a} is out of range for an input of rank {rank} "
                            f"(valid: {-rank} to {top})")
    return a + rank if a < 0 else a


def axes(name: str, values: Sequence[Any], rank: int) -> tuple[int, ...]:
    """Several distinct axes of a tensor of ``rank`` (each as ``axis`` checks it)."""
    out = tuple(axis(f"{name}[{i}]", v, rank) for i, v in enumerate(values))
    if len(set(out)) != len(out):
        raise GeometryError(f"{name} {[int(v) for v in values]} names an axis twice")
    return out


# ------------------------------------------------------------------ Resize --
def resize_axes(rank: int, axes: Any) -> list[int]:
    """Resize's ``axes`` attribute as non-negative, distinct axes (all when absent)."""
    if not axes:
        return list(range(rank))
    out = []
    for i, a in enumerate(axes):
        a = _int(f"axes[{i}]", a)
        if not -rank <= a < rank:
            raise GeometryError(f"axes[{i}] = {a} is out of range for an input of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise GeometryError(f"axes {list(axes)} name an axis twice")
    return out


def resize_output(shape: Sequence[int], scales: Sequence[float] | None,
                  sizes: Sequence[int] | None, axes: Sequence[int],
                  policy: str) -> tuple[list[float], list[int]]:
    """Resize's per-axis scales and output shape, validated: finite positive scales or
    non-negative sizes, one per resized axis, and an output within the limits."""
    r = len(shape)
    given = sizes if sizes is not None else scales
    if given is None:
        raise GeometryError("Resize needs scales or sizes")
    if len(given) != len(axes):
        what = "sizes" if sizes is not None else "scales"
        raise GeometryError(f"{what} has {len(given)} values for {len(axes)} resized axes")
    if sizes is not None:
        sizes = [_int(f"sizes[{i}]", v) for i, v in enumerate(sizes)]
        _bounded("sizes", sizes, 0)
        full = list(shape)
        for i, a in enumerate(axes):
            full[a] = sizes[i]
        sc = [full[i] / shape[i] if shape[i] else 1.0 for i in range(r)]
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise GeometryError(f"keep_aspect_ratio_policy '{policy}' is not one of stretch, "
                                "not_larger, not_smaller")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(sc[a] for a in axes)
            sc = [s if i in axes else 1.0 for i in range(r)]
            full = [int(s * shape[i] + 0.5) if i in axes else shape[i] for i in range(r)]
    else:
        sc = [1.0] * r
        for i, a in enumerate(axes):
            v = float(scales[i])
            if not (math.isfinite(v) and v > 0):
                raise GeometryError(f"scales[{i}] = {v} must be a finite number above 0")
            sc[a] = v
        full = [math.floor(shape[i] * sc[i]) if shape[i] * sc[i] <= MAX_EXTENT else MAX_EXTENT + 1
                for i in range(r)]
    _bounded("output size", full, 0)
    _elements("the output", full)
    return sc, full


# --------------------------------------------------------------- recurrent --
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent(op: str, x_shape: Sequence[int], w_shape: Sequence[int], r_shape: Sequence[int],
              b_shape: Sequence[int] | None = None, *, hidden_size: Any = None,
              direction: Any = "forward", layout: Any = 0) -> int:
    """The hidden size of an RNN, GRU or LSTM whose X, W, R (and B) have these shapes,
    after checking that they and the attributes agree (onnxruntime refuses a
    ``hidden_size`` that contradicts R, and so do we)."""
    return _recurrent(op, tuple(x_shape), tuple(w_shape), tuple(r_shape),
                      None if b_shape is None else tuple(b_shape), hidden_size,
                      direction.decode() if isinstance(direction, bytes) else str(direction),
                      layout)


@functools.lru_cache(maxsize=1024)
def _recurrent(op: str, x_shape: tuple, w_shape: tuple, r_shape: tuple, b_shape: tuple | None,
               hidden_size: Any, direction: str, layout: Any) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise GeometryError(f"direction '{direction}' is not forward, reverse or bidirectional")
    n_dir, gates = 2 if direction == "bidirectional" else 1, _GATES[op]
    if len(x_shape) != 3 or len(w_shape) != 3 or len(r_shape) != 3:
        raise GeometryError(f"X {list(x_shape)}, W {list(w_shape)} and R {list(r_shape)} must "
                            "each have rank 3")
    hs = r_shape[-1]
    if hidden_size is not None and _int("hidden_size", hidden_size) != hs:
        raise GeometryError(f"hidden_size {hidden_size} contradicts R's shape {list(r_shape)} "
                            f"(hidden size {hs})")
    input_size = x_shape[2]
    if _int("layout", layout or 0) not in (0, 1):
        raise GeometryError(f"layout {layout} is not 0 or 1")
    want = {"W": (n_dir, gates * hs, input_size), "R": (n_dir, gates * hs, hs)}
    got = {"W": w_shape, "R": r_shape}
    if b_shape is not None:
        want["B"], got["B"] = (n_dir, 2 * gates * hs), b_shape
    for name, shape in want.items():
        if tuple(got[name]) != shape:
            raise GeometryError(f"{name} has shape {list(got[name])}; {op} with direction "
                                f"{direction}, hidden size {hs} and input size {input_size} "
                                f"needs {list(shape)}")
    return hs
