/* The helpers every compiled kernel file calls (declared in _native.h): taking Python
 * buffers as checked float32 arrays and releasing them, and running independent
 * slices of one call on a few threads. The module table is _native.c's.
 */
#include "_native.h"

#include <string.h>

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
