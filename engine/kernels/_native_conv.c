/* Conv and MaxPool kernels of the numpy path (2-D, float32), each one call without
 * the GIL, on the calling thread: the cores' parallelism is BLAS's own threads, in
 * the GEMM that follows im2col_f32 (docs/kernels.md).
 *
 * im2col_f32: the column matrix of a conv of any group count (groups are blocks of
 * consecutive channels, so one (C kh kw) x (OH OW) matrix per image serves every
 * group), padding written as zeros on the fly: no padded copy of the input, no Python
 * loop over kernel positions. engine/kernels/nn.py multiplies it with numpy.
 *
 * depthwise_conv2d_f32: a conv whose groups each read one input channel (MobileNet's
 * and PP-OCR's 3x3 and 5x5 depthwise layers). As a GEMM it is one 1 x (kh kw) row
 * per channel: BLAS does nothing for it, and numpy's batched matmul over thousands
 * of tiny products ran 5-10x slower than onnxruntime. Here each output row is the
 * sum of kh kw shifted input rows times one weight each, in registers.
 *
 * MaxPool: per output row, the maximum over the kernel's rows first (whole contiguous
 * rows, vectorised), then over its columns.
 *
 * Every entry point re-checks the geometry it is given (it comes from an untrusted
 * model through Python) in arithmetic that cannot overflow, and raises ValueError
 * instead of indexing with numbers it cannot bound.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_native.h"

/* ------------------------------------------------------------------ Conv -- */
typedef struct {
    const float *x;
    Py_ssize_t n, c, h, wd, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
} ConvGeom;

/* geometry = (kh, kw, sh, sw, dh, dw, pad_top, pad_left, OH, OW) into g. */
static int conv_parse(PyObject *geom, ConvGeom *g)
{
    return PyArg_ParseTuple(geom, "nnnnnnnnnn", &g->kh, &g->kw, &g->sh, &g->sw, &g->dh, &g->dw,
                            &g->pt, &g->pl, &g->oh, &g->ow);
}

/* The geometry, re-checked: every value within [lo, NATIVE_MAX_EXTENT], so each index
 * the kernels form (a product of two plus a product of two, less a pad) stays inside
 * int64; K = c kh kw, npos = oh ow and the input plane h wd without overflow. */
static int conv_geometry_ok(const ConvGeom *g, Py_ssize_t *K, Py_ssize_t *npos)
{
    Py_ssize_t plane;
    return native_extent(g->kh, 1) && native_extent(g->kw, 1) && native_extent(g->sh, 1) &&
           native_extent(g->sw, 1) && native_extent(g->dh, 1) && native_extent(g->dw, 1) &&
           native_extent(g->pt, 0) && native_extent(g->pl, 0) && native_extent(g->oh, 1) &&
           native_extent(g->ow, 1) && native_extent(g->h, 0) && native_extent(g->wd, 0) &&
           native_mul3(g->c, g->kh, g->kw, K) && native_mul(g->oh, g->ow, npos) &&
           native_mul(g->h, g->wd, &plane);
}

/* Output columns [*lo, *hi) whose input column x0 + ox * sw lies inside [0, wd)
 * (every term bounded by conv_geometry_ok: nothing here overflows). */
static inline void inside_columns(const ConvGeom *g, Py_ssize_t x0, Py_ssize_t *lo,
                                  Py_ssize_t *hi)
{
    Py_ssize_t a = x0 < 0 ? native_ceil_div(-x0, g->sw) : 0;
    Py_ssize_t b = x0 < g->wd ? (g->wd - 1 - x0) / g->sw + 1 : 0;
    if (b > g->ow)
        b = g->ow;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* d[i] = src[2 i]: stride-2 convs' column rows (ResNet's stem and downsampling). */
CLONES static void strided2(float *d, const float *src, Py_ssize_t n)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = src[2 * i];
}

/* im2col of output rows r0..r1 of image `img`: (c * kh * kw) x ((r1 - r0) * ow),
 * C major, kernel positions minor (the weight's (M, C, kh, kw) flattened). */
static void conv_columns(const ConvGeom *g, Py_ssize_t img, Py_ssize_t r0, Py_ssize_t r1,
                         float *cols)
{
    const Py_ssize_t npos = (r1 - r0) * g->ow;
    const float *xi = g->x + img * g->c * g->h * g->wd;
    float *dst = cols;
    for (Py_ssize_t ch = 0; ch < g->c; ch++) {
        const float *plane = xi + ch * g->h * g->wd;
        for (Py_ssize_t ky = 0; ky < g->kh; ky++) {
            for (Py_ssize_t kx = 0; kx < g->kw; kx++, dst += npos) {
                float *d = dst;
                const Py_ssize_t x0 = kx * g->dw - g->pl;
                Py_ssize_t lo, hi;
                inside_columns(g, x0, &lo, &hi);
                for (Py_ssize_t oy = r0; oy < r1; oy++, d += g->ow) {
                    const Py_ssize_t iy = oy * g->sh + ky * g->dh - g->pt;
                    if (iy < 0 || iy >= g->h) {
                        memset(d, 0, sizeof(float) * (size_t)g->ow);
                        continue;
                    }
                    const float *row = plane + iy * g->wd;
                    /* zeros left and right of the input, a copy in between */
                    for (Py_ssize_t ox = 0; ox < lo; ox++)
                        d[ox] = 0.0f;
                    if (g->sw == 1) {
                        memcpy(d + lo, row + x0 + lo, sizeof(float) * (size_t)(hi - lo));
                    } else if (g->sw == 2) {  /* a constant stride: vectorised */
                        strided2(d + lo, row + x0 + 2 * lo, hi - lo);
                    } else {
                        const float *src = row + x0 + lo * g->sw;
                        for (Py_ssize_t ox = lo; ox < hi; ox++, src += g->sw)
                            d[ox] = *src;
                    }
                    for (Py_ssize_t ox = hi; ox < g->ow; ox++)
                        d[ox] = 0.0f;
                }
            }
        }
    }
}


/* im2col_f32(x, cols, geometry): x (N, C, H, W), cols (N, C * kh * kw, OH * OW), both
 * float32 C-contiguous. */
PyObject *native_im2col_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oc, *geom;
    ConvGeom g;
    memset(&g, 0, sizeof g);
    if (!PyArg_ParseTuple(args, "OOO!", &ox, &oc, &PyTuple_Type, &geom) || !conv_parse(geom, &g))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *c;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 4, "x")) ||
        !(c = native_take(&bs, oc, 1, NATIVE_C, 3, "cols")))
        goto done;
    g.n = x->shape[0], g.c = x->shape[1], g.h = x->shape[2], g.wd = x->shape[3];
    Py_ssize_t K, npos, per_image;
    if (!conv_geometry_ok(&g, &K, &npos) || !native_mul(K, npos, &per_image) ||
        c->shape[0] != g.n || c->shape[1] != K || c->shape[2] != npos) {
        PyErr_SetString(PyExc_ValueError, "im2col_f32: the shapes and geometry do not agree");
        goto done;
    }
    g.x = (const float *)x->buf;
    float *cols = (float *)c->buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t img = 0; img < g.n; img++)
        conv_columns(&g, img, 0, g.oh, cols + img * per_image);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* im2col_rows_f32(x, cols, geometry, img, r0, r1): the columns of output rows [r0, r1)
 * of image img alone, cols (C * kh * kw, (r1 - r0) * OW): a band that stays in cache
 * for the GEMM that reads it next (nn.py's banded conv). */
PyObject *native_im2col_rows_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oc, *geom;
    Py_ssize_t img, r0, r1;
    ConvGeom g;
    memset(&g, 0, sizeof g);
    if (!PyArg_ParseTuple(args, "OOO!nnn", &ox, &oc, &PyTuple_Type, &geom, &img, &r0, &r1) ||
        !conv_parse(geom, &g))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *c;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 4, "x")) ||
        !(c = native_take(&bs, oc, 1, NATIVE_C, 2, "cols")))
        goto done;
    g.n = x->shape[0], g.c = x->shape[1], g.h = x->shape[2], g.wd = x->shape[3];
    Py_ssize_t K, npos, band;
    if (!conv_geometry_ok(&g, &K, &npos) || img < 0 || img >= g.n || r0 < 0 || r0 > r1 ||
        r1 > g.oh || !native_mul(r1 - r0, g.ow, &band) || c->shape[0] != K || c->shape[1] != band) {
        PyErr_SetString(PyExc_ValueError, "im2col_rows_f32: the shapes and geometry do not agree");
        goto done;
    }
    g.x = (const float *)x->buf;
    float *cols = (float *)c->buf;
    Py_BEGIN_ALLOW_THREADS
    conv_columns(&g, img, r0, r1, cols);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* ------------------------------------------------------- depthwise Conv -- */
/* o[ox] += sum over kx < kw of w[kx] * r[ox * sw + kx * dw] for ox in [lo, hi): the
 * taps summed in a register, the loop over ox vectorised. Inlined with constant kw and
 * sw (dw_interior), so the taps unroll and a unit stride reads contiguous vectors. */
static inline __attribute__((always_inline)) void dw_taps(float *o, const float *r,
                                                          const float *w, const int kw,
                                                          const Py_ssize_t sw, Py_ssize_t dw,
                                                          Py_ssize_t lo, Py_ssize_t hi)
{
#pragma omp simd
    for (Py_ssize_t ox = lo; ox < hi; ox++) {
        const float *q = r + ox * sw;
        float even = o[ox], odd = 0.0f;  /* two chains of sums: half the wait on each */
        for (int kx = 0; kx + 1 < kw; kx += 2) {
            even += w[kx] * q[kx * dw];
            odd += w[kx + 1] * q[(kx + 1) * dw];
        }
        if (kw % 2)
            even += w[kw - 1] * q[(kw - 1) * dw];
        o[ox] = even + odd;
    }
}

/* The output columns [lo, hi) whose every tap lies inside the row `row` (no bounds
 * checks: the caller computed the range): 3, 5 and 7 taps at strides 1 and 2 (the
 * depthwise layers of MobileNet, PP-OCR and ConvNeXt) specialised, any other one tap
 * at a time. */
CLONES static void dw_interior(float *o, const float *row, const float *w, Py_ssize_t kw,
                               Py_ssize_t sw, Py_ssize_t dw, Py_ssize_t pl, Py_ssize_t lo,
                               Py_ssize_t hi)
{
    const float *r = row - pl;
#define DW_CASE(KW, SW) \
    if (kw == KW && sw == SW) { \
        dw_taps(o, r, w, KW, SW, dw, lo, hi); \
        return; \
    }
    DW_CASE(3, 1) DW_CASE(3, 2) DW_CASE(5, 1) DW_CASE(5, 2) DW_CASE(7, 1) DW_CASE(7, 2)
#undef DW_CASE
    for (Py_ssize_t kx = 0; kx < kw; kx++) {
        const float wv = w[kx];
        const float *q = r + kx * dw;
#pragma omp simd
        for (Py_ssize_t ox = lo; ox < hi; ox++)
            o[ox] += wv * q[ox * sw];
    }
}

/* o[ox] += the whole K x K window at output column ox, for ox in [lo, hi) whose taps
 * all lie inside the rows (rows[ky]: the input row of kernel row ky, or a row of zeros
 * where it falls in the padding). One pass over the output row; each kernel row's
 * taps summed in its own register, so the sums do not wait on one another. */
static inline __attribute__((always_inline)) void dw_window_k(float *o, const float *const *rows,
                                                              const float *w, const int K,
                                                              const Py_ssize_t sw, Py_ssize_t dw,
                                                              Py_ssize_t pl, Py_ssize_t lo,
                                                              Py_ssize_t hi)
{
#pragma omp simd
    for (Py_ssize_t ox = lo; ox < hi; ox++) {
        float acc = o[ox];
#pragma GCC unroll 7
        for (int ky = 0; ky < K; ky++) {
            const float *q = rows[ky] - pl + ox * sw;
            float part = 0.0f;
#pragma GCC unroll 7
            for (int kx = 0; kx < K; kx++)
                part += w[ky * K + kx] * q[kx * dw];
            acc += part;
        }
        o[ox] = acc;
    }
}

/* Whether dw_window takes this geometry: square 3, 5 and 7 kernels at strides 1 and 2. */
static int dw_square(const ConvGeom *g)
{
    return g->kh == g->kw && (g->kw == 3 || g->kw == 5 || g->kw == 7) &&
           (g->sw == 1 || g->sw == 2);
}

CLONES static void dw_window(float *o, const float *const *rows, const float *w, Py_ssize_t k,
                             Py_ssize_t sw, Py_ssize_t dw, Py_ssize_t lo, Py_ssize_t hi)
{
#define DW_CASE(K, SW) \
    if (k == K && sw == SW) { \
        dw_window_k(o, rows, w, K, SW, dw, 0, lo, hi); \
        return; \
    }
    DW_CASE(3, 1) DW_CASE(3, 2) DW_CASE(5, 1) DW_CASE(5, 2) DW_CASE(7, 1) DW_CASE(7, 2)
#undef DW_CASE
}

/* Narrow stride-1 planes (ow at most DW_FLAT_MAX_OW: EfficientNet's and MobileNet's 28x28
 * down to 7x7 layers) read as one flat row: output (oy, ox) is t[oy wp + ox] of
 * t[j] = sum over the window of w * padded[j + ky dh wp + kx dw], j over the whole padded
 * plane at once. A vector then spans several output rows instead of idling on a 7- or
 * 14-wide one; the j whose window wraps past a row's end (wp - ow of each wp) are computed
 * and dropped. The sums run in dw_window_k's order: the same numbers. One thread, onnxruntime
 * (one thread) beside: 5x5 over 1152 7x7 planes 714 -> 251 us (117), over 672 14x14 1005 -> 312
 * (280), over 240 28x28 887 -> 374 (315); 3x3 over 144 56x56 565 -> 472 (596). Wider planes
 * (112: the same or slower) keep the row form. */
#define DW_FLAT_MAX_OW 64
static inline __attribute__((always_inline)) void dw_flat_k(float *t, const float *p, const float *w,
                                                            const int K, Py_ssize_t wp,
                                                            Py_ssize_t dh, Py_ssize_t dw,
                                                            float bv, Py_ssize_t len)
{
#pragma omp simd
    for (Py_ssize_t j = 0; j < len; j++) {
        float acc = bv;
#pragma GCC unroll 7
        for (int ky = 0; ky < K; ky++) {
            const float *q = p + j + ky * dh * wp;
            float part = 0.0f;
#pragma GCC unroll 7
            for (int kx = 0; kx < K; kx++)
                part += w[ky * K + kx] * q[kx * dw];
            acc += part;
        }
        t[j] = acc;
    }
}

CLONES static void dw_flat(float *t, const float *p, const float *w, Py_ssize_t k, Py_ssize_t wp,
                           Py_ssize_t dh, Py_ssize_t dw, float bv, Py_ssize_t len)
{
    if (k == 3)
        dw_flat_k(t, p, w, 3, wp, dh, dw, bv, len);
    else if (k == 5)
        dw_flat_k(t, p, w, 5, wp, dh, dw, bv, len);
    else
        dw_flat_k(t, p, w, 7, wp, dh, dw, bv, len);
}

typedef struct {
    ConvGeom g;
    const float *w, *bias;
    float *out;
    Py_ssize_t mult;      /* output channels per input channel */
    Py_ssize_t hp, wp;    /* the padded plane: exactly the rows and columns the windows read */
    float *padded;        /* hp x wp floats */
    float *flat;          /* hp x wp floats where dw_flat applies (dw_plane), else NULL */
} DepthwiseArgs;

/* Whether dw_plane takes the flat form: a square kernel dw_window takes, at stride 1, on a
 * narrow plane. */
static int dw_flat_applies(const ConvGeom *g)
{
    return dw_square(g) && g->sh == 1 && g->sw == 1 && g->ow <= DW_FLAT_MAX_OW;
}

/* The padded plane of one input plane: zeros, the input at (pt, pl), cut at hp x wp
 * (the windows read nothing past it). Every window then lies inside it: no edge
 * cases in the loops, at the price of one copy of the plane (the edge columns of a
 * 5x5 or 7x7 kernel, tap by tap, cost as much as the whole interior; measured). */
static void dw_pad_plane(const DepthwiseArgs *d, const float *plane)
{
    const ConvGeom *g = &d->g;
    memset(d->padded, 0, sizeof(float) * (size_t)(d->hp * d->wp));
    if (g->pl >= d->wp)
        return;
    const Py_ssize_t cols = g->wd < d->wp - g->pl ? g->wd : d->wp - g->pl;
    for (Py_ssize_t iy = 0; iy < g->h && g->pt + iy < d->hp; iy++)
        memcpy(d->padded + (g->pt + iy) * d->wp + g->pl, plane + iy * g->wd,
               sizeof(float) * (size_t)cols);
}

/* One output plane from the padded plane: the bias, then the windows (all at once
 * where dw_window takes the geometry, else one kernel row at a time). */
static void dw_plane(const DepthwiseArgs *d, const float *w, float bv, float *out)
{
    const ConvGeom *g = &d->g;
    if (d->flat != NULL) {
        dw_flat(d->flat, d->padded, w, g->kw, d->wp, g->dh, g->dw, bv,
                (g->oh - 1) * d->wp + g->ow);
        for (Py_ssize_t oy = 0; oy < g->oh; oy++)
            memcpy(out + oy * g->ow, d->flat + oy * d->wp, sizeof(float) * (size_t)g->ow);
        return;
    }
    const int square = dw_square(g);
    const float *rows[7];
    for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
        float *o = out + oy * g->ow;
        for (Py_ssize_t ox = 0; ox < g->ow; ox++)
            o[ox] = bv;
        const float *top = d->padded + oy * g->sh * d->wp;
        if (square) {
            for (Py_ssize_t ky = 0; ky < g->kh; ky++)
                rows[ky] = top + ky * g->dh * d->wp;
            dw_window(o, rows, w, g->kw, g->sw, g->dw, 0, g->ow);
            continue;
        }
        for (Py_ssize_t ky = 0; ky < g->kh; ky++)
            dw_interior(o, top + ky * g->dh * d->wp, w + ky * g->kw, g->kw, g->sw, g->dw, 0, 0,
                        g->ow);
    }
}

/* hp = (oh - 1) sh + (kh - 1) dh + 1 and wp likewise, the padded plane's size, and
 * whether it is at most DW_MAX_PADDED times the input and output planes together (a
 * geometry of huge strides or pads around a small input: native.py sends those to
 * numpy's path, and a direct call is refused). */
#define DW_MAX_PADDED 16
static int dw_padded_size(DepthwiseArgs *d, Py_ssize_t npos)
{
    const ConvGeom *g = &d->g;
    Py_ssize_t a, b, plane, in_plane, budget;
    if (!native_mul(g->oh - 1, g->sh, &a) || !native_mul(g->kh - 1, g->dh, &b) ||
        __builtin_add_overflow(a, b + 1, &d->hp) ||
        !native_mul(g->ow - 1, g->sw, &a) || !native_mul(g->kw - 1, g->dw, &b) ||
        __builtin_add_overflow(a, b + 1, &d->wp) ||
        !native_mul(d->hp, d->wp, &plane) || !native_mul(g->h, g->wd, &in_plane) ||
        __builtin_add_overflow(in_plane, npos, &budget) ||
        !native_mul(budget, DW_MAX_PADDED, &budget) || budget > PY_SSIZE_T_MAX - 65536)
        return 0;
    return plane <= budget + 65536;
}

/* depthwise_conv2d_f32(x, w, out, bias, geometry): x (N, C, H, W), w (M, kh * kw) with
 * M a multiple of C (output channel k reads input channel k / (M / C)), out
 * (N, M, OH * OW), bias (M) or None, all float32 C-contiguous. */
PyObject *native_depthwise_conv2d_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *ow_, *oo, *ob, *geom;
    DepthwiseArgs d;
    memset(&d, 0, sizeof d);
    ConvGeom *g = &d.g;
    if (!PyArg_ParseTuple(args, "OOOOO!", &ox, &ow_, &oo, &ob, &PyTuple_Type, &geom) ||
        !conv_parse(geom, g))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *w, *o, *b = NULL;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 4, "x")) ||
        !(w = native_take(&bs, ow_, 0, NATIVE_C, 2, "w")) ||
        !(o = native_take(&bs, oo, 1, NATIVE_C, 3, "out")) ||
        (ob != Py_None && !(b = native_take(&bs, ob, 0, NATIVE_C, 1, "bias"))))
        goto done;
    g->n = x->shape[0], g->c = x->shape[1], g->h = x->shape[2], g->wd = x->shape[3];
    g->m = w->shape[0];
    Py_ssize_t K, npos;
    if (!conv_geometry_ok(g, &K, &npos) || !native_mul(g->kh, g->kw, &K) || g->c < 1 ||
        g->m % g->c != 0 || w->shape[1] != K || o->shape[0] != g->n || o->shape[1] != g->m ||
        o->shape[2] != npos || (b && b->shape[0] != g->m) || !dw_padded_size(&d, npos)) {
        PyErr_SetString(PyExc_ValueError,
                        "depthwise_conv2d_f32: the shapes and geometry do not agree");
        goto done;
    }
    d.mult = g->m / g->c;
    d.padded = PyMem_RawMalloc(sizeof(float) * (size_t)(d.hp * d.wp));
    d.flat = dw_flat_applies(g) ? PyMem_RawMalloc(sizeof(float) * (size_t)(d.hp * d.wp)) : NULL;
    if (d.padded == NULL || (dw_flat_applies(g) && d.flat == NULL)) {
        PyMem_RawFree(d.padded);
        PyMem_RawFree(d.flat);
        PyErr_NoMemory();
        goto done;
    }
    g->x = (const float *)x->buf;
    d.w = (const float *)w->buf, d.out = (float *)o->buf;
    d.bias = b ? (const float *)b->buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t img = 0; img < g->n; img++)
        for (Py_ssize_t k = 0; k < g->m; k++) {
            if (k % d.mult == 0)  /* the next input channel */
                dw_pad_plane(&d, g->x + (img * g->c + k / d.mult) * g->h * g->wd);
            dw_plane(&d, d.w + k * K, d.bias ? d.bias[k] : 0.0f, d.out + (img * g->m + k) * npos);
        }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(d.padded);
    PyMem_RawFree(d.flat);
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* --------------------------------------------------------------- MaxPool -- */
typedef struct {
    const float *x;
    float *out;
    Py_ssize_t planes, h, wd, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    Py_ssize_t x_lo, x_hi;  /* output columns whose taps all lie inside the row */
    float *scratch;  /* one row of wd floats */
} PoolArgs;

/* the larger of two, NaN winning (numpy's maximum: a NaN in a window is the result) */
static inline float nan_max(float m, float v)
{
    return (v > m || v != v) ? v : m;
}

/* Output columns lo..hi, whose kw taps all lie inside the row: no bounds checks
 * (3 taps of stride 1, ResNet's pool, as one expression the compiler vectorises). */
CLONES static void max_columns(const PoolArgs *g, const float *row, float *o, Py_ssize_t lo,
                               Py_ssize_t hi)
{
    const Py_ssize_t sw = g->sw, dw = g->dw, pl = g->pl;
    if (g->kw == 3 && dw == 1) {
#pragma omp simd
        for (Py_ssize_t ox = lo; ox < hi; ox++) {
            const float *r = row + ox * sw - pl;
            o[ox] = nan_max(nan_max(r[0], r[1]), r[2]);
        }
        return;
    }
    for (Py_ssize_t ox = lo; ox < hi; ox++) {
        const float *r = row + ox * sw - pl;
        float m = r[0];
        for (Py_ssize_t kx = 1; kx < g->kw; kx++)
            m = nan_max(m, r[kx * dw]);
        o[ox] = m;
    }
}

/* One plane: the maximum over kh rows first (whole contiguous rows, vectorised),
 * then over kw columns of that row; positions outside the input are skipped (the
 * -inf padding of ONNX MaxPool), a window with none left is -inf. */
CLONES static void max_plane(const PoolArgs *g, const float *in, float *out, float *row)
{
    for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
        for (Py_ssize_t x = 0; x < g->wd; x++)
            row[x] = -INFINITY;
        for (Py_ssize_t ky = 0; ky < g->kh; ky++) {
            const Py_ssize_t iy = oy * g->sh + ky * g->dh - g->pt;
            if (iy < 0 || iy >= g->h)
                continue;
            const float *src = in + iy * g->wd;
#pragma omp simd
            for (Py_ssize_t x = 0; x < g->wd; x++)
                row[x] = nan_max(row[x], src[x]);
        }
        float *o = out + oy * g->ow;
        /* the edge columns check their taps; the interior's lie inside the row */
        for (Py_ssize_t ox = 0; ox < g->ow; ox++) {
            if (ox == g->x_lo && g->x_lo < g->x_hi) {
                max_columns(g, row, o, g->x_lo, g->x_hi);
                ox = g->x_hi - 1;
                continue;
            }
            float m = -INFINITY;
            for (Py_ssize_t kx = 0; kx < g->kw; kx++) {
                const Py_ssize_t ix = ox * g->sw + kx * g->dw - g->pl;
                if (ix >= 0 && ix < g->wd)
                    m = nan_max(m, row[ix]);
            }
            o[ox] = m;
        }
    }
}

/* Stride 1, no dilation, the output as wide as the input, no more left padding than the
 * window's width less one (pads adding up to kw - 1: YOLO's SPPF, Inception's pool branches):
 * the maxima over kh rows in kh long passes over the whole plane, then over kw columns in kw
 * more, the edge columns redone with their bounds -- the same comparisons in the same order
 * as max_plane. Row by row, a 20-wide plane's time went to loop heads and tails: 10x
 * onnxruntime's for SPPF's 5x5. vm: oh * wd floats. */
static int same_width_s1(const PoolArgs *g)
{
    return g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->ow == g->wd && g->pl < g->kw;
}

CLONES static void max_plane_same(const PoolArgs *g, const float *in, float *out, float *vm)
{
    const Py_ssize_t W = g->wd, oh = g->oh, n = oh * W, right = g->kw - 1 - g->pl;
    for (Py_ssize_t i = 0; i < n; i++)
        vm[i] = -INFINITY;
    for (Py_ssize_t ky = 0; ky < g->kh; ky++) {  /* output rows whose input row ky exists */
        const Py_ssize_t lo = g->pt - ky > 0 ? g->pt - ky : 0;
        const Py_ssize_t hi = g->h + g->pt - ky < oh ? g->h + g->pt - ky : oh;
        if (hi <= lo)
            continue;
        float *v = vm + lo * W;
        const float *src = in + (lo + ky - g->pt) * W;
#pragma omp simd
        for (Py_ssize_t i = 0; i < (hi - lo) * W; i++)
            v[i] = nan_max(v[i], src[i]);
    }
    /* every position as if its row went on into the next; the edge columns are redone below */
    const Py_ssize_t lo = g->pl, hi = n - right;
    for (Py_ssize_t i = lo; i < hi; i++)
        out[i] = vm[i - g->pl];
    for (Py_ssize_t kx = 1; kx < g->kw; kx++) {
        const float *v = vm + kx - g->pl;
#pragma omp simd
        for (Py_ssize_t i = lo; i < hi; i++)
            out[i] = nan_max(out[i], v[i]);
    }
    const Py_ssize_t left_end = g->pl < W ? g->pl : W, right_start = W - right > left_end ? W - right : left_end;
    for (Py_ssize_t oy = 0; oy < oh; oy++) {
        const float *row = vm + oy * W;
        for (Py_ssize_t ox = 0; ox < W; ox++) {
            if (ox == left_end)
                ox = right_start;
            if (ox >= W)
                break;
            /* the taps inside the row: ox + kx - pl in [0, W) */
            const Py_ssize_t k0 = g->pl - ox > 0 ? g->pl - ox : 0;
            const Py_ssize_t k1 = W + g->pl - ox < g->kw ? W + g->pl - ox : g->kw;
            const float *r = row + ox - g->pl;
            float m = -INFINITY;
            for (Py_ssize_t kx = k0; kx < k1; kx++)
                m = nan_max(m, r[kx]);
            out[oy * W + ox] = m;
        }
    }
}

/* The geometry, re-checked as conv_geometry_ok does: each value within
 * [lo, NATIVE_MAX_EXTENT], so ox * sw + kx * dw - pl and its row twin stay in int64. */
static int pool_geometry_ok(const PoolArgs *g)
{
    return native_extent(g->kh, 1) && native_extent(g->kw, 1) && native_extent(g->sh, 1) &&
           native_extent(g->sw, 1) && native_extent(g->dh, 1) && native_extent(g->dw, 1) &&
           native_extent(g->pt, 0) && native_extent(g->pl, 0) && native_extent(g->oh, 0) &&
           native_extent(g->ow, 0) && native_extent(g->h, 0) && native_extent(g->wd, 0);
}

/* x_lo..x_hi: the output columns whose kw taps all lie inside the row (max_columns
 * reads them unchecked), then the claim itself checked at both ends in overflow-safe
 * arithmetic -- if either end fails, no column takes the unchecked path. */
static void pool_interior(PoolArgs *g)
{
    g->x_lo = native_ceil_div(g->pl, g->sw);              /* first tap >= 0 */
    const Py_ssize_t reach = (g->kw - 1) * g->dw - g->pl;   /* last tap of column 0 */
    g->x_hi = g->wd - 1 - reach >= 0 ? (g->wd - 1 - reach) / g->sw + 1 : 0;
    if (g->x_hi > g->ow)
        g->x_hi = g->ow;
    if (g->x_lo >= g->x_hi) {
        g->x_lo = g->x_hi = 0;
        return;
    }
    Py_ssize_t first, last, span;
    const int ok = native_mul(g->x_lo, g->sw, &first) && first - g->pl >= 0 &&
                   native_mul(g->x_hi - 1, g->sw, &last) &&
                   native_mul(g->kw - 1, g->dw, &span) &&
                   !__builtin_add_overflow(last, span, &last) && last - g->pl < g->wd;
    if (!ok)
        g->x_lo = g->x_hi = 0;
}

/* maxpool2d_f32(x, out, geometry): x (planes, H, W), out (planes, OH, OW),
 * float32 C-contiguous; geometry = (kh, kw, sh, sw, dh, dw, pad_top, pad_left). */
PyObject *native_maxpool2d_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oo, *geom;
    if (!PyArg_ParseTuple(args, "OOO!", &ox, &oo, &PyTuple_Type, &geom))
        return NULL;
    PoolArgs g;
    memset(&g, 0, sizeof g);
    if (!PyArg_ParseTuple(geom, "nnnnnnnn", &g.kh, &g.kw, &g.sh, &g.sw, &g.dh, &g.dw, &g.pt, &g.pl))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *o;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 3, "x")) ||
        !(o = native_take(&bs, oo, 1, NATIVE_C, 3, "out")))
        goto done;
    g.planes = x->shape[0], g.h = x->shape[1], g.wd = x->shape[2];
    g.oh = o->shape[1], g.ow = o->shape[2];
    Py_ssize_t bytes;
    if (o->shape[0] != g.planes || !pool_geometry_ok(&g) ||
        !native_mul(g.wd > 0 ? g.wd : 1, (Py_ssize_t)sizeof(float), &bytes)) {
        PyErr_SetString(PyExc_ValueError, "maxpool2d_f32: the shapes and geometry do not agree");
        goto done;
    }
    pool_interior(&g);
    const int same = same_width_s1(&g);
    if (same && !native_mul(bytes, g.oh > 0 ? g.oh : 1, &bytes)) {  /* a plane, not a row */
        PyErr_SetString(PyExc_ValueError, "maxpool2d_f32: the shapes and geometry do not agree");
        goto done;
    }
    g.x = (const float *)x->buf, g.out = (float *)o->buf;
    g.scratch = PyMem_RawMalloc((size_t)bytes);
    if (g.scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t p = 0; p < g.planes; p++) {
        if (same)
            max_plane_same(&g, g.x + p * g.h * g.wd, g.out + p * g.oh * g.ow, g.scratch);
        else
            max_plane(&g, g.x + p * g.h * g.wd, g.out + p * g.oh * g.ow, g.scratch);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(g.scratch);
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* ------------------------------------------------------ channel epilogue --
 * A conv's epilogue in one pass over its output, while engine/fuse.py's chains
 * (Conv -> BatchNormalization -> Add -> Relu / Clip / HardSwish) once took up to five: per
 * output channel k, y = y * scale[k] + shift[k] (either absent), then + residual, then
 * either clamped to [lo, hi] as ONNX's Clip computes it (min(max(y, lo), hi): NaN stays
 * NaN, lo > hi gives hi) or, with a hard swish, y * clip(y * a + b, lo, hi), then divided
 * or multiplied by c (post 1 or 2) -- ONNX's HardSwish is a = 1/6, b = 1/2 on [0, 1],
 * Paddle's x * clip(x + 3, 0, 6) / 6 is a = 1, b = 3 on [0, 6], post 1, c = 6: the
 * graph's own operations in its order (x * 1 is exact). A LeakyRelu may come before the
 * clamp: y < 0 ? y * alpha : y (NaN stays NaN), as tf2onnx's Keras convs write it, often
 * with a Max against a constant after it (the clamp's lo). */
typedef struct {
    float a, b, lo, hi, c;
    int post;  /* 0: nothing after the product; 1: / c; 2: * c */
} HardSwish;

/* The activation, in place on one row (inlined into each clone of epilogue_row). */
static inline __attribute__((always_inline)) void activation_row(float *y, Py_ssize_t n, float lo, float hi,
                                                                 const HardSwish *hs, const float *leaky)
{
    if (hs) {
        const float a = hs->a, b = hs->b, hlo = hs->lo, hhi = hs->hi, c = hs->c;
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++) {
            float v = y[i] * a + b;  /* NaN stays NaN through the clamp and the product */
            v = v < hlo ? hlo : v;
            v = v > hhi ? hhi : v;
            y[i] = y[i] * v;
        }
        if (hs->post == 1)
#pragma omp simd
            for (Py_ssize_t i = 0; i < n; i++)
                y[i] /= c;
        else if (hs->post == 2)
#pragma omp simd
            for (Py_ssize_t i = 0; i < n; i++)
                y[i] *= c;
        return;
    }
    if (leaky) {
        const float alpha = *leaky;
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++) {
            float v = y[i] < 0.0f ? y[i] * alpha : y[i];
            v = v < lo ? lo : v;
            y[i] = v > hi ? hi : v;
        }
        return;
    }
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = y[i] < lo ? lo : y[i];
        y[i] = v > hi ? hi : v;
    }
}

/* One output row: y * s + t (affine), + r, the activation, then y * ps + pt (post: an affine
 * after the activation, PP-OCRv4's learnable scale and shift after each hard swish). */
CLONES static void epilogue_row(float *y, const float *r, Py_ssize_t n, float s, float t,
                                int affine, float lo, float hi, const HardSwish *hs,
                                const float *leaky, float ps, float pt, int post)
{
    if (affine)
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++)
            y[i] = y[i] * s + t;
    if (r)
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++)
            y[i] += r[i];
    activation_row(y, n, lo, hi, hs, leaky);
    if (post)
#pragma omp simd
        for (Py_ssize_t i = 0; i < n; i++)
            y[i] = y[i] * ps + pt;
}

/* channel_epilogue_f32(y, scale, shift, residual, lo, hi[, swish[, leaky[, post_scale,
 * post_shift]]]): y (N, M, P) written in place; scale, shift (M) or None; residual (N, M, P) or
 * None; all float32 C-contiguous; swish None, or (a, b, lo, hi, post, c) of a hard swish in the
 * clamp's place; leaky None, or a LeakyRelu's alpha, before the clamp (not with a swish);
 * post_scale, post_shift (M, both or neither) an affine after the activation. */
PyObject *native_channel_epilogue_f32(PyObject *self, PyObject *args)
{
    PyObject *oy, *os, *ot, *orr, *osw = Py_None, *olk = Py_None, *ops = Py_None, *opt = Py_None;
    double lo, hi;
    if (!PyArg_ParseTuple(args, "OOOOdd|OOOO", &oy, &os, &ot, &orr, &lo, &hi, &osw, &olk, &ops, &opt))
        return NULL;
    if ((ops == Py_None) != (opt == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "channel_epilogue_f32: a post scale without a post shift");
        return NULL;
    }
    float leaky_value = 0.0f, *leaky = NULL;
    if (olk != Py_None) {
        double alpha = PyFloat_AsDouble(olk);
        if (alpha == -1.0 && PyErr_Occurred())
            return NULL;
        if (osw != Py_None) {
            PyErr_SetString(PyExc_ValueError, "channel_epilogue_f32: a LeakyRelu and a hard swish at once");
            return NULL;
        }
        leaky_value = (float)alpha;
        leaky = &leaky_value;
    }
    HardSwish hs_value, *hs = NULL;
    if (osw != Py_None) {
        double a, b, slo, shi, c;
        if (!PyArg_ParseTuple(osw, "ddddid", &a, &b, &slo, &shi, &hs_value.post, &c))
            return NULL;
        if (isnan(slo) || isnan(shi) || hs_value.post < 0 || hs_value.post > 2) {
            PyErr_SetString(PyExc_ValueError, "channel_epilogue_f32: bad hard swish parameters");
            return NULL;
        }
        hs_value.a = (float)a, hs_value.b = (float)b, hs_value.lo = (float)slo;
        hs_value.hi = (float)shi, hs_value.c = (float)c;
        hs = &hs_value;
    }
    NativeBuffers bs = {.held = 0};
    Py_buffer *y, *s = NULL, *t = NULL, *r = NULL, *ps = NULL, *pt = NULL;
    int ok = 0;
    if (!(y = native_take(&bs, oy, 1, NATIVE_C, 3, "y")) ||
        (os != Py_None && !(s = native_take(&bs, os, 0, NATIVE_C, 1, "scale"))) ||
        (ot != Py_None && !(t = native_take(&bs, ot, 0, NATIVE_C, 1, "shift"))) ||
        (orr != Py_None && !(r = native_take(&bs, orr, 0, NATIVE_C, 3, "residual"))) ||
        (ops != Py_None && !(ps = native_take(&bs, ops, 0, NATIVE_C, 1, "post_scale"))) ||
        (opt != Py_None && !(pt = native_take(&bs, opt, 0, NATIVE_C, 1, "post_shift"))))
        goto done;
    const Py_ssize_t n = y->shape[0], m = y->shape[1], p = y->shape[2];
    if ((s && s->shape[0] != m) || (t && t->shape[0] != m) ||
        (ps && ps->shape[0] != m) || (pt && pt->shape[0] != m) ||
        (r && (r->shape[0] != n || r->shape[1] != m || r->shape[2] != p)) ||
        isnan(lo) || isnan(hi)) {
        PyErr_SetString(PyExc_ValueError,
                        "channel_epilogue_f32: the shapes or bounds do not agree");
        goto done;
    }
    float *yb = (float *)y->buf;
    const float *sb = s ? (const float *)s->buf : NULL, *tb = t ? (const float *)t->buf : NULL;
    const float *rb = r ? (const float *)r->buf : NULL;
    const float *psb = ps ? (const float *)ps->buf : NULL, *ptb = pt ? (const float *)pt->buf : NULL;
    const float flo = (float)lo, fhi = (float)hi;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t img = 0; img < n; img++)
        for (Py_ssize_t k = 0; k < m; k++) {
            const Py_ssize_t at = (img * m + k) * p;  /* < y->len / 4: no overflow */
            epilogue_row(yb + at, rb ? rb + at : NULL, p, sb ? sb[k] : 1.0f, tb ? tb[k] : 0.0f,
                         sb != NULL || tb != NULL, flo, fhi, hs, leaky,
                         psb ? psb[k] : 1.0f, ptb ? ptb[k] : 0.0f, psb != NULL);
        }
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    return native_finish(&bs, ok);
}
