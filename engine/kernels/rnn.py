"""Recurrent kernels: RNN, GRU, LSTM (forward, reverse, bidirectional; layout 0 and 1)."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from . import blas, geometry, native
from .registry import register, to_host

Act = Callable[[Any], Any]


def _activation(xp: Any, name: str, alpha: float | None, beta: float | None) -> Act:
    n = name.lower()
    if n == "sigmoid":
        return lambda v: 1 / (1 + xp.exp(-v))
    if n == "tanh":
        return xp.tanh
    if n == "relu":
        return lambda v: xp.maximum(v, 0)
    if n == "affine":
        return lambda v: (1.0 if alpha is None else alpha) * v + (0.0 if beta is None else beta)
    if n == "leakyrelu":
        return lambda v: xp.where(v >= 0, v, v * (0.01 if alpha is None else alpha))
    if n == "thresholdedrelu":
        return lambda v: xp.where(v > (1.0 if alpha is None else alpha), v, 0)
    if n == "scaledtanh":
        return lambda v: (1.0 if alpha is None else alpha) * xp.tanh((1.0 if beta is None else beta) * v)
    if n == "hardsigmoid":
        return lambda v: xp.clip((0.2 if alpha is None else alpha) * v + (0.5 if beta is None else beta), 0, 1)
    if n == "elu":
        return lambda v: xp.where(v > 0, v, (1.0 if alpha is None else alpha) * (xp.exp(v) - 1))
    if n == "softsign":
        return lambda v: v / (1 + xp.abs(v))
    if n == "softplus":
        return lambda v: xp.logaddexp(v, 0)
    raise ValueError(f"unknown recurrent activation '{name}'")


def _activations(xp: Any, names: list[str] | None, default: list[str], n_dir: int,
                 alphas: list[float] | None, betas: list[float] | None) -> list[list[Act]]:
    """One list of activation functions per direction; alphas/betas are consumed in order."""
    names = list(names) if names else default * n_dir
    per = len(names) // n_dir
    alphas, betas = list(alphas or []), list(betas or [])
    acts = [_activation(xp, nm, alphas[i] if i < len(alphas) else None,
                        betas[i] if i < len(betas) else None) for i, nm in enumerate(names)]
    return [acts[d * per:(d + 1) * per] for d in range(n_dir)]


def _prepare(xp: Any, x: Any, w: Any, b: Any, seq_lens: Any, h0: Any, layout: int, gates: int,
             hidden: int) -> tuple:
    if layout:
        x = xp.swapaxes(x, 0, 1)
    seq, batch = x.shape[:2]
    n_dir = w.shape[0]
    if b is None:
        b = xp.zeros((n_dir, 2 * gates * hidden), dtype=x.dtype)
    if h0 is not None and layout:
        h0 = xp.swapaxes(h0, 0, 1)
    if h0 is None:
        h0 = xp.zeros((n_dir, batch, hidden), dtype=x.dtype)
    lens = np.full(batch, seq) if seq_lens is None else to_host(xp, seq_lens).astype(np.int64)
    return x, b, h0, lens, seq, batch, n_dir


def _projection(xp: Any, x: Any, w: Any, biases: list) -> list:
    """The input projection of every step at once, per direction: one 2-D
    [seq*batch, in] x [in, gates*hidden] GEMM, its bias added (a 3-D operand made
    numpy run one small product per step: 3x slower at seq 100)."""
    seq, batch = x.shape[:2]
    x2 = x.reshape(seq * batch, x.shape[-1])
    return [(x2 @ w[d].T + biases[d]).reshape(seq, batch, -1) for d in range(len(biases))]


def _run_dirs(xp: Any, x: Any, n_dir: int, direction: str, lens: np.ndarray,
              step: Callable[[int, Any, int], None], seq: int) -> None:
    for d in range(n_dir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            step(d, x[t], t)


def _masked(xp: Any, lens: np.ndarray, t: int, reverse: bool, new: Any, old: Any) -> tuple:
    """Past a batch entry's sequence length the state holds and the output is zero."""
    active = xp.asarray((t < lens).reshape(-1, 1))
    return xp.where(active, new, old), xp.where(active, new, 0)


def _finish(xp: Any, ys: Any, states: list[Any], layout: int) -> tuple:
    y = ys  # [seq, n_dir, batch, hidden]
    if layout:
        y = xp.transpose(y, (2, 0, 1, 3))
        states = [xp.swapaxes(s, 0, 1) for s in states]
    return (y, *states)


@register("RNN", since=7)
def rnn(xp: Any, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None, *,
        activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
        clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
        layout: int = 0) -> tuple:
    hidden = geometry.recurrent("RNN", x.shape, w.shape, r.shape, None if b is None else b.shape,
                                 hidden_size=hidden_size, direction=direction, layout=layout)
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 1, hidden)
    acts = _activations(xp, activations, ["Tanh"], n_dir, activation_alpha, activation_beta)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hidden), dtype=x.dtype)
    xw = _projection(xp, x, w, [b[d, :hidden] + b[d, hidden:] for d in range(n_dir)])

    def step(d: int, xt: Any, t: int) -> None:
        pre = xw[d][t] + h[d] @ r[d].T
        if clip is not None:
            pre = xp.clip(pre, -clip, clip)
        h[d], ys[t, d] = _masked(xp, lens, t, False, acts[d][0](pre), h[d])

    _run_dirs(xp, x, n_dir, direction, lens, step, seq)
    return _finish(xp, ys, [h], layout)


@register("GRU", since=7)
def gru(xp: Any, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None, *,
        activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
        clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
        layout: int = 0, linear_before_reset: int = 0) -> tuple:
    hs = geometry.recurrent("GRU", x.shape, w.shape, r.shape, None if b is None else b.shape,
                             hidden_size=hidden_size, direction=direction, layout=layout)
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 3, hs)
    acts = _activations(xp, activations, ["Sigmoid", "Tanh"], n_dir, activation_alpha, activation_beta)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hs), dtype=x.dtype)

    def clipped(v: Any) -> Any:
        return v if clip is None else xp.clip(v, -clip, clip)

    xw = _projection(xp, x, w, [b[d, :3 * hs] for d in range(n_dir)])

    def step(d: int, xt: Any, t: int) -> None:
        f, g = acts[d]
        wx = xw[d][t]  # gate order z, r, h
        rb = b[d, 3 * hs:]
        hp = h[d]
        rz = hp @ r[d, :2 * hs].T + rb[:2 * hs]
        z = f(clipped(wx[:, :hs] + rz[:, :hs]))
        rr = f(clipped(wx[:, hs:2 * hs] + rz[:, hs:]))
        if linear_before_reset:
            cand = g(clipped(wx[:, 2 * hs:] + rr * (hp @ r[d, 2 * hs:].T + rb[2 * hs:])))
        else:
            cand = g(clipped(wx[:, 2 * hs:] + (rr * hp) @ r[d, 2 * hs:].T + rb[2 * hs:]))
        h[d], ys[t, d] = _masked(xp, lens, t, False, (1 - z) * cand + z * hp, hp)

    _run_dirs(xp, x, n_dir, direction, lens, step, seq)
    return _finish(xp, ys, [h], layout)


@register("LSTM", since=7)
def lstm(xp: Any, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None,
         c0: Any = None, p: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
         activations: Any = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int | None = None, input_forget: int = 0, layout: int = 0) -> tuple:
    hs = geometry.recurrent("LSTM", x.shape, w.shape, r.shape, None if b is None else b.shape,
                             hidden_size=hidden_size, direction=direction, layout=layout)
    if (x.shape[0] == 1 and w.shape[0] == 1 and h0 is not None and c0 is not None and not layout
            and p is None and clip is None and not input_forget and activations is None
            and seq_lens is None and x.dtype == w.dtype == r.dtype):
        # A streaming step with its state given (a VAD's call): straight to the step,
        # without the general set-up (~4 us of a ~20 us step).
        y, states = _lstm_step(xp, x, w, r, b, h0, c0.copy(), hs)
        return (y, *states)
    b_in = b  # the caller's bias (or None): what the step weights are cached on
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 4, hs)
    if c0 is not None and layout:
        c0 = xp.swapaxes(c0, 0, 1)
    c = xp.zeros((n_dir, batch, hs), dtype=x.dtype) if c0 is None else c0.copy()
    peep = p is not None  # without peepholes their three products are skipped
    full = seq_lens is None or bool(np.all(lens >= seq))  # no entry ends early: no masking
    if not peep and clip is None and not input_forget and activations is None and full:
        ys, states = _lstm_common(xp, x, w, r, b, b_in, h, c, direction)
        return _finish(xp, ys, states, layout)
    xw = _projection(xp, x, w, [b[d, :4 * hs] + b[d, 4 * hs:] for d in range(n_dir)])
    acts = _activations(xp, activations, ["Sigmoid", "Tanh", "Tanh"], n_dir, activation_alpha,
                        activation_beta)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hs), dtype=x.dtype)
    rt = [r[d].T for d in range(n_dir)]

    def clipped(v: Any) -> Any:
        return v if clip is None else xp.clip(v, -clip, clip)

    def step(d: int, xt: Any, t: int) -> None:
        f, g, hact = acts[d]
        gates = xw[d][t] + h[d] @ rt[d]  # order i, o, f, c
        cd = c[d]
        if peep:
            pi, po, pf = p[d, :hs], p[d, hs:2 * hs], p[d, 2 * hs:]
            i = f(clipped(gates[:, :hs] + pi * cd))
            fg = f(clipped(gates[:, 2 * hs:3 * hs] + pf * cd))
        else:  # i, o, f are adjacent: one activation call for the three
            iof = f(clipped(gates[:, :3 * hs]))
            i, o, fg = iof[:, :hs], iof[:, hs:2 * hs], iof[:, 2 * hs:]
        if input_forget:
            fg = 1 - i
        cell = fg * cd + i * g(clipped(gates[:, 3 * hs:]))
        if peep:
            o = f(clipped(gates[:, hs:2 * hs] + po * cell))
        new_h = o * hact(cell)
        if full:
            c[d] = cell
            h[d] = ys[t, d] = new_h
            return
        c[d], _ = _masked(xp, lens, t, False, cell, cd)
        h[d], ys[t, d] = _masked(xp, lens, t, False, new_h, h[d])

    _run_dirs(xp, x, n_dir, direction, lens, step, seq)
    return _finish(xp, ys, [h, c], layout)


def _lstm_common(xp: Any, x: Any, w: Any, r: Any, b: Any, b_in: Any, h: Any, c: Any,
                 direction: str) -> tuple[Any, list]:
    """The common LSTM (default activations, no peepholes, clip, coupling or early
    ending), layout 0: a streaming step as one product, else ``_lstm_plain`` per
    direction. ``b`` is the bias (zeros if absent), ``b_in`` the caller's (or None)."""
    hs, (seq, n_dir) = r.shape[-1], (x.shape[0], w.shape[0])
    if seq == 1 and n_dir == 1 and x.dtype == w.dtype == r.dtype:
        return _lstm_step(xp, x, w, r, b_in, h, c, hs)
    rt = _scaled_rt(xp, r, hs, x.dtype.type(0.5))  # (dirs, hidden, 4 hidden), cached
    if native.applies(xp, x, w, rt, b):
        return _lstm_native(x, w, b, b_in, rt, h, c, direction)
    biases = [b[d, :4 * hs] + b[d, 4 * hs:] for d in range(n_dir)]
    xw = _projection(xp, x, w, biases)
    if n_dir == 1:
        return _lstm_plain(xp, xw, rt, h, c, seq, direction)
    # One direction after the other: each keeps its recurrent weight in the core's
    # cache for all its steps (both at once: 2 MB at hidden 256, 1.5x slower).
    parts = [_lstm_plain(xp, xw[d:d + 1], rt[d:d + 1], h[d:d + 1], c[d:d + 1], seq,
                         "reverse" if d == 1 and direction == "bidirectional" else direction)
             for d in range(n_dir)]
    ys = xp.concatenate([p[0] for p in parts], axis=1)
    return ys, [xp.concatenate([p[1][k] for p in parts], axis=0) for k in range(2)]


def _lstm_plain(xp: Any, xw: list, rt: Any, h: Any, c: Any, seq: int,
                direction: str) -> tuple[Any, list]:
    """The common LSTM (default activations, no peepholes, clip, coupling or
    early-ending sequences) over the directions of ``h`` advancing together (the
    caller passes one at a time), reverse ones walking their pre-flipped inputs;
    ``rt`` is ``_scaled_rt``'s weight. Returns (Y, [Y_h, Y_c]) in layout 0.

    sigmoid(v) = tanh(v / 2) / 2 + 1/2 exactly, so with the i, o, f columns of
    the recurrent weight and of the input projection pre-scaled by 1/2 one tanh
    over all four gates serves the three sigmoids and the cell candidate; each
    step writes its hidden state straight into the output. 10 array calls a step.
    """
    n_dir, batch, hs = h.shape
    dt = h.dtype
    half = dt.type(0.5)
    reverse = [direction == "reverse" or (direction == "bidirectional" and d == 1)
               for d in range(n_dir)]
    if n_dir == 1:  # xw is this call's own array: scaled in place, no stack
        xs = (xw[0][::-1] if reverse[0] else xw[0])[:, None]
    else:
        xs = xp.stack([xw[d][::-1] if reverse[d] else xw[d] for d in range(n_dir)], axis=1)
    xs[..., :3 * hs] *= half
    ys = xp.empty((seq, n_dir, batch, hs), dtype=dt)
    gates = xp.empty((n_dir, batch, 4 * hs), dtype=dt)
    tmp = xp.empty((n_dir, batch, hs), dtype=dt)
    iof, i, o, f, g = (gates[..., :3 * hs], gates[..., :hs], gates[..., hs:2 * hs],
                       gates[..., 2 * hs:3 * hs], gates[..., 3 * hs:])
    prev = h
    for k in range(seq):
        xp.matmul(prev, rt, out=gates)
        gates += xs[k]                             # order i, o, f, c
        xp.tanh(gates, out=gates)
        iof *= half                                # sigmoid = tanh(v/2)/2 + 1/2
        iof += half
        g *= i                                     # i * g
        c *= f                                     # f * c
        c += g
        xp.tanh(c, out=tmp)
        prev = ys[k]
        xp.multiply(tmp, o, out=prev)
    h = prev.copy() if seq else h
    for d in range(n_dir):
        if reverse[d]:
            ys[:, d] = ys[::-1, d].copy()
    return ys, [h, c]


def directions_in_parallel(xp: Any) -> bool:
    """Whether a bidirectional float32 LSTM runs its two directions on two cores
    itself (the compiled recurrence, numpy): then ``engine/rewrite.py`` need not
    split it into two nodes for the engine's workers."""
    return xp is np and native.available()


def _lstm_native(x: np.ndarray, w: np.ndarray, b: np.ndarray, b_in: Any, rt: np.ndarray,
                 h: np.ndarray, c: np.ndarray, direction: str) -> tuple[np.ndarray, list]:
    """``_lstm_plain``'s maths in compiled code (``native.py``): the input projection
    of every direction as one GEMM (its weights stacked, transposed and pre-scaled
    once), then each direction's recurrence as one slice of the compiled pool, the
    GIL released: a bidirectional LSTM's two directions run on two cores. ``b`` is
    the bias (zeros if absent), ``b_in`` the caller's (what the cache keys on);
    ``c`` is this call's own copy (updated in place)."""
    seq, batch = x.shape[:2]
    n_dir, hs = w.shape[0], rt.shape[1]
    h = h.copy()  # the caller's initial state is read, never written
    ys = np.empty((seq, n_dir, batch, hs), dtype=np.float32)
    x2 = x.reshape(seq * batch, x.shape[-1])
    wt, bias = _input_weights(w, b, b_in, hs)
    with blas.LargeKernel(x2.shape[0] * wt.shape[0] * wt.shape[1]) as ways:
        xw = native.gemm(np, x2, wt, ways) if ways > 1 else None
    if xw is None:
        xw = x2 @ wt
    xw += bias
    dirs = []
    for d in range(n_dir):
        xs = xw[:, d * 4 * hs:(d + 1) * 4 * hs].reshape(seq, batch, 4 * hs)
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        dirs.append((xs if batch == 1 else np.ascontiguousarray(xs), rt[d], h[d], c[d], ys[:, d],
                     reverse))
    with blas.LargeKernel(n_dir * seq * batch * hs * 4 * hs) as ways:
        native.lstm_directions(dirs, ways)
    return ys, [h, c]


def _input_weights(w: np.ndarray, b: np.ndarray, b_in: Any, hs: int) -> tuple[np.ndarray, np.ndarray]:
    """W of every direction stacked and transposed, (input, dirs * 4 hidden), and the
    summed biases (dirs * 4 hidden), the i, o, f columns of each direction halved."""
    def build() -> tuple[np.ndarray, np.ndarray]:
        n_dir = w.shape[0]
        # a copy, always: for an input size of 1 the reshape is a view of W itself, and
        # the halving below wrote into the model's weight (found by the geometry fuzz)
        wt = np.swapaxes(w, 1, 2).transpose(1, 0, 2).reshape(w.shape[2], -1).copy()
        bias = np.concatenate([b[d, :4 * hs] + b[d, 4 * hs:] for d in range(n_dir)])
        for d in range(n_dir):
            wt[:, d * 4 * hs:d * 4 * hs + 3 * hs] *= np.float32(0.5)
            bias[d * 4 * hs:d * 4 * hs + 3 * hs] *= np.float32(0.5)
        return wt, bias
    return _cached("win", (w, b_in), build)


#: ids of weight arrays -> (weak references to them, what was prepared from them). An
#: executor hands an LSTM node the same weight arrays on every run (weights are
#: replaced, never written in place), so a transposed, pre-scaled copy -- a strided
#: 1 MB copy costs ~0.3 ms, more than a streaming step -- is made once per weight.
_CACHE: dict[tuple, tuple[tuple, Any]] = {}
_CACHE_MAX = 64


def _cached(kind: str, objs: tuple, build: Callable[[], Any]) -> Any:
    """``build()``, remembered while every array of ``objs`` (None allowed) lives."""
    key = (kind, *(id(o) for o in objs))
    hit = _CACHE.get(key)
    if hit is not None and all(ref() is o for ref, o in zip(hit[0], objs) if ref is not None):
        return hit[1]
    value = build()
    try:
        refs = tuple(None if o is None else
                     weakref.ref(o, lambda _ref, key=key: _CACHE.pop(key, None)) for o in objs)
    except TypeError:  # an array type without weak references: no cache
        return value
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (refs, value)
    return value


def _scaled_rt(xp: Any, r: Any, hs: int, half: Any) -> Any:
    """R transposed to (dirs, hidden, 4 hidden), its i, o, f columns halved."""
    def build() -> Any:
        rt = xp.swapaxes(r, 1, 2).copy()  # C order, always our own: scaled in place
        rt[..., :3 * hs] *= half
        return rt
    return _cached("rt", (r,), build)


def _step_weights(xp: Any, w: Any, r: Any, b: Any, hs: int, half: Any) -> tuple[Any, Any]:
    """For one step of one direction: [W; R] transposed and stacked, (in + hidden,
    4 hidden), and the summed bias, their i, o, f columns halved."""
    def build() -> tuple[Any, Any]:
        wr = xp.ascontiguousarray(  # (concatenate keeps the transposes' F order otherwise)
            xp.concatenate([xp.swapaxes(w, 1, 2)[0], xp.swapaxes(r, 1, 2)[0]], axis=0))
        bias = (xp.zeros((4 * hs,), dtype=wr.dtype) if b is None
                else b[0, :4 * hs] + b[0, 4 * hs:])
        wr[:, :3 * hs] *= half
        bias[:3 * hs] *= half
        return wr, bias
    return _cached("step", (w, r, b), build)


def _lstm_step(xp: Any, x: Any, w: Any, r: Any, b: Any, h: Any, c: Any,
               hs: int) -> tuple[Any, list]:
    """A streaming step (one time step, one direction) as one product of [x, h] with
    the stacked weights, then the gates as in ``_lstm_plain``: half the calls."""
    half = h.dtype.type(0.5)
    wr, bias = _step_weights(xp, w, r, b, hs, half)
    if native.applies(xp, x, wr, h, c):
        y = np.empty(h.shape[1:], dtype=np.float32)   # numpy float32: one compiled call
        cell = np.ascontiguousarray(c[0])
        native.lstm_step(np.ascontiguousarray(x[0]), np.ascontiguousarray(h[0]), cell, wr, bias, y)
        return y.reshape((1, 1) + y.shape), [y.reshape((1,) + y.shape).copy(), cell[None]]
    gates = xp.concatenate([x[0], h[0]], axis=1) @ wr     # (batch, 4 hidden)
    gates += bias
    xp.tanh(gates, out=gates)
    iof = gates[:, :3 * hs]
    iof *= half
    iof += half
    g = gates[:, 3 * hs:]
    g *= gates[:, :hs]                                   # i * g
    cell = c[0]
    cell *= gates[:, 2 * hs:3 * hs]                      # f * c
    cell += g
    hn = xp.tanh(cell)
    hn *= gates[:, hs:2 * hs]
    return hn.reshape((1, 1) + hn.shape), [hn.reshape((1,) + hn.shape).copy(), c]
