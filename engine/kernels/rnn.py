"""Recurrent kernels: RNN, GRU, LSTM (forward, reverse, bidirectional; layout 0 and 1)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import device, gemm, geometry, native
from .prepared import prepared
from .registry import register, to_host

Act = Callable[[Any], Any]


#: Activation name (lower case) -> (the compiled recurrence's code, how many of alpha and
#: beta it takes, their defaults). onnxruntime's defaults, which the standard leaves open
#: (Affine and ScaledTanh without alpha and beta are 0 there).
_ACTIVATIONS = {"sigmoid": (0, 0, 0.0, 0.0), "tanh": (1, 0, 0.0, 0.0), "relu": (2, 0, 0.0, 0.0),
                "affine": (3, 2, 0.0, 0.0), "leakyrelu": (4, 1, 0.01, 0.0),
                "thresholdedrelu": (5, 1, 1.0, 0.0), "scaledtanh": (6, 2, 0.0, 0.0),
                "hardsigmoid": (7, 2, 0.2, 0.5), "elu": (8, 1, 1.0, 0.0),
                "softsign": (9, 0, 0.0, 0.0), "softplus": (10, 0, 0.0, 0.0)}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
#: An activation as validated: (name in lower case, alpha, beta), the defaults filled in.
ActSpec = tuple[str, float, float]


def _activation_specs(op: str, names: Any, alphas: Any, betas: Any,
                      n_dir: int) -> list[list[ActSpec]]:
    """One list of activations per direction, checked (onnxruntime refuses an unknown
    name or a count that is not the op's per direction). Alphas and betas go, in
    order, to the activations that take them (as onnxruntime reads them)."""
    default = _DEFAULT_ACTIVATIONS[op]
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names \
        else default * n_dir
    if op == "RNN" and n_dir == 1 and len(names) == 2:
        names = names[:1]  # onnxruntime's RNN takes a pair for one direction, the first used
    if len(names) != len(default) * n_dir:
        raise geometry.GeometryError(
            f"activations {names[:8]} has {len(names)} names; {op} with {n_dir} direction(s) "
            f"takes {len(default) * n_dir} ({', '.join(default)} per direction)")
    alphas, betas = iter(list(alphas or [])), iter(list(betas or []))
    specs = []
    for name in names:
        known = _ACTIVATIONS.get(name.lower())
        if known is None:
            raise geometry.GeometryError(f"unknown recurrent activation '{name[:40]}' (known: "
                                         f"{', '.join(sorted(_ACTIVATIONS))})")
        _, takes, alpha, beta = known
        if takes >= 1:
            alpha = float(next(alphas, alpha))
        if takes == 2:
            beta = float(next(betas, beta))
        specs.append((name.lower(), alpha, beta))
    per = len(default)
    return [specs[d * per:(d + 1) * per] for d in range(n_dir)]


def _activation(xp: Any, spec: ActSpec) -> Act:
    """The numpy/cupy function of one validated activation."""
    n, alpha, beta = spec
    if n == "sigmoid":
        return lambda v: 1 / (1 + xp.exp(-v))
    if n == "tanh":
        return xp.tanh
    if n == "relu":
        return lambda v: xp.maximum(v, 0)
    if n == "affine":
        return lambda v: alpha * v + beta
    if n == "leakyrelu":
        return lambda v: xp.where(v >= 0, v, v * alpha)
    if n == "thresholdedrelu":
        return lambda v: xp.where(v > alpha, v, 0)
    if n == "scaledtanh":
        return lambda v: alpha * xp.tanh(beta * v)
    if n == "hardsigmoid":
        return lambda v: xp.clip(alpha * v + beta, 0, 1)
    if n == "elu":
        return lambda v: xp.where(v > 0, v, alpha * (xp.exp(v) - 1))
    if n == "softsign":
        return lambda v: v / (1 + xp.abs(v))
    return lambda v: xp.logaddexp(v, 0)  # softplus


def _activations(xp: Any, specs: list[list[ActSpec]]) -> list[list[Act]]:
    return [[_activation(xp, s) for s in per_dir] for per_dir in specs]


def _clip(clip: Any) -> float | None:
    """The validated ``clip`` attribute (onnxruntime refuses one that is not > 0)."""
    if clip is None:
        return None
    value = float(clip)
    if not value > 0:  # NaN included
        raise geometry.GeometryError(f"clip {clip} must be a number > 0")
    return value


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
    elif tuple(h0.shape) != (n_dir, batch, hidden):
        raise geometry.GeometryError(f"the initial state has shape {list(h0.shape)} (as layout "
                                     f"0); expected {[n_dir, batch, hidden]}")
    return (x, b, h0, _lengths(xp, seq_lens, seq, batch), seq, batch, n_dir)


def _lengths(xp: Any, seq_lens: Any, seq: int, batch: int) -> np.ndarray:
    """sequence_lens as int64 on the host, checked: one per batch entry, each in [0, seq]."""
    if seq_lens is None:
        return np.full(batch, seq, dtype=np.int64)
    lens = to_host(xp, seq_lens).astype(np.int64)
    if lens.shape != (batch,) or (lens.size and (lens.min() < 0 or lens.max() > seq)):
        raise geometry.GeometryError(f"sequence_lens {lens[:8].tolist()} must hold {batch} "
                                     f"lengths, each in [0, {seq}]")
    return lens


def _projection(xp: Any, x: Any, w: Any, biases: list) -> list:
    """The input projection of every step at once, per direction: one 2-D
    [seq*batch, in] x [in, gates*hidden] GEMM, its bias added (a 3-D operand made
    numpy run one small product per step: 3x slower at seq 100)."""
    seq, batch = x.shape[:2]
    x2 = x.reshape(seq * batch, x.shape[-1])
    return [(gemm.matmul(xp, x2, w[d].T) + biases[d]).reshape(seq, batch, -1) for d in range(len(biases))]


def _run_dirs(xp: Any, x: Any, n_dir: int, direction: str, lens: np.ndarray,
              step: Callable[[int, Any, int], None], seq: int) -> None:
    for d in range(n_dir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            step(d, x[t], t)


def _masked(xp: Any, lens: np.ndarray, t: int, reverse: bool, new: Any, old: Any) -> tuple:
    """Past a batch entry's sequence length the state holds and the output is zero.
    Every entry still running (always, without sequence_lens): nothing to mask, and
    on a device no mask uploaded per step (a GRU's 400 uploads a run)."""
    if lens.size and t < lens.min():
        return new, new
    active = xp.asarray((t < lens).reshape(-1, 1))
    return xp.where(active, new, old), xp.where(active, new, 0)


def _finish(xp: Any, ys: Any, states: list[Any], layout: int,
            lens: np.ndarray | None = None) -> tuple:
    """(Y, the final states) in the node's layout. An entry whose sequence length is 0
    ends with zero states, as onnxruntime answers (``states`` are this call's own)."""
    if lens is not None and lens.size and not lens.all():
        for s in states:
            s[:, xp.asarray(lens == 0)] = 0
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
    specs = _activation_specs("RNN", activations, activation_alpha, activation_beta, w.shape[0])
    clip = _clip(clip)
    b_in = b  # the caller's bias (or None): what the compiled weights are cached on
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 1, hidden)
    if _compiles(xp, x, w, r, b, h):
        return _compiled("RNN", x, w, r, b_in, h, None, None, lens, specs, clip, direction, 0,
                         layout)
    acts = _activations(xp, specs)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hidden), dtype=x.dtype)
    xw = _projection(xp, x, w, [b[d, :hidden] + b[d, hidden:] for d in range(n_dir)])

    def step(d: int, xt: Any, t: int) -> None:
        pre = xw[d][t] + gemm.matmul(xp, h[d], r[d].T)
        if clip is not None:
            pre = xp.clip(pre, -clip, clip)
        h[d], ys[t, d] = _masked(xp, lens, t, False, acts[d][0](pre), h[d])

    _run_dirs(xp, x, n_dir, direction, lens, step, seq)
    return _finish(xp, ys, [h], layout, lens)


@register("GRU", since=7)
def gru(xp: Any, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None, *,
        activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
        clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
        layout: int = 0, linear_before_reset: int = 0) -> tuple:
    hs = geometry.recurrent("GRU", x.shape, w.shape, r.shape, None if b is None else b.shape,
                             hidden_size=hidden_size, direction=direction, layout=layout)
    specs = _activation_specs("GRU", activations, activation_alpha, activation_beta, w.shape[0])
    clip = _clip(clip)
    lbr = geometry._int("linear_before_reset", linear_before_reset or 0)
    if lbr not in (0, 1):
        raise geometry.GeometryError(f"linear_before_reset {lbr} is not 0 or 1")
    b_in = b  # the caller's bias (or None): what the compiled weights are cached on
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 3, hs)
    if _compiles(xp, x, w, r, b, h):
        return _compiled("GRU", x, w, r, b_in, h, None, None, lens, specs, clip, direction,
                         4 * lbr, layout)
    acts = _activations(xp, specs)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hs), dtype=x.dtype)

    def clipped(v: Any) -> Any:
        return v if clip is None else xp.clip(v, -clip, clip)

    xw = _projection(xp, x, w, [b[d, :3 * hs] for d in range(n_dir)])
    fused = _fused_gru_step(xp, x.dtype, specs, clip, lbr, lens, seq)
    if fused is not None:   # on a device: the recurrent GEMM and one kernel per step
        rt = [xp.ascontiguousarray(r[d].T) for d in range(n_dir)]
        rbs = [xp.ascontiguousarray(b[d, 3 * hs:]) for d in range(n_dir)]

        def fused_step(d: int, xt: Any, t: int) -> None:
            fused(xw[d][t], gemm.matmul(xp, h[d], rt[d]), rbs[d], hs, h[d], ys[t, d])
        try:
            _run_dirs(xp, x, n_dir, direction, lens, fused_step, seq)
            return _finish(xp, ys, [h], layout, lens)
        except device.KernelUnavailable:   # it did not compile (at its first call): the general step
            pass

    def step(d: int, xt: Any, t: int) -> None:
        f, g = acts[d]
        wx = xw[d][t]  # gate order z, r, h
        rb = b[d, 3 * hs:]
        hp = h[d]
        rz = gemm.matmul(xp, hp, r[d, :2 * hs].T) + rb[:2 * hs]
        z = f(clipped(wx[:, :hs] + rz[:, :hs]))
        rr = f(clipped(wx[:, hs:2 * hs] + rz[:, hs:]))
        if lbr:
            cand = g(clipped(wx[:, 2 * hs:] + rr * (gemm.matmul(xp, hp, r[d, 2 * hs:].T) + rb[2 * hs:])))
        else:
            cand = g(clipped(wx[:, 2 * hs:] + gemm.matmul(xp, rr * hp, r[d, 2 * hs:].T) + rb[2 * hs:]))
        h[d], ys[t, d] = _masked(xp, lens, t, False, (1 - z) * cand + z * hp, hp)

    _run_dirs(xp, x, n_dir, direction, lens, step, seq)
    return _finish(xp, ys, [h], layout, lens)


def _fused_gru_step(xp: Any, dtype: Any, specs: list[list[ActSpec]], clip: float | None, lbr: int,
                    lens: np.ndarray, seq: int) -> Any:
    """``kernels/device.py:gru_step`` where it computes exactly this GRU: PyTorch's form
    (linear_before_reset), Sigmoid and Tanh, no clip, no sequence ending early."""
    if xp is np or not lbr or clip is not None or (lens.size and lens.min() < seq):
        return None
    if any([a[0].lower() for a in per_dir] != ["sigmoid", "tanh"] for per_dir in specs):
        return None
    return device.gru_step(xp, dtype)


@register("LSTM", since=7)
def lstm(xp: Any, x: Any, w: Any, r: Any, b: Any = None, seq_lens: Any = None, h0: Any = None,
         c0: Any = None, p: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
         activations: Any = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int | None = None, input_forget: int = 0, layout: int = 0) -> tuple:
    hs = geometry.recurrent("LSTM", x.shape, w.shape, r.shape, None if b is None else b.shape,
                             hidden_size=hidden_size, direction=direction, layout=layout)
    clip = _clip(clip)
    if p is not None and tuple(p.shape) != (w.shape[0], 3 * hs):
        raise geometry.GeometryError(f"P has shape {list(p.shape)}; expected "
                                     f"{[w.shape[0], 3 * hs]}")
    if (x.shape[0] == 1 and w.shape[0] == 1 and h0 is not None and c0 is not None and not layout
            and p is None and clip is None and not input_forget and activations is None
            and seq_lens is None and x.dtype == w.dtype == r.dtype
            and h0.shape == c0.shape == (1, x.shape[1], hs)):
        # A streaming step with its state given (a VAD's call): straight to the step,
        # without the general set-up (~4 us of a ~20 us step) -- nor the activations' check:
        # with none named they are the defaults, which nothing can make invalid (2.2 us).
        y, states = _lstm_step(xp, x, w, r, b, h0, c0.copy(), hs)
        return (y, *states)
    specs = _activation_specs("LSTM", activations, activation_alpha, activation_beta, w.shape[0])
    b_in = b  # the caller's bias (or None): what the step weights are cached on
    x, b, h, lens, seq, batch, n_dir = _prepare(xp, x, w, b, seq_lens, h0, layout, 4, hs)
    if c0 is not None and layout:
        c0 = xp.swapaxes(c0, 0, 1)
    if c0 is not None and tuple(c0.shape) != (n_dir, batch, hs):
        raise geometry.GeometryError(f"initial_c has shape {list(c0.shape)} (as layout 0); "
                                     f"expected {[n_dir, batch, hs]}")
    c = xp.zeros((n_dir, batch, hs), dtype=x.dtype) if c0 is None else c0.copy()
    if _compiles(xp, x, w, r, b, h, c, p):
        return _compiled("LSTM", x, w, r, b_in, h, c, p, lens, specs, clip, direction,
                         2 * bool(input_forget), layout)
    peep = p is not None  # without peepholes their three products are skipped
    full = bool(np.all(lens >= seq))  # no entry ends early: no masking
    if not peep and clip is None and not input_forget and activations is None and full:
        ys, states = _lstm_common(xp, x, w, r, b, b_in, h, c, direction)
        return _finish(xp, ys, states, layout)
    xw = _projection(xp, x, w, [b[d, :4 * hs] + b[d, 4 * hs:] for d in range(n_dir)])
    acts = _activations(xp, specs)
    h = h.copy()
    ys = xp.zeros((seq, n_dir, batch, hs), dtype=x.dtype)
    rt = [r[d].T for d in range(n_dir)]

    def clipped(v: Any) -> Any:
        return v if clip is None else xp.clip(v, -clip, clip)

    def step(d: int, xt: Any, t: int) -> None:
        f, g, hact = acts[d]
        gates = xw[d][t] + gemm.matmul(xp, h[d], rt[d])  # order i, o, f, c
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
    return _finish(xp, ys, [h, c], layout, lens)


def _lstm_common(xp: Any, x: Any, w: Any, r: Any, b: Any, b_in: Any, h: Any, c: Any,
                 direction: str) -> tuple[Any, list]:
    """The common LSTM (default activations, no peepholes, clip, coupling or early
    ending), layout 0: a streaming step as one product, else ``_lstm_plain`` per
    direction. ``b`` is the bias (zeros if absent), ``b_in`` the caller's (or None)."""
    hs, (seq, n_dir) = r.shape[-1], (x.shape[0], w.shape[0])
    if seq == 1 and n_dir == 1 and x.dtype == w.dtype == r.dtype:
        return _lstm_step(xp, x, w, r, b_in, h, c, hs)
    rt = _scaled_rt(xp, r, hs, x.dtype.type(0.5))  # (dirs, hidden, 4 hidden), cached
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
    fused = device.lstm_step(xp, dt)   # on a device: the recurrent GEMM and one kernel a step
    for k in range(seq):
        gemm.matmul(xp, prev, rt, out=gates)
        if fused is not None:
            try:
                fused(gates, xs[k], hs, 4 * hs, c, ys[k])
                prev = ys[k]
                continue
            except device.KernelUnavailable:   # it did not compile (at the first step): the xp form
                fused = None
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
    """Whether a bidirectional float32 LSTM runs as one compiled call (numpy, the
    module built): then ``engine/rewrite.py`` need not split it into two nodes."""
    return xp is np and native.available()


_KINDS = {"RNN": 0, "GRU": 1, "LSTM": 2}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _compiles(xp: Any, *arrays: Any) -> bool:
    """Whether ``_native_rnn.c`` takes these arrays (numpy float32, the module built)."""
    return native.applies(xp, *arrays) and hasattr(native._lib, "rnn_directions")


def _compiled(op: str, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
              h: np.ndarray, c: np.ndarray | None, p: np.ndarray | None, lens: np.ndarray,
              specs: list[list[ActSpec]], clip: float | None, direction: str, flags: int,
              layout: int) -> tuple:
    """Any RNN, GRU or LSTM (layout-0 views from ``_prepare``) through the one compiled
    recurrence: the input projection of every direction as one GEMM (W stacked and
    transposed once per weight), then each direction as one compiled loop."""
    seq, batch = x.shape[:2]
    n_dir, hs = w.shape[0], r.shape[-1]
    gw = _GATES[op] * hs
    lbr = bool(flags & 4)
    wt, bias, rt, rbh = _compiled_weights(op, w, r, b, lbr)
    xw = x.reshape(seq * batch, x.shape[-1]) @ wt  # numpy only: (seq * batch, dirs * gates * hidden)
    xw += bias
    xw = xw.reshape(seq, batch, n_dir, gw)
    ys = np.empty((seq, n_dir, batch, hs), dtype=np.float32)
    h = np.array(h, dtype=np.float32, order="C")  # our own: the caller's is read, never written
    c = None if c is None else np.ascontiguousarray(c)
    masked = None if bool(np.all(lens >= seq)) else np.ascontiguousarray(lens, dtype=np.int64)
    codes = [tuple((_ACTIVATIONS[n][0], a, be) for n, a, be in per_dir) for per_dir in specs]
    dirs = []
    for d in range(n_dir):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        dirs.append((_KINDS[op], xw[:, :, d], rt[d], h[d], None if c is None else c[d], ys[:, d],
                     masked, None if p is None else np.ascontiguousarray(p[d]),
                     None if rbh is None else rbh[d], codes[d],
                     np.inf if clip is None else clip, flags | int(reverse)))
    try:
        native._lib.rnn_directions(dirs)
    except ValueError as exc:  # the C side's own check; Python's should have caught it first
        raise geometry.GeometryError(str(exc)) from None
    return _finish(np, ys, [h] if c is None else [h, c], layout, lens)


def _compiled_weights(op: str, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                      lbr: bool) -> tuple:
    """W of every direction stacked and transposed, (input, dirs * gates * hidden); the
    bias added to the projection (W's and R's, but for the GRU's h gate under
    linear_before_reset, whose R bias ``rbh`` goes inside the reset product); R
    transposed per direction, (dirs, hidden, gates * hidden). Made once per weight."""
    hs = r.shape[-1]
    gw = _GATES[op] * hs

    def build() -> tuple:
        # a copy, always: for an input size of 1 the reshape is a view of W itself
        wt = np.swapaxes(w, 1, 2).transpose(1, 0, 2).reshape(w.shape[2], -1).copy()
        bb = np.zeros((w.shape[0], 2 * gw), np.float32) if b is None else b
        bias = (bb[:, :gw] + bb[:, gw:]).astype(np.float32)
        rbh = None
        if op == "GRU" and lbr:
            bias[:, 2 * hs:] = bb[:, 2 * hs:gw]
            rbh = np.ascontiguousarray(bb[:, gw + 2 * hs:])
        rt = np.ascontiguousarray(np.swapaxes(r, 1, 2))
        return wt, bias.reshape(-1), rt, rbh
    return prepared(f"compiled-{op}-{lbr}", (w, r, b), build)


def _scaled_rt(xp: Any, r: Any, hs: int, half: Any) -> Any:
    """R transposed to (dirs, hidden, 4 hidden), its i, o, f columns halved."""
    def build() -> Any:
        rt = xp.swapaxes(r, 1, 2).copy()  # C order, always our own: scaled in place
        rt[..., :3 * hs] *= half
        return rt
    return prepared("rt", (r,), build)


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
    return prepared("step", (w, r, b), build)


def _lstm_step(xp: Any, x: Any, w: Any, r: Any, b: Any, h: Any, c: Any,
               hs: int) -> tuple[Any, list]:
    """A streaming step (one time step, one direction) as one product of [x, h] with
    the stacked weights, then the gates as in ``_lstm_plain``: half the calls."""
    half = h.dtype.type(0.5)
    wr, bias = _step_weights(xp, w, r, b, hs, half)
    if native.applies(xp, x, wr, h, c):
        y = np.empty(h.shape[1:], dtype=np.float32)   # numpy float32: one compiled call
        cell = np.ascontiguousarray(c[0])
        native._lib.lstm_step_f32(np.ascontiguousarray(x[0]), np.ascontiguousarray(h[0]), cell, wr,
                                  bias, y)
        return y.reshape((1, 1) + y.shape), [y.reshape((1,) + y.shape).copy(), cell[None]]
    gates = gemm.matmul(xp, xp.concatenate([x[0], h[0]], axis=1), wr)     # (batch, 4 hidden)
    fused = device.lstm_step(xp, h.dtype)
    if fused is not None and c.flags.c_contiguous:
        hn = xp.empty(h.shape[1:], dtype=h.dtype)
        try:
            fused(gates, bias, hs, 0, c[0], hn)   # the cell state updated in place, as below
            return hn.reshape((1, 1) + hn.shape), [hn.reshape((1,) + hn.shape).copy(), c]
        except device.KernelUnavailable:   # it did not compile: the xp form
            pass
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
