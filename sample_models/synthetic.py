"""Synthetic model-shaped DAGs for benchmarks and property tests.

``synthetic_model``: a long chain with skip connections, sized by node count
(100k nodes build in well under the few seconds a benchmark can afford).
``random_dag_model``: a small random DAG for hypothesis property tests.

Both use ops whose support a test or benchmark decides by op type: nodes whose
op is in ``UNSUPPORTED_OPS`` are the ones a backend under test should reject.
Nothing in ONNX or onnxruntime makes them special; they all run on CPU.

    python -m sample_models.synthetic N OUT.onnx [--unsupported 0.2] [--seed 0]
"""
from __future__ import annotations

import argparse
from typing import Sequence

import numpy as np
import onnx
from onnx import helper

from ._common import make_model, tensor_info

# Op types a test/bench treats as "unsupported by the backend". Chosen because they
# are bounded (no overflow in long chains), run in onnxruntime and onnx.reference,
# and appear in no other role in these generators' supported op lists.
UNSUPPORTED_OPS: tuple[str, ...] = ("Sin", "Cos", "Erf")
# Ops the chain uses for its "supported" nodes. Mul multiplies by the graph input:
# the other ops are contractions, so without it a long chain's output converges to
# a constant and a reference comparison could not see a wrong value mid-chain.
SUPPORTED_CHAIN_OPS: tuple[str, ...] = ("Relu", "Sigmoid", "Tanh", "Mul")
SYNTH_SHAPE = [1, 8]
DAG_SHAPE = [2, 3]
DEFAULT_DAG_OPS: tuple[str, ...] = ("Add", "Mul", "Relu", "Sigmoid", "Sin", "Sum")

_UNARY = {"Relu", "Sigmoid", "Tanh", "Sin", "Cos", "Erf", "Neg", "Abs", "Exp", "Softsign"}
_BINARY = {"Add", "Mul", "Sub", "Div"}
_VARIADIC = {"Sum", "Max", "Min", "Mean"}


def _node(op_type: str, inputs: Sequence[str], output: str, name: str) -> onnx.NodeProto:
    """A NodeProto built field by field: ~3x faster than helper.make_node at 100k nodes."""
    node = onnx.NodeProto()
    node.op_type = op_type
    node.name = name
    node.input.extend(inputs)
    node.output.append(output)
    return node


def _skip_mask(n_nodes: int, skip_every: int) -> np.ndarray:
    """Node i is a skip Add when it is the last of each group of ``skip_every``
    and a value ``skip_every`` steps back exists."""
    idx = np.arange(n_nodes)
    if skip_every < 2:
        return np.zeros(n_nodes, dtype=bool)
    return (idx % skip_every == skip_every - 1) & (idx >= skip_every)


def _node_kinds(n_nodes: int, unsupported_fraction: float, skip_every: int,
                rng: np.random.Generator) -> list[str]:
    """Op type per node: skip Adds fixed by position, then exactly
    round(n * fraction) unsupported nodes (capped by the non-skip count) drawn
    among the rest, the others from SUPPORTED_CHAIN_OPS."""
    skip = _skip_mask(n_nodes, skip_every)
    free = np.flatnonzero(~skip)
    n_unsup = min(int(round(n_nodes * unsupported_fraction)), free.size)
    unsup_idx = rng.choice(free, size=n_unsup, replace=False) if n_unsup else free[:0]
    kinds = np.asarray(SUPPORTED_CHAIN_OPS, dtype=object)[
        rng.integers(0, len(SUPPORTED_CHAIN_OPS), n_nodes)]
    kinds[unsup_idx] = np.asarray(UNSUPPORTED_OPS, dtype=object)[
        rng.integers(0, len(UNSUPPORTED_OPS), n_unsup)]
    kinds[skip] = "Add"
    return kinds.tolist()


def synthetic_model(n_nodes: int, unsupported_fraction: float = 0.2, skip_every: int = 4,
                    seed: int = 0) -> onnx.ModelProto:
    """A chain of ``n_nodes`` elementwise nodes on a [1, 8] float32 tensor.

    Node i consumes node i-1's output (the graph input for i = 0). Every
    ``skip_every``-th node is instead Add(previous, value ``skip_every`` steps
    back) (``skip_every`` < 2 disables skips). Node names are scoped
    ``stage<i//1024>/block<(i//32)%32>/<op>_<i>`` for hierarchical views; the last
    output is ``output``. Not checked here: at 100k nodes the checker dominates.
    """
    if n_nodes < 1:
        raise ValueError("n_nodes must be >= 1")
    if not 0.0 <= unsupported_fraction <= 1.0:
        raise ValueError("unsupported_fraction must be in [0, 1]")
    rng = np.random.default_rng(seed)
    kinds = _node_kinds(n_nodes, unsupported_fraction, skip_every, rng)
    values = ["input"] + [f"t{i}" for i in range(n_nodes - 1)] + ["output"]
    nodes: list[onnx.NodeProto] = []
    for i, op in enumerate(kinds):
        prev = values[i]
        if op == "Add":
            inputs = [prev, values[i - skip_every]]
        elif op == "Mul":
            inputs = [prev, "input"]
        else:
            inputs = [prev]
        name = f"stage{i // 1024}/block{(i // 32) % 32}/{op.lower()}_{i}"
        nodes.append(_node(op, inputs, values[i + 1], name))
    graph = helper.make_graph(nodes, f"synthetic_{n_nodes}",
                              [tensor_info("input", SYNTH_SHAPE)],
                              [tensor_info("output", SYNTH_SHAPE)])
    doc = (f"synthetic chain: n={n_nodes} unsupported={unsupported_fraction} "
           f"skip_every={skip_every} seed={seed}; unsupported ops {UNSUPPORTED_OPS}")
    return make_model(graph, doc)


def _arity(op: str, max_inputs: int, rng: np.random.Generator) -> int:
    if op in _UNARY:
        return 1
    if op in _BINARY:
        return 2
    if op in _VARIADIC:
        return int(rng.integers(1, max_inputs + 1))
    raise ValueError(f"random_dag_model: unknown op {op!r}")


def random_dag_model(n_nodes: int, seed: int = 0, ops: Sequence[str] = DEFAULT_DAG_OPS,
                     max_inputs: int = 3, n_inputs: int = 2) -> onnx.ModelProto:
    """A random DAG of ``n_nodes`` elementwise nodes, all tensors [2, 3] float32.

    Graph inputs are ``x0..x{n_inputs-1}``. Each node takes 1..max_inputs inputs
    (unary ops 1, Add/Mul/Sub/Div 2, Sum/Max/Min/Mean 1..max_inputs) drawn among
    the graph inputs and earlier outputs; the first input is the newest tensor
    half the time so graphs get depth. The same tensor may be drawn twice
    (e.g. Mul(v, v)) on purpose: duplicate edges are a case graph code must handle.
    Every node output nobody consumes becomes a graph output, in node order.
    """
    if n_nodes < 1 or n_inputs < 1 or max_inputs < 1:
        raise ValueError("n_nodes, n_inputs and max_inputs must be >= 1")
    usable = [op for op in ops if not (op in _BINARY and max_inputs < 2)]
    if not usable:
        raise ValueError("no op in `ops` fits max_inputs")
    rng = np.random.default_rng(seed)
    avail = [f"x{j}" for j in range(n_inputs)]
    used: set[str] = set()
    nodes: list[onnx.NodeProto] = []
    for i in range(n_nodes):
        op = usable[int(rng.integers(0, len(usable)))]
        picks = rng.integers(0, len(avail), _arity(op, max_inputs, rng)).tolist()
        if rng.random() < 0.5:
            picks[0] = len(avail) - 1
        inputs = [avail[p] for p in picks]
        used.update(inputs)
        out = f"v{i}"
        nodes.append(_node(op, inputs, out, f"dag/{op.lower()}_{i}"))
        avail.append(out)
    outputs = [tensor_info(n.output[0], DAG_SHAPE) for n in nodes if n.output[0] not in used]
    graph = helper.make_graph(nodes, f"random_dag_{n_nodes}_{seed}",
                              [tensor_info(f"x{j}", DAG_SHAPE) for j in range(n_inputs)],
                              outputs)
    return make_model(graph, f"random DAG n={n_nodes} seed={seed} ops={tuple(usable)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a synthetic chain-with-skips model.")
    parser.add_argument("n_nodes", type=int)
    parser.add_argument("out", help="output .onnx path")
    parser.add_argument("--unsupported", type=float, default=0.2,
                        help=f"fraction of nodes whose op is in {UNSUPPORTED_OPS}")
    parser.add_argument("--skip-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="run onnx.checker (slow for big N)")
    args = parser.parse_args(argv)
    model = synthetic_model(args.n_nodes, args.unsupported, args.skip_every, args.seed)
    if args.check:
        onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, args.out)
    print(f"{args.out}: {len(model.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
