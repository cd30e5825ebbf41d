"""Partitioning time on model-shaped synthetic graphs, beside torch.fx's CapabilityBasedPartitioner.

    python bench/partition.py [--sizes 1000,10000,100000] [--fx-timeout 60] [--teaching-max 2000]
                              [--profile default|tensorrt|load|cli] [--no-cli]

Graphs: ``sample_models.synthetic.synthetic_model(n, 0.2)``: a chain with skip
connections, 20% of the nodes unsupported (Sin/Cos/Erf). The same supported
set everywhere: the ``default`` backend gets ``--ops`` = the other op types;
``tensorrt`` gets ``fallback_ops`` = Sin/Cos/Erf (TensorRT itself supports
them); torch.fx gets an ``OperatorSupport`` accepting the same ops. Trace off.

- ``default``: the generic pass of the subgraph API design (no minimum size).
- ``tensorrt fast`` / ``tensorrt teaching``: the TensorRT integration design's pass (min size 2);
  teaching (the TensorRT design's quadratic groups) only up to ``--teaching-max`` nodes.
- ``torch.fx``: ``CapabilityBasedPartitioner.propose_partitions()`` with
  ``allows_single_node_partition=False``, in a subprocess killed after
  ``--fx-timeout`` seconds (it took 295 s at 4k nodes on this kind of machine).

Times are the partitioner's own (``PartitionResult.seconds``, which includes
building the pass state), not model loading; ``cpu s`` is the process CPU time of
the same call (on a shared machine wall time can be several times the CPU time). Two more rows per size:

- ``load (IR import)``: ``load_model(path)`` of the saved model (``onnx.load``,
  shape inference, building our IR), beside ``onnx.load`` alone. Its ``cpu s``
  includes the shape-inference child the import forks for large models.
- ``cli --json (whole)``: wall time of a fresh ``python -m sglens partition MODEL --backend default
  --ops ... --json`` process run in the checkout (start-up, load, partition, report,
  JSON, exit); ``cpu s`` is its user+sys, children included.

``--profile WHAT`` runs cProfile on one of them at the largest size and prints
the top functions (by own time) instead of the table; ``--profile cli`` runs the
whole command in this process (stdout to /dev/null).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _graph(n: int, seed: int):
    from partition import load_model
    from sample_models.synthetic import synthetic_model
    return load_model(synthetic_model(n, 0.2, seed=seed).SerializeToString(), infer_shapes=False)


def _model_file(n: int, seed: int, folder: Path) -> Path:
    import onnx

    from sample_models.synthetic import synthetic_model
    path = folder / f"synthetic_{n}_{seed}.onnx"
    if not path.exists():
        onnx.save_model(synthetic_model(n, 0.2, seed=seed), str(path))
    return path


def _run_load(path: Path) -> dict:
    import onnx

    from partition import load_model
    start = time.perf_counter()
    onnx.load(str(path))
    proto = time.perf_counter() - start
    start, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    graph = load_model(str(path))
    # cpu: this process's and the shape-inference child's (partition/onnx_io.py forks one at this size)
    cpu = time.process_time() - cpu + _children_cpu() - children
    return {"seconds": time.perf_counter() - start, "cpu": cpu, "onnx_load": proto,
            "partitions": 0, "covered": len(graph.nodes)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli_command(path: Path, ops: list[str]) -> list[str]:
    return ["partition", str(path), "--backend", "default", "--ops", ",".join(ops), "--json"]


def _run_cli(path: Path, ops: list[str]) -> dict:
    # ``python -m sglens`` from the checkout (cwd): the code of this tree, whatever is installed.
    # A fresh process each time: its wall time is what a user waits for (start-up and exit included).
    cmd = [sys.executable, "-m", "sglens", *_cli_command(path, ops)]
    start, before = time.perf_counter(), _children_cpu()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    cpu = _children_cpu() - before  # the command's and its own children's (shape inference)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    data = json.loads(done.stdout)
    return {"seconds": seconds, "cpu": cpu, "partitions": len(data["subgraphs"]),
            "covered": data["summary"]["nodes_covered"]}


def _profile(what: str, n: int, seed: int, ops: list[str], folder: Path) -> None:
    import cProfile
    import pstats

    from sample_models.synthetic import UNSUPPORTED_OPS
    graph = _graph(n, seed)
    path = _model_file(n, seed, folder)
    calls = {"default": lambda: _run_ours(graph, "default", ops=ops),
             "tensorrt": lambda: _run_ours(graph, "tensorrt", fallback_ops=UNSUPPORTED_OPS, mode="fast"),
             "load": lambda: _run_load(path),
             "cli": lambda: _cli_in_process(path, ops)}
    profiler = cProfile.Profile()
    profiler.runcall(calls[what])
    print(f"# cProfile of {what} at {n} nodes (own time; cProfile slows Python code ~2x)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def _cli_in_process(path: Path, ops: list[str]) -> None:
    """``sglens partition --json`` in this process (output to /dev/null), for the profile."""
    from sglens.cli import main
    with open(os.devnull, "w") as sink:
        saved, sys.stdout = sys.stdout, sink
        try:
            main(_cli_command(path, ops))
        finally:
            sys.stdout = saved


def _run_ours(graph, backend: str, **options) -> dict:
    from partition import check_partition, partition
    cpu = time.process_time()
    result = partition(graph, backend, **options)
    cpu = time.process_time() - cpu
    check_partition(result)
    return {"seconds": result.seconds, "cpu": cpu, "partitions": len(result.subgraphs),
            "covered": len(graph.nodes) - len(result.reasons)}


# ------------------------------------------------------------------ torch.fx --
def fx_worker(n: int, seed: int) -> None:
    """Child process: build the same graph in torch.fx and time propose_partitions()."""
    import torch
    from torch.fx import Graph as FxGraph, GraphModule
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from sample_models.synthetic import UNSUPPORTED_OPS, synthetic_model
    fns = {"Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Mul": torch.mul, "Add": torch.add,
           "Sin": torch.sin, "Cos": torch.cos, "Erf": torch.erf}
    model = synthetic_model(n, 0.2, seed=seed)
    g = FxGraph()
    values = {"input": g.placeholder("input")}
    for node in model.graph.node:
        args = tuple(values[i] for i in node.input)
        values[node.output[0]] = g.call_function(fns[node.op_type], args)
    g.output(values["output"])
    gm = GraphModule(torch.nn.Module(), g)
    unsupported = {fns[o] for o in UNSUPPORTED_OPS}

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and node.target not in unsupported

    start, cpu = time.perf_counter(), time.process_time()
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=False)
    partitions = partitioner.propose_partitions()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu": cpu, "partitions": len(partitions),
                      "covered": sum(len(p.nodes) for p in partitions), "torch": torch.__version__}))


def _run_fx(n: int, seed: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--fx-worker", str(n), "--seed", str(seed)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"timed_out": True}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------- main --
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fx-timeout", type=float, default=60.0)
    parser.add_argument("--teaching-max", type=int, default=2000)
    parser.add_argument("--no-fx", action="store_true")
    parser.add_argument("--no-cli", action="store_true", help="skip the load and whole-command rows")
    parser.add_argument("--profile", choices=("default", "tensorrt", "load", "cli"),
                        help="cProfile one method at the largest size instead of the table")
    parser.add_argument("--json", metavar="OUT.json", help="also write the rows as JSON")
    parser.add_argument("--fx-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fx_worker:
        fx_worker(args.fx_worker, args.seed)
        return 0

    import partition as _partition  # noqa: F401 - registers the built-in backends and tensorrt
    from sample_models.synthetic import SUPPORTED_CHAIN_OPS, UNSUPPORTED_OPS
    ops = sorted(set(SUPPORTED_CHAIN_OPS) | {"Add"})
    sizes = [int(s) for s in args.sizes.split(",") if s]
    folder = Path(tempfile.mkdtemp(prefix="sglens-bench-"))
    if args.profile:
        _profile(args.profile, max(sizes), args.seed, ops, folder)
        return 0
    have_torch = True
    try:
        import torch  # noqa: F401
    except ImportError:
        have_torch = False
    rows = []
    print(f"# python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
          f"synthetic chain with skips, 20% unsupported (Sin/Cos/Erf), seed {args.seed}; trace off")
    header = (f"{'nodes':>7} {'method':<18} {'seconds':>9} {'cpu s':>7} {'nodes/s':>10} {'partitions':>10} "
              f"{'covered':>8} {'vs fast':>8}")
    print(header)
    print("-" * len(header))
    for n in sizes:
        graph = _graph(n, args.seed)
        results = {
            "default": _run_ours(graph, "default", ops=ops),
            "tensorrt fast": _run_ours(graph, "tensorrt", fallback_ops=UNSUPPORTED_OPS, mode="fast"),
        }
        if n <= args.teaching_max:
            results["tensorrt teaching"] = _run_ours(graph, "tensorrt", fallback_ops=UNSUPPORTED_OPS, mode="teaching")
        else:
            results["tensorrt teaching"] = {"skipped": f"quadratic: only up to {args.teaching_max} nodes"}
        if args.no_fx or not have_torch:
            results["torch.fx"] = {"skipped": "torch not installed (pip install -e '.[bench]')" if not have_torch
                                   else "--no-fx"}
        else:
            results["torch.fx"] = _run_fx(n, args.seed, args.fx_timeout)
        if not args.no_cli:
            path = _model_file(n, args.seed, folder)
            results["load (IR import)"] = _run_load(path)
            results["cli --json (whole)"] = _run_cli(path, ops)
        fast = results["tensorrt fast"]["seconds"]
        for method, r in results.items():
            if "seconds" in r:
                ratio = r["seconds"] / fast if fast else float("nan")
                note = f"  (onnx.load alone {r['onnx_load']:.3f} s)" if "onnx_load" in r else ""
                cpu = f"{r['cpu']:>7.3f}" if "cpu" in r else f"{'':>7}"
                print(f"{n:>7} {method:<18} {r['seconds']:>9.3f} {cpu} {n / r['seconds']:>10.0f} {r['partitions']:>10} "
                      f"{r['covered']:>8} {ratio:>7.1f}x{note}")
            else:
                why = "timed out" + f" (> {args.fx_timeout:.0f} s)" if r.get("timed_out") else \
                    r.get("skipped") or f"error: {r.get('error')}"
                print(f"{n:>7} {method:<18} {why}")
            rows.append({"nodes": n, "method": method, **r})
        same = results.get("tensorrt teaching", {}).get("partitions")
        if same is not None and same != results["tensorrt fast"]["partitions"]:
            print(f"!! fast and teaching disagree at {n} nodes")
            return 1
    print(f"# reproduce: {Path(sys.executable).name} bench/partition.py --sizes {args.sizes} "
          f"--fx-timeout {args.fx_timeout:g} --teaching-max {args.teaching_max}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
