"""GridSample (N-D; nearest, linear, cubic; zeros, border, reflection padding) and Col2Im, vectorised on ``xp``.

Every output position gathers its 1, 2^k or 4^k neighbours with one advanced-indexing
call per neighbour; no python loop over pixels, so it runs on cupy as on numpy.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from . import gemm
from .registry import host_ints, register

_CUBIC_A = -0.75  # Keys' cubic convolution, as PyTorch and ONNX use


def _reflect(xp: Any, x: Any, lo: float, hi: float) -> Any:
    span = hi - lo
    below, above = x < lo, x > hi
    d = xp.where(below, lo - x, xp.where(above, x - hi, 0.0))
    n = xp.floor(d / span) if span > 0 else xp.zeros_like(d)
    r = d - n * span
    even = (n % 2) == 0
    from_below = xp.where(even, lo + r, hi - r)
    from_above = xp.where(even, hi - r, lo + r)
    return xp.where(below, from_below, xp.where(above, from_above, x))


def _cubic_weights(xp: Any, t: Any) -> list[Any]:
    a = _CUBIC_A
    ws = []
    for off in (1.0, 0.0, -1.0, -2.0):  # neighbours at floor-1 .. floor+2
        s = xp.abs(t + off)
        near = ((a + 2) * s - (a + 3)) * s * s + 1
        far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
        ws.append(xp.where(s <= 1, near, far))
    return ws


def _fetch(xp: Any, x: Any, idx: list[Any], dims: tuple[int, ...], padding: str,
           borders: list[tuple[float, float]]) -> Any:
    """X[n, :, idx...] -> [N, C, O...], with the padding rule for indices outside X."""
    valid = None
    fixed = []
    for i, (ix, d) in enumerate(zip(idx, dims)):
        if padding == "reflection":
            ix = xp.trunc(_reflect(xp, ix.astype(x.dtype), *borders[i])).astype(ix.dtype)
        if padding == "zeros":
            ok = (ix >= 0) & (ix < d)
            valid = ok if valid is None else valid & ok
        fixed.append(xp.clip(ix, 0, d - 1))
    n = xp.arange(x.shape[0]).reshape((-1,) + (1,) * (idx[0].ndim - 1))
    got = x[(n, slice(None), *fixed)]  # [N, O..., C]
    if valid is not None:
        got = got * valid[..., None].astype(x.dtype)
    return xp.moveaxis(got, -1, 1)


@register("GridSample", since=16)
def grid_sample(xp: Any, x: Any, grid: Any, *, align_corners: int = 0, mode: str = "linear",
                padding_mode: str = "zeros") -> Any:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    dims = tuple(x.shape[2:])
    k = len(dims)
    if grid.shape[-1] != k:
        raise ValueError(f"GridSample: grid's last dimension is {grid.shape[-1]}, X has {k} spatial dims")
    g = grid.astype(x.dtype)
    coords, borders = [], []
    for i, d in enumerate(dims):
        nrm = g[..., k - 1 - i]  # the grid lists coordinates innermost (x) first
        c = (nrm + 1) / 2 * (d - 1) if align_corners else ((nrm + 1) * d - 1) / 2
        lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
        if padding_mode == "border":  # only points beyond the border move (matters for cubic)
            c = xp.where((c < lo) | (c > hi), xp.clip(c, 0, d - 1), c)
        elif padding_mode == "reflection":
            c = _reflect(xp, c, lo, hi)
        coords.append(c)
        borders.append((lo, hi))
    if mode == "nearest":
        idx = [xp.rint(c).astype(xp.int64) for c in coords]
        return _fetch(xp, x, idx, dims, padding_mode, borders).astype(x.dtype)
    if mode not in ("linear", "cubic"):
        raise ValueError(f"GridSample mode must be nearest, linear or cubic, got {mode!r}")
    base = [xp.floor(c) for c in coords]
    frac = [c - b for c, b in zip(coords, base)]
    if mode == "linear":
        offsets, weights = (0, 1), [[1 - t, t] for t in frac]
    else:
        offsets, weights = (-1, 0, 1, 2), [_cubic_weights(xp, t) for t in frac]
    out = None
    for combo in itertools.product(range(len(offsets)), repeat=k):
        idx = [(b + offsets[j]).astype(xp.int64) for b, j in zip(base, combo)]
        w = weights[0][combo[0]]
        for i in range(1, k):
            w = w * weights[i][combo[i]]
        term = _fetch(xp, x, idx, dims, padding_mode, borders) * w[:, None]
        out = term if out is None else out + term
    return out.astype(x.dtype)


@register("Col2Im", since=18)
def col2im(xp: Any, x: Any, image_shape: Any, block_shape: Any, *, dilations: list[int] | None = None,
           pads: list[int] | None = None, strides: list[int] | None = None) -> Any:
    """The inverse of im2col: every column's block is summed back into the (padded) image,
    one strided slice-add per position inside the block."""
    image, block = host_ints(xp, image_shape), host_ints(xp, block_shape)
    k = len(image)
    dil, st = dilations or [1] * k, strides or [1] * k
    pad = pads or [0] * (2 * k)
    counts = [(image[d] + pad[d] + pad[d + k] - dil[d] * (block[d] - 1) - 1) // st[d] + 1 for d in range(k)]
    n, c = x.shape[0], x.shape[1] // math.prod(block)
    cols = x.reshape(n, c, *block, *counts)
    out = xp.zeros((n, c, *[image[d] + pad[d] + pad[d + k] for d in range(k)]), dtype=x.dtype)
    for offset in itertools.product(*[range(b) for b in block]):
        window = tuple(slice(offset[d] * dil[d], offset[d] * dil[d] + st[d] * (counts[d] - 1) + 1, st[d])
                       for d in range(k))
        out[(slice(None), slice(None), *window)] += cols[(slice(None), slice(None), *offset)]
    crop = tuple(slice(pad[d], pad[d] + image[d]) for d in range(k))
    return out[(slice(None), slice(None), *crop)]


@register("DeformConv", since=19)
def deform_conv(xp: Any, x: Any, w: Any, offset: Any, b: Any = None, mask: Any = None, *,
                dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                offset_group: int = 1, pads: list[int] | None = None, strides: list[int] | None = None) -> Any:
    """2-D deformable convolution: each kernel tap samples X bilinearly (zeros outside) at its
    regular position plus a learned offset, scaled by ``mask``; then a grouped matmul.
    Sampling reuses GridSample (align_corners=1); an image of height or width 1 is refused
    because that normalisation has no scale there."""
    if min(x.shape[2:]) < 2:
        raise ValueError(f"DeformConv needs images at least 2x2, got {tuple(x.shape[2:])}")
    if x.ndim != 4:
        raise ValueError(f"DeformConv is implemented for 2-D images (4-D X), got X of rank {x.ndim}")
    n, c, h, wd = x.shape
    kh, kw = kernel_shape or list(w.shape[2:])
    dh, dw = dilations or [1, 1]
    sh, sw = strides or [1, 1]
    pt, pl = (pads or [0, 0, 0, 0])[:2]
    oh, ow = offset.shape[2:]
    k = kh * kw
    off = offset.reshape(n, offset_group, kh, kw, 2, oh, ow).astype(xp.float64)
    base_y = (xp.arange(oh) * sh - pt)[None, :, None] + (xp.arange(kh) * dh)[:, None, None]  # [kh, oh, 1]
    base_x = (xp.arange(ow) * sw - pl)[None, None, :] + (xp.arange(kw) * dw)[:, None, None]  # [kw, 1, ow]
    py = off[:, :, :, :, 0] + base_y[None, None, :, None, :, :]  # [n, G, kh, kw, oh, ow]
    px = off[:, :, :, :, 1] + base_x[None, None, None, :, :, :]
    # Pixel coordinates -> GridSample's align_corners=1 normalisation, so one sampler serves both.
    gy = py / max(h - 1, 1) * 2 - 1
    gx = px / max(wd - 1, 1) * 2 - 1
    grid = xp.stack([gx, gy], axis=-1).reshape(n * offset_group, k * oh, ow, 2)
    cg = c // offset_group
    xs = x.astype(xp.float64).reshape(n * offset_group, cg, h, wd)
    cols = grid_sample(xp, xs, grid, align_corners=1, mode="linear", padding_mode="zeros")
    cols = cols.reshape(n, offset_group, cg, k, oh, ow)
    if mask is not None:
        cols = cols * mask.astype(xp.float64).reshape(n, offset_group, 1, k, oh, ow)
    cols = cols.reshape(n, group, (c // group) * k, oh * ow)
    oc = w.shape[0]
    wg = w.astype(xp.float64).reshape(group, oc // group, (c // group) * k)
    out = gemm.matmul(xp, wg[None], cols).reshape(n, oc, oh, ow)
    if b is not None:
        out = out + b.astype(xp.float64).reshape(1, -1, 1, 1)
    return out.astype(x.dtype)
