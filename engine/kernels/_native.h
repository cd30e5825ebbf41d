/* Shared by the compiled kernel files: _native.c (the module table, the LSTM, the
 * elementwise and row kernels), _native_conv.c (Conv's columns, depthwise Conv,
 * MaxPool), _native_winograd.c (3x3 Conv's Winograd transforms) and _native_util.c (the
 * helpers declared here). */
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

/* ------------------------------------------------------------- checks --
 * The kernels do not trust their caller's numbers (they come from an untrusted
 * model, through engine/kernels/geometry.py): each entry point re-checks them here,
 * in arithmetic that cannot overflow, and raises instead of indexing with them. */

/* Largest geometry value (kernel, stride, dilation, pad, spatial or output size):
 * geometry.py's MAX_EXTENT. A product of two and a sum of a few stay inside int64. */
#define NATIVE_MAX_EXTENT ((Py_ssize_t)0x7fffffff)

/* Whether lo <= v <= NATIVE_MAX_EXTENT. */
static inline int native_extent(Py_ssize_t v, Py_ssize_t lo)
{
    return v >= lo && v <= NATIVE_MAX_EXTENT;
}

/* *out = a * b, or 0 when that overflows Py_ssize_t. */
static inline int native_mul(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* *out = a * b * c, or 0 when that overflows Py_ssize_t. */
static inline int native_mul3(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t *out)
{
    Py_ssize_t ab;
    return native_mul(a, b, &ab) && native_mul(ab, c, out);
}

/* ceil(a / b) for a >= 0, b >= 1, without the a + b - 1 that can overflow. */
static inline Py_ssize_t native_ceil_div(Py_ssize_t a, Py_ssize_t b)
{
    return a / b + (a % b != 0);
}

PyObject *native_im2col_f32(PyObject *self, PyObject *args);
PyObject *native_im2col_rows_f32(PyObject *self, PyObject *args);
PyObject *native_depthwise_conv2d_f32(PyObject *self, PyObject *args);
PyObject *native_maxpool2d_f32(PyObject *self, PyObject *args);
PyObject *native_channel_epilogue_f32(PyObject *self, PyObject *args);
PyObject *native_winograd_input_f32(PyObject *self, PyObject *args);
PyObject *native_winograd_output_f32(PyObject *self, PyObject *args);

#endif
