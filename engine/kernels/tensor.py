"""Shape and layout kernels: Shape, Reshape, Transpose, Squeeze, Concat, Split, Slice, Pad, ..."""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import numpy as np

from . import geometry
from .dtypes import np_dtype
from .registry import host_ints, register, to_host


@register("Shape")
def shape(xp: Any, x: Any, *, start: int = 0, end: int | None = None) -> Any:
    dims = list(x.shape)[slice(start, end)]
    return xp.asarray(np.array(dims, dtype=np.int64))


@register("Size")
def size(xp: Any, x: Any) -> Any:
    return xp.asarray(np.array(x.size, dtype=np.int64))


def _reshape_dims(shape_in: tuple[int, ...], dims: list[int], allowzero: int) -> list[int]:
    out = list(dims)
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            out[i] = shape_in[i]  # 0 copies the input dim unless allowzero says it is literal
    return out


@register("Reshape", since=5)
def reshape(xp: Any, x: Any, shape_t: Any, *, allowzero: int = 0) -> Any:
    return x.reshape(_reshape_dims(x.shape, host_ints(xp, shape_t), allowzero))


@register("Reshape", since=1)
def reshape_v1(xp: Any, x: Any, *, shape: list[int], consumed_inputs: Any = None) -> Any:
    return x.reshape(_reshape_dims(x.shape, list(shape), 0))


@register("Flatten")
def flatten(xp: Any, x: Any, *, axis: int = 1) -> Any:
    axis = geometry.axis("axis", axis, x.ndim, inclusive_end=True)
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(lead, int(np.prod(x.shape[axis:], dtype=np.int64)))


@register("Transpose")
def transpose(xp: Any, x: Any, *, perm: list[int] | None = None) -> Any:
    return xp.transpose(x, perm)


def _axes(xp: Any, axes_in: Any, axes_attr: Any) -> list[int] | None:
    if axes_in is not None:
        return host_ints(xp, axes_in)
    return None if axes_attr is None else [int(a) for a in axes_attr]


@register("Squeeze")
def squeeze(xp: Any, x: Any, axes_in: Any = None, *, axes: list[int] | None = None) -> Any:
    ax = _axes(xp, axes_in, axes)
    if ax is None:
        return xp.squeeze(x)
    return xp.squeeze(x, axis=tuple(a % x.ndim for a in ax)) if ax else x


@register("Unsqueeze")
def unsqueeze(xp: Any, x: Any, axes_in: Any = None, *, axes: list[int] | None = None) -> Any:
    ax = _axes(xp, axes_in, axes) or []
    rank = x.ndim + len(ax)
    shape_out = list(x.shape)
    for a in sorted(geometry.axes("axes", ax, rank)):
        shape_out.insert(a, 1)
    return x.reshape(shape_out)


@register("Expand", since=8)
def expand(xp: Any, x: Any, shape_t: Any) -> Any:
    dims = host_ints(xp, shape_t)
    # ONNX Expand is bidirectional broadcasting: the target may be smaller than x.
    target = np.broadcast_shapes(tuple(x.shape), tuple(dims))
    return xp.broadcast_to(x, target).copy()


@register("Tile", since=6)
def tile(xp: Any, x: Any, repeats: Any) -> Any:
    return xp.tile(x, tuple(host_ints(xp, repeats)))


@register("Concat", since=4)
def concat(xp: Any, *xs: Any, axis: int) -> Any:
    return xp.concatenate(xs, axis=axis)


def _split_points(total: int, sizes: list[int] | None, n: int) -> list[int]:
    """Where the pieces start, after the first: from ``sizes`` (which must cover the axis, as
    onnxruntime requires), or ``n`` near-equal pieces."""
    if sizes is None:
        chunk = -(-total // n)  # ceil: the last chunk is the smaller one (opset 18 rule)
        sizes = [min(chunk, total - i * chunk) for i in range(n)]
    elif sum(sizes) != total or min(sizes, default=0) < 0:
        raise ValueError(f"Split sizes {sizes} do not add up to the axis length {total}; "
                         "give sizes that cover the axis exactly")
    return list(accumulate(sizes))[:-1]


@register("Split", since=2)
def split(xp: Any, x: Any, split_in: Any = None, *, axis: int = 0, split: list[int] | None = None,
          num_outputs: int | None = None, _n_outputs: int | None = None) -> tuple:
    sizes = host_ints(xp, split_in) if split_in is not None else (list(split) if split else None)
    n = num_outputs or _n_outputs or (len(sizes) if sizes else 1)
    axis = geometry.axis("Split axis", axis, x.ndim)
    bounds = [0, *_split_points(x.shape[axis], sizes, n), x.shape[axis]]
    # Basic slicing, not xp.split: numpy's array_split is Python over swapaxes (tens of us
    # for a 4-way split of a small tensor, 8% of a silero-VAD step).
    lead = (slice(None),) * axis
    return tuple(x[lead + (slice(a, b),)] for a, b in zip(bounds, bounds[1:]))


@register("Slice", since=1)
def slice_v1(xp: Any, x: Any, *, starts: list[int], ends: list[int], axes: list[int] | None = None) -> Any:
    return _slice(x, list(starts), list(ends), axes and list(axes), None)


@register("Slice", since=10)
def slice_(xp: Any, x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    return _slice(x, host_ints(xp, starts), host_ints(xp, ends), host_ints(xp, axes), host_ints(xp, steps))


def _slice(x: Any, starts: list[int], ends: list[int], axes: list[int] | None,
           steps: list[int] | None) -> Any:
    axes = axes if axes is not None else list(range(len(starts)))
    return x[_slice_index(tuple(x.shape), starts, ends, axes, steps)]


def _slice_index(shape: tuple, starts: list[int], ends: list[int], axes: list[int],
                 steps: list[int] | None) -> tuple:
    """The index tuple of an ONNX Slice of a tensor of ``shape`` (also planned once per
    shape by ``engine/specialize.py``)."""
    index = [slice(None)] * len(shape)
    steps = steps if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim = shape[a]
        # Clamp like ONNX: huge ends (INT_MAX) and negative-step sentinels map to the dim edges.
        if st > 0:
            s = max(0, min(dim, s + dim if s < 0 else s))
            e = max(0, min(dim, e + dim if e < 0 else e))
        else:
            s = max(0, min(dim - 1, s + dim if s < 0 else s))
            e = max(-1, min(dim - 1, e + dim if e < 0 else e))
            e = None if e == -1 else e
        index[a % len(shape)] = slice(s, e, st)
    return tuple(index)


@register("Pad", since=2)
def pad_v2(xp: Any, x: Any, *, pads: list[int], mode: str = "constant", value: float = 0.0) -> Any:
    return _pad(xp, x, list(pads), mode, value, None)


@register("Pad", since=11)
def pad(xp: Any, x: Any, pads: Any, value: Any = None, axes: Any = None, *, mode: str = "constant") -> Any:
    v = 0 if value is None or value.size == 0 else to_host(xp, value).reshape(-1)[0]
    return _pad(xp, x, host_ints(xp, pads), mode, v, host_ints(xp, axes))


def _pad(xp: Any, x: Any, pads: list[int], mode: str, value: Any, axes: list[int] | None) -> Any:
    axes = [a % x.ndim for a in axes] if axes is not None else list(range(x.ndim))
    n = len(axes)
    widths = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        widths[a] = [pads[i], pads[i + n]]
    # Negative pads crop: apply them as a slice first.
    index = tuple(slice(-min(b, 0), x.shape[d] + min(e, 0)) for d, (b, e) in enumerate(widths))
    x = x[index]
    widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if x.dtype != object:
        fast = _pad_sliced(xp, x, widths, mode, value)
        if fast is not None:
            return fast
    if mode == "constant":
        return xp.pad(x, widths, mode="constant", constant_values=value)
    return xp.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


def _pad_sliced(xp: Any, x: Any, widths: list[tuple[int, int]], mode: str, value: Any) -> Any:
    """Pad by slicing (``xp.pad`` spends ~25 us in Python on a small tensor): constant
    fills one new array and copies ``x`` in; reflect, edge and wrap concatenate
    slices of ``x`` per padded axis. None where a pad is wider than the axis
    allows (``xp.pad`` repeats the pattern there)."""
    if mode == "constant":
        shape = tuple(d + b + e for d, (b, e) in zip(x.shape, widths))
        out = xp.full(shape, value, dtype=x.dtype)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, widths))] = x
        return out
    if mode not in ("reflect", "edge", "wrap"):
        return None
    for axis, (b, e) in enumerate(widths):
        if not b and not e:
            continue
        dim = x.shape[axis]
        lead = (slice(None),) * axis
        if mode == "reflect":
            if dim < 2 or b >= dim or e >= dim:
                return None
            left = xp.flip(x[lead + (slice(1, b + 1),)], axis)
            right = xp.flip(x[lead + (slice(dim - 1 - e, dim - 1),)], axis)
        elif mode == "edge":
            if dim < 1:
                return None
            left = xp.repeat(x[lead + (slice(0, 1),)], b, axis=axis)
            right = xp.repeat(x[lead + (slice(dim - 1, dim),)], e, axis=axis)
        else:
            if b > dim or e > dim:
                return None
            left, right = x[lead + (slice(dim - b, dim),)], x[lead + (slice(0, e),)]
        x = xp.concatenate([left, x, right], axis=axis)
    return x


@register("Constant")
def constant(xp: Any, *, value: Any = None, value_float: float | None = None,
             value_floats: list[float] | None = None, value_int: int | None = None,
             value_ints: list[int] | None = None, value_string: str | None = None,
             value_strings: list[str] | None = None, sparse_value: Any = None) -> Any:
    if value is not None:
        return xp.asarray(value) if np.asarray(value).dtype != object else np.asarray(value)
    if value_float is not None:
        return xp.asarray(np.array(value_float, dtype=np.float32))
    if value_floats is not None:
        return xp.asarray(np.array(value_floats, dtype=np.float32))
    if value_int is not None:
        return xp.asarray(np.array(value_int, dtype=np.int64))
    if value_ints is not None:
        return xp.asarray(np.array(value_ints, dtype=np.int64))
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object)
    raise ValueError("Constant has none of its value attributes set")


@register("ConstantOfShape", since=9)
def constant_of_shape(xp: Any, shape_t: Any, *, value: Any = None) -> Any:
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    return xp.full(tuple(host_ints(xp, shape_t)), fill[0], dtype=fill.dtype)


@register("Range", since=11)
def range_(xp: Any, start: Any, limit: Any, delta: Any) -> Any:
    s, l, d = (to_host(xp, v).reshape(-1)[0] for v in (start, limit, delta))
    n = max(int(np.ceil((l - s) / d)), 0)
    return xp.asarray((s + np.arange(n) * d).astype(start.dtype))


@register("EyeLike", since=9)
def eye_like(xp: Any, x: Any, *, dtype: int | None = None, k: int = 0) -> Any:
    out_dtype = np_dtype(dtype) if dtype is not None else x.dtype
    return xp.eye(x.shape[0], x.shape[1], k=k, dtype=out_dtype)


@register("Trilu", since=14)
def trilu(xp: Any, x: Any, k: Any = None, *, upper: int = 1) -> Any:
    kk = 0 if k is None else int(to_host(xp, k).reshape(-1)[0])
    return xp.triu(x, kk) if upper else xp.tril(x, kk)


@register("DepthToSpace", since=1)
def depth_to_space(xp: Any, x: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth", since=1)
def space_to_depth(xp: Any, x: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    n, c, h, w = x.shape
    b = blocksize
    t = x.reshape(n, c, h // b, b, w // b, b)
    # DCR puts the block offsets before the channel, CRD after it (the inverse of DepthToSpace).
    t = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


@register("OneHot", since=9)
def one_hot(xp: Any, indices: Any, depth: Any, values: Any, *, axis: int = -1) -> Any:
    d = int(to_host(xp, depth).reshape(-1)[0])
    idx = indices.astype(np.int64)
    idx = xp.where(idx < 0, idx + d, idx)
    rank = indices.ndim + 1
    axis = axis % rank
    shape_ = [1] * rank
    shape_[axis] = d
    hot = xp.expand_dims(idx, axis) == xp.arange(d).reshape(shape_)
    return xp.where(hot, values[1], values[0]).astype(values.dtype)


@register("BitCast", since=26)
def bitcast(xp: Any, x: Any, *, to: int) -> Any:
    target = np_dtype(to)
    if x.dtype.kind in "OUS" or target.kind in "OUS":
        raise ValueError("BitCast from or to STRING is not defined")
    if x.dtype.itemsize != target.itemsize:
        raise ValueError(f"BitCast needs types of one width: {x.dtype} has {x.dtype.itemsize * 8} bits, "
                         f"{target} has {target.itemsize * 8}")
    return x.view(target)  # same width: a view is exact for any layout, 0-d included


@register("TensorScatter", since=24)
def tensor_scatter(xp: Any, past: Any, update: Any, write_indices: Any = None, *,
                   mode: str = "linear", axis: int = -2) -> Any:
    axis = axis % past.ndim
    if axis == 0:
        raise ValueError("TensorScatter: axis 0 is the batch axis; the sequence axis must come after it")
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter mode must be 'linear' or 'circular', got {mode!r}")
    starts = host_ints(xp, write_indices) if write_indices is not None else [0] * past.shape[0]
    out = past.copy()
    seq, cap = update.shape[axis], past.shape[axis]
    for b in range(past.shape[0]):
        idx = np.arange(starts[b], starts[b] + seq)
        if mode == "circular":
            idx %= cap
        view = xp.moveaxis(out[b], axis - 1, 0)  # a view: writes land in ``out``
        view[xp.asarray(idx)] = xp.moveaxis(update[b], axis - 1, 0)
    return out
