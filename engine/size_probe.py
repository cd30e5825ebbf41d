"""Sizes a model runs at, found on onnxruntime, for a run that failed on sizes we guessed.

A symbolic axis gets its size from its name (``input_spec``): a guess. silero-VAD's
``sequence`` at 128 is shorter than its 256-sample STFT window; PP-OCR's recogniser takes
images 48 high, not 224; onnx-asr's fbank front end wants more than one sample. Each such run
failed with a correct message that named a node deep inside the model, and the user still had
to find the size by hand. So when a run on guessed sizes fails, ``probe_sizes`` asks
onnxruntime, the reference, which sizes the model takes:

1. the sizes as they were (when onnxruntime runs them, the sizes are not the cause: said so);
2. each guessed axis alone over ``LADDER``, the sizes nearest the guess first (nearness on a
   log scale: 48 is as near 224 as 1024 is), the others as they were;
3. every guessed axis together at one size, the same order.

A named axis moves wherever it appears (``batch_size`` of the waveforms and of their lengths);
an input that reads as lengths follows the axis it measures. Batch axes (by name, or an unnamed
axis 0 of an input of rank 2 or more) stay: a model that runs at batch 1 is not helped by 2.
The search is bounded by ``max_trials``, ``deadline_s``, the input elements a trial may make and
the run's memory budget;
``check`` runs between trials (a run's time limit and cancel). It only suggests: the failed
run is not run again, the user sees the sizes and sets them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from partition.ir import Graph, TensorInfo

from .input_spec import InputSpec, default_dim, length_links, materialize

LADDER = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 800,
          1024, 1280, 1600, 2048, 4000, 8000, 16000)
_NO_INFO = TensorInfo("", "FLOAT", None)


@dataclass(frozen=True)
class GuessedAxis:
    """Axes that take one size: every place of a named dim, or one unnamed axis."""

    label: str                              # the dim's name, or "input 'x' axis 2"
    places: tuple[tuple[str, int], ...]     # (input, axis)
    size: int                               # the size the failed run had
    named: bool                             # label is a dim name (``--dim`` sets it)


@dataclass(frozen=True)
class SizeProbe:
    """What onnxruntime said: ``as_given`` (it ran the failed sizes), or ``shapes`` it ran."""

    as_given: bool
    shapes: Mapping[str, tuple[int, ...]] | None   # input -> shape, for the inputs that change
    changed: tuple[tuple[GuessedAxis, int], ...]   # each axis moved, with its new size
    tried: int

    def sentence(self, flags: bool = False) -> str:
        """One sentence for the error; ``flags``: the command-line options that set the sizes."""
        if self.as_given:
            return ("onnxruntime runs the model on these same inputs, so their sizes are not the "
                    "cause: the failure is in this run's own path")
        if not self.shapes:
            return (f"onnxruntime ran none of the {self.tried} other sizes tried for the guessed axes "
                    "either: give the sizes the model was exported for")
        moved = ", ".join(f"{a.label} = {new} (not {a.size})" for a, new in self.changed)
        shown = "; ".join(f"'{k}' {list(v)}" for k, v in self.shapes.items())
        return f"onnxruntime runs the model with {moved}, i.e. inputs {shown}" + (
            f" -- run again with {self.options()}" if flags
            else ": set those sizes in the inputs form and run again")

    def options(self) -> str:
        """``--dim`` for a named axis, ``--shape`` for an input with an unnamed one."""
        dims = [f"--dim {a.label}={new}" for a, new in self.changed if a.named]
        whole = {name for a, _ in self.changed if not a.named for name, _ in a.places}
        return " ".join(dims + [f"--shape {k}={'x'.join(map(str, v))}"
                                for k, v in (self.shapes or {}).items() if k in whole])


def guessed_axes(graph: Graph, specs: Sequence[InputSpec], *, set_inputs: Sequence[str] = (),
                 set_dims: Sequence[str] = ()) -> list[GuessedAxis]:
    """The symbolic axes of ``specs`` the user did not set (``set_inputs``: whole shapes given,
    or uploaded; ``set_dims``: named dims given), batch axes left out, in input order."""
    groups: dict[tuple, list[tuple[str, int]]] = {}
    sizes: dict[tuple, int] = {}
    batch: dict[tuple, bool] = {}   # a group is left out when every place of it is a batch
    for spec in specs:
        if spec.name in set_inputs or spec.fill == "file":
            continue
        declared = list(graph.info(spec.name).shape or ())
        for axis, size in enumerate(spec.shape):
            d = declared[axis] if axis < len(declared) else None
            if isinstance(d, int) and d >= 0:
                continue
            name = d if isinstance(d, str) and d.strip("?") else None   # PP-OCR names one "?"
            if name in set_dims:
                continue
            key = (name,) if name else (f"input '{spec.name}' axis {axis}", spec.name, axis)
            groups.setdefault(key, []).append((spec.name, axis))
            sizes.setdefault(key, int(size))
            batch[key] = batch.get(key, True) and _is_batch(name, axis, len(spec.shape))
    return [GuessedAxis(k[0], tuple(v), sizes[k], len(k) == 1) for k, v in groups.items() if not batch[k]]


def _is_batch(name: str | None, axis: int, rank: int) -> bool:
    """A batch axis: named so (``batch``, ``batch_size``), or axis 0 of an input of rank 2 or
    more whose name does not say otherwise (onnx-asr's ``N`` is samples, on axis 1)."""
    if (name or "").strip().lower().startswith("batch"):
        return True
    # a name the defaults read as a sequence, a side or samples is not a batch; any other is
    return axis == 0 and rank >= 2 and default_dim(name, axis, _NO_INFO) == 1


def probe_sizes(model: Any, graph: Graph, specs: Sequence[InputSpec], axes: Sequence[GuessedAxis], *,
                files: Mapping[str, np.ndarray] | None = None, known_refused: bool = False,
                max_trials: int = 48, deadline_s: float = 10.0, max_elements: int | None = None,
                memory_limit: int | None = None, check: Callable[[], None] | None = None) -> SizeProbe | None:
    """See the module docstring. ``known_refused``: onnxruntime already refused the sizes as
    given (skip step 1). ``memory_limit``: the run's budget (``engine/budget.py``); sizes whose
    estimate passes it are not tried (a worker killed for memory would lose the run's own
    error). None when onnxruntime cannot load the model (nothing to ask)."""
    session = _session(model)
    if session is None:
        return None
    names = [o.name for o in session.get_outputs()]
    links = length_links(graph, specs)
    base = sum(math.prod(s.shape) for s in specs)
    limit = max_elements or max(4 * base, 1 << 16)
    end = time.monotonic() + deadline_s
    before = {s.name: tuple(s.shape) for s in specs}
    tried = 0

    def runs(choice: Mapping[GuessedAxis, int]) -> dict[str, tuple[int, ...]] | None:
        nonlocal tried
        trial = _resized(specs, choice, links)
        if sum(math.prod(s.shape) for s in trial) > limit or not _within(graph, trial, memory_limit):
            return None
        tried += 1
        try:
            session.run(names, materialize(graph, trial, files))
        except Exception:  # noqa: BLE001 - a refusal is the answer "not these sizes"
            return None
        return {s.name: tuple(s.shape) for s in trial if tuple(s.shape) != before[s.name]}

    if not known_refused and runs({}) is not None:
        return SizeProbe(True, None, (), tried)
    # the k-th nearest size of every axis before the (k+1)-th of any: near the guess first
    ladders = [_nearest(a.size) for a in axes]
    plans = [{a: ladder[k]} for k in range(len(LADDER)) for a, ladder in zip(axes, ladders)
             if k < len(ladder)]
    if len(axes) > 1:
        plans += [dict.fromkeys(axes, v) for v in _nearest(max(a.size for a in axes))]
    for choice in plans:
        if tried >= max_trials or time.monotonic() > end:
            break
        if check is not None:
            check()
        shapes = runs(choice)
        if shapes:
            changed = tuple((a, v) for a, v in choice.items() if v != a.size)
            return SizeProbe(False, shapes, changed, tried)
    return SizeProbe(False, None, (), tried)


def _within(graph: Graph, specs: Sequence[InputSpec], memory_limit: int | None) -> bool:
    from .budget import MemoryBudgetError, check_memory_budget
    try:
        check_memory_budget(graph, {s.name: tuple(s.shape) for s in specs}, memory_limit)
    except MemoryBudgetError:
        return False
    return True


def _nearest(size: int) -> list[int]:
    """The ladder without ``size``, nearest first on a log scale (ties: the smaller)."""
    here = math.log(max(size, 1))
    return sorted((v for v in LADDER if v != size), key=lambda v: (abs(math.log(v) - here), v))


def _resized(specs: Sequence[InputSpec], choice: Mapping[GuessedAxis, int],
             links: Mapping[str, Mapping[str, Any]]) -> list[InputSpec]:
    """Copies of ``specs`` with the chosen sizes; inputs read as lengths follow their axis."""
    trial = {s.name: replace(s, shape=list(s.shape)) for s in specs}
    for axis, size in choice.items():
        for name, i in axis.places:
            trial[name].shape[i] = size
    for name, link in links.items():
        trial[name].value = float(trial[link["input"]].shape[link["axis"]])
    return list(trial.values())


def _session(model: Any) -> Any:
    """One onnxruntime session for every trial: on one thread (the probe runs beside a failed
    run, on its worker) and without ``compare.reference_session``'s copy of the model (it adds
    outputs; here none are added, and a large model's copy is memory the probe need not take)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 4      # the refusals are the answers, not news for stderr
    opts.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - a model onnxruntime cannot load has no sizes to find
        return None
