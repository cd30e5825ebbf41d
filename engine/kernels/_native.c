/* Compiled kernels of the numpy path, float32, each one call without the GIL.
 * engine/kernels/native.py is their only caller and says when they apply; each
 * has a numpy path beside it that runs where this module was not built.
 *
 * The recurrent family (RNN, GRU, LSTM) is _native_rnn.c's.
 *
 * tanhf: glibc >= 2.35 ships vector versions (libmvec) but declares them only
 * under -ffast-math, which would also change the rounding of everything else;
 * declaring tanhf's SIMD variants here lets gcc vectorise the two tanh loops with
 * the rest of the file compiled strictly. target_clones builds AVX-512, AVX2 and
 * baseline versions of the step; the loader picks the one the CPU runs.
 */
#include "_native.h"
#include "_native_rnn.h"

#include <math.h>
#include <string.h>

#if defined(__GLIBC__) && defined(__x86_64__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
float tanhf(float) __attribute__((__simd__("notinbranch")));
float erff(float) __attribute__((__simd__("notinbranch")));
float expf(float) __attribute__((__simd__("notinbranch")));
#endif


/* ------------------------------------------------------------ erf, GELU --
 * erf and the exact (erf) GELU of float32 arrays through glibc's vector erff:
 * within a few ulps, where numpy has no erf at all (elementwise.py's vectorised
 * series costs ~20 array passes). */
CLONES static void erf_loop(const float *x, float *y, Py_ssize_t n)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = erff(x[i]);
}

CLONES static void gelu_loop(const float *x, float *y, Py_ssize_t n, float inv_div, float one,
                             float half)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = half * x[i] * (one + erff(x[i] * inv_div));
}

/* Two C-contiguous float32 buffers of one size, kept in `bs`: the input and the output. */
static int take_pair(NativeBuffers *bs, PyObject *ox, PyObject *oy, Py_buffer **x, Py_buffer **y)
{
    if (!(*x = native_take(bs, ox, 0, NATIVE_C, 0, "x")) ||
        !(*y = native_take(bs, oy, 1, NATIVE_C, 0, "out")))
        return -1;
    if ((*x)->len != (*y)->len) {
        PyErr_SetString(PyExc_ValueError, "expected two float32 arrays of one size");
        return -1;
    }
    return 0;
}

static PyObject *erf_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *y;
    if (!PyArg_ParseTuple(args, "OO", &ox, &oy))
        return NULL;
    if (take_pair(&bs, ox, oy, &x, &y) < 0)
        return native_finish(&bs, 0);
    Py_BEGIN_ALLOW_THREADS
    erf_loop((const float *)x->buf, (float *)y->buf, x->len / 4);
    Py_END_ALLOW_THREADS
    return native_finish(&bs, 1);
}

static PyObject *gelu_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    float div, one, half;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *y;
    if (!PyArg_ParseTuple(args, "OOfff", &ox, &oy, &div, &one, &half))
        return NULL;
    if (take_pair(&bs, ox, oy, &x, &y) < 0)
        return native_finish(&bs, 0);
    Py_BEGIN_ALLOW_THREADS
    gelu_loop((const float *)x->buf, (float *)y->buf, x->len / 4, 1.0f / div, one, half);
    Py_END_ALLOW_THREADS
    return native_finish(&bs, 1);
}

/* ------------------------------------------------------ softmax, LayerNorm --
 * Row by row over the last axis (rows of n): numpy reduces a short last axis row
 * by row in Python-visible passes (an attention map's 512 rows of 128, a
 * transformer's 128 rows of 256), here each row is three passes in cache. */
CLONES static void softmax_rows(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float hi = -INFINITY;
        for (Py_ssize_t i = 0; i < n; i++)   /* not vectorised: NaN must win, as in numpy */
            hi = (xr[i] > hi || xr[i] != xr[i]) ? xr[i] : hi;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (Py_ssize_t i = 0; i < n; i++) {
            const float e = expf(xr[i] - hi);
            yr[i] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++)
            yr[i] *= inv;
    }
}

/* y = (x - mean) / sqrt(var + eps) * scale + bias per row; the statistics are
 * two passes (mean first, then squares of deviations), as the numpy path. */
CLONES static void layer_norm_rows(const float *x, const float *scale, const float *bias,
                                   float *y, float *mean_out, float *inv_out, Py_ssize_t rows,
                                   Py_ssize_t n, float eps)
{
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (Py_ssize_t i = 0; i < n; i++)
            sum += xr[i];
        const float mean = sum / (float)n;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (Py_ssize_t i = 0; i < n; i++) {
            const float d = xr[i] - mean;
            sq += d * d;
        }
        const float inv = 1.0f / sqrtf(sq / (float)n + eps);
        if (bias != NULL) {
#pragma omp simd
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * inv * scale[i] + bias[i];
        } else {
#pragma omp simd
            for (Py_ssize_t i = 0; i < n; i++)
                yr[i] = (xr[i] - mean) * inv * scale[i];
        }
        mean_out[r] = mean;
        inv_out[r] = inv;
    }
}

/* A C-contiguous float32 buffer of exactly `need` items, kept in `bs`. */
static Py_buffer *take_items(NativeBuffers *bs, PyObject *obj, int writable, Py_ssize_t need,
                             const char *name)
{
    Py_buffer *v = native_take(bs, obj, writable, NATIVE_C, 0, name);
    if (v != NULL && v->len / 4 != need) {
        PyErr_Format(PyExc_ValueError, "%s: expected a float32 array of %zd items", name, need);
        return NULL;
    }
    return v;
}

static PyObject *softmax_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    Py_ssize_t n;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *y;
    if (!PyArg_ParseTuple(args, "OOn", &ox, &oy, &n))
        return NULL;
    int ok = take_pair(&bs, ox, oy, &x, &y) == 0;
    if (ok && (n <= 0 || (x->len / 4) % n != 0)) {
        PyErr_SetString(PyExc_ValueError, "softmax_f32: the size is not a multiple of the row");
        ok = 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        softmax_rows((const float *)x->buf, (float *)y->buf, x->len / 4 / n, n);
        Py_END_ALLOW_THREADS
    }
    return native_finish(&bs, ok);
}

static PyObject *layer_norm_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *os, *ob, *oy, *om, *oi;
    Py_ssize_t n;
    float eps;
    if (!PyArg_ParseTuple(args, "OOOOOOnf", &ox, &os, &ob, &oy, &om, &oi, &n, &eps))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *sc, *b = NULL, *y, *m, *iv;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 0, "x")))
        goto done;
    if (n <= 0 || (x->len / 4) % n != 0) {
        PyErr_SetString(PyExc_ValueError, "layer_norm_f32: x must be float32 rows of n");
        goto done;
    }
    const Py_ssize_t rows = x->len / 4 / n;
    if (!(sc = take_items(&bs, os, 0, n, "scale")) ||
        (ob != Py_None && !(b = take_items(&bs, ob, 0, n, "bias"))) ||
        !(y = take_items(&bs, oy, 1, rows * n, "y")) ||
        !(m = take_items(&bs, om, 1, rows, "mean")) ||
        !(iv = take_items(&bs, oi, 1, rows, "inv_std")))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    layer_norm_rows((const float *)x->buf, (const float *)sc->buf,
                    b != NULL ? (const float *)b->buf : NULL, (float *)y->buf, (float *)m->buf,
                    (float *)iv->buf, rows, n, eps);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* ------------------------------------------------------------------ spin --
 * engine/blas.py's helper threads wait for the next slice of a large kernel here
 * for a short while, the GIL released, before they block: on a virtual machine
 * an idle vCPU is halted, and a helper woken on it started its slice 0.5-2 ms
 * late (a 1 ms LSTM direction; measured), so a split kernel ran no faster than
 * serially. onnxruntime's pool spins the same way. */
#include <time.h>

double native_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static PyObject *spin_wait(PyObject *self, PyObject *args)
{
    PyObject *obj;
    long long seen;
    double seconds;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "OLd", &obj, &seen, &seconds))
        return NULL;
    if (PyObject_GetBuffer(obj, &buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (buf.itemsize != 8 || buf.len < 8 || (strcmp(buf.format, "q") != 0 &&
                                             strcmp(buf.format, "l") != 0)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "spin_wait: expected an int64 array");
        return NULL;
    }
    volatile const long long *counter = (volatile const long long *)buf.buf;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    const double end = native_now() + seconds;
    for (;;) {
        for (int k = 0; k < 256; k++) {
            if (*counter != seen) {
                changed = 1;
                break;
            }
            NATIVE_RELAX();
        }
        if (changed || native_now() >= end)
            break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyBool_FromLong(changed);
}

Py_buffer *native_take(NativeBuffers *bs, PyObject *obj, int writable, NativeLayout layout,
                       int ndim, const char *name)
{
    if (bs->held == NATIVE_MAX_BUFFERS) {
        PyErr_SetString(PyExc_RuntimeError, "native_take: too many buffers for one call");
        return NULL;
    }
    Py_buffer *v = &bs->view[bs->held];
    const int flags = (layout == NATIVE_C ? PyBUF_C_CONTIGUOUS : PyBUF_STRIDES) | PyBUF_FORMAT |
                      (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0)
        return NULL;
    if (v->format == NULL || strcmp(v->format, "f") != 0 || v->itemsize != 4 ||
        (ndim > 0 && v->ndim != ndim)) {
        if (ndim > 0)
            PyErr_Format(PyExc_ValueError, "%s: expected a %d-D float32 array", name, ndim);
        else
            PyErr_Format(PyExc_ValueError, "%s: expected a float32 array", name);
        PyBuffer_Release(v);
        return NULL;
    }
    if (layout == NATIVE_ROWS) {
        Py_ssize_t expect = 4;
        for (int d = v->ndim - 1; d >= 1; d--) {
            if (v->shape[d] > 1 && v->strides[d] != expect) {
                PyErr_Format(PyExc_ValueError, "%s: its last %d axes must be C-contiguous", name,
                             v->ndim - 1);
                PyBuffer_Release(v);
                return NULL;
            }
            expect *= v->shape[d];
        }
    }
    bs->held++;
    return v;
}

void native_release(NativeBuffers *bs)
{
    while (bs->held > 0)
        PyBuffer_Release(&bs->view[--bs->held]);
}

PyObject *native_finish(NativeBuffers *bs, int ok)
{
    native_release(bs);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_sgemm", native_set_sgemm, METH_VARARGS,
     "set_sgemm(address, ilp64): the CBLAS sgemm the pool's GEMMs and convs call."},
    {"pool_stats", native_pool_stats, METH_NOARGS,
     "pool_stats(): (jobs posted to the pool, slices its workers ran) so far."},
    {"set_pool_spin", native_set_pool_spin, METH_VARARGS,
     "set_pool_spin(seconds): how long a pool worker spins for the next job."},
    {"gemm_f32", native_gemm_f32, METH_VARARGS,
     "gemm_f32(a, b, out, ways): out = a @ b (2-D float32) over `ways` threads."},
    {"maxpool2d_f32", native_maxpool2d_f32, METH_VARARGS,
     "maxpool2d_f32(x, out, geometry, ways): 2-D MaxPool values of planes, -inf padding."},
    {"conv2d_f32", native_conv2d_f32, METH_VARARGS,
     "conv2d_f32(x, w, out, bias, residual, relu, geometry, ways): 2-D conv, one group."},
    {"softmax_f32", softmax_f32, METH_VARARGS,
     "softmax_f32(x, out, n): softmax of each row of n, float32, C-contiguous."},
    {"layer_norm_f32", layer_norm_f32, METH_VARARGS,
     "layer_norm_f32(x, scale, bias_or_None, y, mean, inv_std, n, eps): LayerNorm of rows of n."},
    {"spin_wait", spin_wait, METH_VARARGS,
     "spin_wait(counter, seen, seconds): spin, the GIL released, until counter[0] != seen\n"
     "(True) or the time is up (False)."},
    {"erf_f32", erf_f32, METH_VARARGS, "erf_f32(x, out): out = erf(x), float32, C-contiguous."},
    {"gelu_f32", gelu_f32, METH_VARARGS,
     "gelu_f32(x, out, div, one, half): out = half * x * (one + erf(x / div)), float32."},
    NATIVE_RNN_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
