/* The helpers every compiled kernel file calls (declared in _native.h): taking Python
 * buffers as checked float32 arrays and releasing them, and running independent
 * slices of one call on a few threads. The module table is _native.c's.
 */
#include "_native.h"

#include <pthread.h>
#include <stdatomic.h>
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

/* ------------------------------------------------------------- parallel --
 * Fork-join, nothing kept between calls: threads started for this call take slices
 * from a shared counter beside the caller and are joined before it returns; no
 * thread waits or spins between calls, so the only threads that outlive a kernel
 * are BLAS's own (docs/kernels.md: one owner of the cores). Starting a thread costs
 * tens of microseconds: for work of a millisecond or more (a bidirectional LSTM's
 * two directions), not for small kernels. */
typedef struct {
    native_slice_fn fn;
    void *arg;
    Py_ssize_t n;
    atomic_long next;
} Slices;

typedef struct {
    Slices *job;
    int slot;
} Taker;

static void take_slices(Slices *job, int slot)
{
    for (;;) {
        const long i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n)
            return;
        job->fn(job->arg, i, slot);
    }
}

static void *taker_main(void *p)
{
    Taker *t = (Taker *)p;
    take_slices(t->job, t->slot);
    return NULL;
}

void native_parallel_for(native_slice_fn fn, void *arg, Py_ssize_t n, int ways)
{
    ways = native_ways(ways);
    if (ways > n)
        ways = (int)(n > 0 ? n : 1);
    Slices job = {fn, arg, n, 0};
    pthread_t threads[NATIVE_MAX_WAYS];
    Taker takers[NATIVE_MAX_WAYS];
    int started = 0;
    for (int s = 1; s < ways; s++) {
        takers[started] = (Taker){&job, s};
        if (pthread_create(&threads[started], NULL, taker_main, &takers[started]) != 0)
            break;  /* fewer threads: the caller takes the slices nobody else does */
        started++;
    }
    take_slices(&job, 0);
    for (int s = 0; s < started; s++)
        pthread_join(threads[s], NULL);
}
