/* Conv and MaxPool on the pool of _native_pool.c (2-D, float32).
 *
 * Conv (one group): a slice is a band of output rows of one image: it builds the
 * im2col columns of its band (padding written as zeros on the fly, no padded
 * copy), multiplies them into its rows of the output, and applies the epilogue of
 * a fused chain (bias, residual, Relu) while the band is in cache. Maps with fewer
 * rows than threads are cut by output channels over one column matrix instead.
 *
 * MaxPool: a slice is a block of planes; per output row, the maximum over the
 * kernel's rows first (whole contiguous rows, vectorised), then over its columns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "_native.h"

/* ------------------------------------------------------------------ Conv -- */
typedef struct {
    const float *x, *w, *bias, *residual;
    float *out;
    Py_ssize_t n, c, h, wd, m, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
    Py_ssize_t bands;         /* row bands per image (band split) */
    Py_ssize_t parts;         /* channel parts per image (channel split), else 0 */
    int relu;
    float *scratch;           /* per-thread column buffers (band split), or all columns */
    Py_ssize_t scratch_each;  /* floats per thread's buffer */
} ConvArgs;

/* d[i] = src[2 i]: stride-2 convs' column rows (ResNet's stem and downsampling). */
CLONES static void strided2(float *d, const float *src, Py_ssize_t n)
{
#pragma omp simd
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = src[2 * i];
}

/* im2col of output rows r0..r1 of image `img`: (c * kh * kw) x ((r1 - r0) * ow),
 * C major, kernel positions minor (the weight's (M, C, kh, kw) flattened). */
static void conv_columns(const ConvArgs *g, Py_ssize_t img, Py_ssize_t r0, Py_ssize_t r1,
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
                /* output columns whose input column x0 + ox * sw lies inside [0, wd)
                 * (conv2d_f32 bounded every term: no sum or quotient here overflows) */
                Py_ssize_t lo = x0 < 0 ? native_ceil_div(-x0, g->sw) : 0;
                Py_ssize_t hi = x0 < g->wd ? (g->wd - 1 - x0) / g->sw + 1 : 0;
                if (hi > g->ow)
                    hi = g->ow;
                if (lo > hi)
                    lo = hi;
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

/* bias, residual and Relu on channels m0..m1, positions p0..p1 of image img. */
CLONES static void conv_epilogue(const ConvArgs *g, Py_ssize_t img, Py_ssize_t m0, Py_ssize_t m1,
                                 Py_ssize_t p0, Py_ssize_t p1)
{
    const Py_ssize_t npos = g->oh * g->ow;
    for (Py_ssize_t ch = m0; ch < m1; ch++) {
        float *o = g->out + (img * g->m + ch) * npos;
        const float *r = g->residual ? g->residual + (img * g->m + ch) * npos : NULL;
        const float bv = g->bias ? g->bias[ch] : 0.0f;
        if (r != NULL) {
#pragma omp simd
            for (Py_ssize_t p = p0; p < p1; p++)
                o[p] = (o[p] + bv) + r[p];
        } else if (g->bias) {
#pragma omp simd
            for (Py_ssize_t p = p0; p < p1; p++)
                o[p] += bv;
        }
        if (g->relu) {
#pragma omp simd
            for (Py_ssize_t p = p0; p < p1; p++)
                o[p] = o[p] > 0.0f ? o[p] : 0.0f;
        }
    }
}

static int conv_is_pointwise(const ConvArgs *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
           g->oh == g->h && g->ow == g->wd;
}

static void conv_band(void *arg, Py_ssize_t i, int slot)
{
    const ConvArgs *g = (const ConvArgs *)arg;
    const Py_ssize_t img = i / g->bands, band = i % g->bands;
    const Py_ssize_t r0 = g->oh * band / g->bands, r1 = g->oh * (band + 1) / g->bands;
    const Py_ssize_t K = g->c * g->kh * g->kw, npos = g->oh * g->ow;
    const Py_ssize_t p0 = r0 * g->ow, p1 = r1 * g->ow;
    float *o = g->out + img * g->m * npos + p0;
    if (conv_is_pointwise(g)) {  /* the input rows are the columns: no copy */
        native_sgemm(0, 0, g->m, p1 - p0, K, g->w, K, g->x + img * g->c * npos + p0, npos, 0.0f, o,
              npos);
    } else {
        float *cols = g->scratch + (Py_ssize_t)slot * g->scratch_each;
        conv_columns(g, img, r0, r1, cols);
        native_sgemm(0, 0, g->m, p1 - p0, K, g->w, K, cols, p1 - p0, 0.0f, o, npos);
    }
    conv_epilogue(g, img, 0, g->m, p0, p1);
}

static void conv_channels(void *arg, Py_ssize_t i, int slot)
{
    (void)slot;
    const ConvArgs *g = (const ConvArgs *)arg;
    const Py_ssize_t img = i / g->parts, part = i % g->parts;
    const Py_ssize_t m0 = g->m * part / g->parts, m1 = g->m * (part + 1) / g->parts;
    const Py_ssize_t K = g->c * g->kh * g->kw, npos = g->oh * g->ow;
    native_sgemm(0, 0, m1 - m0, npos, K, g->w + m0 * K, K, g->scratch + img * K * npos, npos, 0.0f,
          g->out + (img * g->m + m0) * npos, npos);
    conv_epilogue(g, img, m0, m1, 0, npos);
}

static void conv_all_columns(void *arg, Py_ssize_t img, int slot)
{
    (void)slot;
    const ConvArgs *g = (const ConvArgs *)arg;
    const Py_ssize_t K = g->c * g->kh * g->kw, npos = g->oh * g->ow;
    conv_columns(g, img, 0, g->oh, g->scratch + img * K * npos);
}

/* The geometry, re-checked (it comes from an untrusted model through Python): every
 * value within [lo, NATIVE_MAX_EXTENT], so each index conv_columns forms (a product
 * of two plus a product of two, less a pad) stays inside int64; K = c kh kw and
 * npos = oh ow without overflow. */
static int conv_geometry_ok(const ConvArgs *g, Py_ssize_t *K, Py_ssize_t *npos)
{
    return native_extent(g->kh, 1) && native_extent(g->kw, 1) && native_extent(g->sh, 1) &&
           native_extent(g->sw, 1) && native_extent(g->dh, 1) && native_extent(g->dw, 1) &&
           native_extent(g->pt, 0) && native_extent(g->pl, 0) && native_extent(g->oh, 1) &&
           native_extent(g->ow, 1) && native_extent(g->h, 0) && native_extent(g->wd, 0) &&
           native_mul3(g->c, g->kh, g->kw, K) && native_mul(g->oh, g->ow, npos);
}

/* Output positions a row band should have at least: narrower GEMMs lose BLAS
 * efficiency (ResNet-18's 7x7 maps: 49 columns ran at 2/3 of peak). */
#define MIN_BAND 192

/* conv2d_f32(x, w, out, bias, residual, relu, geometry, ways): x (N, C, H, W),
 * w (M, C * kh * kw), out (N, M, OH * OW), bias (M) or None, residual like out or
 * None, all float32 C-contiguous; geometry = (kh, kw, sh, sw, dh, dw, pad_top,
 * pad_left, OH, OW). */
PyObject *native_conv2d_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *ow_, *oo, *ob, *orr, *geom;
    int relu, ways;
    if (!PyArg_ParseTuple(args, "OOOOOpO!i", &ox, &ow_, &oo, &ob, &orr, &relu, &PyTuple_Type,
                          &geom, &ways))
        return NULL;
    if (!native_have_sgemm()) {
        PyErr_SetString(PyExc_RuntimeError, "conv2d_f32: no BLAS (set_sgemm was not called)");
        return NULL;
    }
    ConvArgs g;
    memset(&g, 0, sizeof g);
    if (!PyArg_ParseTuple(geom, "nnnnnnnnnn", &g.kh, &g.kw, &g.sh, &g.sw, &g.dh, &g.dw, &g.pt,
                          &g.pl, &g.oh, &g.ow))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *w, *o, *b = NULL, *r = NULL;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 4, "x")) ||
        !(w = native_take(&bs, ow_, 0, NATIVE_C, 2, "w")) ||
        !(o = native_take(&bs, oo, 1, NATIVE_C, 3, "out")) ||
        (ob != Py_None && !(b = native_take(&bs, ob, 0, NATIVE_C, 1, "bias"))) ||
        (orr != Py_None && !(r = native_take(&bs, orr, 0, NATIVE_C, 3, "residual"))))
        goto done;
    g.n = x->shape[0], g.c = x->shape[1], g.h = x->shape[2], g.wd = x->shape[3], g.m = w->shape[0];
    Py_ssize_t K, npos;
    if (!conv_geometry_ok(&g, &K, &npos) || w->shape[1] != K || o->shape[0] != g.n ||
        o->shape[1] != g.m || o->shape[2] != npos || (b && b->shape[0] != g.m) ||
        (r && (r->shape[0] != g.n || r->shape[1] != g.m || r->shape[2] != npos))) {
        PyErr_SetString(PyExc_ValueError, "conv2d_f32: the shapes and geometry do not agree");
        goto done;
    }
    if (!native_sgemm_fits("conv2d_f32", g.m, npos, K, K, npos, npos))
        goto done;
    g.x = (const float *)x->buf, g.w = (const float *)w->buf, g.out = (float *)o->buf;
    g.bias = b ? (const float *)b->buf : NULL;
    g.residual = r ? (const float *)r->buf : NULL;
    g.relu = relu;
    ways = native_ways(ways);
    Py_ssize_t bands = g.oh < ways ? g.oh : ways;
    if (npos / MIN_BAND < bands)
        bands = npos / MIN_BAND > 0 ? npos / MIN_BAND : 1;
    const int channel_split = ways > 1 && bands < ways && g.n * bands < ways &&
                              !conv_is_pointwise(&g);
    Py_ssize_t floats = 1, bytes;
    int sized;
    if (channel_split) {
        g.parts = g.m / 8 < ways ? (g.m / 8 > 0 ? g.m / 8 : 1) : ways;
        sized = native_mul3(g.n, K, npos, &floats);
    } else {
        g.bands = bands;
        sized = native_mul3(K, native_ceil_div(g.oh, bands), g.ow, &g.scratch_each) &&
                (conv_is_pointwise(&g) || native_mul(g.scratch_each, ways, &floats));
    }
    if (!sized || !native_mul(floats > 0 ? floats : 1, (Py_ssize_t)sizeof(float), &bytes)) {
        PyErr_SetString(PyExc_MemoryError, "conv2d_f32: the column buffer's size overflows");
        goto done;
    }
    g.scratch = PyMem_RawMalloc((size_t)bytes);
    if (g.scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (channel_split) {
        native_pool_run(conv_all_columns, &g, g.n, ways);
        native_pool_run(conv_channels, &g, g.n * g.parts, ways);
    } else {
        native_pool_run(conv_band, &g, g.n * g.bands, ways);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(g.scratch);
    ok = 1;
done:
    return native_finish(&bs, ok);
}

/* --------------------------------------------------------------- MaxPool -- */
typedef struct {
    const float *x;
    float *out;
    Py_ssize_t planes, h, wd, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, blocks;
    Py_ssize_t x_lo, x_hi;  /* output columns whose taps all lie inside the row */
    float *scratch;  /* per-slot row of wd floats */
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

static void pool_block(void *arg, Py_ssize_t i, int slot)
{
    const PoolArgs *g = (const PoolArgs *)arg;
    const Py_ssize_t p0 = g->planes * i / g->blocks, p1 = g->planes * (i + 1) / g->blocks;
    float *row = g->scratch + (Py_ssize_t)slot * g->wd;
    for (Py_ssize_t p = p0; p < p1; p++)
        max_plane(g, g->x + p * g->h * g->wd, g->out + p * g->oh * g->ow, row);
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

/* maxpool2d_f32(x, out, geometry, ways): x (planes, H, W), out (planes, OH, OW),
 * float32 C-contiguous; geometry = (kh, kw, sh, sw, dh, dw, pad_top, pad_left). */
PyObject *native_maxpool2d_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *oo, *geom;
    int ways;
    if (!PyArg_ParseTuple(args, "OOO!i", &ox, &oo, &PyTuple_Type, &geom, &ways))
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
    ways = native_ways(ways);
    Py_ssize_t bytes;
    if (o->shape[0] != g.planes || !pool_geometry_ok(&g) ||
        !native_mul3(ways, g.wd > 0 ? g.wd : 1, (Py_ssize_t)sizeof(float), &bytes)) {
        PyErr_SetString(PyExc_ValueError, "maxpool2d_f32: the shapes and geometry do not agree");
        goto done;
    }
    g.blocks = g.planes < ways ? (g.planes > 0 ? g.planes : 1) : ways;
    pool_interior(&g);
    g.x = (const float *)x->buf, g.out = (float *)o->buf;
    g.scratch = PyMem_RawMalloc((size_t)bytes);
    if (g.scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    native_pool_run(pool_block, &g, g.planes > 0 ? g.blocks : 0, ways);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(g.scratch);
    ok = 1;
done:
    return native_finish(&bs, ok);
}
