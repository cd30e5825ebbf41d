"""What a web run feeds the model: input specs, uploaded arrays, tolerance; kept so it can be repeated.

``POST /api/runs`` takes, per graph input, an ``engine.input_spec.InputSpec`` (shape,
fill, range, seed), optionally an uploaded ``.npy``/``.npz`` per input, and a tolerance.
Everything is checked here, before a job is queued: a bad spec, a shape the model
cannot take (ONNX shape inference) or an unreadable array is a 400 naming the input.

What a run used is written to ``<instance>/run_inputs/<run id>.json`` (specs and
tolerance) and ``<run id>.npz`` (uploaded arrays only; random, zero and one fills are
remade from their specs), so ``{"repeat_of": id}`` runs it again with the same values.
Those files are ours (named by the random run id), never by anything from the request.

Shapes entered are remembered per model in ``<instance>/input_shapes.json`` and prefill
the form next time (``suggest_specs(graph, remembered)``).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import zipfile
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from engine.float16 import computes_in_float16
from engine.inputs import UNREADABLE, array_header, check_declared, npz_headers
from engine.input_spec import (InputSpec, check_specs, check_with_inference, graph_inputs, length_links, materialize,
                               suggest_specs)
from engine.run_errors import InputError
from engine.tolerance import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance, default_tolerance
from partition.ir import Graph

from .errors import ApiError
from .limits import HINT

_ID = re.compile(r"^[0-9a-f]{8,64}$")
_lock = threading.Lock()


@dataclass
class RunInputs:
    """The checked inputs of one run: specs, uploaded arrays by input name, tolerance."""

    specs: list[InputSpec]
    files: dict[str, np.ndarray] = field(default_factory=dict)
    tolerance: Tolerance | None = None   # None: the model's default (engine.compare decides)
    repeat: int | None = None     # measured repeats per side, kept so Repeat measures alike

    def feeds(self, graph: Graph) -> dict[str, np.ndarray]:
        return materialize(graph, self.specs, self.files)

    def to_json(self) -> dict[str, Any]:
        tolerance = None if self.tolerance is None else self.tolerance.to_json()
        return {"specs": [s.to_json() for s in self.specs], "tolerance": tolerance,
                "files": sorted(self.files), "repeat": self.repeat}


def default_inputs(graph: Graph) -> RunInputs:
    """What a run gets when the request says nothing: the prefilled specs, the default tolerance."""
    return RunInputs(suggest_specs(graph))


def defaults_json(graph: Graph, remembered: Mapping[str, list[int]] | None) -> dict[str, Any]:
    """``GET /api/models/<id>/inputs``: the prefilled specs and the default tolerance."""
    specs = suggest_specs(graph, remembered)
    half = computes_in_float16(graph)
    tolerance = default_tolerance(half)   # float16's for a float16 model
    return {"inputs": [s.to_json() for s in specs], "lengths": length_links(graph, specs),
            "remembered": sorted(remembered or {}),
            "tolerance": tolerance.to_json(), "float16": half,
            "rule": tolerance.describe(), "fills": ["random", "zeros", "ones", "constant", "file"]}


def parse_tolerance(data: Any) -> Tolerance | None:
    """The request's tolerance, or None (none given: the model's default)."""
    if data in (None, ""):
        return None
    if not isinstance(data, dict):
        raise ApiError("'tolerance' must be an object {\"atol\": number, \"rtol\": number}")
    try:
        atol = float(data.get("atol", DEFAULT_ATOL))
        rtol = float(data.get("rtol", DEFAULT_RTOL))
        return Tolerance(atol, rtol)
    except (TypeError, ValueError) as exc:
        raise ApiError(f"tolerance: {exc}") from None


def read_arrays(uploads: Mapping[str, Any], graph: Graph, budget: int | None = None) -> dict[str, np.ndarray]:
    """Uploaded ``.npy``/``.npz`` per input: form field ``input:<name>`` (an .npz may also hold
    several inputs by name, under any field name). Never unpickled.

    Headers first: every array's shape and dtype are read from its ``.npy`` header (inside the
    zip for an .npz) and checked against the graph input and ``budget`` (bytes of all arrays,
    the run memory limit) before any data is decompressed; a 1 MB .npz that unpacks to a GiB
    of the wrong shape is refused unread."""
    wanted = set(graph_inputs(graph))
    arrays: dict[str, np.ndarray] = {}
    total = 0
    for field_name, f in uploads.items():
        target = field_name[len("input:"):] if field_name.startswith("input:") else None
        label = f"uploaded values '{os.path.basename(f.filename or field_name)[:80]}'"
        if target is not None and target not in wanted:
            raise ApiError(f"uploaded values for ['{target[:80]}'], which is not a graph input; the inputs are "
                           f"{sorted(wanted)}")
        try:
            with _ArrayFile(f.stream, label) as source:
                chosen = source.choose(target, wanted)
                for name, (shape, dtype) in chosen.items():
                    check_declared(graph.info(name), shape, dtype, label)
                    total += math.prod(shape) * dtype.itemsize
                    if budget is not None and total > budget:
                        raise ApiError(f"{label}: input '{name}' holds {math.prod(shape) * dtype.itemsize} bytes "
                                       f"({list(shape)} {dtype}); the uploaded arrays would pass the run memory "
                                       f"limit of {budget} bytes; {HINT}")
                for name in chosen:
                    arrays[name] = source.read(name)
        except UNREADABLE as exc:
            raise ApiError(f"{label}: not a .npy or .npz file numpy can read without pickle "
                           f"({type(exc).__name__})") from None
    return arrays


class _ArrayFile:
    """An uploaded .npy or .npz, read headers first: ``choose`` maps graph inputs to (shape,
    dtype) from the headers alone; ``read`` then reads one array's data."""

    def __init__(self, stream: Any, label: str) -> None:
        self.stream, self.label = stream, label
        stream.seek(0)
        magic = stream.read(6)
        stream.seek(0)
        self.zip = zipfile.ZipFile(stream) if magic.startswith(b"PK") else None
        if self.zip is None and not magic.startswith(b"\x93NUMPY"):
            raise ValueError("not numpy's format")
        self.headers = npz_headers(self.zip) if self.zip else {"": array_header(stream)}
        self.members: dict[str, str] = {}

    def __enter__(self) -> "_ArrayFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.zip is not None:
            self.zip.close()

    def choose(self, target: str | None, wanted: set[str]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        if self.zip is None:
            if target is None:
                raise ApiError(f"{self.label}: a .npy holds one array; send it as field 'input:<input name>'")
            self.members[target] = ""
            return {target: self.headers[""]}
        names = list(self.headers)
        if target is not None and len(names) == 1:
            self.members[target] = names[0]
        else:
            self.members = {n: n for n in names if n in wanted}
            if target is not None and target not in self.members:
                raise ApiError(f"{self.label}: the .npz has {len(names)} arrays and none is named '{target}'")
        return {name: self.headers[member] for name, member in self.members.items()}

    def read(self, name: str) -> np.ndarray:
        member = self.members[name]
        if self.zip is None:
            self.stream.seek(0)
            return np.lib.format.read_array(self.stream, allow_pickle=False)
        with self.zip.open(member if member in self.zip.namelist() else member + ".npy") as f:
            return np.lib.format.read_array(f, allow_pickle=False)


def parse_run_inputs(graph: Graph, model: Any, data: Mapping[str, Any],
                     arrays: Mapping[str, np.ndarray], remembered: Mapping[str, list[int]] | None,
                     memory_limit: int | None = None) -> RunInputs:
    """Check the run's input specs (prefilled ones for inputs not given) before anything runs."""
    given = data.get("inputs")
    if given is not None and not isinstance(given, list):
        raise ApiError("'inputs' must be a list of input specs (GET /api/models/<id>/inputs gives them)")
    by_name: dict[str, InputSpec] = {s.name: s for s in suggest_specs(graph, remembered)}
    prefilled = {name: list(s.shape) for name, s in by_name.items()}
    specs: list[InputSpec] = []
    seen: set[str] = set()
    for item in given or []:
        name = item.get("name") if isinstance(item, dict) else None
        if name not in by_name:
            raise InputError(f"input {name!r} is not a graph input; the inputs are {list(by_name)}")
        # Fields left out (dtype, seed, range) keep their prefilled values.
        spec = InputSpec.from_json({**by_name[name].to_json(), **item})   # InputError (400) names it
        if spec.name in seen:
            raise InputError(f"input '{spec.name}' is given twice")
        seen.add(spec.name)
        spec.dim_names = by_name[spec.name].dim_names
        specs.append(spec)
    for name, spec in by_name.items():
        if name not in seen:
            if name in arrays:
                spec.fill = "file"
            specs.append(spec)
    order = {n: i for i, n in enumerate(by_name)}
    specs.sort(key=lambda s: order[s.name])
    run = RunInputs(specs, dict(arrays), parse_tolerance(data.get("tolerance")))
    check_specs(graph, run.specs, run.files)
    if memory_limit:   # --run-memory-limit, on the shapes, before any value is made
        from .limits import check_run_budget
        check_run_budget(graph, {s.name: tuple(s.shape) for s in run.specs}, memory_limit)
    feeds = run.feeds(graph)
    if model is not None:
        try:
            check_with_inference(model, feeds)    # a shape the model cannot take, named up front
        except InputError:
            # Sizes the user typed are refused here. The form's own prefill is our guess: the
            # run goes on, and where onnxruntime refuses it too the worker says which sizes it
            # runs (engine/size_probe.py: a worker, not this process, runs the upload) and the
            # page offers them (WeSpeaker's fbank at one sample got a 400 and no size to try).
            from engine.size_probe import guessed_axes   # the axes the worker would try
            if not guessed_axes(graph, run.specs) or \
                    any(s.fill == "file" or s.shape != prefilled[s.name] for s in run.specs):
                raise
    return run


# ----------------------------------------------------------- kept on disk --
def _folder(instance: str) -> str:
    path = os.path.join(instance, "run_inputs")
    os.makedirs(path, exist_ok=True)
    return path


def check_room(store: Any, run: RunInputs) -> None:
    """``--store-limit`` counts the uploaded arrays a run keeps (``save``): refused (507) up front."""
    store.check_room(sum(int(a.nbytes) for a in run.files.values()))


def save(instance: str, rid: str, run: RunInputs) -> None:
    """Keep what run ``rid`` used: specs and tolerance as JSON, uploaded arrays as .npz."""
    folder = _folder(instance)
    with open(os.path.join(folder, f"{rid}.json"), "w", encoding="utf-8") as f:
        json.dump(run.to_json(), f)
    if run.files:
        np.savez(os.path.join(folder, f"{rid}.npz"), **run.files)


def load(instance: str, rid: str) -> RunInputs | None:
    """What run ``rid`` used, or None (an unknown id, or a run from before inputs were kept)."""
    if not _ID.match(rid):
        return None
    folder = os.path.join(instance, "run_inputs")
    try:
        with open(os.path.join(folder, f"{rid}.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    files: dict[str, np.ndarray] = {}
    if data.get("files"):
        with np.load(os.path.join(folder, f"{rid}.npz"), allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
    repeat = data.get("repeat")
    return RunInputs([InputSpec.from_json(s) for s in data["specs"]], files,
                     parse_tolerance(data.get("tolerance")), repeat if isinstance(repeat, int) else None)


def stored_json(instance: str, rid: str) -> dict[str, Any] | None:
    run = load(instance, rid)
    return run.to_json() if run is not None else None


# ------------------------------------------------------ remembered shapes --
def remembered(instance: str, model_id: str) -> dict[str, list[int]]:
    data = _read_shapes(instance)
    value = data.get(model_id)
    return value if isinstance(value, dict) else {}


def remember(instance: str, model_id: str, specs: list[InputSpec]) -> None:
    """Keep the shapes a run used as this model's prefill (uploaded arrays' shapes too)."""
    with _lock:
        data = _read_shapes(instance)
        data[model_id] = {s.name: list(s.shape) for s in specs}
        if len(data) > 1000:   # bounded: the oldest models' entries go first
            for key in list(data)[: len(data) - 1000]:
                data.pop(key)
        path = os.path.join(instance, "input_shapes.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)


def _read_shapes(instance: str) -> dict[str, Any]:
    try:
        with open(os.path.join(instance, "input_shapes.json"), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
