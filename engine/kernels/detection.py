"""Detection kernels: NonMaxSuppression (host-side, data dependent) and RoiAlign."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register, to_host


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as [y1, x1, y2, x2] with min/max ordered (ONNX allows flipped corners)."""
    if center_point_box:
        xc, yc, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1 = np.minimum(boxes[..., 0], boxes[..., 2])
    y2 = np.maximum(boxes[..., 0], boxes[..., 2])
    x1 = np.minimum(boxes[..., 1], boxes[..., 3])
    x2 = np.maximum(boxes[..., 1], boxes[..., 3])
    return np.stack([y1, x1, y2, x2], axis=-1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    ih = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    iw = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = ih * iw
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(all="ignore"):
        iou = np.where((inter > 0) & (area > 0) & (areas > 0) & (union > 0), inter / union, 0.0)
    return iou


def _scalar(xp: Any, a: Any, default: Any) -> Any:
    if a is None or a.size == 0:
        return default
    return to_host(xp, a).reshape(-1)[0]


@register("NonMaxSuppression", since=10)
def non_max_suppression(xp: Any, boxes: Any, scores: Any, max_out: Any = None, iou_threshold: Any = None,
                        score_threshold: Any = None, *, center_point_box: int = 0) -> Any:
    limit = int(_scalar(xp, max_out, 0))
    iou_t = float(_scalar(xp, iou_threshold, 0.0))
    score_t = None if score_threshold is None or score_threshold.size == 0 else \
        float(_scalar(xp, score_threshold, 0.0))
    hb = _corners(to_host(xp, boxes).astype(np.float64), center_point_box)
    hs = to_host(xp, scores)
    selected: list[tuple[int, int, int]] = []
    for b in range(hs.shape[0]):
        for c in range(hs.shape[1]):
            s = hs[b, c]
            cand = np.arange(s.size) if score_t is None else np.nonzero(s > score_t)[0]
            # Highest score first; among equal scores the lower box index first.
            order = cand[np.lexsort((cand, -s[cand]))]
            keep: list[int] = []
            for i in order:
                if len(keep) >= limit:
                    break
                if not keep or not np.any(_iou(hb[b, i], hb[b, keep]) > iou_t):
                    keep.append(int(i))
            selected.extend((b, c, i) for i in keep)
    return xp.asarray(np.array(selected, dtype=np.int64).reshape(-1, 3))


def _bilinear(img: np.ndarray, y: np.ndarray, x: np.ndarray, corner_max: bool = False) -> np.ndarray:
    """Bilinear samples of img [C, H, W] at points (y, x); zero outside [-1, H] x [-1, W].

    ``corner_max`` gives RoiAlign's max mode as ONNX defines it: the largest of the four
    *weighted* corner terms rather than their sum."""
    h, w = img.shape[1:]
    valid = (y >= -1.0) & (y <= h) & (x >= -1.0) & (x <= w)
    y = np.clip(y, 0, None)
    x = np.clip(x, 0, None)
    y0 = np.minimum(np.floor(y).astype(np.int64), h - 1)
    x0 = np.minimum(np.floor(x).astype(np.int64), w - 1)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    y = np.where(y0 >= h - 1, y0.astype(np.float64), y)
    x = np.where(x0 >= w - 1, x0.astype(np.float64), x)
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    terms = (hy * hx * img[:, y0, x0], hy * lx * img[:, y0, x1], ly * hx * img[:, y1, x0],
             ly * lx * img[:, y1, x1])
    if corner_max:
        v = np.maximum(np.maximum(terms[0], terms[1]), np.maximum(terms[2], terms[3]))
    else:
        v = terms[0] + terms[1] + terms[2] + terms[3]
    return np.where(valid, v, 0.0)


@register("RoiAlign", since=10)
def roi_align(xp: Any, x: Any, rois: Any, batch_indices: Any, *, coordinate_transformation_mode: str = "half_pixel",
              mode: str = "avg", output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
              spatial_scale: float = 1.0) -> Any:
    hx = to_host(xp, x).astype(np.float64)
    hr = to_host(xp, rois).astype(np.float64)
    hb = to_host(xp, batch_indices).astype(np.int64)
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    out = np.zeros((hr.shape[0], hx.shape[1], output_height, output_width))
    for r, (x1, y1, x2, y2) in enumerate(hr):
        x1, y1, x2, y2 = (v * spatial_scale - offset for v in (x1, y1, x2, y2))
        rw, rh = x2 - x1, y2 - y1
        if offset == 0.0:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / output_height, rw / output_width
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / output_height))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / output_width))
        gh, gw = max(gh, 1), max(gw, 1)
        py = np.arange(output_height)[:, None] * bh + y1 + (np.arange(gh)[None, :] + 0.5) * bh / gh
        px = np.arange(output_width)[:, None] * bw + x1 + (np.arange(gw)[None, :] + 0.5) * bw / gw
        yy = py[:, None, :, None] * np.ones((1, output_width, 1, gw))
        xx = px[None, :, None, :] * np.ones((output_height, 1, gh, 1))
        v = _bilinear(hx[hb[r]], yy, xx, corner_max=mode == "max")  # [C, oh, ow, gh, gw]
        out[r] = v.max(axis=(3, 4)) if mode == "max" else v.mean(axis=(3, 4))
    return xp.asarray(out.astype(x.dtype))
