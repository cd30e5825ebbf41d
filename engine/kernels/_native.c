/* Compiled kernels of the numpy path, float32, each one call without the GIL.
 * engine/kernels/native.py is their only caller and says when they apply; each
 * has a numpy path beside it that runs where this module was not built.
 *
 * lstm_direction: the LSTM recurrence of one direction.
 *
 * Why compiled code: a bidirectional LSTM's two directions are independent, but
 * in numpy each step is ten array calls of which only the matmul releases the
 * GIL, so two Python threads walking the two directions ran slower than one
 * (5.2 against 5.0 ms, the BiLSTM tagger of bench/run.py). Here a whole direction
 * is one call that releases the GIL: engine/kernels/rnn.py runs the directions on
 * two cores at once (engine/blas.py's run_split).
 *
 * The maths is rnn.py's _lstm_plain, step for step: gates = x_t W^T + b (given,
 * every step at once, with the i, o, f columns halved) + h R^T (R^T given with
 * the same columns halved); one tanh over the four gates, so that
 * sigmoid(v) = tanh(v / 2) / 2 + 1 / 2; c = f * c + i * g; h = o * tanh(c).
 * Only the default activations, no peepholes, clip, coupling or early-ending
 * sequences: rnn.py sends nothing else here.
 *
 * tanhf: glibc >= 2.35 ships vector versions (libmvec) but declares them only
 * under -ffast-math, which would also change the rounding of everything else;
 * declaring tanhf's SIMD variants here lets gcc vectorise the two tanh loops with
 * the rest of the file compiled strictly. target_clones builds AVX-512, AVX2 and
 * baseline versions of the step; the loader picks the one the CPU runs.
 */
#include "_native.h"

#include <math.h>
#include <string.h>

#if defined(__GLIBC__) && defined(__x86_64__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
float tanhf(float) __attribute__((__simd__("notinbranch")));
float erff(float) __attribute__((__simd__("notinbranch")));
float expf(float) __attribute__((__simd__("notinbranch")));
#endif


/* gates (g4) += v (n) . m (n x g4): four rows of m per pass over gates, so gates
 * is loaded and stored a quarter as often (1.9 -> 1.5 ms a BiLSTM). */
CLONES static void accumulate_product(float *gates, const float *h, const float *rt,
                                      Py_ssize_t hs, Py_ssize_t g4)
{
    Py_ssize_t j = 0;
    for (; j + 4 <= hs; j += 4) {
        const float h0 = h[j], h1 = h[j + 1], h2 = h[j + 2], h3 = h[j + 3];
        const float *r0 = rt + j * g4, *r1 = r0 + g4, *r2 = r1 + g4, *r3 = r2 + g4;
#pragma omp simd
        for (Py_ssize_t q = 0; q < g4; q++)
            gates[q] += h0 * r0[q] + h1 * r1[q] + h2 * r2[q] + h3 * r3[q];
    }
    for (; j < hs; j++) {
        const float hj = h[j];
        const float *row = rt + j * g4;
#pragma omp simd
        for (Py_ssize_t q = 0; q < g4; q++)
            gates[q] += hj * row[q];
    }
}

/* From the pre-activation gates (i, o, f halved; g as is): the new cell in c and
 * the new hidden state in y. */
CLONES static void cell_update(float *gates, float *c, float *y, Py_ssize_t hs)
{
    const Py_ssize_t g4 = 4 * hs;
#pragma omp simd
    for (Py_ssize_t q = 0; q < g4; q++)
        gates[q] = tanhf(gates[q]);
#pragma omp simd
    for (Py_ssize_t q = 0; q < hs; q++) {
        const float i = 0.5f * gates[q] + 0.5f, o = 0.5f * gates[hs + q] + 0.5f;
        const float f = 0.5f * gates[2 * hs + q] + 0.5f, g = gates[3 * hs + q];
        const float cell = f * c[q] + i * g;
        c[q] = cell;
        y[q] = o * tanhf(cell);
    }
}

typedef struct {
    const char *data;
    Py_ssize_t step;  /* bytes between time steps */
} Seq;

static void run_direction(Seq xs, const float *rt, float *h, float *c, Seq ys, Py_ssize_t seq,
                          Py_ssize_t batch, Py_ssize_t hs, int reverse, float *gates)
{
    const Py_ssize_t g4 = 4 * hs;
    for (Py_ssize_t k = 0; k < seq; k++) {
        const Py_ssize_t t = reverse ? seq - 1 - k : k;
        const float *xt = (const float *)(xs.data + t * xs.step);
        float *yt = (float *)(ys.data + t * ys.step);
        for (Py_ssize_t b = 0; b < batch; b++) {
            memcpy(gates, xt + b * g4, sizeof(float) * (size_t)g4);
            accumulate_product(gates, h + b * hs, rt, hs, g4);
            cell_update(gates, c + b * hs, yt + b * hs, hs);
        }
        /* every entry's product above read the previous h: update it only now */
        memcpy(h, yt, sizeof(float) * (size_t)(batch * hs));
    }
}

/* One direction's arrays, checked, and the buffers to release. */
typedef struct {
    NativeBuffers bufs;
    Py_buffer *xs, *rt, *h, *c, *ys;
    int reverse;
    float *gates;  /* scratch: 4 * hidden floats */
} LstmDir;

static void lstm_release(LstmDir *d)
{
    native_release(&d->bufs);
    PyMem_RawFree(d->gates);
    d->gates = NULL;
}

static int lstm_acquire(LstmDir *d, PyObject *o_xs, PyObject *o_rt, PyObject *o_h, PyObject *o_c,
                        PyObject *o_ys, int reverse)
{
    NativeBuffers *bs = &d->bufs;
    bs->held = 0;
    d->gates = NULL;
    d->reverse = reverse;
    if (!(d->xs = native_take(bs, o_xs, 0, NATIVE_ROWS, 3, "xs")) ||
        !(d->rt = native_take(bs, o_rt, 0, NATIVE_ROWS, 2, "rt")) ||
        !(d->h = native_take(bs, o_h, 1, NATIVE_ROWS, 2, "h")) ||
        !(d->c = native_take(bs, o_c, 1, NATIVE_ROWS, 2, "c")) ||
        !(d->ys = native_take(bs, o_ys, 1, NATIVE_ROWS, 3, "ys")))
        goto fail;
    const Py_ssize_t seq = d->xs->shape[0], batch = d->xs->shape[1], hs = d->rt->shape[0];
    if (d->xs->shape[2] != 4 * hs || d->rt->shape[1] != 4 * hs || d->h->shape[0] != batch ||
        d->h->shape[1] != hs || d->c->shape[0] != batch || d->c->shape[1] != hs ||
        d->ys->shape[0] != seq || d->ys->shape[1] != batch || d->ys->shape[2] != hs ||
        d->h->strides[0] != 4 * hs || d->c->strides[0] != 4 * hs || d->rt->strides[0] != 16 * hs) {
        PyErr_SetString(PyExc_ValueError, "lstm_direction: shapes do not match "
                        "xs (seq, batch, 4h), rt (h, 4h), h and c (batch, h), ys (seq, batch, h)");
        goto fail;
    }
    d->gates = PyMem_RawMalloc(sizeof(float) * (size_t)(4 * hs > 0 ? 4 * hs : 1));
    if (d->gates == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    return 0;
fail:
    lstm_release(d);
    return -1;
}

static void lstm_run(void *arg, Py_ssize_t i, int slot)
{
    (void)slot;
    LstmDir *d = (LstmDir *)arg + i;
    Seq sx = {(const char *)d->xs->buf, d->xs->strides[0]};
    Seq sy = {(const char *)d->ys->buf, d->ys->strides[0]};
    run_direction(sx, (const float *)d->rt->buf, (float *)d->h->buf, (float *)d->c->buf, sy,
                  d->xs->shape[0], d->xs->shape[1], d->rt->shape[0], d->reverse, d->gates);
}

static PyObject *lstm_direction(PyObject *self, PyObject *args)
{
    PyObject *o_xs, *o_rt, *o_h, *o_c, *o_ys;
    int reverse;
    LstmDir d;
    if (!PyArg_ParseTuple(args, "OOOOOp", &o_xs, &o_rt, &o_h, &o_c, &o_ys, &reverse) ||
        lstm_acquire(&d, o_xs, o_rt, o_h, o_c, o_ys, reverse) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    lstm_run(&d, 0, 0);
    Py_END_ALLOW_THREADS
    lstm_release(&d);
    Py_RETURN_NONE;
}

/* lstm_directions(dirs, ways): dirs a sequence of (xs, rt, h, c, ys, reverse), run
 * on `ways` threads of the pool (a bidirectional LSTM: one direction per core). */
static PyObject *lstm_directions(PyObject *self, PyObject *args)
{
    PyObject *seq;
    int ways;
    if (!PyArg_ParseTuple(args, "Oi", &seq, &ways))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "lstm_directions: expected a sequence of directions");
    if (fast == NULL)
        return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    /* zeroed: a direction not (or no longer) taken holds nothing to release */
    LstmDir *dirs = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(LstmDir));
    int ok = dirs != NULL;
    if (!ok)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *o_xs, *o_rt, *o_h, *o_c, *o_ys;
        int reverse;
        ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "OOOOOp", &o_xs, &o_rt, &o_h,
                              &o_c, &o_ys, &reverse) &&
             lstm_acquire(&dirs[i], o_xs, o_rt, o_h, o_c, o_ys, reverse) == 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        native_pool_run(lstm_run, dirs, n, native_ways(ways));
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; dirs != NULL && i < n; i++)
        lstm_release(&dirs[i]);
    PyMem_Free(dirs);
    Py_DECREF(fast);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* lstm_step_f32(x, h, c, wr, bias, y): one streaming step of one direction (a VAD
 * called chunk by chunk): gates = bias + x W + h R, with wr = [W; R] transposed and
 * stacked ((in + hidden) x 4 hidden) and the i, o, f columns of wr and bias halved
 * (rnn.py's _step_weights); c updated in place, y the new hidden state. One call
 * instead of a concatenation, a product and eight ufuncs: 15 -> ~5 us at hidden 128. */
static PyObject *lstm_step_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oh, *oc, *ow, *ob, *oy;
    if (!PyArg_ParseTuple(args, "OOOOOO", &ox, &oh, &oc, &ow, &ob, &oy))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *h, *c, *w, *b, *y;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 2, "x")) ||
        !(h = native_take(&bs, oh, 0, NATIVE_C, 2, "h")) ||
        !(c = native_take(&bs, oc, 1, NATIVE_C, 2, "c")) ||
        !(w = native_take(&bs, ow, 0, NATIVE_C, 2, "wr")) ||
        !(b = native_take(&bs, ob, 0, NATIVE_C, 1, "bias")) ||
        !(y = native_take(&bs, oy, 1, NATIVE_C, 2, "y")))
        goto done;
    const Py_ssize_t batch = x->shape[0], in = x->shape[1], hs = h->shape[1], g4 = 4 * hs;
    if (h->shape[0] != batch || c->shape[0] != batch || c->shape[1] != hs ||
        y->shape[0] != batch || y->shape[1] != hs || w->shape[0] != in + hs ||
        w->shape[1] != g4 || b->shape[0] != g4) {
        PyErr_SetString(PyExc_ValueError, "lstm_step_f32: shapes do not match x (batch, in), "
                        "h, c and y (batch, h), wr (in + h, 4h), bias (4h)");
        goto done;
    }
    float *gates = PyMem_RawMalloc(sizeof(float) * (size_t)(g4 > 0 ? g4 : 1));
    if (gates == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const float *xs = x->buf, *hv = h->buf, *wr = w->buf, *bias = b->buf;
    float *cv = c->buf, *yv = y->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < batch; k++) {
        memcpy(gates, bias, sizeof(float) * (size_t)g4);
        accumulate_product(gates, xs + k * in, wr, in, g4);
        accumulate_product(gates, hv + k * hs, wr + in * g4, hs, g4);
        cell_update(gates, cv + k * hs, yv + k * hs, hs);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(gates);
    ok = 1;
done:
    return native_finish(&bs, ok);
}

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

static PyMethodDef methods[] = {
    {"im2col_f32", native_im2col_f32, METH_VARARGS,
     "im2col_f32(x, cols, geometry): the columns of a 2-D conv, padding written as zeros."},
    {"depthwise_conv2d_f32", native_depthwise_conv2d_f32, METH_VARARGS,
     "depthwise_conv2d_f32(x, w, out, bias, geometry): a 2-D conv of one input channel a group."},
    {"maxpool2d_f32", native_maxpool2d_f32, METH_VARARGS,
     "maxpool2d_f32(x, out, geometry): 2-D MaxPool values of planes, -inf padding."},
    {"softmax_f32", softmax_f32, METH_VARARGS,
     "softmax_f32(x, out, n): softmax of each row of n, float32, C-contiguous."},
    {"layer_norm_f32", layer_norm_f32, METH_VARARGS,
     "layer_norm_f32(x, scale, bias_or_None, y, mean, inv_std, n, eps): LayerNorm of rows of n."},
    {"erf_f32", erf_f32, METH_VARARGS, "erf_f32(x, out): out = erf(x), float32, C-contiguous."},
    {"gelu_f32", gelu_f32, METH_VARARGS,
     "gelu_f32(x, out, div, one, half): out = half * x * (one + erf(x / div)), float32."},
    {"lstm_step_f32", lstm_step_f32, METH_VARARGS,
     "lstm_step_f32(x, h, c, wr, bias, y): one streaming LSTM step (see the C file)."},
    {"lstm_directions", lstm_directions, METH_VARARGS,
     "lstm_directions(dirs, ways): lstm_direction for each (xs, rt, h, c, ys, reverse) of\n"
     "dirs, on `ways` threads of the pool."},
    {"lstm_direction", lstm_direction, METH_VARARGS,
     "lstm_direction(xs, rt, h, c, ys, reverse): one direction of the common LSTM over\n"
     "float32 arrays, the GIL released; h and c are updated in place, ys written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
