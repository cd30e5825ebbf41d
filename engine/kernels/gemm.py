"""The matrix product every kernel calls, and the one a CUDA Graph capture can record.

Outside a capture ``matmul`` is ``xp.matmul`` (numpy or cupy), unchanged.

During a capture (``engine/gpu_graphs.py`` enters ``capturing_on``) it calls cuBLAS
itself. cupy refuses every cuBLAS call while the current stream captures: its
``setStream`` raises "calling cuBLAS API during stream capture is currently unsupported"
(cupy_backends/cuda/libs/cublas.pyx, a TODO there). cuBLAS supports capture (the cuBLAS
docs, "CUDA Graphs support"). Every model has GEMMs (MatMul, Gemm, convolutions as
im2col products, LayerNorm's row statistics, recurrent steps), so this guard is what kept
every model out of a capture on an H200. Here the same cuBLAS library that cupy loaded
(found among the process's mapped files, so the handle is valid for it) runs a strided
batched GEMM on cupy's own handle, on the capturing stream. Only float32 and float64
are handled; any other product raises ``CaptureUnsupported``, and the graph runs eagerly.
"""

from __future__ import annotations

import ctypes
import math
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

_local = threading.local()
_CUBLAS_OP_N = 0
_POINTER_MODE_HOST = 0


class CaptureUnsupported(RuntimeError):
    """A product this module cannot record in a capture (the graph runs eagerly instead)."""


def matmul(xp: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` with numpy's matmul rules (into ``out`` if given)."""
    stream = getattr(_local, "stream", None)
    if stream is None or xp is np:
        return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)
    result = _captured_matmul(xp, a, b, stream)
    if out is None:
        return result
    out[...] = result
    return out


@contextmanager
def capturing_on(stream_ptr: int) -> Iterator[None]:
    """This thread's products go through cuBLAS on ``stream_ptr`` (a capturing stream)."""
    _local.stream = stream_ptr
    try:
        yield
    finally:
        _local.stream = None


def _captured_matmul(xp: Any, a: Any, b: Any, stream: int) -> Any:
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
        raise CaptureUnsupported(f"a {a.dtype} x {b.dtype} matrix product cannot be captured "
                                 "(float32 and float64 only)")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    (m, k), (k2, n) = a2.shape[-2:], b2.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not align")
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    count = math.prod(batch)
    c = xp.empty(batch + (m, n), dtype=a.dtype)
    if k == 0:
        c[...] = 0
    elif c.size:
        a3, stride_a = _batched(xp, a2, batch, count)
        b3, stride_b = _batched(xp, b2, batch, count)
        _gemm(xp, stream, a.dtype, m, n, k, a3, stride_a, b3, stride_b, c, count)
    if a.ndim == 1:
        c = c.reshape(batch + (n,))
    if b.ndim == 1:
        c = c.reshape(c.shape[:-1])
    return c


def _batched(xp: Any, x: Any, batch: tuple, count: int) -> tuple[Any, int]:
    """``x`` as ``count`` C-contiguous matrices and the element stride between them (0: one
    matrix shared by the whole batch, no copy per batch entry)."""
    rows, cols = x.shape[-2:]
    if math.prod(x.shape[:-2]) == 1:
        return xp.ascontiguousarray(x.reshape(rows, cols)), 0
    if tuple(x.shape[:-2]) != batch:
        x = xp.broadcast_to(x, batch + (rows, cols))
    return xp.ascontiguousarray(x), rows * cols


def _gemm(xp: Any, stream: int, dtype: Any, m: int, n: int, k: int, a: Any, stride_a: int,
          b: Any, stride_b: int, c: Any, count: int) -> None:
    """Row-major C (m x n) = A (m x k) @ B (k x n) per batch entry: cuBLAS is column-major,
    so it computes C^T (n x m) = B^T A^T, which is the same memory."""
    library = getattr(xp.cuda, "cublas_stand_in", None) or _Cublas.of(xp)   # the fake cupy's, in tests
    library.gemm_strided_batched(dtype, stream, _CUBLAS_OP_N, _CUBLAS_OP_N, n, m, k, 1.0,
                                 b, n, stride_b, a, k, stride_a, 0.0, c, n, m * n, count)


class _Cublas:
    """cuBLAS as cupy loaded it (already mapped once cupy made its handle), through ctypes."""

    _one: "_Cublas | None" = None

    @classmethod
    def of(cls, xp: Any) -> "_Cublas":
        if cls._one is None:
            cls._one = cls(xp)
        return cls._one

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        xp.cuda.device.get_cublas_handle()   # loads cuBLAS and makes the handle
        path = _mapped("libcublas.so")
        if path is None:
            raise CaptureUnsupported("cuBLAS is not mapped into this process; cannot capture GEMMs")
        self.lib = lib = ctypes.CDLL(path)
        for name in ("cublasSgemmStridedBatched", "cublasDgemmStridedBatched", "cublasSetStream_v2",
                     "cublasSetPointerMode_v2"):
            getattr(lib, name).restype = ctypes.c_int

    def gemm_strided_batched(self, dtype: Any, stream: int, op_a: int, op_b: int, m: int, n: int,
                             k: int, alpha: float, a: Any, lda: int, stride_a: int, b: Any, ldb: int,
                             stride_b: int, beta: float, c: Any, ldc: int, stride_c: int,
                             count: int) -> None:
        """cublas{S,D}gemmStridedBatched (column-major) on cupy's handle, on ``stream``."""
        lib = self.lib
        handle = ctypes.c_void_p(self.xp.cuda.device.get_cublas_handle())
        _check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream)), "cublasSetStream")
        _check(lib.cublasSetPointerMode_v2(handle, _POINTER_MODE_HOST), "cublasSetPointerMode")
        single = dtype == np.float32
        scalar = ctypes.c_float if single else ctypes.c_double
        fn = lib.cublasSgemmStridedBatched if single else lib.cublasDgemmStridedBatched
        ptr, big = ctypes.c_void_p, ctypes.c_longlong
        status = fn(handle, op_a, op_b, m, n, k, ctypes.byref(scalar(alpha)),
                    ptr(a.data.ptr), lda, big(stride_a), ptr(b.data.ptr), ldb, big(stride_b),
                    ctypes.byref(scalar(beta)), ptr(c.data.ptr), ldc, big(stride_c), count)
        _check(status, "cublasSgemmStridedBatched" if single else "cublasDgemmStridedBatched")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned cuBLAS status {status} during a CUDA Graph capture")


def _mapped(prefix: str) -> str | None:
    """The path of the first mapped file whose name starts with ``prefix`` (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.rsplit("/", 1)[-1].startswith(prefix):
                    return path
    except OSError:
        return None
    return None
