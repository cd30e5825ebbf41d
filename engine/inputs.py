"""Inputs for a run: seeded random tensors from the graph's input types, or an .npz file.

``random_inputs(graph, dims={"N": 4}, seed=0)`` makes one array per graph input
with its declared dtype and shape; a symbolic dim takes its value from ``dims``
(``--dim NAME=VALUE`` on the command line). A symbolic dim that is not given is
an error naming it, unless ``default_dim`` is set: then it takes that size and
a note saying so is appended to ``notes`` (the CLI prints them), never a silent
guess. ``load_inputs(path, graph)`` reads an
.npz whose keys are graph input names and checks them against the graph.
"""

from __future__ import annotations

import os
import tokenize
import zipfile
import zlib
from typing import Any, Iterable, Mapping

import numpy as np

from partition.dtypes import to_numpy
from partition.ir import Graph, TensorInfo

from .run_errors import InputError
from .values import map_keys

#: Integer inputs are drawn from [0, INT_HIGH): small enough to index any table.
INT_HIGH = 4
#: What reading a damaged .npy/.npz raises: numpy's header parser (ValueError, SyntaxError,
#: tokenize's TokenError), zipfile (BadZipFile, NotImplementedError for an unknown method or
#: version, RuntimeError for an encrypted member), zlib on corrupt deflate data, short files.
UNREADABLE = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
              RuntimeError, SyntaxError, tokenize.TokenError)


def parse_dims(items: Iterable[str] | None) -> dict[str, int]:
    """``["N=4", "seq=16"]`` -> ``{"N": 4, "seq": 16}``."""
    dims: dict[str, int] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--dim {item!r}: expected NAME=VALUE, e.g. --dim batch=4")
        try:
            number = int(value)
        except ValueError:
            raise InputError(f"--dim {item!r}: {value!r} is not an integer") from None
        if number < 0:
            raise InputError(f"--dim {item!r}: a dimension cannot be negative")
        dims[name.strip()] = number
    return dims


def concrete_shape(info: TensorInfo, dims: Mapping[str, int], default_dim: int | None = None,
                   notes: list[str] | None = None) -> tuple[int, ...]:
    """The shape of ``info`` with symbolic dims replaced from ``dims``."""
    if info.shape is None:
        raise InputError(f"graph input '{info.name}' has no declared shape; pass its value "
                         "with --inputs IN.npz")
    shape = []
    for i, dim in enumerate(info.shape):
        if isinstance(dim, int) and dim >= 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(int(dims[dim]))
        elif default_dim is not None:
            shape.append(default_dim)
            if notes is not None:
                label = f"symbolic dim '{dim}'" if isinstance(dim, str) else f"unknown dim (axis {i})"  # -1 too
                note = (f"{label} of input '{info.name}' not given: using {default_dim}"
                        + (f" (set it with --dim {dim}=VALUE)" if isinstance(dim, str) else ""))
                if note not in notes:
                    notes.append(note)
        elif isinstance(dim, str):
            raise InputError(f"graph input '{info.name}' has symbolic dim '{dim}' (axis {i}); "
                             f"give its size with --dim {dim}=VALUE")
        else:
            raise InputError(f"graph input '{info.name}' has an unnamed unknown dim at axis {i}; "
                             "pass its value with --inputs IN.npz")
    return tuple(shape)


def random_inputs(graph: Graph, dims: Mapping[str, int] | None = None, seed: int = 0, *,
                  default_dim: int | None = None, notes: list[str] | None = None) -> dict[str, np.ndarray]:
    """One seeded random array per graph input (weights excluded)."""
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    feeds: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        if name in graph.initializers:
            continue
        info = graph.info(name)
        if info.dtype is None:
            raise InputError(f"graph input '{name}' has no declared dtype; pass its value with "
                             "--inputs IN.npz")
        try:
            dtype = to_numpy(info.dtype)
        except KeyError:
            raise InputError(f"graph input '{name}' has dtype {info.dtype}, which random inputs "
                             "do not cover; pass its value with --inputs IN.npz") from None
        shape = concrete_shape(info, dims, default_dim, notes)
        feeds[name] = _random_array(rng, shape, dtype)
    return feeds


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)  # a 0-d draw compares to a numpy scalar, not an array
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, INT_HIGH, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    raise InputError(f"no random values for dtype {dtype}; pass inputs with --inputs IN.npz")


def load_inputs(path: str | os.PathLike, graph: Graph) -> dict[str, np.ndarray]:
    """Arrays from an .npz whose keys are the graph's input names, checked and conformed.

    A ``.npy`` file (one array) is taken as the value of the graph's only
    input; for a graph with several inputs it is refused with the way to save
    them. Every array's header (shape, dtype) is checked against the graph
    before its data is read, so a small .npz that expands to gigabytes of the
    wrong shape is refused unread. Dtypes are cast where numpy's safe casting
    says it is lossless (``check_feeds``).
    """
    label = f"--inputs {os.fspath(path)}"
    for name, (shape, dtype) in input_file_headers(path, graph).items():
        check_declared(graph.info(name), shape, dtype, label)
    loaded = _read_arrays(path, label)
    if isinstance(loaded, np.ndarray):
        wanted = [n for n in graph.inputs if n not in graph.initializers]
        if len(wanted) != 1:
            raise InputError(f"{label}: a .npy file holds one array, but the graph has {len(wanted)} "
                             f"inputs {wanted}; save them by name with np.savez(path, name=array, ...)")
        feeds = {wanted[0]: loaded}
    else:
        try:
            with loaded as data:
                feeds = {k: data[k] for k in data.files}
        except UNREADABLE as exc:
            raise InputError(f"{label}: a member of the .npz file cannot be read ({_reason(exc)})") from None
    return check_feeds(graph, feeds, label=label)


def input_file_shapes(path: str | os.PathLike, graph: Graph) -> dict[str, tuple[int, ...]]:
    """The shapes an --inputs file holds, from the array headers alone (no data read)."""
    return {name: shape for name, (shape, _dtype) in input_file_headers(path, graph).items()}


def input_file_headers(path: str | os.PathLike, graph: Graph) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) per graph input an --inputs file holds, from the array headers alone.

    For the memory budget: a small compressed .npz can expand to gigabytes, so
    its arrays are sized before they are loaded. Names not in the graph are
    left out (``load_inputs`` reports them).
    """
    label = f"--inputs {os.fspath(path)}"
    _read_arrays(path, label, load=False)  # the same one-line errors for a missing or foreign file
    wanted = [n for n in graph.inputs if n not in graph.initializers]
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return {name: header for name, header in npz_headers(zf).items() if name in wanted}
        with open(path, "rb") as f:
            return {wanted[0]: array_header(f)} if len(wanted) == 1 else {}
    except UNREADABLE as exc:
        raise InputError(f"{label}: not a readable .npz or .npy file (an array header cannot be read: "
                         f"{_reason(exc)}); save inputs with np.savez(path, input_name=array, ...)") from None


def npz_headers(zf: zipfile.ZipFile) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every ``.npy`` member of an open .npz, by array name; only headers are read."""
    out = {}
    for member in zf.namelist():
        name = member[:-4] if member.endswith(".npy") else member
        with zf.open(member) as f:
            out[name] = array_header(f)
    return out


def array_header(f: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from a ``.npy`` header at ``f``'s position (numpy reads the header alone);
    object arrays are refused here, as ``np.load(allow_pickle=False)`` would."""
    major, _minor = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, _fortran, dtype = read(f)
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    return tuple(int(d) for d in shape), dtype


def check_declared(info: TensorInfo, shape: tuple[int, ...], dtype: np.dtype, label: str) -> None:
    """An array's header against the graph input ``info``: rank, fixed dims, and a dtype that
    converts without loss; the messages of ``check_feeds``, before any data is read."""
    name = info.name
    if info.shape is not None:
        if len(info.shape) != len(shape):
            raise InputError(f"{label}: input '{name}' has shape {list(shape)}, but the graph "
                             f"declares rank {len(info.shape)} ({list(info.shape)})")
        for axis, (want, got) in enumerate(zip(info.shape, shape)):
            if isinstance(want, int) and want >= 0 and want != got:
                raise InputError(f"{label}: input '{name}' has size {got} on axis {axis}; the graph "
                                 f"declares {want} ({list(info.shape)})")
    if info.dtype is None:
        return
    try:
        want = to_numpy(info.dtype)
    except KeyError:   # exotic declared type: left to the kernels, as in check_feeds
        return
    if dtype != want and not np.can_cast(dtype, want, casting="safe"):
        raise InputError(f"{label}: input '{name}' has dtype {dtype}, but the graph declares "
                         f"{info.dtype} ({want}); {dtype} does not convert to {want} without loss, "
                         f"so save it as {want}")


def _read_arrays(path: str | os.PathLike, label: str, *, load: bool = True) -> Any:
    """``np.load`` without pickles, its failures as one-line ``InputError``s.

    ``load=False`` checks only that the file is there and looks like numpy's.
    """
    if os.path.isdir(path):
        raise InputError(f"{label}: is a directory; expected an .npz file of input arrays")
    try:
        with open(path, "rb") as f:
            head = f.read(6)
        if not head:
            raise EOFError
        if not head.startswith((b"PK", b"\x93NUMPY")):
            # np.load would try a pickle next (refused anyway); say what the file is not.
            raise InputError(f"{label}: not an .npz or .npy file; save inputs with "
                             "np.savez(path, input_name=array, ...)")
        return np.load(path, allow_pickle=False) if load else None
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except EOFError:
        raise InputError(f"{label}: the file is empty; expected an .npz file of input arrays") from None
    except UNREADABLE as exc:
        raise InputError(f"{label}: not a readable .npz or .npy file ({_reason(exc)}); save inputs with "
                         "np.savez(path, input_name=array, ...)") from None


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "pickled" in text or "allow_pickle" in text:
        return "it holds pickled objects, which are never loaded"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return text.splitlines()[0][:200] if text else type(exc).__name__


def check_feeds(graph: Graph, feeds: Mapping[str, Any], label: str = "inputs") -> dict[str, np.ndarray]:
    """Every graph input given, no unknown names, ranks, fixed dims and dtypes as declared.

    Returns the feeds as arrays, each cast to its declared dtype when numpy's
    ``can_cast(..., "safe")`` says that loses nothing (int32 into int64, float32
    into double); any other dtype is refused naming the input, the declared and
    the given dtype. Negative or unknown declared dims accept any size.
    """
    wanted = [n for n in graph.inputs if n not in graph.initializers]
    missing = [n for n in wanted if n not in feeds]
    unknown = [n for n in feeds if n not in graph.inputs]
    if missing:
        extra = f" (it has {unknown}, which are not graph inputs)" if unknown else ""
        raise InputError(f"{label}: missing graph input(s) {missing}{extra}; the graph's inputs "
                         f"are {wanted}")
    if unknown:
        raise InputError(f"{label}: {unknown} are not graph inputs; the graph's inputs are {wanted}")
    out: dict[str, np.ndarray] = {}
    for name in feeds:
        info, value = graph.info(name), np.asarray(feeds[name])
        if info.shape is not None:
            _check_shape(info, value, label)
        out[name] = _conform_dtype(info, value, label)
    return out


def _check_shape(info: TensorInfo, value: np.ndarray, label: str) -> None:
    name = info.name
    if len(info.shape or ()) != value.ndim:
        raise InputError(f"{label}: input '{name}' has shape {list(value.shape)}, but the graph "
                         f"declares rank {len(info.shape or ())} ({list(info.shape or ())})")
    for axis, (want, got) in enumerate(zip(info.shape or (), value.shape)):
        if isinstance(want, int) and want >= 0 and want != got:
            raise InputError(f"{label}: input '{name}' has size {got} on axis {axis}; the graph "
                             f"declares {want} ({list(info.shape or ())})")


def _conform_dtype(info: TensorInfo, value: np.ndarray, label: str) -> np.ndarray:
    if info.dtype is None:
        return value
    try:
        want = to_numpy(info.dtype)
    except KeyError:  # exotic declared type (float8, string...): leave it to the kernels
        return value
    if value.dtype == want:
        return value
    if np.can_cast(value.dtype, want, casting="safe"):
        return value.astype(want)
    raise InputError(f"{label}: input '{info.name}' has dtype {value.dtype}, but the graph declares "
                     f"{info.dtype} ({want}); {value.dtype} does not convert to {want} without loss, "
                     f"so save it as {want}")


def save_outputs(path: str | os.PathLike, outputs: Mapping[str, np.ndarray]) -> None:
    """Every output under its own name, as ``np.load`` reads it back; a sequence output's
    elements as ``name[0]``, ``name[1]``, ... (a map element as ``name[0].keys`` and
    ``name[0].values``, in key order); an absent optional output is left out.

    Written member by member: tensor names are arbitrary strings, which
    ``np.savez(**outputs)`` would refuse for names like ``file``.
    """
    members = []
    for name, value in outputs.items():
        if value is None:
            continue
        if not isinstance(value, list):
            members.append((name, value))
            continue
        for i, element in enumerate(value):
            if isinstance(element, dict):   # a map (ZipMap's elements): its keys, its values
                keys = map_keys(element)
                members += [(f"{name}[{i}].keys", keys), (f"{name}[{i}].values", [element[k] for k in keys])]
            else:
                members.append((f"{name}[{i}]", element))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, value in members:
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)
