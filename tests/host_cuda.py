"""cupy's ``ElementwiseKernel`` and ``RawKernel`` on the host, for tests: the CUDA sources compiled there.

No GPU is lent to this project's CI, so the generated kernels' sources (``engine/kernels/
device.py``) would otherwise be checked only where a GPU happens to be lent. An
elementwise kernel's operation is a C expression run once per index ``i``; this module
compiles it with the system C compiler inside a loop over ``i`` and calls it through
ctypes, with cupy's conventions for the parts our kernels use:

* parameters ``"raw T name"`` (the whole array, indexed by its logical flat index -- cupy's
  ``CArray`` unravels a non-contiguous array, so a C-contiguous copy is handed in and an
  output is copied back), ``"T name"`` (one element per index, arrays broadcast together;
  a Python or numpy scalar passed by value) and fixed C types (``int32``, ``float32``...);
* ``T`` is the dtype of the first argument typed ``T`` (float32 or float64 here);
* ``size=`` gives the index count when no parameter is elementwise; outputs not passed
  are allocated in the broadcast shape and returned;
* the math functions are C's type-generic ones (``<tgmath.h>``): ``exp``/``tanh``/``erf``
  of a float are the float versions, as CUDA's C++ overloads are on the device.

``RawKernel`` (1-D grids and blocks) runs its source as C++: block after block, one host
thread per CUDA thread, ``__syncthreads()`` a barrier, ``__shared__`` one array per block,
``blockIdx``/``threadIdx``/``blockDim`` as CUDA defines them.

What it cannot check is what only NVRTC sees (a CUDA-only identifier, a macro NVRTC lacks:
the first LayerNorm/Softmax sources' ``INFINITY``), warp-level behaviour and speed --
those still need a GPU run. Each launch is counted on the fake
(``launches["ElementwiseKernel:<name>"]``, ``launches["RawKernel:<name>"]``).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fake_cupy import DeviceConversionError, FakeArray, FakeCupy

_C_TYPES = {"bool": ("bool", ctypes.c_bool, np.bool_),
            "int32": ("int32_t", ctypes.c_int32, np.int32), "int64": ("int64_t", ctypes.c_int64, np.int64),
            "float32": ("float", ctypes.c_float, np.float32), "float64": ("double", ctypes.c_double, np.float64)}
_T_TYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_BUILD = Path(tempfile.mkdtemp(prefix="sglens-host-cuda-"))
_LIBS: dict[str, Any] = {}


def _params(spec: str) -> list[tuple[bool, str, str]]:
    """``"raw T a, T b, int32 n"`` -> [(raw, type, name), ...]."""
    out = []
    for part in (p.split() for p in spec.split(",") if p.strip()):
        raw = part[0] == "raw"
        typ, name = part[1 if raw else 0:]
        out.append((raw, typ, name))
    return out


def _compile(source: str, cpp: bool = False) -> Any:
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    if key not in _LIBS:
        src, lib = _BUILD / f"k{key}.{'cpp' if cpp else 'c'}", _BUILD / f"k{key}.so"
        src.write_text(source)
        cmd = (["c++", "-std=c++17", "-pthread"] if cpp else ["cc", "-std=c99"])
        subprocess.run([*cmd, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src), "-lm"],
                       check=True, capture_output=True, text=True)
        _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


class HostElementwiseKernel:
    """``cupy.ElementwiseKernel(in_params, out_params, operation, name)`` for the fake."""

    def __init__(self, fake: FakeCupy, in_params: str, out_params: str, operation: str, name: str) -> None:
        self.fake, self.name, self.operation = fake, name, operation
        self.ins, self.outs = _params(in_params), _params(out_params)

    def _source(self, t: str) -> str:
        c_t = _C_TYPES[t][0]
        args, defines, undefs = ["ptrdiff_t _n"], [], []
        for raw, typ, name in self.ins + self.outs:
            c_typ = c_t if typ == "T" else _C_TYPES[typ][0]
            args.append(f"{c_typ}* {name}" if raw else f"{c_typ}* {name}__")
            if not raw:
                defines.append(f"#define {name} ({name}__[i])")
                undefs.append(f"#undef {name}")
        return ("#include <tgmath.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <stddef.h>\n"
                f"typedef {c_t} T;\nvoid {self.name}({', '.join(args)}) {{\n"
                "  for (ptrdiff_t i = 0; i < _n; ++i) {\n" + "\n".join(defines) +
                f"\n    {{ {self.operation}; }}\n" + "\n".join(undefs) + "\n  }\n}\n")

    def __call__(self, *args: Any, size: int | None = None) -> Any:
        params = self.ins + self.outs
        if not len(self.ins) <= len(args) <= len(params):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(params)} parameters")
        if any(isinstance(a, np.ndarray) for a in args):
            raise DeviceConversionError(f"{self.name}: a numpy array among the arguments (cupy "
                                        "refuses host arrays); use xp.asarray")
        values = [a._a if isinstance(a, FakeArray) else a for a in args]
        t_dtype = next(np.asarray(v).dtype for v, (_, typ, _) in zip(values, params) if typ == "T")
        t = _T_TYPES[np.dtype(t_dtype)]
        dtype_of = lambda typ: np.dtype(_C_TYPES[t if typ == "T" else typ][2])  # noqa: E731
        elementwise = [np.asarray(v) for v, (raw, _, _) in zip(values, params) if not raw
                       and isinstance(v, np.ndarray)]
        shape = np.broadcast_shapes(*(v.shape for v in elementwise)) if elementwise else None
        n = int(np.prod(shape)) if shape is not None else size
        if n is None:
            raise ValueError(f"{self.name}: no elementwise argument; pass size=")
        shape = shape if shape is not None else (n,)
        buffers, c_args, returned = [], [ctypes.c_ssize_t(n)], []
        for k, (raw, typ, name) in enumerate(params):
            dt = dtype_of(typ)
            if k >= len(values):   # an output not passed: allocated in the broadcast shape
                values.append(np.empty(shape, dt))
                returned.append(values[k])
            v = values[k]
            if not raw and not isinstance(v, np.ndarray):   # a scalar: by value, as one element
                v = np.full(shape, v, dt)
            # an array already C-contiguous is handed over as it is: aliasing as on the device
            buf = np.ascontiguousarray(v if raw else np.broadcast_to(v, shape), dtype=dt)
            buffers.append(buf)
            c_args.append(ctypes.c_void_p(buf.ctypes.data))
        getattr(_compile(self._source(t)), self.name)(*c_args)
        for k, (raw, _, name) in enumerate(params):
            if k >= len(self.ins):   # outputs back into the arrays given (cupy writes in place)
                values[k][...] = buffers[k].reshape(values[k].shape)
        self.fake._count("launches", f"ElementwiseKernel:{self.name}")
        wrapped = [self.fake._wrap(r) for r in returned]
        return None if not wrapped else wrapped[0] if len(wrapped) == 1 else tuple(wrapped)


def available() -> bool:
    """Whether a C compiler is here (the project's extension needs one too; without it the
    callers skip)."""
    return shutil.which("cc") is not None and shutil.which("c++") is not None


def install_kernels(monkeypatch: Any, fake: FakeCupy) -> None:
    """Give ``fake`` a working ``ElementwiseKernel`` and ``RawKernel`` (and forget kernels made
    for other fakes)."""
    import pytest  # noqa: PLC0415

    from engine.kernels import device  # noqa: PLC0415 - tests only
    if not available():
        pytest.skip("no C compiler (cc) to build the kernels' sources on the host")

    monkeypatch.setattr(fake, "ElementwiseKernel",
                        lambda *spec: HostElementwiseKernel(fake, *spec), raising=False)
    monkeypatch.setattr(fake, "RawKernel", lambda source, name, **kw: HostRawKernel(fake, source, name),
                        raising=False)
    monkeypatch.setattr(device, "_made", {})
    monkeypatch.setattr(device, "_elementwise", type(device._elementwise)())


# A RawKernel's source runs as C++: every block in turn, a thread per CUDA thread (so
# ``__syncthreads`` is a real barrier and ``__shared__`` memory one array per block).
_RAW_PRELUDE = r"""
#include <math.h>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <thread>
#include <vector>
#include <pthread.h>
struct sglens_dim3 { unsigned x = 1, y = 1, z = 1; };
static thread_local sglens_dim3 threadIdx;
static sglens_dim3 blockIdx, blockDim, gridDim;
static pthread_barrier_t sglens_barrier;
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() pthread_barrier_wait(&sglens_barrier)
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, sizeof i); return i; }
"""
_RAW_C_TYPES = {"int": ctypes.c_int32, "float": ctypes.c_float, "double": ctypes.c_double,
                "long long": ctypes.c_int64, "long": ctypes.c_int64, "unsigned": ctypes.c_uint32}


class HostRawKernel:
    """``cupy.RawKernel(source, name)`` for the fake, 1-D grids and blocks: ``k((grid,), (block,), args)``."""

    def __init__(self, fake: FakeCupy, source: str, name: str) -> None:
        self.fake, self.source, self.name = fake, source, name
        sig = re.search(rf"\b{re.escape(name)}\s*\(([^)]*)\)", source)
        if sig is None:
            raise ValueError(f"{name}: no such kernel in the source")
        self.params = [p.strip() for p in sig.group(1).split(",") if p.strip()]

    def _wrapper(self) -> str:
        names = [re.findall(r"\w+", p)[-1] for p in self.params]
        return (_RAW_PRELUDE + self.source +
                f'\nextern "C" void sglens_launch(unsigned grid, unsigned block, {", ".join(self.params)}) {{\n'
                "  gridDim.x = grid; blockDim.x = block;\n"
                "  pthread_barrier_init(&sglens_barrier, nullptr, block);\n"
                "  for (unsigned b = 0; b < grid; ++b) {\n    blockIdx.x = b;\n"
                "    std::vector<std::thread> ts;\n"
                f"    for (unsigned t = 0; t < block; ++t) ts.emplace_back([=] {{ threadIdx.x = t; {self.name}({', '.join(names)}); }});\n"
                "    for (auto& th : ts) th.join();\n  }\n"
                "  pthread_barrier_destroy(&sglens_barrier);\n}\n")

    def __call__(self, grid: tuple, block: tuple, args: tuple, **_: Any) -> None:
        if len(grid) != 1 or len(block) != 1 or len(args) != len(self.params):
            raise TypeError(f"{self.name}: 1-D launches with {len(self.params)} arguments only")
        c_args, back = [ctypes.c_uint32(int(grid[0])), ctypes.c_uint32(int(block[0]))], []
        for a, p in zip(args, self.params):
            if isinstance(a, np.ndarray):
                raise DeviceConversionError(f"{self.name}: a numpy array among the arguments")
            if "*" in p:
                arr = a._a
                buf = np.ascontiguousarray(arr)
                back.append((arr, buf))
                c_args.append(ctypes.c_void_p(buf.ctypes.data))
            else:
                typ = " ".join(w for w in re.findall(r"\w+", p)[:-1] if w != "const")
                c_args.append(_RAW_C_TYPES[typ](a.item() if isinstance(a, np.generic) else a))
        _compile(self._wrapper(), cpp=True).sglens_launch(*c_args)
        for arr, buf in back:
            if buf is not arr:
                arr[...] = buf
        self.fake._count("launches", f"RawKernel:{self.name}")


def refusing_kernel(*spec: Any) -> Any:
    """A ``cupy.ElementwiseKernel`` whose NVRTC rejects the source, at the first launch (as cupy
    compiles): for the tests of the generated kernels' fallback."""
    def launch(*args: Any, **kw: Any) -> None:
        raise RuntimeError("NVRTC_ERROR_COMPILATION: stand-in")
    return launch
