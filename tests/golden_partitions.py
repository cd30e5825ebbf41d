"""The graphs and backends of the partition golden test, and the writer of its fixture.

``tests/data/partition_golden.json`` holds the partitions (subgraphs with their
nodes in graph order, the cycles avoided with their witness paths and excluded
node) that the partitioner produced on these
graphs before the pass driver was rewritten for speed (commit 93f6955). The test
``tests/test_partition_golden.py`` asserts that today's code gives the same.

    .venv/bin/python tests/golden_partitions.py   # rewrite the fixture (only on purpose)
    .venv/bin/python tests/golden_partitions.py --add-missing   # record new cases, keep the rest
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "partition_golden.json"
SAMPLES = ("conv_bn_relu_chain", "if_model", "loop_model", "mlp", "resnet_small", "scan_rnn",
           "transformer_block", "trt_cycle")
DAG_OPS = ("Relu", "Sin", "Add", "Mul", "Exp", "Conv", "BatchNormalization", "Det")
DEFAULT_OPS = ("Relu", "Add", "Mul", "Exp", "Conv", "BatchNormalization")


def random_dag(seed: int, n: int):
    """A random DAG of ``n`` nodes (1-3 inputs each, reads biased to recent tensors)."""
    from partition import Graph, Node
    rng = random.Random(seed)
    nodes, tensors = [], ["x"]
    for i in range(n):
        k = rng.randint(1, 3)
        ins = tuple(tensors[max(0, len(tensors) - 1 - int(rng.expovariate(0.3)))] if rng.random() < 0.8
                    else rng.choice(tensors) for _ in range(k))
        nodes.append(Node(f"n{i}", rng.choice(DAG_OPS), ins, (f"t{i}",)))
        tensors.append(f"t{i}")
    used = {t for node in nodes for t in node.inputs}
    outputs = [t for t in tensors[1:] if t not in used] or [tensors[-1]]
    rng.shuffle(outputs)
    return Graph(f"dag{seed}", nodes, ["x"], outputs)


def cases() -> Iterator[tuple[str, Any]]:
    """(case name, graph) for every graph of the fixture."""
    from partition import load_model
    from sample_models.synthetic import synthetic_model
    for seed in range(40):
        yield f"dag{seed}", random_dag(seed, 8 + seed * 3)
    for name in SAMPLES:
        yield name, load_model(str(ROOT / "sample_models" / f"{name}.onnx"))
    for n, seed in ((500, 1), (3000, 0)):
        yield f"chain{n}_s{seed}", load_model(synthetic_model(n, 0.2, seed=seed).SerializeToString(),
                                              infer_shapes=False)


#: the older TensorRT releases whose tables are recorded on the sample models (10.1, the default, everywhere)
OLDER_RELEASES = ("8.5", "8.6", "10.0")


def backends(graph, case: str = "") -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(label, backend, options) to run on ``graph`` (case ``case``)."""
    from sample_models.synthetic import UNSUPPORTED_OPS
    ops = sorted({n.op_type for n in graph.nodes})
    yield "default", "default", {"ops": [o for o in ops if o in DEFAULT_OPS or o not in
                                         (*DAG_OPS, *UNSUPPORTED_OPS, "Transpose", "Softmax", "If", "Loop")]}
    yield "default_half", "default", {"ops": ops[::2] or ops}
    yield "conv_bn", "conv_bn", {}
    yield "conv_bn_relu", "conv_bn_relu", {}
    yield "tensorrt", "tensorrt", {"fallback_ops": list(UNSUPPORTED_OPS) + ["Exp"]}
    yield "tensorrt_min3", "tensorrt", {"min_size": 3, "fallback_ops": ["Sin"]}
    if case in SAMPLES:  # each release from its own table: the partition it gives, with every reason
        for release in OLDER_RELEASES:
            yield f"tensorrt_{release}", "tensorrt", {"trt_version": release}
        for release in (*OLDER_RELEASES, "10.1"):  # the DLA regions (loadables), every GPU-fallback reason
            yield f"tensorrt_dla_{release}", "tensorrt", {"trt_version": release, "trt_target": "dla"}


def with_reasons(case: str) -> bool:
    """Reasons are recorded for the samples and the 20 smallest DAGs (to keep the file small)."""
    return case in SAMPLES or (case.startswith("dag") and int(case[3:]) < 20)


def record(result, reasons: bool) -> dict[str, Any]:
    """Compact: nodes by their position in the model (the names left out and the
    boundary tensors follow from the members); the reasons only for small graphs."""
    pos = result.original.index
    extra = {"reasons": {str(pos[n]): r for n, r in result.excluded.items()}} if reasons else {}
    return {**extra, "subgraphs": [[s.id, s.property, [pos[n] for n in s.nodes]] for s in result.subgraphs],
            "cycles": [[c["property"], pos[c["seed"]], [pos[n] for n in c["path"]],
                        None if c["excluded"] is None else pos[c["excluded"]]] for c in result.cycles]}


def compute() -> dict[str, Any]:
    from partition import partition
    out: dict[str, Any] = {}
    for case, graph in cases():
        for label, backend, options in backends(graph, case):
            out[f"{case}/{label}"] = record(partition(graph, backend, **options), with_reasons(case))
    return out


def add_missing() -> dict[str, Any]:
    """The fixture with the entries it lacks computed (the recorded ones kept as they are)."""
    from partition import partition
    data = json.loads(FIXTURE.read_text())
    for case, graph in cases():
        for label, backend, options in backends(graph, case):
            if f"{case}/{label}" not in data:
                data[f"{case}/{label}"] = record(partition(graph, backend, **options), with_reasons(case))
    return data


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    data = add_missing() if "--add-missing" in sys.argv else compute()
    FIXTURE.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True))
    print(f"{len(data)} partitions -> {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
