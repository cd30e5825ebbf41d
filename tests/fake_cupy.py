"""A strict stand-in for cupy, for tests only: numpy underneath, cupy's rules on top.

No GPU is lent to this project, so the cupy half of the kernels and the executor's
``--device gpu`` path are checked against this module instead. It follows cupy's
documented conversion policy, which is what breaks code written with numpy in mind:

* ``FakeArray`` is not a ``numpy.ndarray``; ``np.asarray(a)`` / ``np.array(a)`` raise
  ``TypeError`` (``__array__`` refuses, as cupy's does), and numpy functions and operators
  given a device array raise too (``__array_ufunc__ = None``, no buffer protocol).
* The only ways back to the host are ``a.get()``, ``fake.asnumpy(a)`` and the explicit
  scalar reads cupy also allows (``float(a)``, ``bool(a)``, ``a.item()``, ``a.tolist()``);
  those synchronise with the device, so each is counted in ``FakeCupy.syncs``.
  ``Stream.synchronize`` and ``Event.synchronize`` block the host too: counted in ``waits``.
* Functions of the module and methods of the array refuse numpy arrays among their
  arguments (cupy does: "Unsupported type <class 'numpy.ndarray'>"); only the
  constructors (``asarray``, ``array``, ``ascontiguousarray``, ...) copy from the host.
  Python and numpy scalars are fine. ``a[...] = numpy_array`` is allowed only for a whole
  array assignment (``a[:]``, ``a[...]``), as in cupy.
* Reductions and scalar indexing return 0-d device arrays (cupy never returns numpy
  scalars), and ``operator.index(a)`` raises (cupy leaves ``__index__`` out on purpose).
* Constructors refuse object and string dtypes (cupy has none): strings stay on the host.
* A few numpy-only names cupy does not have (``errstate``, ``ndindex``, ``vectorize``,
  ``char``, ...) raise ``AttributeError``.

``fake.cuda`` has the ``Stream``/``Event``/``Device``/``runtime`` stand-ins the engine calls,
logged like the fake in ``tests/test_engine_gpu.py``.

Besides the syncs it counts what costs host time on a real GPU: ``h2d`` (a constructor or a
whole-array assignment given host data: an upload) and ``launches`` (a call that would enqueue a
kernel: module functions, array methods and operators that make or write device data; views such
as ``reshape``/``transpose`` and basic slicing launch nothing on cupy and are not counted). Read
them per run with ``with fake.counting() as c: ...`` (``c.syncs``, ``c.h2d``, ``c.launches``,
``c.waits``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import operator
import sys
import threading
import types
from typing import Any, Callable

import numpy as np

#: numpy names cupy does not provide (a kernel using them through ``xp`` fails on a GPU).
NUMPY_ONLY = frozenset({"errstate", "seterr", "geterr", "ndindex", "nditer", "vectorize", "frompyfunc",
                        "char", "strings", "rec", "ma", "ctypeslib", "testing", "asmatrix", "matrix"})
#: Functions that copy host data to the device: numpy arrays are welcome here.
CONSTRUCTORS = frozenset({"asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray"})
#: Calls that only make a view, read metadata or allocate without writing: no kernel on cupy.
NO_LAUNCH = frozenset({"reshape", "transpose", "swapaxes", "moveaxis", "expand_dims", "squeeze",
                       "broadcast_to", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d",
                       "empty", "empty_like", "view", "result_type", "shape", "ndim", "size",
                       "can_cast", "promote_types", "dtype", "iinfo", "finfo", "split", "array_split",
                       "get_array_module", "squeeze", "diagonal", "real", "imag"})


class DeviceConversionError(TypeError):
    """Raised where real cupy would refuse to mix host and device arrays."""


class FakeArray:
    """A device array: holds a numpy array but is not one and will not turn into one implicitly."""

    __slots__ = ("_a", "_mod")
    __array_ufunc__ = None  # numpy operators and ufuncs given a device array defer, then fail
    __array_priority__ = 1000

    def __init__(self, a: np.ndarray, mod: "FakeCupy") -> None:
        self._a = a
        self._mod = mod

    # -- the refusals -------------------------------------------------------------
    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise DeviceConversionError("Implicit conversion to a NumPy array is not allowed. "
                                    "Please use `.get()` to construct a NumPy array explicitly.")

    def __index__(self) -> int:
        raise DeviceConversionError("a device array cannot be used as an index (cupy has no __index__); "
                                    "read it on the host first")

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "data": (0, False), "version": 3}

    # -- explicit ways back (counted: each is a device->host sync) ----------------
    def get(self, stream: Any = None, order: str = "C", out: Any = None) -> np.ndarray:
        self._mod._sync("get")
        return np.array(self._a, copy=True)

    def item(self, *args: Any) -> Any:
        self._mod._sync("item")
        return self._a.item(*args)

    def tolist(self) -> Any:
        self._mod._sync("tolist")
        return self._a.tolist()

    def __bool__(self) -> bool:
        self._mod._sync("bool")
        return bool(self._a)

    def __float__(self) -> float:
        self._mod._sync("float")
        return float(self._a)

    def __int__(self) -> int:
        self._mod._sync("int")
        return int(self._a)

    def __complex__(self) -> complex:
        self._mod._sync("complex")
        return complex(self._a)

    # -- plain attributes ---------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: FakeArray(self._a.T, self._mod))
    real = property(lambda self: FakeArray(self._a.real, self._mod))
    imag = property(lambda self: FakeArray(self._a.imag, self._mod))

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        return (self._mod._wrap(v) for v in self._a)

    def __repr__(self) -> str:
        return f"FakeArray({self._a!r})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self._a, name)
        if callable(value):
            return self._mod._wrap_fn(value, f"ndarray.{name}")
        return self._mod._wrap(value)

    def __getitem__(self, key: Any) -> Any:
        if not _is_basic_index(key):
            self._mod._count("launches", "getitem")  # a gather kernel; basic slicing is a view
        return self._mod._wrap(self._a[self._mod._unwrap_index(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        whole = key is Ellipsis or (isinstance(key, slice) and key == slice(None))
        if isinstance(value, np.ndarray) and value.ndim > 0 and not whole:
            raise DeviceConversionError("cupy refuses `device[idx] = numpy_array` except for a whole-array "
                                        "copy (`a[:] = host`); move the value with xp.asarray first")
        host = isinstance(value, np.ndarray) and value.ndim > 0
        self._mod._count("h2d" if host else "launches", "setitem")
        v = value if isinstance(value, np.ndarray) else self._mod._unwrap(value, "setitem")
        self._a[self._mod._unwrap_index(key)] = v


def _binary(name: str, reflected: bool = False) -> Callable[..., Any]:
    op = getattr(operator, name)

    def method(self: FakeArray, other: Any) -> Any:
        o = self._mod._unwrap(other, f"operator {name}")
        self._mod._count("launches", f"operator {name}")
        return self._mod._wrap(op(o, self._a) if reflected else op(self._a, o))
    return method


def _inplace(name: str) -> Callable[..., Any]:
    op = getattr(operator, f"i{name.rstrip('_')}")

    def method(self: FakeArray, other: Any) -> FakeArray:
        self._mod._count("launches", f"operator i{name}")
        self._a = op(self._a, self._mod._unwrap(other, f"operator i{name}"))
        return self
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lshift", "rshift"):
    _op = _name + "_" if _name in ("and", "or") else _name
    setattr(FakeArray, f"__{_name}__", _binary(_op))
    setattr(FakeArray, f"__r{_name}__", _binary(_op, reflected=True))
    setattr(FakeArray, f"__i{_name}__", _inplace(_op))
for _name in ("lt", "le", "eq", "ne", "gt", "ge"):
    setattr(FakeArray, f"__{_name}__", _binary(_name))
def _unary(name: str) -> Callable[..., Any]:
    op = getattr(operator, name)

    def method(self: FakeArray) -> Any:
        self._mod._count("launches", f"operator {name}")
        return self._mod._wrap(op(self._a))
    return method


for _name in ("neg", "pos", "abs", "invert"):
    setattr(FakeArray, f"__{_name}__", _unary(_name))
FakeArray.__hash__ = None  # type: ignore[assignment]


class _FakeCuda:
    """The cupy.cuda calls the engine makes (streams, events, devices), logged."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []
        self.on_sync: Callable[[str], None] = lambda kind: None  # the module counts host waits
        self.capturing: Any = None          # the stream capturing a CUDA Graph, if one is
        self.recorded: dict[Any, int] = {}  # stream ptr -> events recorded on it so far
        self.reached: dict[Any, int] = {}   # stream ptr -> how far the host knows it has run
        self._ids = itertools.count()
        self._lock = threading.Lock()
        cuda = self

        class Stream:
            null: Any = None

            def __init__(self, non_blocking: bool = False) -> None:
                self.ptr = 1000 + next(cuda._ids)

            def use(self) -> "Stream":
                return self

            def __enter__(self) -> "Stream":
                return self

            def __exit__(self, *a: object) -> None:
                pass

            done = True

            def wait_event(self, event: Any) -> None:
                cuda._add("wait_event", self.ptr, event.id)

            def record(self, event: Any = None) -> Any:
                event = event if event is not None else Event()
                event.record(self)
                return event

            def synchronize(self) -> None:
                cuda._add("stream_sync", self.ptr, None)
                cuda.on_sync("stream_sync")
                cuda.reached[self.ptr] = cuda.recorded.get(self.ptr, 0)

            # Stream capture as cupy has it, with CUDA's rules enforced: while a stream
            # captures, a host wait, a read of device data, an event query or an upload from
            # host memory fails (a real capture is invalidated). The work still runs eagerly
            # here, so a replay computes nothing new: only a GPU checks replayed numbers.
            def begin_capture(self, mode: Any = None) -> None:
                if cuda.capturing is not None:
                    raise RuntimeError("fake cupy: a stream is already capturing")
                cuda.capturing = self

            def end_capture(self) -> Any:
                if cuda.capturing is not self:
                    raise RuntimeError("fake cupy: this stream is not capturing")
                cuda.capturing = None
                return cuda.Graph()

            def is_capturing(self) -> bool:
                return cuda.capturing is self

        class Graph:
            def __init__(self) -> None:
                self.launches = 0

            def launch(self, stream: Any = None) -> None:
                cuda.refuse_while_capturing("Graph.launch")
                self.launches += 1

        class Event:
            """As the host sees a device: an event is ``done`` only once the host waited for it
            or for a later point of its stream (numpy ran the work long ago, but the host
            cannot know that on a GPU without asking)."""

            def __init__(self, disable_timing: bool = True, **kw: Any) -> None:
                self.id = next(cuda._ids)
                self.at: tuple[Any, int] | None = None

            @property
            def done(self) -> bool:
                cuda.refuse_while_capturing("Event.query")
                return self.at is None or cuda.reached.get(self.at[0], 0) >= self.at[1]

            def record(self, stream: Any = None) -> None:
                ptr = getattr(stream, "ptr", None)
                cuda._add("record", ptr, self.id)
                with cuda._lock:
                    cuda.recorded[ptr] = seq = cuda.recorded.get(ptr, 0) + 1
                self.at = (ptr, seq)

            def synchronize(self) -> None:
                cuda._add("event_sync", None, self.id)
                cuda.on_sync("event_sync")
                if self.at is not None:
                    with cuda._lock:
                        cuda.reached[self.at[0]] = max(cuda.reached.get(self.at[0], 0), self.at[1])

        self.Stream, self.Event, self.Graph = Stream, Event, Graph
        self.cublas_stand_in = _CublasStandIn()
        Stream.null = Stream()
        self.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
        self.Device = lambda i=0: types.SimpleNamespace(use=lambda: None, synchronize=lambda: None, id=i)
        self.get_elapsed_time = lambda a, b: 1.0
        self.get_current_stream = lambda: Stream.null

    def _add(self, *entry: Any) -> None:
        with self._lock:
            self.log.append(entry)

    def refuse_while_capturing(self, what: str) -> None:
        if self.capturing is not None:
            raise RuntimeError(f"fake cupy: {what} while a stream is capturing "
                               "(cudaErrorStreamCaptureUnsupported: the capture is invalidated)")

    def using_allocator(self, allocator: Any = None) -> Any:
        return contextlib.nullcontext()


class _CublasStandIn:
    """cublas{S,D}gemmStridedBatched's column-major semantics on the fake's arrays, for
    ``engine/kernels/gemm.py``'s capture path: element (r, c) of matrix i of A is
    ``A[i * stride_a + r + c * lda]``. It checks the row-major -> column-major mapping the
    real call relies on; the ctypes call itself runs only on a GPU."""

    def gemm_strided_batched(self, dtype: Any, stream: int, op_a: int, op_b: int, m: int, n: int,
                             k: int, alpha: float, a: Any, lda: int, stride_a: int, b: Any, ldb: int,
                             stride_b: int, beta: float, c: Any, ldc: int, stride_c: int,
                             count: int) -> None:
        assert op_a == op_b == 0, "only untransposed operands are used"
        assert all(x._a.flags.c_contiguous for x in (a, b, c)), "cuBLAS is given C-contiguous buffers"
        flat = [x._a.reshape(-1) for x in (a, b, c)]
        for i in range(count):
            am = flat[0][i * stride_a:i * stride_a + lda * k].reshape(k, lda).T[:m, :]
            bm = flat[1][i * stride_b:i * stride_b + ldb * n].reshape(n, ldb).T[:k, :]
            cm = flat[2][i * stride_c:i * stride_c + ldc * n].reshape(n, ldc).T[:m, :]
            cm[...] = alpha * (am @ bm) + (beta * cm if beta else 0)


class _MemoryPool:
    """Reports the bytes the fake has allocated so far (it never frees): a high-water mark
    that only grows, enough to see that a caller reads it."""

    allocated = 0

    def used_bytes(self) -> int:
        return self.allocated

    def total_bytes(self) -> int:
        return self.allocated

    def free_all_blocks(self) -> None:
        pass

    def malloc(self, nbytes: int) -> None:
        raise NotImplementedError("fake cupy: allocations are numpy's")


def _copies_on_device(name: str, a: "FakeArray", kwargs: dict[str, Any]) -> bool:
    """Whether constructor ``name`` given device array ``a`` copies it (a launch) or returns it."""
    dtype = kwargs.get("dtype")
    if dtype is not None and np.dtype(dtype) != a.dtype:
        return True
    if name == "array":
        return kwargs.get("copy", True) is not False
    if name == "ascontiguousarray":
        return not a._a.flags.c_contiguous
    return name == "asfortranarray" and not a._a.flags.f_contiguous


def _is_basic_index(key: Any) -> bool:
    """A view on cupy (ints, slices, None, Ellipsis): no kernel."""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in keys)


@dataclasses.dataclass
class Counts:
    """What a stretch of code did on the fake device (``FakeCupy.counting``)."""

    syncs: int
    h2d: int
    launches: int
    sync_calls: dict[str, int]
    h2d_calls: dict[str, int]
    launch_calls: dict[str, int]
    waits: int = 0  # Stream/Event.synchronize: the host blocked without reading data


class FakeCupy(types.ModuleType):
    """The module: ``fake.sum``, ``fake.fft.fft``, ... are numpy's, behind cupy's rules."""

    def __init__(self, name: str = "fake_cupy", base: Any = np) -> None:
        super().__init__(name)
        self._base = base
        self._root = self
        self.syncs: dict[str, int] = {}
        self.h2d: dict[str, int] = {}       # host->device uploads, by the call that made them
        self.launches: dict[str, int] = {}  # kernel-launching calls, by name
        self.waits: dict[str, int] = {}     # host waits on a stream or an event (no data read)
        self.ndarray = FakeArray
        self.cuda = _FakeCuda()
        self.cuda.on_sync = lambda kind: self._count("waits", kind)  # the host blocks there too
        self.cuda.MemoryPool = _MemoryPool
        self.cuda.device = types.SimpleNamespace(get_cublas_handle=lambda: 1)
        self._pool = _MemoryPool()

    # -- host <-> device ------------------------------------------------------
    def asnumpy(self, a: Any, stream: Any = None) -> np.ndarray:
        return a.get() if isinstance(a, FakeArray) else np.asarray(a)

    def get_array_module(self, *args: Any) -> Any:
        return self if any(isinstance(a, FakeArray) for a in args) else np

    def get_default_memory_pool(self) -> _MemoryPool:
        return self._pool

    def get_default_pinned_memory_pool(self) -> _MemoryPool:
        return self._pool

    def _sync(self, kind: str) -> None:
        self._root.cuda.refuse_while_capturing(f"a device read ({kind})")
        root = self._root
        root.syncs[kind] = root.syncs.get(kind, 0) + 1

    def _count(self, table: str, name: str) -> None:
        if table != "launches":
            self._root.cuda.refuse_while_capturing(f"{table} ({name})")
        counts = getattr(self._root, table)
        counts[name] = counts.get(name, 0) + 1

    def snapshot(self) -> "Counts":
        """Totals so far (syncs, uploads, launches), with the launch and upload tables by name."""
        root = self._root
        return Counts(sum(root.syncs.values()), sum(root.h2d.values()), sum(root.launches.values()),
                      dict(root.syncs), dict(root.h2d), dict(root.launches), sum(root.waits.values()))

    @contextlib.contextmanager
    def counting(self) -> Any:
        """``with fake.counting() as c: ex.run(feeds)``: ``c`` holds what happened inside."""
        before = self.snapshot()
        delta = Counts(0, 0, 0, {}, {}, {}, 0)
        try:
            yield delta
        finally:
            after = self.snapshot()
            delta.syncs, delta.h2d, delta.launches = (after.syncs - before.syncs, after.h2d - before.h2d,
                                                      after.launches - before.launches)
            delta.waits = after.waits - before.waits
            for table in ("sync_calls", "h2d_calls", "launch_calls"):
                old, new = getattr(before, table), getattr(after, table)
                getattr(delta, table).update({k: n - old.get(k, 0) for k, n in new.items()
                                              if n != old.get(k, 0)})

    # -- wrapping -------------------------------------------------------------
    def _wrap(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return FakeArray(value, self._root)
        if isinstance(value, np.generic):  # cupy returns 0-d device arrays, never numpy scalars
            return FakeArray(np.asarray(value), self._root)
        if isinstance(value, tuple):
            return tuple(self._wrap(v) for v in value)
        if isinstance(value, list):
            return [self._wrap(v) for v in value]
        return value

    def _unwrap(self, value: Any, where: str) -> Any:
        if isinstance(value, FakeArray):
            return value._a
        if isinstance(value, np.ndarray):
            raise DeviceConversionError(f"{where}: got a numpy array where cupy needs a device array "
                                        "(Unsupported type <class 'numpy.ndarray'>); use xp.asarray")
        if isinstance(value, (list, tuple)):
            return type(value)(self._unwrap(v, where) for v in value)
        if isinstance(value, dict):
            return {k: self._unwrap(v, where) for k, v in value.items()}
        return value

    def _unwrap_index(self, key: Any) -> Any:
        # Indices may be device arrays, slices, ints, lists; numpy index arrays are copied over as cupy does.
        if isinstance(key, tuple):
            return tuple(self._unwrap_index(k) for k in key)
        if isinstance(key, FakeArray):
            return key._a
        return key

    def _wrap_fn(self, fn: Any, name: str, host_ok: bool = False) -> Callable[..., Any]:
        mod = self._root

        short = name.rsplit(".", 1)[-1]
        launches = short not in NO_LAUNCH

        def call(*args: Any, **kwargs: Any) -> Any:
            if host_ok:
                if args and not isinstance(args[0], FakeArray):
                    mod._count("h2d", name)  # host data in: an upload
                elif _copies_on_device(short, args[0], kwargs):
                    mod._count("launches", name)  # a device copy / cast
                args = tuple(a._a if isinstance(a, FakeArray) else mod._unwrap_host_list(a) for a in args)
                kwargs = {k: v._a if isinstance(v, FakeArray) else v for k, v in kwargs.items()}
                result = fn(*args, **kwargs)
                result = np.asarray(result) if not isinstance(result, np.ndarray) else result
                if result.dtype == object or result.dtype.kind in "US":
                    raise DeviceConversionError(f"{name}: cupy has no string/object arrays "
                                                f"(dtype {result.dtype}); keep them on the host")
                return mod._wrap(result)
            args = tuple(mod._unwrap(a, name) for a in args)
            kwargs = {k: mod._unwrap(v, name) for k, v in kwargs.items()}
            result = fn(*args, **kwargs)
            if launches and isinstance(result, (np.ndarray, np.generic, tuple, list)):
                mod._count("launches", name)
                if isinstance(result, np.ndarray) and result.base is None:
                    mod._pool.allocated += result.nbytes
            return mod._wrap(result)

        call.__name__ = name
        if isinstance(fn, np.ufunc):  # ufunc methods (reduce, accumulate, at, outer) follow the same rules
            for meth in ("reduce", "accumulate", "at", "outer", "reduceat"):
                setattr(call, meth, mod._wrap_fn(getattr(fn, meth), f"{name}.{meth}"))
        return call

    def _unwrap_host_list(self, a: Any) -> Any:
        if isinstance(a, (list, tuple)):
            return type(a)(self._unwrap_host_list(v) for v in a)
        return a._a if isinstance(a, FakeArray) else a

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        if name in NUMPY_ONLY:
            raise AttributeError(f"cupy has no attribute {name!r} (numpy-only); "
                                 "do this on the host through registry.to_host, or find a cupy equivalent")
        value = getattr(self._base, name)
        if isinstance(value, types.ModuleType):
            sub = FakeCupy(f"{self.__name__}.{name}", value)
            sub._root = self._root
            object.__setattr__(self, name, sub)  # cache: the next lookup finds it directly
            return sub
        if isinstance(value, type) or not callable(value):
            return value  # dtypes, classes, constants (cupy.float32 is numpy.float32 too)
        return self._wrap_fn(value, name, host_ok=name in CONSTRUCTORS and self._base is np)


#: Set (through monkeypatch, so undone after the test) when a test installs the fake itself:
#: under the plugin mode its results then stay on the device, as the test expects.
_TEST_INSTALLED = False


#: The fake the plugin mode put behind every Executor (set through monkeypatch, per test).
_FORCED: "FakeCupy | None" = None


def install(monkeypatch: Any) -> FakeCupy:
    """Make ``engine.gpu`` (and so the executor's ``--device gpu``) find the fake as cupy.
    Under the plugin mode that is the fake already there: its counts are the executors'."""
    monkeypatch.setattr(sys.modules[__name__], "_TEST_INSTALLED", True)
    return _FORCED if _FORCED is not None else _install(monkeypatch)


def _install(monkeypatch: Any) -> FakeCupy:
    import engine.gpu  # noqa: PLC0415 - tests only

    fake = FakeCupy("cupy")
    monkeypatch.setitem(sys.modules, "cupy", fake)  # the executor imports cupy by name
    monkeypatch.setattr(engine.gpu, "_cupy", fake)
    monkeypatch.setattr(engine.gpu, "_probed", True)
    return fake


# --- a pytest plugin: any test file's executors on the fake GPU ------------------
# PYTHONPATH=tests python -m pytest -p fake_cupy --fake-gpu tests/test_executor.py ...
# runs those tests unchanged with every Executor on ``--device gpu`` over this fake
# (``device_context`` answers the GPU context and the fake for "cpu" too).

def pytest_addoption(parser: Any) -> None:
    parser.addoption("--fake-gpu", action="store_true",
                     help="run every Executor on the strict fake cupy (tests/fake_cupy.py)")
    parser.addoption("--real-gpu", action="store_true",
                     help="run every Executor on the real cupy and CUDA GPU (a GPU machine only)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "cpu_only(reason): checks a CPU-only behaviour; "
                                       "skipped with its reason under --fake-gpu")


def _force_gpu(monkeypatch: Any) -> FakeCupy:
    fake = _install(monkeypatch)
    monkeypatch.setattr(sys.modules[__name__], "_FORCED", fake)
    _every_executor_on(monkeypatch, fake, FakeArray)
    return fake


def _force_real_gpu(monkeypatch: Any) -> None:
    """The same tests on a real GPU (``--real-gpu``): every Executor on real cupy, so the
    fake-GPU suite doubles as the GPU machine's correctness check against onnxruntime."""
    from engine import gpu  # noqa: PLC0415 - tests only

    cupy = gpu.require_gpu(0)
    _every_executor_on(monkeypatch, cupy, cupy.ndarray)


def _every_executor_on(monkeypatch: Any, module: Any, device_array: type) -> None:
    """Executors asked for "cpu" or "gpu" get the GPU context and ``module`` as their xp."""
    import engine.executor  # noqa: PLC0415 - tests only
    from engine import Context  # noqa: PLC0415

    real = engine.executor.device_context

    def device_context(device: str, device_id: int = 0) -> tuple[Any, Any]:
        if device in ("cpu", "gpu"):
            return Context.gpu(device_id), module
        return real(device, device_id)
    monkeypatch.setattr(engine.executor, "device_context", device_context)
    _host_results_for_tests(monkeypatch, engine.executor.Executor, device_array)


def _host_results_for_tests(monkeypatch: Any, executor_cls: Any, device_array: type | None = None) -> None:
    """Tests read ``res.outputs[...]`` with numpy; on a GPU those are device arrays. Copy a
    RunResult's outputs and kept values to the host (``.get()``, an explicit transfer) where a
    test receives it -- only when ``Executor.run`` is called from outside ``engine``, so runs
    nested inside the engine (subgraph operators, bodies) keep their values on the device."""
    real_run = executor_cls.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        res = real_run(self, *args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if _TEST_INSTALLED or caller == "engine" or caller.startswith("engine."):
            return res
        for field in ("outputs", "values"):
            d = getattr(res, field, None)
            if isinstance(d, dict):
                setattr(res, field, {k: v.get() if isinstance(v, device_array or FakeArray) else v
                                     for k, v in d.items()})
        return res
    monkeypatch.setattr(executor_cls, "run", run)


try:
    import pytest as _pytest

    @_pytest.fixture(autouse=True)
    def _fake_gpu_everywhere(request: Any, monkeypatch: Any) -> Any:
        fake, real = (request.config.getoption(o, default=False) for o in ("--fake-gpu", "--real-gpu"))
        if fake or real:
            mark = request.node.get_closest_marker("cpu_only")
            if mark is not None:
                _pytest.skip("CPU-only: " + mark.kwargs.get("reason", mark.args[0] if mark.args else "?"))
            if fake:
                _force_gpu(monkeypatch)
            else:
                _force_real_gpu(monkeypatch)
        yield
except ImportError:  # pragma: no cover - only ever imported under pytest
    pass
