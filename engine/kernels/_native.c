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

/* ------------------------------------------------------ sigmoid, SiLU --
 * 1 / (1 + exp(-x)), and x times it (SiLU, the Swish of EfficientNet, MobileViT and
 * Llama's MLP), in one pass through glibc's vector expf: numpy makes four passes for
 * the sigmoid (negate, exp, add, reciprocal) and one more for the product. The same
 * operations as the unfused nodes, so x = -inf gives NaN in SiLU as Mul(x, Sigmoid(x)). */
CLONES static void sigmoid_loop(const float *x, float *y, Py_ssize_t n)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

CLONES static void silu_loop(const float *x, float *y, Py_ssize_t n)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = x[i] * (1.0f / (1.0f + expf(-x[i])));
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

static PyObject *sigmoid_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    int times_x;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *y;
    if (!PyArg_ParseTuple(args, "OOp", &ox, &oy, &times_x))
        return NULL;
    if (take_pair(&bs, ox, oy, &x, &y) < 0)
        return native_finish(&bs, 0);
    Py_BEGIN_ALLOW_THREADS
    if (times_x)
        silu_loop((const float *)x->buf, (float *)y->buf, x->len / 4);
    else
        sigmoid_loop((const float *)x->buf, (float *)y->buf, x->len / 4);
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

/* ------------------------------------------------------------- quantize --
 * QuantizeLinear's float steps with one scale s and zero point z: x / s rounded to nearest
 * even, plus z, clipped to [lo, hi] -- the same float32 operations in the same order as numpy's
 * path (a division, not a product with 1 / s: ties round alike); a NaN stays NaN through the
 * clip, as numpy's clip keeps it. Two uses, one pass each:
 *  - fake quantization, DequantizeLinear(QuantizeLinear(x)) (the per-tensor activations of a
 *    QDQ model: 610 pairs a run in PP-OCRv4 rec, each six numpy passes): then minus z, times s;
 *  - DynamicQuantizeLinear's quantized values (before numpy's cast to uint8): five numpy
 *    passes and four temporaries before. */
static inline float quantized(float x, float s, float z, float lo, float hi)
{
    float q = rintf(x / s) + z;
    return q < lo ? lo : (q > hi ? hi : q);
}

CLONES static void fake_quantize_loop(const float *x, float *y, Py_ssize_t n, float s, float z,
                                      float lo, float hi)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = (quantized(x[i], s, z, lo, hi) - z) * s;
}

CLONES static void quantize_loop(const float *x, float *y, Py_ssize_t n, float s, float z,
                                 float lo, float hi)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = quantized(x[i], s, z, lo, hi);
}

static PyObject *quantize_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    float s, z, lo, hi;
    int dequantize;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *y;
    if (!PyArg_ParseTuple(args, "OOffffp", &ox, &oy, &s, &z, &lo, &hi, &dequantize))
        return NULL;
    if (take_pair(&bs, ox, oy, &x, &y) < 0)
        return native_finish(&bs, 0);
    Py_BEGIN_ALLOW_THREADS
    (dequantize ? fake_quantize_loop : quantize_loop)((const float *)x->buf, (float *)y->buf,
                                                      x->len / 4, s, z, lo, hi);
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
        /* The maximum, vectorised, with NaN tracked apart: any NaN makes the row's
         * maximum NaN, as numpy's (a scalar loop letting NaN win in the comparison
         * was most of a 1500-wide attention row's time). */
        float hi = -INFINITY;
        int nan = 0;
#pragma omp simd reduction(max : hi) reduction(| : nan)
        for (Py_ssize_t i = 0; i < n; i++) {
            hi = xr[i] > hi ? xr[i] : hi;
            nan |= xr[i] != xr[i];
        }
        if (nan)
            hi = NAN;
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

static PyMethodDef methods[] = {
    {"im2col_f32", native_im2col_f32, METH_VARARGS,
     "im2col_f32(x, cols, geometry): the columns of a 2-D conv, padding written as zeros."},
    {"im2col_rows_f32", native_im2col_rows_f32, METH_VARARGS,
     "im2col_rows_f32(x, cols, geometry, img, r0, r1): the columns of output rows r0..r1."},
    {"depthwise_conv2d_f32", native_depthwise_conv2d_f32, METH_VARARGS,
     "depthwise_conv2d_f32(x, w, out, bias, geometry): a 2-D conv of one input channel a group."},
    {"maxpool2d_f32", native_maxpool2d_f32, METH_VARARGS,
     "maxpool2d_f32(x, out, geometry): 2-D MaxPool values of planes, -inf padding."},
    {"winograd_input_f32", native_winograd_input_f32, METH_VARARGS,
     "winograd_input_f32(x, v, (pad_top, pad_left, th, tw)): F(2x2, 3x3) input tiles B^T d B."},
    {"winograd_output_f32", native_winograd_output_f32, METH_VARARGS,
     "winograd_output_f32(m, y): F(2x2, 3x3) output tiles A^T m A into y (N, M, OH, OW)."},
    {"channel_epilogue_f32", native_channel_epilogue_f32, METH_VARARGS,
     "channel_epilogue_f32(y, scale, shift, residual, lo, hi, swish, leaky, post_scale, post_shift): a conv's epilogue in one pass."},
    {"softmax_f32", softmax_f32, METH_VARARGS,
     "softmax_f32(x, out, n): softmax of each row of n, float32, C-contiguous."},
    {"layer_norm_f32", layer_norm_f32, METH_VARARGS,
     "layer_norm_f32(x, scale, bias_or_None, y, mean, inv_std, n, eps): LayerNorm of rows of n."},
    {"erf_f32", erf_f32, METH_VARARGS, "erf_f32(x, out): out = erf(x), float32, C-contiguous."},
    {"sigmoid_f32", sigmoid_f32, METH_VARARGS,
     "sigmoid_f32(x, out, times_x): out = 1 / (1 + exp(-x)), times x if times_x; float32."},
    {"quantize_f32", quantize_f32, METH_VARARGS,
     "quantize_f32(x, out, s, z, lo, hi, dequantize): out = clip(rint(x / s) + z, lo, hi), then "
     "(out - z) * s if dequantize; float32."},
    {"gelu_f32", gelu_f32, METH_VARARGS,
     "gelu_f32(x, out, div, one, half): out = half * x * (one + erf(x / div)), float32."},
    NATIVE_RNN_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
