"""The ai.onnx.preview.training optimizers: Adagrad, Momentum, Adam (one update step).

Inputs are R (learning rate), T (step count), then the groups of tensors the spec
lists (X..., G..., then the optimizer's state tensors); outputs the updated X...
then the updated state. Written against ``xp``; R and T are scalars read on the host.
"""

from __future__ import annotations

from typing import Any

from .registry import register, to_host

DOMAIN = "ai.onnx.preview.training"


def _scalar(xp: Any, v: Any) -> float:
    return float(to_host(xp, v).reshape(-1)[0])


def _groups(tensors: tuple, k: int) -> list[tuple]:
    if len(tensors) % k:
        raise ValueError(f"expected {k} groups of equal size after R and T, got {len(tensors)} tensors")
    n = len(tensors) // k
    return [tuple(tensors[g * n + i] for g in range(k)) for i in range(n)]


@register("Adagrad", domain=DOMAIN)
def adagrad(xp: Any, r: Any, t: Any, *tensors: Any, decay_factor: float = 0.0, epsilon: float = 1e-6,
            norm_coefficient: float = 0.0) -> tuple:
    rate = _scalar(xp, r) / (1 + _scalar(xp, t) * decay_factor)
    xs, hs = [], []
    for x, g, h in _groups(tensors, 3):
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        xs.append((x - rate * g_reg / (xp.sqrt(h_new) + epsilon)).astype(x.dtype))
        hs.append(h_new.astype(h.dtype))
    return (*xs, *hs)


@register("Momentum", domain=DOMAIN)
def momentum(xp: Any, r: Any, t: Any, *tensors: Any, alpha: float, beta: float, mode: str,
             norm_coefficient: float) -> tuple:
    rate, step = _scalar(xp, r), _scalar(xp, t)
    beta_adj = beta if step > 0 else 1.0
    xs, vs = [], []
    for x, g, v in _groups(tensors, 3):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_adj * g_reg
        if mode == "nesterov":
            x_new = x - rate * (g_reg + alpha * v_new)
        elif mode == "standard":
            x_new = x - rate * v_new
        else:
            raise ValueError(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
        xs.append(x_new.astype(x.dtype))
        vs.append(v_new.astype(v.dtype))
    return (*xs, *vs)


@register("Adam", domain=DOMAIN)
def adam(xp: Any, r: Any, t: Any, *tensors: Any, alpha: float = 0.9, beta: float = 0.999,
         epsilon: float = 1e-6, norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0) -> tuple:
    rate, step = _scalar(xp, r), _scalar(xp, t)
    if step > 0:
        rate = rate * (1 - beta ** step) ** 0.5 / (1 - alpha ** step)
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(tensors, 4):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        x_new = x - rate * (v_new / (xp.sqrt(h_new) + epsilon))
        xs.append(((1 - norm_coefficient_post) * x_new).astype(x.dtype))
        vs.append(v_new.astype(v.dtype))
        hs.append(h_new.astype(h.dtype))
    return (*xs, *vs, *hs)
