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

/* A float32 buffer of `ndim` dimensions whose last ndim - 1 are C-contiguous
 * (the first may be strided: a direction's slice of the output). */
static int get_buffer(PyObject *obj, Py_buffer *view, int ndim, int writable, const char *name)
{
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->ndim != ndim || view->format == NULL || strcmp(view->format, "f") != 0 ||
        view->itemsize != 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected a %d-D float32 array", name, ndim);
        PyBuffer_Release(view);
        return -1;
    }
    Py_ssize_t expect = 4;
    for (int d = ndim - 1; d >= 1; d--) {
        if (view->shape[d] > 1 && view->strides[d] != expect) {
            PyErr_Format(PyExc_ValueError, "%s: its last %d axes must be C-contiguous",
                         name, ndim - 1);
            PyBuffer_Release(view);
            return -1;
        }
        expect *= view->shape[d];
    }
    return 0;
}

/* One direction's arrays, checked, and the buffers to release. */
typedef struct {
    Py_buffer xs, rt, h, c, ys;
    int held;      /* buffers acquired so far */
    int reverse;
    float *gates;  /* scratch: 4 * hidden floats */
} LstmDir;

static void lstm_release(LstmDir *d)
{
    Py_buffer *all[5] = {&d->xs, &d->rt, &d->h, &d->c, &d->ys};
    for (int i = d->held - 1; i >= 0; i--)
        PyBuffer_Release(all[i]);
    d->held = 0;
    PyMem_RawFree(d->gates);
    d->gates = NULL;
}

static int lstm_acquire(LstmDir *d, PyObject *o_xs, PyObject *o_rt, PyObject *o_h, PyObject *o_c,
                        PyObject *o_ys, int reverse)
{
    d->held = 0;
    d->gates = NULL;
    d->reverse = reverse;
    if (get_buffer(o_xs, &d->xs, 3, 0, "xs") < 0)
        return -1;
    d->held = 1;
    if (get_buffer(o_rt, &d->rt, 2, 0, "rt") < 0)
        goto fail;
    d->held = 2;
    if (get_buffer(o_h, &d->h, 2, 1, "h") < 0)
        goto fail;
    d->held = 3;
    if (get_buffer(o_c, &d->c, 2, 1, "c") < 0)
        goto fail;
    d->held = 4;
    if (get_buffer(o_ys, &d->ys, 3, 1, "ys") < 0)
        goto fail;
    d->held = 5;
    const Py_ssize_t seq = d->xs.shape[0], batch = d->xs.shape[1], hs = d->rt.shape[0];
    if (d->xs.shape[2] != 4 * hs || d->rt.shape[1] != 4 * hs || d->h.shape[0] != batch ||
        d->h.shape[1] != hs || d->c.shape[0] != batch || d->c.shape[1] != hs ||
        d->ys.shape[0] != seq || d->ys.shape[1] != batch || d->ys.shape[2] != hs ||
        d->h.strides[0] != 4 * hs || d->c.strides[0] != 4 * hs || d->rt.strides[0] != 16 * hs) {
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
    Seq sx = {(const char *)d->xs.buf, d->xs.strides[0]};
    Seq sy = {(const char *)d->ys.buf, d->ys.strides[0]};
    run_direction(sx, (const float *)d->rt.buf, (float *)d->h.buf, (float *)d->c.buf, sy,
                  d->xs.shape[0], d->xs.shape[1], d->rt.shape[0], d->reverse, d->gates);
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
    LstmDir *dirs = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(LstmDir));
    Py_ssize_t got = 0;
    int ok = dirs != NULL;
    if (!ok)
        PyErr_NoMemory();
    for (; ok && got < n; got++) {
        PyObject *o_xs, *o_rt, *o_h, *o_c, *o_ys;
        int reverse;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, got), "OOOOOp", &o_xs, &o_rt, &o_h,
                              &o_c, &o_ys, &reverse) ||
            lstm_acquire(&dirs[got], o_xs, o_rt, o_h, o_c, o_ys, reverse) < 0)
            ok = 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        native_pool_run(lstm_run, dirs, n, ways);
        Py_END_ALLOW_THREADS
    } else if (got > 0) {
        got--;  /* the one that failed released its own buffers */
    }
    for (Py_ssize_t i = 0; i < got; i++)
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
    Py_buffer x, h, c, w, b, y;
    int got = 0, ok = 0;
    if (native_get_contiguous(ox, &x, 0, 2, "x") < 0)
        goto done;
    got = 1;
    if (native_get_contiguous(oh, &h, 0, 2, "h") < 0)
        goto done;
    got = 2;
    if (native_get_contiguous(oc, &c, 1, 2, "c") < 0)
        goto done;
    got = 3;
    if (native_get_contiguous(ow, &w, 0, 2, "wr") < 0)
        goto done;
    got = 4;
    if (native_get_contiguous(ob, &b, 0, 1, "bias") < 0)
        goto done;
    got = 5;
    if (native_get_contiguous(oy, &y, 1, 2, "y") < 0)
        goto done;
    got = 6;
    const Py_ssize_t batch = x.shape[0], in = x.shape[1], hs = h.shape[1], g4 = 4 * hs;
    if (h.shape[0] != batch || c.shape[0] != batch || c.shape[1] != hs || y.shape[0] != batch ||
        y.shape[1] != hs || w.shape[0] != in + hs || w.shape[1] != g4 || b.shape[0] != g4) {
        PyErr_SetString(PyExc_ValueError, "lstm_step_f32: shapes do not match x (batch, in), "
                        "h, c and y (batch, h), wr (in + h, 4h), bias (4h)");
        goto done;
    }
    float *gates = PyMem_RawMalloc(sizeof(float) * (size_t)(g4 > 0 ? g4 : 1));
    if (gates == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const float *xs = x.buf, *hv = h.buf, *wr = w.buf, *bias = b.buf;
    float *cv = c.buf, *yv = y.buf;
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
done:;
    Py_buffer *all[6] = {&x, &h, &c, &w, &b, &y};
    for (int i = got - 1; i >= 0; i--)
        PyBuffer_Release(all[i]);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
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

/* Two C-contiguous float32 buffers of one size: the input and the output. */
static int get_pair(PyObject *ox, PyObject *oy, Py_buffer *x, Py_buffer *y)
{
    if (PyObject_GetBuffer(ox, x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (PyObject_GetBuffer(oy, y, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(x);
        return -1;
    }
    if (strcmp(x->format, "f") != 0 || strcmp(y->format, "f") != 0 || x->len != y->len) {
        PyErr_SetString(PyExc_ValueError, "expected two float32 arrays of one size");
        PyBuffer_Release(y);
        PyBuffer_Release(x);
        return -1;
    }
    return 0;
}

static PyObject *erf_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    Py_buffer x, y;
    if (!PyArg_ParseTuple(args, "OO", &ox, &oy) || get_pair(ox, oy, &x, &y) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    erf_loop((const float *)x.buf, (float *)y.buf, x.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&y);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
}

static PyObject *gelu_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    float div, one, half;
    Py_buffer x, y;
    if (!PyArg_ParseTuple(args, "OOfff", &ox, &oy, &div, &one, &half) ||
        get_pair(ox, oy, &x, &y) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    gelu_loop((const float *)x.buf, (float *)y.buf, x.len / 4, 1.0f / div, one, half);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&y);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
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

/* A C-contiguous float32 buffer (read-only or writable) of at least `need` items. */
static int get_f32(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t need,
                   const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (strcmp(view->format, "f") != 0 || view->len / 4 != need) {
        PyErr_Format(PyExc_ValueError, "%s: expected a float32 array of %zd items", name, need);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *softmax_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oy;
    Py_ssize_t n;
    Py_buffer x, y;
    if (!PyArg_ParseTuple(args, "OOn", &ox, &oy, &n) || get_pair(ox, oy, &x, &y) < 0)
        return NULL;
    if (n <= 0 || (x.len / 4) % n != 0) {
        PyBuffer_Release(&y);
        PyBuffer_Release(&x);
        PyErr_SetString(PyExc_ValueError, "softmax_f32: the size is not a multiple of the row");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    softmax_rows((const float *)x.buf, (float *)y.buf, x.len / 4 / n, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&y);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
}

static PyObject *layer_norm_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *os, *ob, *oy, *om, *oi;
    Py_ssize_t n;
    float eps;
    if (!PyArg_ParseTuple(args, "OOOOOOnf", &ox, &os, &ob, &oy, &om, &oi, &n, &eps))
        return NULL;
    Py_buffer x, sc, b, y, m, iv;
    if (PyObject_GetBuffer(ox, &x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (strcmp(x.format, "f") != 0 || n <= 0 || (x.len / 4) % n != 0) {
        PyBuffer_Release(&x);
        PyErr_SetString(PyExc_ValueError, "layer_norm_f32: x must be float32 rows of n");
        return NULL;
    }
    const Py_ssize_t rows = x.len / 4 / n;
    if (get_f32(os, &sc, 0, n, "scale") < 0)
        goto fail_x;
    const int has_bias = ob != Py_None;
    if (has_bias && get_f32(ob, &b, 0, n, "bias") < 0)
        goto fail_sc;
    if (get_f32(oy, &y, 1, rows * n, "y") < 0)
        goto fail_b;
    if (get_f32(om, &m, 1, rows, "mean") < 0)
        goto fail_y;
    if (get_f32(oi, &iv, 1, rows, "inv_std") < 0)
        goto fail_m;
    Py_BEGIN_ALLOW_THREADS
    layer_norm_rows((const float *)x.buf, (const float *)sc.buf,
                    has_bias ? (const float *)b.buf : NULL, (float *)y.buf, (float *)m.buf,
                    (float *)iv.buf, rows, n, eps);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&iv);
    PyBuffer_Release(&m);
    PyBuffer_Release(&y);
    if (has_bias)
        PyBuffer_Release(&b);
    PyBuffer_Release(&sc);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
fail_m:
    PyBuffer_Release(&m);
fail_y:
    PyBuffer_Release(&y);
fail_b:
    if (has_bias)
        PyBuffer_Release(&b);
fail_sc:
    PyBuffer_Release(&sc);
fail_x:
    PyBuffer_Release(&x);
    return NULL;
}

/* ------------------------------------------------------------------ spin --
 * engine/blas.py's helper threads wait for the next slice of a large kernel here
 * for a short while, the GIL released, before they block: on a virtual machine
 * an idle vCPU is halted, and a helper woken on it started its slice 0.5-2 ms
 * late (a 1 ms LSTM direction; measured), so a split kernel ran no faster than
 * serially. onnxruntime's pool spins the same way. */
#include <time.h>

static double now_seconds(void)
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
    const double end = now_seconds() + seconds;
    for (;;) {
        for (int k = 0; k < 256; k++) {
            if (*counter != seen) {
                changed = 1;
                break;
            }
            NATIVE_RELAX();
        }
        if (changed || now_seconds() >= end)
            break;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyBool_FromLong(changed);
}

int native_get_contiguous(PyObject *obj, Py_buffer *view, int writable, int ndim,
                          const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->ndim != ndim || strcmp(view->format, "f") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous %d-D float32 array", name,
                     ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int native_get_2d(PyObject *obj, Py_buffer *view, int writable, const char *name)
{
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->ndim != 2 || strcmp(view->format, "f") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 2-D float32 array", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
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
