/* A small pool of C threads for large GEMMs and convolutions, the GIL released.
 *
 * Why not the Python helpers of engine/blas.py: a helper must hold the GIL to run
 * its slice's Python code, and taking the GIL from a thread that is releasing it
 * costs a futex wake-up: measured on a 2-vCPU machine, a spinning helper started
 * its half of a 0.46 ms matmul 48 us late (median; 100 us at p99), and the split
 * gained 1.27x. Here a job's slices are C functions: the caller posts a job and
 * works on it, the workers (spinning for SPIN seconds after each job, then
 * sleeping on a condition variable) take slices from an atomic counter.
 *
 * The GEMMs are the process's own BLAS (numpy's OpenBLAS), called through the
 * CBLAS function native.py finds in it and hands over with set_sgemm(); BLAS runs
 * one thread per call (engine/blas.py), the cores are ours to share out.
 *
 * The jobs that run on it: GEMM (here), Conv and MaxPool (_native_conv.c), the
 * LSTM's directions (_native.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "_native.h"

/* ------------------------------------------------------------------ BLAS -- */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                           int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_fn)(int, int, int, int, int, int, float, const float *, int,
                           const float *, int, float, float *, int);
static void *sgemm_ptr = NULL;
static int sgemm_ilp64 = 0;

/* C (m x n, row stride ldc) = A (m x k) B (k x n) + beta C; ta / tb: the operand is
 * stored transposed (A as k x m with row stride lda). */
void native_sgemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, const float *a,
                  Py_ssize_t lda, const float *b, Py_ssize_t ldb, float beta, float *c,
                  Py_ssize_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    const int oa = ta ? TRANS : NO_TRANS, ob = tb ? TRANS : NO_TRANS;
    if (sgemm_ilp64)
        ((sgemm64_fn)sgemm_ptr)(ROW_MAJOR, oa, ob, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    else
        ((sgemm32_fn)sgemm_ptr)(ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                                (int)ldb, beta, c, (int)ldc);
}

int native_have_sgemm(void)
{
    return sgemm_ptr != NULL;
}

int native_sgemm_fits(const char *what, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, Py_ssize_t lda,
                      Py_ssize_t ldb, Py_ssize_t ldc)
{
    const Py_ssize_t v[6] = {m, n, k, lda, ldb, ldc};
    for (int i = 0; i < 6; i++) {
        if (v[i] < 0 || (!sgemm_ilp64 && v[i] > INT_MAX)) {
            PyErr_Format(PyExc_ValueError, "%s: a GEMM size %zd that this BLAS cannot take", what,
                         v[i]);
            return 0;
        }
    }
    return 1;
}

PyObject *native_set_sgemm(PyObject *self, PyObject *args)
{
    unsigned long long address;
    int ilp64;
    if (!PyArg_ParseTuple(args, "Kp", &address, &ilp64))
        return NULL;
    sgemm_ptr = (void *)(uintptr_t)address;
    sgemm_ilp64 = ilp64;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ pool -- */
/* fn(arg, i, slot): slot is 0 on the caller and 1..helpers on the workers that joined,
 * so a slice can use a per-thread scratch buffer the caller allocated. */
typedef native_slice_fn slice_fn;
typedef struct {
    slice_fn fn;
    void *arg;
    Py_ssize_t n;
    int helpers;        /* workers allowed to join (ways - 1) */
    atomic_long next;   /* next slice to take */
    atomic_int joined;  /* workers that asked to join */
    atomic_int active;  /* workers inside the job: the caller waits for 0 before returning */
    atomic_long done;   /* slices finished */
} Job;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t submit_mu = PTHREAD_MUTEX_INITIALIZER;  /* one pool job at a time */
static Job *pool_job = NULL;       /* guarded by pool_mu */
static atomic_long pool_seq;       /* bumped when a job is posted (read while spinning) */
static int pool_workers = 0;       /* started (guarded by pool_mu) */
static double pool_spin = 0.002;   /* seconds a worker spins for the next job */
static atomic_long stat_jobs, stat_worker_slices;  /* for tests and benchmarks */


static void run_slices(Job *job, int slot)
{
    for (;;) {
        const long i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n)
            return;
        job->fn(job->arg, i, slot);
        if (slot > 0)
            atomic_fetch_add(&stat_worker_slices, 1);
        atomic_fetch_add(&job->done, 1);
    }
}

static void *worker_main(void *unused)
{
    (void)unused;
    long seen = atomic_load(&pool_seq);
    for (;;) {
        const double end = native_now() + pool_spin;
        while (atomic_load(&pool_seq) == seen) {
            for (int k = 0; k < 128 && atomic_load(&pool_seq) == seen; k++)
                NATIVE_RELAX();
            if (native_now() >= end)
                break;
        }
        pthread_mutex_lock(&pool_mu);
        while (atomic_load(&pool_seq) == seen)
            pthread_cond_wait(&pool_cv, &pool_mu);
        seen = atomic_load(&pool_seq);
        Job *job = pool_job;
        int slot = 0;
        if (job != NULL && (slot = atomic_fetch_add(&job->joined, 1) + 1) <= job->helpers)
            atomic_fetch_add(&job->active, 1);
        else
            job = NULL;
        pthread_mutex_unlock(&pool_mu);
        if (job != NULL) {
            run_slices(job, slot);
            atomic_fetch_sub(&job->active, 1);
        }
    }
    return NULL;
}

static void pool_after_fork(void)
{
    /* the child has none of the workers: start afresh */
    pthread_mutex_init(&pool_mu, NULL);
    pthread_cond_init(&pool_cv, NULL);
    pthread_mutex_init(&submit_mu, NULL);
    pool_job = NULL;
    pool_workers = 0;
}

static void ensure_workers(int n)
{
    static int fork_hook = 0;
    pthread_mutex_lock(&pool_mu);
    if (!fork_hook) {
        pthread_atfork(NULL, NULL, pool_after_fork);
        fork_hook = 1;
    }
    while (pool_workers < n) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (failed)
            break;  /* fewer workers: the caller takes the slices nobody else does */
        pool_workers++;
    }
    pthread_mutex_unlock(&pool_mu);
}

/* fn(arg, i) for i < n on this thread and up to ways - 1 workers; returns when all
 * are done. Called without the GIL. Another pool job in progress (a second engine
 * worker): this one runs on its caller alone. */
void native_pool_run(slice_fn fn, void *arg, Py_ssize_t n, int ways)
{
    if (ways > n)
        ways = n > NATIVE_MAX_WAYS ? NATIVE_MAX_WAYS : (int)n;  /* no more helpers than slices */
    if (ways <= 1 || n <= 1 || pthread_mutex_trylock(&submit_mu) != 0) {
        for (Py_ssize_t i = 0; i < n; i++)
            fn(arg, i, 0);
        return;
    }
    ensure_workers(ways - 1);
    Job job;
    job.fn = fn;
    job.arg = arg;
    job.n = n;
    job.helpers = ways - 1;
    atomic_init(&job.next, 0);
    atomic_init(&job.joined, 0);
    atomic_init(&job.active, 0);
    atomic_init(&job.done, 0);
    atomic_fetch_add(&stat_jobs, 1);
    pthread_mutex_lock(&pool_mu);
    pool_job = &job;
    atomic_fetch_add(&pool_seq, 1);
    pthread_cond_broadcast(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
    run_slices(&job, 0);
    while (atomic_load(&job.done) < n)
        NATIVE_RELAX();
    pthread_mutex_lock(&pool_mu);
    pool_job = NULL;  /* late workers find nothing */
    pthread_mutex_unlock(&pool_mu);
    while (atomic_load(&job.active) > 0)  /* a worker may still be between slices */
        NATIVE_RELAX();
    pthread_mutex_unlock(&submit_mu);
}

PyObject *native_pool_stats(PyObject *self, PyObject *args)
{
    return Py_BuildValue("(ll)", atomic_load(&stat_jobs), atomic_load(&stat_worker_slices));
}

PyObject *native_set_pool_spin(PyObject *self, PyObject *args)
{
    double seconds;
    if (!PyArg_ParseTuple(args, "d", &seconds))
        return NULL;
    pool_spin = seconds < 0 ? 0 : seconds;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ GEMM -- */
/* A 2-D float32 operand as BLAS sees it: its first element, whether it is stored
 * transposed, and its leading dimension. */
typedef struct {
    const float *p;
    int trans;
    Py_ssize_t ld;
} Operand;

static int operand(Py_buffer *v, Operand *op, const char *name)
{
    const Py_ssize_t s0 = v->strides[0], s1 = v->strides[1];
    if (s1 == 4 && s0 % 4 == 0 && s0 / 4 >= (v->shape[1] > 1 ? v->shape[1] : 1)) {
        *op = (Operand){(const float *)v->buf, 0, s0 / 4};
        return 0;
    }
    if (s0 == 4 && s1 % 4 == 0 && s1 / 4 >= (v->shape[0] > 1 ? v->shape[0] : 1)) {
        *op = (Operand){(const float *)v->buf, 1, s1 / 4};
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s: no unit stride (BLAS cannot read it in place)", name);
    return -1;
}

typedef struct {
    Operand a, b;
    float *c;
    Py_ssize_t m, n, k, ldc, parts;
    int by_cols;
} GemmArgs;

static void gemm_slice(void *arg, Py_ssize_t i, int slot)
{
    (void)slot;
    const GemmArgs *g = (const GemmArgs *)arg;
    if (g->by_cols) {  /* a block of output columns: columns of b */
        Py_ssize_t c0 = g->n * i / g->parts, c1 = g->n * (i + 1) / g->parts;
        const float *b = g->b.p + (g->b.trans ? c0 * g->b.ld : c0);
        native_sgemm(g->a.trans, g->b.trans, g->m, c1 - c0, g->k, g->a.p, g->a.ld, b, g->b.ld, 0.0f,
              g->c + c0, g->ldc);
    } else {           /* a block of output rows: rows of a */
        Py_ssize_t r0 = g->m * i / g->parts, r1 = g->m * (i + 1) / g->parts;
        const float *a = g->a.p + (g->a.trans ? r0 : r0 * g->a.ld);
        native_sgemm(g->a.trans, g->b.trans, r1 - r0, g->n, g->k, a, g->a.ld, g->b.p, g->b.ld, 0.0f,
              g->c + r0 * g->ldc, g->ldc);
    }
}

/* gemm_f32(a, b, out, ways): out = a @ b for 2-D float32 arrays (a and b may be
 * transposed views; out C-contiguous), cut over `ways` threads. */
PyObject *native_gemm_f32(PyObject *self, PyObject *args)
{
    PyObject *oa, *ob, *oc;
    int ways;
    if (!PyArg_ParseTuple(args, "OOOi", &oa, &ob, &oc, &ways))
        return NULL;
    if (sgemm_ptr == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gemm_f32: no BLAS (set_sgemm was not called)");
        return NULL;
    }
    NativeBuffers bs = {.held = 0};
    Py_buffer *a, *b, *c;
    GemmArgs g;
    int bad = !(a = native_take(&bs, oa, 0, NATIVE_STRIDED, 2, "a")) ||
              !(b = native_take(&bs, ob, 0, NATIVE_STRIDED, 2, "b")) ||
              !(c = native_take(&bs, oc, 1, NATIVE_C, 2, "out")) ||
              operand(a, &g.a, "a") < 0 || operand(b, &g.b, "b") < 0;
    if (!bad && (a->shape[1] != b->shape[0] || c->shape[0] != a->shape[0] ||
                 c->shape[1] != b->shape[1])) {
        PyErr_SetString(PyExc_ValueError, "gemm_f32: shapes (m, k) @ (k, n) -> C-contiguous (m, n)");
        bad = 1;
    }
    if (!bad && !native_sgemm_fits("gemm_f32", a->shape[0], b->shape[1], a->shape[1], g.a.ld,
                                   g.b.ld, c->shape[1]))
        bad = 1;
    if (!bad) {
        ways = native_ways(ways);
        g.c = (float *)c->buf;
        g.m = a->shape[0];
        g.k = a->shape[1];
        g.n = b->shape[1];
        g.ldc = g.n;
        g.by_cols = g.n >= g.m;
        const Py_ssize_t span = g.by_cols ? g.n : g.m;
        g.parts = ways < 1 ? 1 : (ways > span ? span : ways);
        Py_BEGIN_ALLOW_THREADS
        native_pool_run(gemm_slice, &g, g.parts, ways);
        Py_END_ALLOW_THREADS
    }
    return native_finish(&bs, !bad);
}

