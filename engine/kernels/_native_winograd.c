/* Conv 3x3, stride 1, no dilation, one group, as Winograd's F(2x2, 3x3) (Lavin and Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2015): each 4x4 input tile d becomes
 * V = B^T d B, the products are 16 GEMMs (M x C)(C x tiles) that numpy's matmul gives to BLAS
 * (engine/kernels/winograd.py), and each output tile is Y = A^T m A, 2x2 outputs. A tile's
 * outputs take 16 products a channel instead of 36: the GEMMs' work is 2.25x less than the
 * columns' GEMM of im2col. The two transforms are here, one pass each.
 *
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * Layouts: v and m are (16, channels, N * th * tw), tile (n, ty, tx) at n*th*tw + ty*tw + tx,
 * element (i, j) of a tile in plane 4i + j. Every entry point re-checks its geometry against
 * its buffers (the numbers come from an untrusted model) and raises instead of indexing. */
#include "_native.h"

#include <string.h>

/* One image's channel: its zero-padded plane (hp x wp) transformed tile by tile, B^T d along
 * whole rows first (rows holds 4 x wp floats), then d B per tile: a few streams a loop, each
 * vectorised (one loop of 16 scattered streams spilled registers: 3x slower). */
CLONES static void input_tiles(const float *plane, Py_ssize_t wp, Py_ssize_t th, Py_ssize_t tw,
                               float *v, Py_ssize_t stride, float *rows)
{
    float *q0 = rows, *q1 = rows + wp, *q2 = rows + 2 * wp, *q3 = rows + 3 * wp;
    for (Py_ssize_t ty = 0; ty < th; ty++) {
        const float *r0 = plane + 2 * ty * wp, *r1 = r0 + wp, *r2 = r1 + wp, *r3 = r2 + wp;
#pragma omp simd
        for (Py_ssize_t x = 0; x < wp; x++) {
            q0[x] = r0[x] - r2[x];
            q1[x] = r1[x] + r2[x];
            q2[x] = r2[x] - r1[x];
            q3[x] = r1[x] - r3[x];
        }
        float *o = v + ty * tw;
        const float *q[4] = {q0, q1, q2, q3};
        for (int i = 0; i < 4; i++) {
            const float *t = q[i];
            float *o0 = o + (4 * i) * stride, *o1 = o0 + stride, *o2 = o1 + stride, *o3 = o2 + stride;
#pragma omp simd
            for (Py_ssize_t tx = 0; tx < tw; tx++) {
                const float a = t[2 * tx], b = t[2 * tx + 1], c = t[2 * tx + 2], d = t[2 * tx + 3];
                o0[tx] = a - c;
                o1[tx] = b + c;
                o2[tx] = c - b;
                o3[tx] = b - d;
            }
        }
    }
}

/* winograd_input_f32(x, v, geometry): x (N, C, H, W) float32, v (16, C, N*th*tw);
 * geometry = (pad_top, pad_left, th, tw): the input at (pad_top, pad_left) of a zero plane of
 * (2 th + 2) x (2 tw + 2), which must hold it. */
PyObject *native_winograd_input_f32(PyObject *self, PyObject *args)
{
    PyObject *ox, *ov;
    Py_ssize_t pt, pl, th, tw;
    if (!PyArg_ParseTuple(args, "OO(nnnn)", &ox, &ov, &pt, &pl, &th, &tw))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *x, *v;
    float *plane = NULL;
    int ok = 0;
    if (!(x = native_take(&bs, ox, 0, NATIVE_C, 4, "x")) || !(v = native_take(&bs, ov, 1, NATIVE_C, 3, "v")))
        goto done;
    const Py_ssize_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    Py_ssize_t hp, wp, tiles, per_image, bytes;
    if (!native_extent(pt, 0) || !native_extent(pl, 0) || !native_extent(th, 1) || !native_extent(tw, 1) ||
        !native_mul(th, 2, &hp) || !native_mul(tw, 2, &wp) || (hp += 2) < pt + h || (wp += 2) < pl + w ||
        !native_mul(th, tw, &per_image) || !native_mul(n, per_image, &tiles) ||
        v->shape[0] != 16 || v->shape[1] != c || v->shape[2] != tiles ||
        !native_mul3(hp + 4, wp, (Py_ssize_t)sizeof(float), &bytes)) {  /* the plane, then 4 rows */
        PyErr_SetString(PyExc_ValueError, "winograd_input_f32: the shapes and geometry do not agree");
        goto done;
    }
    plane = PyMem_RawMalloc((size_t)bytes);
    if (plane == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const float *xs = (const float *)x->buf;
    float *vs = (float *)v->buf;
    const Py_ssize_t stride = c * tiles;  /* from one tile element's plane to the next */
    Py_BEGIN_ALLOW_THREADS
    memset(plane, 0, (size_t)bytes);  /* the pads stay zero: each copy writes the same cells */
    for (Py_ssize_t img = 0; img < n; img++)
        for (Py_ssize_t ch = 0; ch < c; ch++) {
            const float *src = xs + (img * c + ch) * h * w;
            for (Py_ssize_t y = 0; y < h; y++)
                memcpy(plane + (pt + y) * wp + pl, src + y * w, (size_t)w * sizeof(float));
            input_tiles(plane, wp, th, tw, vs + ch * tiles + img * per_image, stride, plane + hp * wp);
        }
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    PyMem_RawFree(plane);
    return native_finish(&bs, ok);
}

/* One output channel of one image: A^T m along each tile row's 16 planes first (sums holds
 * 8 x tw floats), then (A^T m) A into the two output rows, the outputs past (oh, ow) dropped. */
CLONES static void output_tiles(const float *m, Py_ssize_t stride, Py_ssize_t th, Py_ssize_t tw,
                                float *y, Py_ssize_t oh, Py_ssize_t ow, float *sums)
{
    const Py_ssize_t full = ow / 2;  /* tiles whose two columns both lie inside */
    for (Py_ssize_t ty = 0; ty < th; ty++) {
        const float *t = m + ty * tw;
        for (int j = 0; j < 4; j++) {
            const float *a = t + j * stride, *b = t + (4 + j) * stride, *c = t + (8 + j) * stride,
                        *d = t + (12 + j) * stride;
            float *s0 = sums + j * tw, *s1 = sums + (4 + j) * tw;
#pragma omp simd
            for (Py_ssize_t tx = 0; tx < tw; tx++) {
                s0[tx] = a[tx] + b[tx] + c[tx];
                s1[tx] = b[tx] - c[tx] - d[tx];
            }
        }
        for (int r = 0; r < 2 && 2 * ty + r < oh; r++) {
            const float *s0 = sums + 4 * r * tw, *s1 = s0 + tw, *s2 = s1 + tw, *s3 = s2 + tw;
            float *row = y + (2 * ty + r) * ow;
#pragma omp simd
            for (Py_ssize_t tx = 0; tx < full; tx++) {
                row[2 * tx] = s0[tx] + s1[tx] + s2[tx];
                row[2 * tx + 1] = s1[tx] - s2[tx] - s3[tx];
            }
            if (full < tw)  /* an odd width: the last tile's first column */
                row[2 * full] = s0[full] + s1[full] + s2[full];
        }
    }
}

/* winograd_output_f32(m, y): m (16, M, N*th*tw) float32, y (N, M, OH, OW) with th and tw
 * the tiles that cover it: ceil(OH / 2) and ceil(OW / 2). */
PyObject *native_winograd_output_f32(PyObject *self, PyObject *args)
{
    PyObject *om, *oy;
    if (!PyArg_ParseTuple(args, "OO", &om, &oy))
        return NULL;
    NativeBuffers bs = {.held = 0};
    Py_buffer *m, *y;
    int ok = 0;
    if (!(m = native_take(&bs, om, 0, NATIVE_C, 3, "m")) || !(y = native_take(&bs, oy, 1, NATIVE_C, 4, "y")))
        goto done;
    const Py_ssize_t n = y->shape[0], mo = y->shape[1], oh = y->shape[2], ow = y->shape[3];
    const Py_ssize_t th = native_ceil_div(oh, 2), tw = native_ceil_div(ow, 2);
    Py_ssize_t per_image, tiles;
    if (oh < 1 || ow < 1 || !native_mul(th, tw, &per_image) || !native_mul(n, per_image, &tiles) ||
        m->shape[0] != 16 || m->shape[1] != mo || m->shape[2] != tiles) {
        PyErr_SetString(PyExc_ValueError, "winograd_output_f32: the shapes do not agree");
        goto done;
    }
    float *sums = PyMem_RawMalloc((size_t)tw * 8 * sizeof(float));  /* tw <= OW: no overflow */
    if (sums == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const float *ms = (const float *)m->buf;
    float *ys = (float *)y->buf;
    const Py_ssize_t stride = mo * tiles;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t img = 0; img < n; img++)
        for (Py_ssize_t k = 0; k < mo; k++)
            output_tiles(ms + k * tiles + img * per_image, stride, th, tw, ys + (img * mo + k) * oh * ow, oh, ow,
                         sums);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(sums);
    ok = 1;
done:
    return native_finish(&bs, ok);
}
