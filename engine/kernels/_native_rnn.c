/* The recurrent family (RNN, GRU, LSTM) as one compiled recurrence, float32, the
 * GIL released; engine/kernels/rnn.py is its only caller.
 *
 * Why compiled code: a recurrence is a loop of small steps (a GEMV of the hidden
 * state by R, then a few elementwise gate updates), and numpy spends most of a
 * step in per-call overhead: a bidirectional 2-layer GRU ran 15x slower than
 * onnxruntime (issue 23). Here a whole direction is one loop in C.
 *
 * rnn_directions(dirs): each entry of dirs is one direction,
 *   (kind, xs, rt, h, c, ys, lens, p, rbh, acts, clip, flags)
 * kind 0 RNN, 1 GRU, 2 LSTM (G = 1, 3, 4 gates); xs (seq, batch, G*hs) the input
 * projection x W^T with every bias that sits outside the gates' products added
 * (rnn.py's _compiled_bias); rt (hs, G*hs) R transposed; h (batch, hs) the state,
 * updated; c (batch, hs) the LSTM cell, updated (None otherwise); ys (seq, batch,
 * hs) written; lens (batch,) int64 sequence lengths or None (past its length an
 * entry's state holds and its output is 0); p (3*hs) LSTM peepholes (i, o, f) or
 * None; rbh (hs) the GRU's recurrent bias of the h gate with linear_before_reset
 * (inside the reset product there) or None; acts a tuple of (code, alpha, beta),
 * one per activation of the op (f; f, g; f, g, h); clip: the gates' pre-activation
 * bound (inf: none); flags: 1 reverse, 2 input_forget, 4 linear_before_reset.
 * The maths is rnn.py's numpy path step for step (the gate orders: GRU z, r, h;
 * LSTM i, o, f, c).
 *
 * The directions run one after the other, in the calling thread: on the pool
 * (two directions on two cores) a bidirectional GRU measured no faster (67-80 ms
 * either way for a 128-wide layer, interleaved, on the contended 2-core VM), and
 * each direction keeps its R in one core's cache for all its steps.
 *
 * lstm_step_f32: one streaming LSTM step (see its comment).
 *
 * Every array is re-checked here (rank, dtype, layout, every shape against the
 * others, the size products in arithmetic that cannot overflow, the lengths
 * against seq): a mismatch raises ValueError instead of indexing with it.
 */
#include "_native_rnn.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GLIBC__) && defined(__x86_64__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
float tanhf(float) __attribute__((__simd__("notinbranch")));
float expf(float) __attribute__((__simd__("notinbranch")));
#endif

enum { RNN_KIND = 0, GRU_KIND = 1, LSTM_KIND = 2 };
enum { F_REVERSE = 1, F_INPUT_FORGET = 2, F_LINEAR_BEFORE_RESET = 4 };
enum {
    A_SIGMOID, A_TANH, A_RELU, A_AFFINE, A_LEAKYRELU, A_THRESHOLDEDRELU, A_SCALEDTANH,
    A_HARDSIGMOID, A_ELU, A_SOFTSIGN, A_SOFTPLUS, A_COUNT
};

typedef struct {
    int code;
    float alpha, beta;
} Act;

/* gates (n) += v (rows) . m (rows x n, row stride ld): four rows of m per pass over
 * gates, so gates is loaded and stored a quarter as often. */
CLONES static void accumulate(float *gates, const float *v, const float *m, Py_ssize_t rows,
                              Py_ssize_t ld, Py_ssize_t n)
{
    Py_ssize_t j = 0;
    for (; j + 4 <= rows; j += 4) {
        const float v0 = v[j], v1 = v[j + 1], v2 = v[j + 2], v3 = v[j + 3];
        const float *r0 = m + j * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            gates[q] += v0 * r0[q] + v1 * r1[q] + v2 * r2[q] + v3 * r3[q];
    }
    for (; j < rows; j++) {
        const float vj = v[j];
        const float *row = m + j * ld;
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            gates[q] += vj * row[q];
    }
}

/* v = act(clip(v)) over n values; each activation its own vectorised loop. */
CLONES static void activate(float *v, Py_ssize_t n, Act a, float clip)
{
    if (clip < INFINITY) {
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] < -clip ? -clip : (v[q] > clip ? clip : v[q]);
    }
    const float al = a.alpha, be = a.beta;
    switch (a.code) {
    case A_SIGMOID:
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = 1.0f / (1.0f + expf(-v[q]));
        break;
    case A_TANH:
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = tanhf(v[q]);
        break;
    case A_RELU:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] > 0.0f ? v[q] : 0.0f;
        break;
    case A_AFFINE:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = al * v[q] + be;
        break;
    case A_LEAKYRELU:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] >= 0.0f ? v[q] : v[q] * al;
        break;
    case A_THRESHOLDEDRELU:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] > al ? v[q] : 0.0f;
        break;
    case A_SCALEDTANH:
#pragma omp simd
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = al * tanhf(be * v[q]);
        break;
    case A_HARDSIGMOID:
        for (Py_ssize_t q = 0; q < n; q++) {
            const float s = al * v[q] + be;
            v[q] = s < 0.0f ? 0.0f : (s > 1.0f ? 1.0f : s);
        }
        break;
    case A_ELU:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] > 0.0f ? v[q] : al * (expf(v[q]) - 1.0f);
        break;
    case A_SOFTSIGN:
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = v[q] / (1.0f + fabsf(v[q]));
        break;
    default: /* A_SOFTPLUS: log(1 + e^v) without overflow */
        for (Py_ssize_t q = 0; q < n; q++)
            v[q] = (v[q] > 0.0f ? v[q] : 0.0f) + log1pf(expf(-fabsf(v[q])));
        break;
    }
}

/* One direction's arrays, checked, its scratch and the buffers to release. */
typedef struct {
    NativeBuffers bufs;
    Py_buffer lens_view;
    int has_lens;
    const char *xs;
    char *ys;
    Py_ssize_t xs_step, ys_step;   /* bytes between time steps */
    Py_ssize_t xs_entry, ys_entry; /* bytes between batch entries */
    const float *rt, *p, *rbh;
    float *h, *c;
    const int64_t *lens;
    Py_ssize_t seq, batch, hs, ng;
    int kind, flags;
    float clip;
    Act act[3];
    float *gates; /* scratch: ng * hs + hs floats */
} RnnDir;

/* The GRU's step for one batch entry: g holds the 3 hs input gates (z, r, h). */
static void gru_entry(const RnnDir *d, float *g, const float *h, float *y)
{
    const Py_ssize_t hs = d->hs, g3 = 3 * hs;
    float *tmp = g + g3;
    accumulate(g, h, d->rt, hs, g3, 2 * hs);
    activate(g, 2 * hs, d->act[0], d->clip); /* z, r */
    const float *z = g, *r = g + hs;
    float *gh = g + 2 * hs;
    if (d->flags & F_LINEAR_BEFORE_RESET) {
        memcpy(tmp, d->rbh, sizeof(float) * (size_t)hs);
        accumulate(tmp, h, d->rt + 2 * hs, hs, g3, hs);
        for (Py_ssize_t q = 0; q < hs; q++)
            gh[q] += r[q] * tmp[q];
    } else {
        for (Py_ssize_t q = 0; q < hs; q++)
            tmp[q] = r[q] * h[q];
        accumulate(gh, tmp, d->rt + 2 * hs, hs, g3, hs);
    }
    activate(gh, hs, d->act[1], d->clip);
    for (Py_ssize_t q = 0; q < hs; q++)
        y[q] = (1.0f - z[q]) * gh[q] + z[q] * h[q];
}

/* The LSTM's step for one batch entry: g holds the 4 hs input gates (i, o, f, c). */
static void lstm_entry(const RnnDir *d, float *g, const float *h, float *c, float *y)
{
    const Py_ssize_t hs = d->hs;
    float *i = g, *o = g + hs, *f = g + 2 * hs, *cand = g + 3 * hs, *tmp = g + 4 * hs;
    accumulate(g, h, d->rt, hs, 4 * hs, 4 * hs);
    if (d->p) {
        for (Py_ssize_t q = 0; q < hs; q++) {
            i[q] += d->p[q] * c[q];
            f[q] += d->p[2 * hs + q] * c[q];
        }
        activate(i, hs, d->act[0], d->clip);
        activate(f, hs, d->act[0], d->clip);
    } else { /* i, o, f adjacent: one pass */
        activate(g, 3 * hs, d->act[0], d->clip);
    }
    if (d->flags & F_INPUT_FORGET)
        for (Py_ssize_t q = 0; q < hs; q++)
            f[q] = 1.0f - i[q];
    activate(cand, hs, d->act[1], d->clip);
    for (Py_ssize_t q = 0; q < hs; q++)
        c[q] = f[q] * c[q] + i[q] * cand[q];
    if (d->p) {
        for (Py_ssize_t q = 0; q < hs; q++)
            o[q] += d->p[hs + q] * c[q];
        activate(o, hs, d->act[0], d->clip);
    }
    memcpy(tmp, c, sizeof(float) * (size_t)hs);
    activate(tmp, hs, d->act[2], INFINITY);
    for (Py_ssize_t q = 0; q < hs; q++)
        y[q] = o[q] * tmp[q];
}

static void run_direction(const RnnDir *d)
{
    const Py_ssize_t hs = d->hs, gw = d->ng * hs;
    for (Py_ssize_t k = 0; k < d->seq; k++) {
        const Py_ssize_t t = (d->flags & F_REVERSE) ? d->seq - 1 - k : k;
        const char *xt = d->xs + t * d->xs_step;
        char *yt = d->ys + t * d->ys_step;
        for (Py_ssize_t b = 0; b < d->batch; b++) {
            float *y = (float *)(yt + b * d->ys_entry);
            if (d->lens && t >= d->lens[b]) { /* past its length: output 0, state holds */
                memset(y, 0, sizeof(float) * (size_t)hs);
                continue;
            }
            float *g = d->gates;
            const float *h = d->h + b * hs;
            memcpy(g, xt + b * d->xs_entry, sizeof(float) * (size_t)gw);
            if (d->kind == RNN_KIND) {
                accumulate(g, h, d->rt, hs, hs, hs);
                activate(g, hs, d->act[0], d->clip);
                memcpy(y, g, sizeof(float) * (size_t)hs);
            } else if (d->kind == GRU_KIND) {
                gru_entry(d, g, h, y);
            } else {
                lstm_entry(d, g, h, d->c + b * hs, y);
            }
        }
        /* every entry's product above read the previous h: update it only now */
        for (Py_ssize_t b = 0; b < d->batch; b++)
            if (!d->lens || t < d->lens[b])
                memcpy(d->h + b * hs, yt + b * d->ys_entry, sizeof(float) * (size_t)hs);
    }
}

static void dir_release(RnnDir *d)
{
    native_release(&d->bufs);
    if (d->has_lens)
        PyBuffer_Release(&d->lens_view);
    d->has_lens = 0;
    PyMem_RawFree(d->gates);
    d->gates = NULL;
}

static int fail(const char *op, const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s: %s", op, what);
    return -1;
}

/* The sequence lengths: an int64 vector of `batch` values, each in [0, seq]. */
static int take_lens(RnnDir *d, PyObject *o, const char *op)
{
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, &d->lens_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    d->has_lens = 1;
    const Py_buffer *v = &d->lens_view;
    if (v->ndim != 1 || v->itemsize != 8 || v->format == NULL ||
        (strcmp(v->format, "l") != 0 && strcmp(v->format, "q") != 0))
        return fail(op, "lens must be a 1-D int64 array");
    if (v->shape[0] != d->batch)
        return fail(op, "lens must hold one length per batch entry");
    d->lens = (const int64_t *)v->buf;
    for (Py_ssize_t b = 0; b < d->batch; b++)
        if (d->lens[b] < 0 || d->lens[b] > d->seq)
            return fail(op, "a sequence length lies outside [0, seq]");
    return 0;
}

static int take_acts(RnnDir *d, PyObject *o, const char *op)
{
    static const int count[] = {1, 2, 3};
    PyObject *fast = PySequence_Fast(o, "acts must be a sequence of (code, alpha, beta)");
    if (fast == NULL)
        return -1;
    int ok = PySequence_Fast_GET_SIZE(fast) == count[d->kind];
    if (!ok)
        fail(op, "acts must hold one (code, alpha, beta) per activation of the op");
    for (int k = 0; ok && k < count[d->kind]; k++) {
        Act *a = &d->act[k];
        ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, k), "iff", &a->code, &a->alpha,
                              &a->beta);
        if (ok && (a->code < 0 || a->code >= A_COUNT))
            ok = fail(op, "an activation code is unknown") == 0;
    }
    Py_DECREF(fast);
    return ok ? 0 : -1;
}

/* The optional float32 vector `o` (None: NULL) of exactly n values. */
static int take_vector(RnnDir *d, PyObject *o, Py_ssize_t n, const float **out, const char *name,
                       const char *op)
{
    *out = NULL;
    if (o == Py_None)
        return 0;
    Py_buffer *v = native_take(&d->bufs, o, 0, NATIVE_C, 1, name);
    if (v == NULL)
        return -1;
    if (v->shape[0] != n)
        return fail(op, name[0] == 'p' ? "p must hold 3 * hidden peepholes"
                                       : "rbh must hold hidden values");
    *out = v->buf;
    return 0;
}

/* Each array against the others: shapes, layouts, products that cannot overflow. */
static int check_shapes(RnnDir *d, Py_buffer *xs, Py_buffer *rt, Py_buffer *h, Py_buffer *c,
                        Py_buffer *ys, const char *op)
{
    static const Py_ssize_t gates[] = {1, 3, 4};
    const Py_ssize_t hs = rt->shape[0];
    Py_ssize_t gw, all;
    d->ng = gates[d->kind];
    d->seq = xs->shape[0], d->batch = xs->shape[1], d->hs = hs;
    if (!native_mul(d->ng, hs, &gw) || !native_mul3(d->seq, d->batch, gw, &all) ||
        !native_mul(gw + 1, hs, &all))
        return fail(op, "the sizes overflow");
    if (xs->shape[2] != gw || rt->shape[1] != gw)
        return fail(op, "xs must be (seq, batch, gates * hidden) and rt (hidden, gates * hidden)");
    if (h->shape[0] != d->batch || h->shape[1] != hs)
        return fail(op, "h must be (batch, hidden)");
    if (c && (c->shape[0] != d->batch || c->shape[1] != hs))
        return fail(op, "c must be (batch, hidden)");
    if ((d->kind == LSTM_KIND) != (c != NULL))
        return fail(op, "c is the LSTM's, and only its");
    if (ys->shape[0] != d->seq || ys->shape[1] != d->batch || ys->shape[2] != hs)
        return fail(op, "ys must be (seq, batch, hidden)");
    if ((gw > 1 && xs->strides[2] != 4) || (hs > 1 && ys->strides[2] != 4))
        return fail(op, "xs and ys must hold each entry's values contiguously");
    d->xs = xs->buf, d->ys = ys->buf;
    d->xs_step = xs->strides[0], d->ys_step = ys->strides[0];
    d->xs_entry = xs->strides[1], d->ys_entry = ys->strides[1];
    d->rt = rt->buf, d->h = h->buf, d->c = c ? c->buf : NULL;
    return 0;
}

static const char *const OP_NAMES[] = {"RNN", "GRU", "LSTM"};

static int dir_acquire(RnnDir *d, PyObject *item)
{
    PyObject *o_xs, *o_rt, *o_h, *o_c, *o_ys, *o_lens, *o_p, *o_rbh, *o_acts;
    d->bufs.held = 0;
    d->has_lens = 0;
    d->gates = NULL;
    d->lens = NULL;
    if (!PyArg_ParseTuple(item, "iOOOOOOOOOfi", &d->kind, &o_xs, &o_rt, &o_h, &o_c, &o_ys,
                          &o_lens, &o_p, &o_rbh, &o_acts, &d->clip, &d->flags))
        return -1;
    if (d->kind < RNN_KIND || d->kind > LSTM_KIND)
        return fail("rnn_directions", "kind must be 0 (RNN), 1 (GRU) or 2 (LSTM)");
    const char *op = OP_NAMES[d->kind];
    if (!(d->clip >= 0.0f)) /* NaN included */
        return fail(op, "clip must be a number >= 0 (inf: none)");
    Py_buffer *xs, *rt, *h, *c = NULL, *ys;
    if (!(xs = native_take(&d->bufs, o_xs, 0, NATIVE_STRIDED, 3, "xs")) ||
        !(rt = native_take(&d->bufs, o_rt, 0, NATIVE_C, 2, "rt")) ||
        !(h = native_take(&d->bufs, o_h, 1, NATIVE_C, 2, "h")) ||
        (o_c != Py_None && !(c = native_take(&d->bufs, o_c, 1, NATIVE_C, 2, "c"))) ||
        !(ys = native_take(&d->bufs, o_ys, 1, NATIVE_STRIDED, 3, "ys")))
        return -1;
    if (check_shapes(d, xs, rt, h, c, ys, op) < 0 || take_lens(d, o_lens, op) < 0 ||
        take_acts(d, o_acts, op) < 0)
        return -1;
    const Py_ssize_t hs = d->hs;
    if (take_vector(d, o_p, 3 * hs, &d->p, "p", op) < 0 ||
        take_vector(d, o_rbh, hs, &d->rbh, "rbh", op) < 0)
        return -1;
    if ((d->p && d->kind != LSTM_KIND))
        return fail(op, "peepholes are the LSTM's");
    if ((d->kind == GRU_KIND && (d->flags & F_LINEAR_BEFORE_RESET)) != (d->rbh != NULL))
        return fail(op, "rbh goes with a GRU's linear_before_reset, and only there");
    d->gates = PyMem_RawMalloc(sizeof(float) * (size_t)((d->ng + 1) * hs + 1));
    if (d->gates == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* rnn_directions(dirs): see the top of the file. */
PyObject *native_rnn_directions(PyObject *self, PyObject *args)
{
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "rnn_directions: expected a sequence of directions");
    if (fast == NULL)
        return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    /* zeroed: a direction not (or no longer) taken holds nothing to release */
    RnnDir *dirs = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(RnnDir));
    int ok = dirs != NULL;
    if (!ok)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = dir_acquire(&dirs[i], PySequence_Fast_GET_ITEM(fast, i)) == 0;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            run_direction(&dirs[i]);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; dirs != NULL && i < n; i++)
        dir_release(&dirs[i]);
    PyMem_Free(dirs);
    Py_DECREF(fast);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* From the pre-activation gates (i, o, f halved; g as is): the new cell in c and
 * the new hidden state in y, with sigmoid(v) = tanh(v / 2) / 2 + 1 / 2. */
CLONES static void halved_cell_update(float *gates, float *c, float *y, Py_ssize_t hs)
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

/* lstm_step_f32(x, h, c, wr, bias, y): one streaming step of one direction (a VAD
 * called chunk by chunk): gates = bias + x W + h R, with wr = [W; R] transposed and
 * stacked ((in + hidden) x 4 hidden) and the i, o, f columns of wr and bias halved
 * (rnn.py's _step_weights); c updated in place, y the new hidden state. One call
 * instead of a concatenation, a product and eight ufuncs: 15 -> ~5 us at hidden 128. */
PyObject *native_lstm_step_f32(PyObject *self, PyObject *args)
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
    const Py_ssize_t batch = x->shape[0], in = x->shape[1], hs = h->shape[1];
    Py_ssize_t g4, rows;
    if (!native_mul(4, hs, &g4) || !native_mul(in + hs, g4, &rows) || h->shape[0] != batch ||
        c->shape[0] != batch || c->shape[1] != hs || y->shape[0] != batch || y->shape[1] != hs ||
        w->shape[0] != in + hs || w->shape[1] != g4 || b->shape[0] != g4) {
        PyErr_SetString(PyExc_ValueError, "LSTM: lstm_step_f32's shapes do not match x (batch, in), "
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
        accumulate(gates, xs + k * in, wr, in, g4, g4);
        accumulate(gates, hv + k * hs, wr + in * g4, hs, g4, g4);
        halved_cell_update(gates, cv + k * hs, yv + k * hs, hs);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(gates);
    ok = 1;
done:
    return native_finish(&bs, ok);
}
