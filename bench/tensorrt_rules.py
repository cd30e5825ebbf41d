"""Cost of the TensorRT rule checks beside a bare op-type lookup, on the same graphs.

    python bench/tensorrt_rules.py [--sizes 10000,100000] [--repeat 3]

Graphs: ``sample_models.synthetic.synthetic_model(n, 0.2)`` (a chain with skip
connections). ``rules``: ``TRTRules().compat(graph)`` -- dispatch, attributes,
types, constant inputs, as the parser checks them. ``op lookup``: the peer, a
set membership test per node on the supported op types of the same table (what
a table without types and constants costs). Best of ``--repeat`` runs; prints
the ratio rules / op lookup.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from partition import load_model
    from partition.tensorrt.rules import TRTRules
    from sample_models.synthetic import synthetic_model
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    supported = {op for op, row in TRTRules().table["ops"].items() if row.get("supported", True)}
    print("nodes   rules      op lookup  ratio")
    for n in (int(s) for s in args.sizes.split(",")):
        graph = load_model(synthetic_model(n, 0.2, seed=1).SerializeToString(), infer_shapes=False)
        rules_t = lookup_t = float("inf")
        for _ in range(args.repeat):
            t = time.perf_counter()
            TRTRules().compat(graph)
            rules_t = min(rules_t, time.perf_counter() - t)
            t = time.perf_counter()
            _ = {node.name: "unsupported" for node in graph.nodes if node.op_type not in supported}
            lookup_t = min(lookup_t, time.perf_counter() - t)
        print(f"{n:<7} {rules_t:8.3f} s {lookup_t:8.3f} s  {rules_t / lookup_t:5.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
