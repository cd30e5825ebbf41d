"""Builders for the control-flow sample models: If, Loop and Scan (the control-flow design's operators).

Every body reads at least one outer-scope tensor, because that implicit input is
what a partitioner most easily gets wrong: it is an edge into the body that no
input list of the control-flow node names.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ._common import GraphBuilder, make_model, tensor_info

IF_SHAPE = [2, 8]
LOOP_WIDTH = 4
MIN_TRIPS, MAX_TRIPS = 1.0, 6.0
RNN_IN, RNN_HIDDEN = 4, 8


def _if_branches(b: GraphBuilder, scaled: str) -> tuple[onnx.GraphProto, onnx.GraphProto]:
    """then: Relu(scaled + bias) * input; else: Sigmoid(-scaled) + bias.

    Both read ``scaled`` (computed in the main graph), the graph input and
    main-graph initializers through outer scope.
    """
    then_bias = b.const("branch/then_bias", 0.1 * b.rng.standard_normal(IF_SHAPE[1]))
    else_bias = b.const("branch/else_bias", 0.1 * b.rng.standard_normal(IF_SHAPE[1]))
    tb = b.child()
    y = tb.op("Add", [scaled, then_bias], "branch/then/add")
    y = tb.op("Relu", [y], "branch/then/relu")
    tb.op("Mul", [y, "input"], "branch/then/mul", outputs=["then_out"])
    then_g = tb.graph("then_branch", [], [tensor_info("then_out", IF_SHAPE)])
    eb = b.child()
    y = eb.op("Neg", [scaled], "branch/else/neg")
    y = eb.op("Sigmoid", [y], "branch/else/sigmoid")
    eb.op("Add", [y, else_bias], "branch/else/add", outputs=["else_out"])
    else_g = eb.graph("else_branch", [], [tensor_info("else_out", IF_SHAPE)])
    return then_g, else_g


def build_if_model(seed: int = 5) -> onnx.ModelProto:
    """If(ReduceSum(input) > 0) with a few ops per branch, then a Tanh after the join."""
    b = GraphBuilder(np.random.default_rng(seed))
    total = b.op("ReduceSum", ["input"], "cond/reduce_sum", keepdims=0)
    zero = b.const("cond/zero", 0.0)
    cond = b.op("Greater", [total, zero], "cond/greater")
    w = b.weight("pre/scale_w", [IF_SHAPE[1]], scale=1.0)
    scaled = b.op("Mul", ["input", w], "pre/scale")
    then_g, else_g = _if_branches(b, scaled)
    y = b.op("If", [cond], "branch/if", outputs=["branch_out"],
             then_branch=then_g, else_branch=else_g)
    b.op("Tanh", [y], "post/tanh", outputs=["output"])
    g = b.graph("if_model", [tensor_info("input", IF_SHAPE)], [tensor_info("output", IF_SHAPE)])
    return make_model(g, "If on ReduceSum(input) > 0; branches read outer-scope tensors.")


def _trip_count(b: GraphBuilder) -> str:
    """int64 trip count = floor(clip(sum|input|, 1, 6)): dynamic but bounded, so
    random float inputs never ask for an enormous loop. The floor is 1, not 0,
    because onnx.reference's Loop cannot stack an empty scan output (it raises on
    zero iterations) and the tests compare against it; onnxruntime runs 0 fine."""
    y = b.op("Abs", ["input"], "trip/abs")
    y = b.op("ReduceSum", [y], "trip/sum", keepdims=0)
    lo = b.const("trip/min", MIN_TRIPS)
    hi = b.const("trip/max", MAX_TRIPS)
    y = b.op("Clip", [y, lo, hi], "trip/clip")
    y = b.op("Floor", [y], "trip/floor")
    return b.op("Cast", [y], "trip/cast", outputs=["trip_count"], to=TensorProto.INT64)


def _loop_body(b: GraphBuilder, decay: str) -> onnx.GraphProto:
    """v_out = Tanh(v_in * decay + float(iter)); scan output = 2 * v_out."""
    scan_scale = b.const("loop/scan_scale", 2.0)
    body = b.child()
    it = body.op("Cast", ["loop/body/iter"], "loop/body/iter_float", to=TensorProto.FLOAT)
    y = body.op("Mul", ["loop/body/v_in", decay], "loop/body/mul_decay")
    y = body.op("Add", [y, it], "loop/body/add_iter")
    v_out = body.op("Tanh", [y], "loop/body/tanh", outputs=["loop/body/v_out"])
    body.op("Identity", ["loop/body/cond_in"], "loop/body/cond_pass",
            outputs=["loop/body/cond_out"])
    body.op("Mul", [v_out, scan_scale], "loop/body/scan_emit", outputs=["loop/body/scan_out"])
    return body.graph(
        "loop_body",
        [tensor_info("loop/body/iter", [], TensorProto.INT64),
         tensor_info("loop/body/cond_in", [], TensorProto.BOOL),
         tensor_info("loop/body/v_in", [LOOP_WIDTH])],
        [tensor_info("loop/body/cond_out", [], TensorProto.BOOL),
         tensor_info("loop/body/v_out", [LOOP_WIDTH]),
         tensor_info("loop/body/scan_out", [LOOP_WIDTH])])


def build_loop_model(seed: int = 6) -> onnx.ModelProto:
    """Loop with a trip count computed from the input, one carried value, one scan output."""
    b = GraphBuilder(np.random.default_rng(seed))
    trips = _trip_count(b)
    decay = b.op("Sigmoid", ["input"], "pre/decay")  # outer-scope tensor read by the body
    body = _loop_body(b, decay)
    # An explicit always-true cond (rather than the legal empty input) because
    # onnx.reference's Loop treats a missing cond as false and runs zero times.
    keep_going = b.const("loop/cond_init", True, dtype=np.bool_)
    v_final = b.op("Loop", [trips, keep_going, "input"], "loop/loop",
                   outputs=["v_final", "v_history"], body=body)
    b.op("Add", [v_final, "input"], "post/add", outputs=["output"])
    g = b.graph("loop_model", [tensor_info("input", [LOOP_WIDTH])],
                [tensor_info("output", [LOOP_WIDTH]),
                 tensor_info("v_history", ["trips", LOOP_WIDTH])])
    return make_model(g, "Loop: dynamic trip count from input, carried value, scan output.")


def _rnn_body(b: GraphBuilder) -> onnx.GraphProto:
    """h_t = Tanh(x_t @ W + h_{t-1} @ R + b); W, R, b live in the main graph."""
    w = b.weight("rnn/W", [RNN_IN, RNN_HIDDEN], scale=0.5)
    r = b.weight("rnn/R", [RNN_HIDDEN, RNN_HIDDEN], scale=0.3)
    bias = b.const("rnn/B", 0.1 * b.rng.standard_normal(RNN_HIDDEN))
    body = b.child()
    xw = body.op("MatMul", ["rnn/step/x_t", w], "rnn/step/matmul_x")
    hr = body.op("MatMul", ["rnn/step/h_prev", r], "rnn/step/matmul_h")
    y = body.op("Add", [xw, hr], "rnn/step/add_xh")
    y = body.op("Add", [y, bias], "rnn/step/add_bias")
    h = body.op("Tanh", [y], "rnn/step/tanh", outputs=["rnn/step/h_new"])
    body.op("Identity", [h], "rnn/step/emit", outputs=["rnn/step/y_t"])
    return body.graph(
        "rnn_step",
        [tensor_info("rnn/step/h_prev", [1, RNN_HIDDEN]),
         tensor_info("rnn/step/x_t", [1, RNN_IN])],
        [tensor_info("rnn/step/h_new", [1, RNN_HIDDEN]),
         tensor_info("rnn/step/y_t", [1, RNN_HIDDEN])])


def build_scan_rnn(seed: int = 7) -> onnx.ModelProto:
    """Elman RNN as Scan over a symbolic-length sequence [T, 1, RNN_IN]."""
    b = GraphBuilder(np.random.default_rng(seed))
    body = _rnn_body(b)
    h0 = b.const("rnn/h0", np.zeros([1, RNN_HIDDEN]))
    h_final = b.op("Scan", [h0, "input"], "rnn/scan", outputs=["h_final", "hidden_seq"],
                   body=body, num_scan_inputs=1)
    b.op("Relu", [h_final], "head/relu", outputs=["output"])
    g = b.graph("scan_rnn", [tensor_info("input", ["T", 1, RNN_IN])],
                [tensor_info("output", [1, RNN_HIDDEN]),
                 tensor_info("hidden_seq", ["T", 1, RNN_HIDDEN])])
    return make_model(g, "Simple RNN with Scan: carried hidden state, per-step scan output.")
