"""The recurrent family (RNN, GRU, LSTM) through its one compiled recurrence
(``engine/kernels/_native_rnn.c``), the numpy path and onnxruntime, on random valid
AND invalid nodes (issue 23): sizes, directions, layouts, sequence lengths, initial
states, clip, linear_before_reset, input_forget, peepholes, activations -- and
W/R/B shapes, ``hidden_size``, activations or lengths that contradict each other.
The three agree, or ours refuse with a ``GeometryError`` where onnxruntime refuses.

``make test-sanitize`` runs this file again on the extension built with
``-fsanitize=address,undefined``; the raw-arguments test hands random arrays straight
to the C entry points for that build to check. No test here needs torch: every model
is built with onnx.helper.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from engine.run_errors import KernelFailure
from engine.executor import Executor
from engine.kernels import native, rnn
from engine.kernels.geometry import GeometryError
from partition import load_model

pytestmark = pytest.mark.cpu_only("the compiled recurrence is the numpy path's")

SANITIZED = bool(os.environ.get("SGLENS_EXPECT_SANITIZED"))
_EXAMPLES = int(os.environ.get("SGLENS_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_EXAMPLES or 150, deadline=None, derandomize=not _EXAMPLES,
                database=None, suppress_health_check=[HealthCheck.too_slow])
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_ACTS = {"RNN": 1, "GRU": 2, "LSTM": 3}
#: Bounded activations: an unbounded one (Relu, Softplus) lets an LSTM's cell grow
#: without limit, where onnxruntime's reverse LSTM answers inf and the forward one not.
BOUNDED = ["Sigmoid", "Tanh", "HardSigmoid", "Softsign", "ScaledTanh"]
COMPILED = native.available()


@st.composite
def recurrent_case(draw) -> dict:
    """One node: half the cases valid, half with one thing wrong (hostile)."""
    op = draw(st.sampled_from(list(GATES)))
    hostile = draw(st.booleans())
    seq, batch, inp, hs = (draw(st.integers(1, 5)), draw(st.integers(1, 3)),
                           draw(st.integers(1, 5)), draw(st.integers(1, 7)))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    case: dict = {"op": op, "seq": seq, "batch": batch, "inp": inp, "hs": hs, "nd": nd,
                  "attrs": {"hidden_size": hs, "direction": direction},
                  "shapes": {"w": [nd, g * hs, inp], "r": [nd, g * hs, hs]},
                  "seed": draw(st.integers(0, 2**31)), "lens": None, "layout": 0}
    if draw(st.booleans()):
        case["shapes"]["b"] = [nd, 2 * g * hs]
    if draw(st.booleans()):
        case["shapes"]["h0"] = [nd, batch, hs]
    if op == "LSTM" and draw(st.booleans()):
        case["shapes"]["c0"] = [nd, batch, hs]
    if op == "LSTM" and draw(st.booleans()):
        case["shapes"]["p"] = [nd, 3 * hs]
    if draw(st.booleans()):
        case["lens"] = [draw(st.integers(0, seq)) for _ in range(batch)]
    if draw(st.booleans()):
        case["attrs"]["clip"] = draw(st.sampled_from([0.3, 1.0, 5.0]))
    if draw(st.booleans()):
        case["attrs"]["activations"] = [draw(st.sampled_from(BOUNDED))
                                        for _ in range(N_ACTS[op] * nd)]
        for key in ("activation_alpha", "activation_beta"):  # shared out in order
            values = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5]), max_size=3))
            if values:
                case["attrs"][key] = values
    if op == "GRU":
        case["attrs"]["linear_before_reset"] = draw(st.integers(0, 1))
    if op == "LSTM" and draw(st.booleans()):
        case["attrs"]["input_forget"] = 1
    if draw(st.integers(0, 3)) == 0:
        case["layout"] = case["attrs"]["layout"] = 1
    if hostile:
        _spoil(draw, case)
    return case


def _spoil(draw, case: dict) -> None:
    """One thing wrong: a shape off by one, a contradicting hidden_size, an unknown or
    miscounted activation, a length past the sequence."""
    what = draw(st.sampled_from(["shape", "hidden", "activation", "count", "lens"]))
    event(f"hostile: {what}")
    if what == "shape":
        name = draw(st.sampled_from(sorted(case["shapes"])))
        axis = draw(st.integers(0, len(case["shapes"][name]) - 1))
        case["shapes"][name][axis] += draw(st.sampled_from([-1, 1]))
        case["shapes"][name][axis] = max(1, case["shapes"][name][axis])
    elif what == "hidden":
        case["attrs"]["hidden_size"] = draw(st.sampled_from([case["hs"] + 1, 0, -1]))
    elif what == "activation":
        case["attrs"]["activations"] = ["Swish"] * (N_ACTS[case["op"]] * case["nd"])
    elif what == "count":
        case["attrs"]["activations"] = ["Tanh"] * (N_ACTS[case["op"]] * case["nd"] + 1)
    else:
        case["lens"] = [case["seq"] + 1] * case["batch"]


def _arrays(case: dict) -> dict:
    """The node's arrays in layout 0 (``_batch_first`` turns them to layout 1)."""
    rng = np.random.default_rng(case["seed"])
    out = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in case["shapes"].items()}
    out["x"] = rng.standard_normal((case["seq"], case["batch"], case["inp"])).astype(np.float32)
    if case["lens"] is not None:
        out["l"] = np.array(case["lens"], np.int32)
    return out


def _batch_first(case: dict, arrays: dict) -> dict:
    """Layout 1's X and initial states (the batch first)."""
    if not case["layout"]:
        return arrays
    return {k: np.ascontiguousarray(v.swapaxes(0, 1)) if k in ("x", "h0", "c0") else v
            for k, v in arrays.items()}


def _as_layout_0(case: dict, outputs: tuple) -> list:
    """Our outputs in layout 0 (onnxruntime runs only layout 0: the same node without
    the attribute is its oracle)."""
    if not case["layout"]:
        return list(outputs)
    return [outputs[0].transpose(1, 2, 0, 3), *(s.swapaxes(0, 1) for s in outputs[1:])]


_ORDER = ["x", "w", "r", "b", "l", "h0", "c0", "p"]


def _model(case: dict, arrays: dict) -> bytes:
    names = [k if k in arrays else "" for k in _ORDER[:8 if case["op"] == "LSTM" else 6]]
    while names[-1] == "":
        names.pop()
    outs = ["y", "y_h", "y_c"][:3 if case["op"] == "LSTM" else 2]
    attrs = {k: v for k, v in case["attrs"].items() if k != "layout"}
    node = helper.make_node(case["op"], names, outs, name="rec", **attrs)
    inits = [numpy_helper.from_array(arrays[k], k) for k in names if k and k != "x"]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(arrays["x"].shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _ours(case: dict, arrays: dict, compiled: bool):
    args = [arrays.get(k) for k in _ORDER[:8 if case["op"] == "LSTM" else 6]]
    kernel = getattr(rnn, case["op"].lower())
    with pytest.MonkeyPatch.context() as mp:
        if not compiled:
            mp.setattr(native, "_lib", None)
        try:
            return kernel(np, *args, **case["attrs"])
        except GeometryError as exc:
            return exc


def _onnxruntime(data: bytes, arrays: dict):
    try:
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": arrays["x"]})
    except Exception as exc:  # noqa: BLE001 - a refusal, whichever stage
        return exc


@FUZZ
@given(recurrent_case())
def test_compiled_numpy_and_onnxruntime_agree_or_all_refuse(case: dict) -> None:
    arrays = _arrays(case)
    ours = _batch_first(case, arrays)
    compiled, plain = _ours(case, ours, True), _ours(case, ours, False)
    event("we refused" if isinstance(plain, GeometryError) else "we answered")
    assert type(compiled) is type(plain), (compiled, plain)
    if isinstance(plain, GeometryError):
        assert str(compiled) == str(plain)
    else:
        for got, want in zip(compiled, plain):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if SANITIZED:  # onnxruntime is not what the sanitizer run checks
        return
    reference = _onnxruntime(_model(case, arrays), arrays)
    if isinstance(plain, GeometryError):
        assert isinstance(reference, Exception), f"we refused ({plain}), onnxruntime answered"
        return
    assert not isinstance(reference, Exception), f"onnxruntime refused ({reference}), we answered"
    for got, want in zip(_as_layout_0(case, plain), reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def _direction(kind: int, seq: int, batch: int, hs: int, **over) -> dict:
    g = (1, 3, 4)[kind]
    f32 = np.float32
    d = {"kind": kind, "xs": np.zeros((seq, batch, g * hs), f32), "rt": np.zeros((hs, g * hs), f32),
         "h": np.zeros((batch, hs), f32), "c": np.zeros((batch, hs), f32) if kind == 2 else None,
         "ys": np.zeros((seq, batch, hs), f32), "lens": None, "p": None, "rbh": None,
         "acts": tuple((1, 0.0, 0.0) for _ in range(kind + 1)), "clip": np.inf, "flags": 0}
    d.update(over)
    return d


def _call(d: dict) -> None:
    native._lib.rnn_directions([tuple(d.values())])


@pytest.mark.skipif(not COMPILED, reason="extension not built")
@pytest.mark.parametrize("over,message", [
    ({"xs": np.zeros((3, 2, 12), np.float64)}, "float32"),
    ({"xs": np.zeros((3, 2, 11), np.float32)}, "xs must be"),
    ({"rt": np.zeros((12, 4), np.float32).T}, "C-contiguous"),
    ({"h": np.zeros((1, 4), np.float32)}, "h must be"),
    ({"c": np.zeros((2, 4), np.float32)}, "c is the LSTM's"),
    ({"ys": np.zeros((3, 2, 5), np.float32)}, "ys must be"),
    ({"lens": np.array([1, 4])}, "outside"),
    ({"lens": np.array([1, 2, 3])}, "one length per batch entry"),
    ({"lens": np.array([1, 2], np.int32)}, "int64"),
    ({"acts": ((1, 0.0, 0.0),)}, "one \\(code, alpha, beta\\) per activation"),
    ({"acts": ((99, 0.0, 0.0), (1, 0.0, 0.0))}, "activation code"),
    ({"clip": float("nan")}, "clip"),
    ({"flags": 4}, "rbh goes with"),
    ({"p": np.zeros(12, np.float32)}, "peepholes are the LSTM's"),
    ({"kind": 7}, "kind must be"),
])
def test_the_compiled_recurrence_refuses_bad_arrays(over: dict, message: str) -> None:
    """Each argument is re-checked in C (a GRU, seq 3, batch 2, hidden 4)."""
    direction = _direction(1, 3, 2, 4)
    direction.update(over)
    with pytest.raises(ValueError, match=message):
        _call(direction)


@pytest.mark.skipif(not COMPILED, reason="extension not built")
def test_a_bad_direction_after_a_good_one_releases_both() -> None:
    """The second direction is refused; the first one's buffers are released (its
    array stays resizable, which a held buffer would forbid)."""
    good, bad = _direction(2, 3, 2, 4), _direction(2, 3, 2, 4, h=np.zeros((2, 4), np.float64))
    with pytest.raises(ValueError, match="float32"):
        native._lib.rnn_directions([tuple(good.values()), tuple(bad.values())])
    good["xs"].resize((1,), refcheck=False)  # BufferError if a view of it were still held
    with pytest.raises(TypeError):
        native._lib.rnn_directions([("not", "a", "direction")])


@pytest.mark.skipif(not COMPILED, reason="extension not built")
@settings(max_examples=_EXAMPLES or 200, deadline=None, derandomize=not _EXAMPLES,
          database=None)
@given(st.integers(0, 2), st.lists(st.integers(0, 6), min_size=10, max_size=10),
       st.integers(0, 7), st.booleans())
def test_raw_arguments_never_crash(kind: int, dims: list, flags: int, strided: bool) -> None:
    """Random, mostly inconsistent sizes straight to the C entry point: it computes
    or raises ValueError, never reads or writes outside a buffer (the sanitizer run)."""
    seq, batch, hs = dims[:3]
    f32 = np.float32
    g = (1, 3, 4)[kind]
    xs = np.ones((dims[3], dims[4], g * dims[5] + (1 if strided else 0)), f32)
    if strided:
        xs = xs[:, :, 1:]
    d = _direction(kind, seq, batch, hs, xs=xs, rt=np.ones((hs, g * dims[6]), f32),
                   h=np.ones((dims[7], hs), f32), flags=flags,
                   ys=np.zeros((dims[8], dims[9], hs), f32),
                   lens=np.minimum(np.arange(batch), seq).astype(np.int64) if flags & 1 else None,
                   rbh=np.ones(hs, f32) if flags & 4 else None,
                   p=np.ones(3 * hs, f32) if kind == 2 and flags & 2 else None)
    try:
        _call(d)
    except ValueError:
        return
    assert np.isfinite(d["ys"]).all()


def _gru_model(rng: np.random.Generator, hidden_size: int, hs: int = 5) -> tuple[bytes, dict]:
    case = {"op": "GRU", "seq": 4, "batch": 2, "inp": 3, "hs": hs, "nd": 2, "layout": 0,
            "attrs": {"hidden_size": hidden_size, "direction": "bidirectional"},
            "shapes": {"w": [2, 3 * hs, 3], "r": [2, 3 * hs, hs], "b": [2, 6 * hs]},
            "seed": int(rng.integers(2**31)), "lens": None}
    arrays = _arrays(case)
    return _model(case, arrays), {"x": arrays["x"]}


#: onnxruntime's C++ exceptions abort a process under AddressSanitizer: its checks
#: are this run's, not the sanitizer run's (which checks compiled against numpy).
_NOT_SANITIZED = pytest.mark.skipif(SANITIZED, reason="onnxruntime under the sanitizer")


@_NOT_SANITIZED
def test_a_gru_runs_compiled_through_the_executor_run_after_run(
        rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    data, feeds = _gru_model(rng, 5)
    calls: list[int] = []
    if COMPILED:
        real = native._lib.rnn_directions
        monkeypatch.setattr(native._lib, "rnn_directions",
                            lambda *a: (calls.append(1), real(*a))[1], raising=False)
    reference = _onnxruntime(data, feeds)
    with Executor(load_model(data)) as ex:
        for _ in range(3):  # the cached weights serve later runs
            got = ex(feeds)
            for name, want in zip(["y", "y_h"], reference):
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=2e-5)
    assert calls or not COMPILED, "the GRU did not run compiled"


@_NOT_SANITIZED
def test_a_contradicting_hidden_size_is_refused_naming_the_node(rng: np.random.Generator) -> None:
    data, feeds = _gru_model(rng, 6)
    assert isinstance(_onnxruntime(data, feeds), Exception)  # onnxruntime refuses it too
    refused = "node 'rec' \\(GRU\\).*hidden_size 6 contradicts"
    with Executor(load_model(data)) as ex, pytest.raises(KernelFailure, match=refused):
        ex(feeds)


def _case(op: str, **attrs) -> dict:
    hs, g = 3, GATES[op]
    return {"op": op, "seq": 4, "batch": 2, "inp": 2, "hs": hs, "nd": 1, "layout": 0,
            "attrs": {"hidden_size": hs, "direction": "forward", **attrs},
            "shapes": {"w": [1, g * hs, 2], "r": [1, g * hs, hs], "h0": [1, 2, hs]},
            "seed": 7, "lens": None}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("acts", [["Relu", "Tanh"], ["Tanh", "Relu"]])
def test_a_forward_rnn_takes_a_pair_of_activations_as_onnxruntime_does(
        acts: list, compiled: bool) -> None:
    """onnxruntime's RNN accepts two names for one direction and uses the first (we
    refused the pair, found by the fuzz)."""
    case = _case("RNN", activations=acts)
    arrays = _arrays(case)
    got = _ours(case, arrays, compiled)
    for g, want in zip(got, _onnxruntime(_model(case, arrays), arrays)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@_NOT_SANITIZED
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("op", list(GATES))
def test_an_empty_sequence_ends_with_zero_states(op: str, compiled: bool) -> None:
    """A batch entry of length 0 ends with Y_h (and Y_c) zero, as onnxruntime answers
    (we returned the initial state)."""
    case = _case(op)
    case["lens"] = [0, 3]
    arrays = _arrays(case)
    got = _ours(case, arrays, compiled)
    assert not np.any(got[1][:, 0])
    for g, want in zip(got, _onnxruntime(_model(case, arrays), arrays)):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
