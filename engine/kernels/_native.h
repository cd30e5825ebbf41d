/* Shared by _native.c (the module, the LSTM, elementwise and row kernels, the spin)
 * and _native_pool.c (the thread pool, GEMM and Conv). */
#ifndef SGLENS_NATIVE_H
#define SGLENS_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* AVX-512, AVX2 and baseline builds of the hot loops; the loader picks one. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NATIVE_RELAX() _mm_pause()
#else
#define NATIVE_RELAX() ((void)0)
#endif

/* The float32 buffers one call holds: taken one by one, released together (on
 * success and on every error path alike). */
#define NATIVE_MAX_BUFFERS 8
typedef struct {
    Py_buffer view[NATIVE_MAX_BUFFERS];
    int held;
} NativeBuffers;

typedef enum {
    NATIVE_C,        /* C-contiguous (ndim 0: any number of dimensions) */
    NATIVE_ROWS,     /* the last ndim - 1 axes C-contiguous, the first may be strided */
    NATIVE_STRIDED,  /* any strides (the caller checks what BLAS can read) */
} NativeLayout;

/* `obj` as a float32 buffer of `ndim` dimensions laid out as asked, kept in `bs`;
 * NULL with a ValueError naming it (`name`) when it is not one. */
Py_buffer *native_take(NativeBuffers *bs, PyObject *obj, int writable, NativeLayout layout,
                       int ndim, const char *name);
void native_release(NativeBuffers *bs);
/* The end of a call: its buffers released; None if it succeeded (`ok`), else NULL
 * with its exception set. */
PyObject *native_finish(NativeBuffers *bs, int ok);

/* CLOCK_MONOTONIC in seconds (the spins' deadlines). */
double native_now(void);

/* fn(arg, i, slot) for i < n on the caller and up to ways - 1 pool workers (slot 0 is
 * the caller, 1.. the workers that joined); call without the GIL. */
typedef void (*native_slice_fn)(void *arg, Py_ssize_t i, int slot);
void native_pool_run(native_slice_fn fn, void *arg, Py_ssize_t n, int ways);
/* C (m x n, row stride ldc) = A (m x k) B (k x n) + beta C through the process's CBLAS
 * sgemm (set_sgemm); ta / tb: the operand is stored transposed. */
void native_sgemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float *a,
                  Py_ssize_t lda, const float *b, Py_ssize_t ldb, float beta, float *c,
                  Py_ssize_t ldc);
/* Whether set_sgemm gave the pool a BLAS. */
int native_have_sgemm(void);

PyObject *native_set_sgemm(PyObject *self, PyObject *args);
PyObject *native_set_pool_spin(PyObject *self, PyObject *args);
PyObject *native_pool_stats(PyObject *self, PyObject *args);
PyObject *native_gemm_f32(PyObject *self, PyObject *args);
PyObject *native_conv2d_f32(PyObject *self, PyObject *args);
PyObject *native_maxpool2d_f32(PyObject *self, PyObject *args);

#endif
