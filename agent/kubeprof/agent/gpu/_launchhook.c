/* The per-launch hot path of the GPU tracer, in C: CUPTI's callback subscriber and its
 * activity buffers.
 *
 * Through cupti-python every traced API call runs a Python callback, four per PyTorch launch
 * (runtime enter/exit, the nested driver enter/exit), each taking the GIL and building
 * Python objects, and every activity record becomes a Python object converted field by
 * field. Here the exits and nested driver calls cost a thread-local read, and a launch one
 * GIL acquisition plus a walk of its frames: the whole chain of (code object, last
 * instruction) pairs, up to StackTable's max_depth, is the key of a call-site table (read
 * from the interpreter frames in place on 3.11+, see raw_frames(), else through frame
 * objects). That key
 * is exact (the same pairs give the same lines), so there is nothing to revalidate; only a
 * new site calls back into Python (StackTable.walk). Launches from threads without Python
 * frames (autograd's engine, XLA's runtime threads) call the Python `slow` path, which owns
 * the backward and main-thread fallbacks. Launch, autograd and activity rows are packed as
 * int64 in C, in the wire's layout (wire.SCHEMAS), and the sender takes them as bytes
 * (take()). The semantics are launch_stacks.py's pure-Python callback and activity.py's
 * converter; those are used whenever this module is absent.
 *
 * libcupti is not linked: its three callback functions are looked up in the copy that
 * cupti-python already loaded (dlopen RTLD_NOLOAD), so one libcupti serves both, and
 * cupti-python keeps the activity API. Nothing here may raise into the workload: errors are
 * counted (stats()["errors"]) and cleared.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifdef Py_LIMITED_API
/* One build for every CPython >= 3.10: the stable ABI (`_launchhook.abi3.so`, built with
 * Py_LIMITED_API=0x030A0000 by scripts/build_launchhook.sh). The two frame accessors of the
 * key are exported by every CPython since 3.9 / 3.11 but are not in the limited API, so they
 * are declared here; PyFrame_GetLasti is weak: on 3.10 the line number keys the frame
 * instead (as exact for the key: the same lines give the same stack). */
PyAPI_FUNC(PyFrameObject *) PyFrame_GetBack(PyFrameObject *frame);
extern int PyFrame_GetLasti(PyFrameObject *frame) __attribute__((weak));
static inline int frame_pos(PyFrameObject *f) {
    return PyFrame_GetLasti ? PyFrame_GetLasti(f) : PyFrame_GetLineNumber(f);
}
#define PyObject_CallOneArg(fn, arg) PyObject_CallFunctionObjArgs((fn), (arg), NULL)
#ifndef Py_XSETREF
#define Py_XSETREF(op, op2)                                                                   \
    do {                                                                                      \
        PyObject *old_ = (PyObject *)(op);                                                    \
        (op) = (op2);                                                                         \
        Py_XDECREF(old_);                                                                     \
    } while (0)
#endif
#else
#define frame_pos PyFrame_GetLasti
#endif
#if !defined(Py_LIMITED_API) && PY_VERSION_HEX < 0x030B0000
/* 3.10: PyFrame_Type and PyFrame_GetBack are declared in frameobject.h, and there is no
 * PyFrame_GetLasti; f_lasti serves the same purpose here (a per-line part of the key). */
#include <frameobject.h>
static inline int PyFrame_GetLasti(PyFrameObject *f) { return f->f_lasti; }
#endif
#include <dlfcn.h>
#if defined(__GLIBC__) && defined(__x86_64__)
/* Bind to the dl* symbols every glibc since 2.2.5 has (libdl's before 2.34, libc's compat
 * ones since), not to 2.34's: built on Debian 12, the hook still loads in pods of older
 * distributions (scripts/build_launchhook.sh links libdl.so.2 for those). */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#endif
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the CUPTI ABI we use (cupti_callbacks.h; stable since CUDA 4) ---- */
typedef int CUptiResult;
typedef void *CUpti_SubscriberHandle;
typedef struct {
    int callbackSite; /* CUPTI_API_ENTER = 0, CUPTI_API_EXIT = 1 */
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CbData;
typedef void (*CbFunc)(void *, int, uint32_t, const void *);
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2, SITE_ENTER = 0 };

static CUptiResult (*p_subscribe)(CUpti_SubscriberHandle *, CbFunc, void *);
static CUptiResult (*p_unsubscribe)(CUpti_SubscriberHandle);
static CUptiResult (*p_enable)(uint32_t, CUpti_SubscriberHandle, int, uint32_t);

#define MAX_CBID 4096
#define MAX_KEY 256 /* frames: StackTable's max_depth, so a key covers what a walk records */
#define NONE_SEQ (-1)

/* ---- packed rows, one growable int64 array per record kind (wire.SCHEMAS order) ---- */
enum { R_KERNEL, R_MEMCPY, R_MEMSET, R_SYNC, R_MARKER, R_AUTOGRAD, R_LAUNCH, R_KINDS };
static const char *ROW_NAMES[R_KINDS] = {"kernel", "memcpy", "memset", "sync",
                                         "marker", "autograd", "launch"};
static const int ROW_WIDTH[R_KINDS] = {17, 9, 6, 6, 5, 4, 6};
typedef struct {
    int64_t *data;
    size_t n, cap; /* rows */
} Rows;
static Rows g_rows[R_KINDS]; /* guarded by the GIL */

/* ---- state: written with the GIL held (or before subscribing) ---- */
static CUpti_SubscriberHandle g_sub;
static volatile int g_on;
static Py_ssize_t g_max_queued = 1000000;
static PyObject *g_walk, *g_slow, *g_intern, *g_resolve;
static uint64_t (*g_peek)(void);
static int g_peek_state; /* 0 unresolved, 1 resolved, -1 unavailable / not wanted */
static unsigned char g_alias[MAX_CBID];
static int64_t g_api[3][MAX_CBID];
static uint32_t (*g_cbids)[2];
static Py_ssize_t g_ncbids;
static uint64_t s_hits, s_walks, s_dropped, s_errors, s_slow, s_launches, s_records;
static uint64_t s_cupti_dropped;

/* ---- per thread: the runtime call a driver callback is nested in ---- */
static __thread int tl_in_rt;
static __thread int64_t tl_sid, tl_api, tl_seq;
static __thread int tl_has_peek;
static __thread uint64_t tl_last_peek;
static __thread int64_t tl_os_tid; /* gettid(), once per thread (0: not read yet) */

/* A launch's time: host CLOCK_MONOTONIC ns, the clock CPU samples and (after the receiver
 * adds the offset) kernel records are in. clock_gettime goes through the vDSO: no syscall. */
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The kernel's id of this thread (what CPU samples carry): one syscall per thread. */
static int64_t os_tid(void) {
    if (tl_os_tid == 0)
        tl_os_tid = (int64_t)syscall(SYS_gettid);
    return tl_os_tid;
}

/* A forked child's thread inherits its parent's cached id: read it again there. */
static void os_tid_forget(void) { tl_os_tid = 0; }

/* ---- call-site table: open addressing, keys of (code, lasti) pairs ---- */
typedef struct {
    uint64_t hash; /* 0 = empty */
    int n;
    int64_t sid;
    uintptr_t *key;
} Site;
static Site *g_sites;
static size_t g_cap, g_used;

static Site *site_find(uint64_t h, const uintptr_t *key, int n) {
    size_t mask = g_cap - 1, i = (size_t)h & mask;
    for (;;) {
        Site *s = &g_sites[i];
        if (s->hash == 0)
            return s;
        if (s->hash == h && s->n == n && memcmp(s->key, key, n * sizeof(uintptr_t)) == 0)
            return s;
        i = (i + 1) & mask;
    }
}

static int sites_grow(void) {
    size_t old_cap = g_cap, cap = old_cap ? old_cap * 2 : 1024;
    Site *old = g_sites, *fresh = PyMem_Calloc(cap, sizeof(Site));
    if (fresh == NULL)
        return -1;
    g_sites = fresh;
    g_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].hash)
            *site_find(old[i].hash, old[i].key, old[i].n) = old[i];
    PyMem_Free(old);
    return 0;
}

static void sites_clear(void);

/* Room for one more row of `kind`; NULL (and counted) past max_queued or out of memory. */
static int64_t *row(int kind) {
    Rows *r = &g_rows[kind];
    if ((Py_ssize_t)r->n >= g_max_queued) {
        s_dropped++;
        return NULL;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        int64_t *d = PyMem_Realloc(r->data, cap * ROW_WIDTH[kind] * sizeof(int64_t));
        if (d == NULL) {
            s_dropped++;
            return NULL;
        }
        r->data = d;
        r->cap = cap;
    }
    return r->data + (r->n++) * ROW_WIDTH[kind];
}

/* One row of `kind`, its ROW_WIDTH values. */
static void put_row(int kind, const int64_t *values) {
    int64_t *p = row(kind);
    if (p != NULL)
        memcpy(p, values, ROW_WIDTH[kind] * sizeof(int64_t));
}

static void put4(int kind, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t v[4] = {a, b, c, d};
    put_row(kind, v);
}

/* A launch row (wire.SCHEMAS["launch"]): correlation id, stack, api, Python thread ident,
 * entry time, kernel thread id. */
static void put_launch(uint32_t corr, int64_t sid, int64_t api, int64_t tid, int64_t t) {
    const int64_t v[6] = {corr, sid, api, tid, t, os_tid()};
    put_row(R_LAUNCH, v);
}

static void count_error(void) {
    s_errors++;
    PyErr_Clear();
}

/* The integer a Python callback returned (`r`, a new reference or NULL), into `out`;
 * consumes `r`. 0, or on an error (counted and cleared: the workload never sees it) -1
 * when the call raised and -2 when it returned no int64. */
static int take_int(PyObject *r, int64_t *out) {
    if (r == NULL) {
        count_error();
        return -1;
    }
    *out = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (*out == -1 && PyErr_Occurred()) {
        count_error();
        return -2;
    }
    return 0;
}

static int64_t walk(PyFrameObject *f) {
    int64_t sid;
    s_walks++;
    return take_int(PyObject_CallOneArg(g_walk, (PyObject *)f), &sid) < 0 ? 0 : sid;
}

/* ---- interpreter frames read in place (3.11+), instead of materialised frame objects ----
 * PyFrame_GetBack() creates a frame object for every frame it steps to that has none yet, and
 * a module call's frames (`_wrapped_call_impl`, `_call_impl`, `forward`) are new at nearly
 * every launch of a decode step: ~40 ns each, against ~9 ns for a frame that has one. With the
 * offsets of cpython_layout (the table the BPF unwinder uses, checked against each
 * interpreter), the key is read from the thread's _PyInterpreterFrame chain as it lies: the
 * same (code, instruction) pairs, so still exact. raw_frames() switches it on only after the
 * chain it reads equals the frame objects' chain on the calling thread. */
typedef struct {
    Py_ssize_t tstate_frame, cframe_frame, code, previous, instr, owner;
    int cstack; /* owner value of the C entry's shim frames (3.12+), skipped */
} FrameOffsets;
static FrameOffsets g_fo;
static int g_raw; /* 1: keys from the interpreter frames in place */

#define RAW_PTR(p, off) (*(const char *const *)((const char *)(p) + (off)))
#define MAX_HOPS (4 * MAX_KEY) /* a bound on a chain that should end (shims included) */

/* The thread's innermost interpreter frame that is not a C entry's shim, or NULL. */
static const char *raw_skip(const char *p, int *hops) {
    while (p != NULL && g_fo.owner >= 0 &&
           *(const unsigned char *)(p + g_fo.owner) == (unsigned char)g_fo.cstack) {
        if (++*hops > MAX_HOPS)
            return NULL;
        p = RAW_PTR(p, g_fo.previous);
    }
    return p;
}

static const char *raw_top(PyThreadState *ts, int *hops) {
    const char *p = RAW_PTR(ts, g_fo.tstate_frame);
    if (p != NULL && g_fo.cframe_frame >= 0)
        p = RAW_PTR(p, g_fo.cframe_frame);
    return raw_skip(p, hops);
}

/* The key of the stack from `top` (raw_top's) outwards into `key`; its length. */
static int key_raw(const char *top, int hops, uintptr_t *key, uint64_t *hash) {
    int n = 0;
    uint64_t h = *hash;
    const char *p = top;
    for (int d = 0; d < MAX_KEY && p != NULL; d++) {
        key[n] = (uintptr_t)RAW_PTR(p, g_fo.code);
        key[n + 1] = (uintptr_t)RAW_PTR(p, g_fo.instr);
        h = (h ^ key[n]) * 1099511628211ULL;
        h = (h ^ key[n + 1]) * 1099511628211ULL;
        n += 2;
        if (++hops > MAX_HOPS)
            break;
        p = raw_skip(RAW_PTR(p, g_fo.previous), &hops);
    }
    *hash = h;
    return n;
}

/* The key of the stack ending at frame object `f` (borrowed), through the frame API. */
static int key_api(PyFrameObject *f, uintptr_t *key, uint64_t *hash) {
    int n = 0;
    uint64_t h = *hash;
    PyFrameObject *cur = f;
    Py_INCREF(cur);
    for (int d = 0; d < MAX_KEY && cur != NULL; d++) {
        PyCodeObject *co = PyFrame_GetCode(cur);
        key[n] = (uintptr_t)co;
        key[n + 1] = (uintptr_t)frame_pos(cur);
        Py_DECREF(co);
        h = (h ^ key[n]) * 1099511628211ULL;
        h = (h ^ key[n + 1]) * 1099511628211ULL;
        n += 2;
        PyFrameObject *back = PyFrame_GetBack(cur);
        Py_DECREF(cur);
        cur = back;
    }
    Py_XDECREF(cur);
    *hash = h;
    return n;
}

/* StackTable.walk of this thread's stack (`f`: its innermost frame object, borrowed, or
 * NULL to take it here: the raw keys' misses). */
static int64_t walk_here(PyFrameObject *f) {
    if (f != NULL)
        return walk(f);
    PyFrameObject *own = PyThreadState_GetFrame(PyThreadState_Get());
    if (own == NULL)
        return 0;
    int64_t sid = walk(own);
    Py_DECREF(own);
    return sid;
}

/* Stack id of a key (`n` words, `h` its hash); a miss walks the stack (walk_here(f)). */
static int64_t site_lookup(uintptr_t *key, int n, uint64_t h, PyFrameObject *f) {
    if (h == 0)
        h = 1;
    if (g_used * 2 >= g_cap && sites_grow() < 0)
        return walk_here(f);
    Site *s = site_find(h, key, n);
    if (s->hash == 0) {
        /* the walk runs Python (a finalizer may even launch and re-enter here, reusing
         * `key` and growing the table): keep our own copy, find the slot again after */
        uintptr_t *copy = PyMem_Malloc(n * sizeof(uintptr_t));
        if (copy == NULL)
            return walk_here(f);
        memcpy(copy, key, n * sizeof(uintptr_t));
        int64_t sid = walk_here(f);
        if (g_sites == NULL || (g_used * 2 >= g_cap && sites_grow() < 0)) {
            PyMem_Free(copy);
            return sid;
        }
        s = site_find(h, copy, n);
        if (s->hash != 0) { /* inserted meanwhile by a re-entrant launch */
            PyMem_Free(copy);
            return sid;
        }
        s->hash = h;
        s->n = n;
        s->key = copy;
        s->sid = sid;
        g_used++;
        return sid;
    }
    s_hits++;
    return s->sid;
}

static uintptr_t g_key[2 * MAX_KEY]; /* GIL held */
#define FNV_BASIS 1469598103934665603ULL

/* Stack id for the stack ending at `f` (borrowed), keyed through the frame API. */
static int64_t site_sid(PyFrameObject *f) {
    uint64_t h = FNV_BASIS;
    int n = key_api(f, g_key, &h);
    return site_lookup(g_key, n, h, f);
}

/* Stack id for the stack from interpreter frame `top` (raw_top's), keyed in place. */
static int64_t site_sid_raw(const char *top, int hops) {
    uint64_t h = FNV_BASIS;
    int n = key_raw(top, hops, g_key, &h);
    return site_lookup(g_key, n, h, NULL);
}

/* Stack id of thread `ts`'s Python stack, keyed in place or through the frame API as
 * raw_frames() set; 0 and *frameless = 1 when the thread has no Python frames. */
static int64_t here_sid(PyThreadState *ts, int *frameless) {
    if (g_raw) {
        int hops = 0;
        const char *top = raw_top(ts, &hops);
        if (top == NULL) {
            *frameless = 1;
            return 0;
        }
        return site_sid_raw(top, hops);
    }
    PyFrameObject *f = PyThreadState_GetFrame(ts);
    if (f == NULL) {
        *frameless = 1;
        return 0;
    }
    int64_t sid = site_sid(f);
    Py_DECREF(f);
    return sid;
}

static int64_t api_id(int domain, uint32_t cbid, const char *name) {
    int64_t *slot = (domain >= 0 && domain < 3 && cbid < MAX_CBID) ? &g_api[domain][cbid] : NULL;
    if (slot != NULL && *slot >= 0)
        return *slot;
    PyObject *text = name ? PyUnicode_FromString(name) : PyUnicode_FromFormat("%u", cbid);
    if (text == NULL) {
        count_error();
        return 0;
    }
    int64_t id;
    PyObject *r = PyObject_CallOneArg(g_intern, text);
    Py_DECREF(text);
    if (take_int(r, &id) < 0)
        return 0; /* the slot stays unset: the next call asks again */
    if (slot != NULL)
        *slot = id;
    return id;
}

static void forward_seq(uint32_t corr, int64_t tid) {
    if (g_peek_state == 0) { /* until torch is imported: ask Python to resolve the read */
        int64_t addr;
        int got = take_int(PyObject_CallNoArgs(g_resolve), &addr);
        if (got == -2)
            g_peek_state = -1; /* an answer that is no address: give up on the read */
        if (got < 0)
            return; /* a raise: ask again at the next launch */
        if (addr > 0) {
            g_peek = (uint64_t (*)(void))(uintptr_t)addr;
            g_peek_state = 1;
        } else if (addr < 0) {
            g_peek_state = -1;
        }
        if (g_peek_state != 1)
            return;
    }
    uint64_t peek = g_peek();
    if (!tl_has_peek || tl_last_peek != peek) {
        tl_has_peek = 1;
        tl_last_peek = peek;
        put4(R_AUTOGRAD, corr, (int64_t)peek, tid, 0);
    }
}

/* A launch from a thread without Python frames: the Python fallbacks (`slow`). */
static void launch_slow(int domain, uint32_t cbid, const CbData *d, int64_t t) {
    s_slow++;
    PyObject *r = PyObject_CallFunction(g_slow, "iIIsLL", domain, cbid, d->correlationId,
                                        d->functionName ? d->functionName : "",
                                        (long long)t, (long long)os_tid());
    long long sid = 0, api = 0, seq = NONE_SEQ;
    if (r == NULL || !PyArg_ParseTuple(r, "LLL", &sid, &api, &seq))
        count_error();
    Py_XDECREF(r);
    if (domain == DOMAIN_RUNTIME) {
        tl_in_rt = 1;
        tl_sid = sid;
        tl_api = api;
        tl_seq = seq;
    }
}

/* An API call that may start GPU work, not nested in a runtime call, entered at `t`; GIL
 * held. */
static void launch(int domain, uint32_t cbid, const CbData *d, int64_t t) {
    uint32_t corr = d->correlationId;
    int frameless = 0;
    s_launches++;
    int64_t sid = here_sid(PyThreadState_Get(), &frameless);
    if (frameless) { /* no Python frames on this thread */
        launch_slow(domain, cbid, d, t);
        return;
    }
    int64_t tid = (int64_t)PyThread_get_thread_ident();
    if (g_peek_state >= 0)
        forward_seq(corr, tid);
    int64_t api = api_id(domain, cbid, d->functionName);
    if (domain == DOMAIN_RUNTIME) {
        tl_in_rt = 1;
        tl_sid = sid;
        tl_api = api;
        tl_seq = NONE_SEQ;
    }
    put_launch(corr, sid, api, tid, t);
}

static void on_api(void *ud, int domain, uint32_t cbid, const void *p) {
    const CbData *d = p;
    (void)ud;
    if (!g_on)
        return;
    if (domain == DOMAIN_RUNTIME) {
        if (d->callbackSite != SITE_ENTER) {
            tl_in_rt = 0;
            return;
        }
    } else if (d->callbackSite != SITE_ENTER) {
        return;
    } else if (tl_in_rt) { /* nested in a runtime call: its stack, under an alias id */
        if (cbid >= MAX_CBID || !g_alias[cbid])
            return;
        if (!Py_IsInitialized())
            return;
        int64_t t = now_ns(); /* before the GIL: waiting for it is not the call's time */
        PyGILState_STATE g = PyGILState_Ensure();
        if (g_on) {
            int64_t tid = (int64_t)PyThread_get_thread_ident();
            if (tl_seq != NONE_SEQ)
                put4(R_AUTOGRAD, d->correlationId, tl_seq, tid, 1);
            put_launch(d->correlationId, tl_sid, tl_api, tid, t);
        }
        PyGILState_Release(g);
        return;
    }
    if (!Py_IsInitialized())
        return;
    int64_t t = now_ns();
    PyGILState_STATE g = PyGILState_Ensure();
    if (g_on)
        launch(domain, cbid, d, t);
    PyGILState_Release(g);
}

/* ---- activity buffers: CUPTI records -> packed rows ---- */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire is little-endian int64; packed rows are copied as they lie in memory"
#endif
typedef void (*BufRequested)(uint8_t **, size_t *, size_t *);
typedef void (*BufCompleted)(void *, uint32_t, uint8_t *, size_t, size_t);
static CUptiResult (*p_act_register)(BufRequested, BufCompleted);
static CUptiResult (*p_act_next)(uint8_t *, size_t, void **);
static CUptiResult (*p_act_dropped)(void *, uint32_t, size_t *);

/* Field offsets, identical in CUpti_ActivityKernel9..13, Memcpy5..7, Memset4..5,
 * Synchronization(2), Marker2 (cupti_activity.h of CUDA 12.x-13.4; the records' later
 * versions only append fields). */
#define AT(r, o, T) ((int64_t) * (const T *)((const char *)(r) + (o)))
#define U8(r, o) AT(r, o, uint8_t)
#define U16(r, o) AT(r, o, uint16_t)
#define U32(r, o) AT(r, o, uint32_t)
#define I32(r, o) AT(r, o, int32_t)
#define U64(r, o) AT(r, o, uint64_t)
#define PTR(r, o) (*(const char *const *)((const char *)(r) + (o)))
enum {
    KIND_MEMCPY = 1,
    KIND_MEMSET = 2,
    KIND_KERNEL = 3,
    KIND_CONCURRENT_KERNEL = 10,
    KIND_MARKER = 12,
    KIND_SYNCHRONIZATION = 38
};

/* Kernel and marker names -> string ids (sender.intern), cached by pointer and checked
 * against a copy: CUPTI keeps a function's name at one address, but that is not promised. */
typedef struct {
    const char *ptr;
    char *copy;
    int64_t id;
} Name;
static Name g_names[4096];

static int64_t name_id(const char *p) {
    if (p == NULL)
        return 0;
    Name *n = &g_names[((uintptr_t)p >> 3) & 4095];
    if (n->ptr == p && n->copy != NULL && strcmp(n->copy, p) == 0)
        return n->id;
    int64_t id = 0;
    PyObject *text = PyUnicode_DecodeUTF8(p, (Py_ssize_t)strlen(p), "replace");
    PyObject *r = text ? PyObject_CallOneArg(g_intern, text) : NULL;
    Py_XDECREF(text);
    if (r == NULL || ((id = PyLong_AsLongLong(r)) == -1 && PyErr_Occurred())) {
        Py_XDECREF(r);
        count_error();
        return 0;
    }
    Py_DECREF(r);
    char *copy = PyMem_Malloc(strlen(p) + 1);
    if (copy != NULL) {
        strcpy(copy, p);
        PyMem_Free(n->copy);
        n->ptr = p;
        n->copy = copy;
        n->id = id;
    }
    return id;
}

static void convert(const void *r) {
    int64_t *p;
    s_records++;
    /* one case per CUPTI record kind, each reading that kind's offsets: alike in shape only */
    switch (*(const int32_t *)r) {
    case KIND_KERNEL:
    case KIND_CONCURRENT_KERNEL: {
        /* the name first: interning runs Python, which may let another thread append rows
         * (and move them) before we write into ours */
        int64_t name = name_id(PTR(r, 104));
        if ((p = row(R_KERNEL)) == NULL)
            return;
        p[0] = U64(r, 16), p[1] = U64(r, 24), p[2] = U32(r, 40), p[3] = U32(r, 92);
        p[4] = U32(r, 48), p[5] = I32(r, 52), p[6] = I32(r, 56), p[7] = I32(r, 60);
        p[8] = I32(r, 64), p[9] = I32(r, 68), p[10] = I32(r, 72), p[11] = U16(r, 6);
        p[12] = I32(r, 76), p[13] = I32(r, 80), p[14] = U32(r, 156), p[15] = U32(r, 44);
        p[16] = name;
        return;
    }
    case KIND_MEMCPY:
        if ((p = row(R_MEMCPY)) == NULL)
            return;
        p[0] = U64(r, 16), p[1] = U64(r, 24), p[2] = U32(r, 32), p[3] = U32(r, 44);
        p[4] = U32(r, 40), p[5] = U64(r, 8), p[6] = U8(r, 4), p[7] = U8(r, 5), p[8] = U8(r, 6);
        return;
    case KIND_MEMSET:
        if ((p = row(R_MEMSET)) == NULL)
            return;
        p[0] = U64(r, 16), p[1] = U64(r, 24), p[2] = U32(r, 32), p[3] = U32(r, 44);
        p[4] = U32(r, 40), p[5] = U64(r, 8);
        return;
    case KIND_SYNCHRONIZATION:
        if ((p = row(R_SYNC)) == NULL)
            return;
        p[0] = U64(r, 8), p[1] = U64(r, 16), p[2] = U32(r, 28), p[3] = U32(r, 24);
        p[4] = U32(r, 32), p[5] = I32(r, 4);
        return;
    case KIND_MARKER: {
        int64_t name = name_id(PTR(r, 40));
        if ((p = row(R_MARKER)) == NULL)
            return;
        p[0] = U64(r, 8), p[1] = U32(r, 16), p[2] = I32(r, 4), p[3] = name, p[4] = U32(r, 28);
        return;
    }
    default:
        return;
    }
}

static void buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void buf_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size,
                          size_t valid) {
    (void)size;
    if (valid > 0 && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure(); /* once per buffer, not per record */
        void *rec = NULL;
        while (p_act_next(buffer, valid, &rec) == 0)
            convert(rec);
        size_t dropped = 0;
        if (p_act_dropped != NULL && p_act_dropped(ctx, stream, &dropped) == 0)
            s_cupti_dropped += dropped;
        PyGILState_Release(g);
    }
    free(buffer);
}

/* ---- module functions ---- */
static void *g_lib;

static void *sym(const char *name) {
    void *p = dlsym(g_lib, name);
    if (p == NULL)
        PyErr_Format(PyExc_OSError, "%s not found in libcupti", name);
    return p;
}

static void rows_clear(void) {
    for (int k = 0; k < R_KINDS; k++) {
        PyMem_Free(g_rows[k].data);
        g_rows[k].data = NULL;
        g_rows[k].n = g_rows[k].cap = 0;
    }
}

static PyObject *install(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"libcupti", "cbids", "alias", "walk", "slow", "intern",
                            "resolve_peek", "max_queued", NULL};
    const char *path;
    PyObject *cbids, *alias, *walk_fn, *slow, *intern, *resolve;
    Py_ssize_t max_queued;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOOOOOn", names, &path, &cbids, &alias,
                                     &walk_fn, &slow, &intern, &resolve, &max_queued))
        return NULL;
    if (g_sub != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "already installed");
        return NULL;
    }
    if (g_lib == NULL && (g_lib = dlopen(path, RTLD_NOLOAD | RTLD_LAZY)) == NULL)
        return PyErr_Format(PyExc_OSError, "libcupti is not loaded: %s", dlerror());
    static int at_fork;
    if (!at_fork && pthread_atfork(NULL, NULL, os_tid_forget) == 0)
        at_fork = 1;
    if (!(p_subscribe = sym("cuptiSubscribe")) || !(p_unsubscribe = sym("cuptiUnsubscribe")) ||
        !(p_enable = sym("cuptiEnableCallback")))
        return NULL;
    PyObject *seq = PySequence_Fast(cbids, "cbids must be a sequence of (domain, cbid)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Size(seq);
    uint32_t (*ids)[2] = PyMem_Calloc(n > 0 ? n : 1, sizeof *ids);
    for (Py_ssize_t i = 0; ids != NULL && i < n; i++) {
        unsigned int dom, cb;
        PyObject *pair = PySequence_GetItem(seq, i);
        if (pair == NULL || !PyArg_ParseTuple(pair, "II", &dom, &cb)) {
            Py_XDECREF(pair);
            PyMem_Free(ids);
            Py_DECREF(seq);
            return NULL;
        }
        Py_DECREF(pair);
        ids[i][0] = dom;
        ids[i][1] = cb;
    }
    Py_DECREF(seq);
    if (ids == NULL)
        return PyErr_NoMemory();
    memset(g_alias, 0, sizeof g_alias);
    PyObject *it = PyObject_GetIter(alias);
    if (it == NULL) {
        PyMem_Free(ids);
        return NULL;
    }
    for (PyObject *x; (x = PyIter_Next(it)) != NULL; Py_DECREF(x)) {
        long v = PyLong_AsLong(x);
        if (v >= 0 && v < MAX_CBID)
            g_alias[v] = 1;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        PyMem_Free(ids);
        return NULL;
    }
    CUpti_SubscriberHandle sub = NULL;
    CUptiResult rc = p_subscribe(&sub, on_api, NULL);
    if (rc != 0) {
        PyMem_Free(ids);
        return PyLong_FromLong(rc);
    }
    g_sub = sub;
    g_cbids = ids;
    g_ncbids = n;
    Py_INCREF(walk_fn);
    g_walk = walk_fn;
    Py_INCREF(slow);
    g_slow = slow;
    Py_INCREF(intern);
    Py_XSETREF(g_intern, intern); /* kept after uninstall: late activity buffers intern */
    Py_INCREF(resolve);
    g_resolve = resolve;
    g_peek_state = resolve == Py_None ? -1 : 0;
    g_peek = NULL;
    s_hits = s_walks = s_dropped = s_errors = s_slow = s_launches = s_records = 0;
    s_cupti_dropped = 0;
    sites_clear(); /* ids of another StackTable's stacks must not leak into this one */
    g_raw = 0;     /* until raw_frames() checks the offsets on this interpreter */
    rows_clear();  /* nor rows left from a tracer whose sender is gone */
    for (int k = 0; k < 4096; k++) {
        PyMem_Free(g_names[k].copy);
        g_names[k].ptr = NULL;
        g_names[k].copy = NULL;
    }
    g_max_queued = max_queued;
    for (int dd = 0; dd < 3; dd++)
        for (int c = 0; c < MAX_CBID; c++)
            g_api[dd][c] = -1;
    return PyLong_FromLong(0);
}

static PyObject *activity(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (g_lib == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "install() first");
        return NULL;
    }
    if (!(p_act_register = sym("cuptiActivityRegisterCallbacks")) ||
        !(p_act_next = sym("cuptiActivityGetNextRecord")))
        return NULL;
    p_act_dropped = dlsym(g_lib, "cuptiActivityGetNumDroppedRecords");
    return PyLong_FromLong(p_act_register(buf_requested, buf_completed));
}

static PyObject *take(PyObject *self, PyObject *args) {
    const char *kind;
    Py_ssize_t max_rows;
    (void)self;
    if (!PyArg_ParseTuple(args, "sn", &kind, &max_rows))
        return NULL;
    for (int k = 0; k < R_KINDS; k++) {
        if (strcmp(kind, ROW_NAMES[k]) != 0)
            continue;
        Rows *r = &g_rows[k];
        size_t n = r->n < (size_t)(max_rows < 0 ? 0 : max_rows) ? r->n : (size_t)max_rows;
        size_t width = ROW_WIDTH[k] * sizeof(int64_t);
        PyObject *b = PyBytes_FromStringAndSize((const char *)r->data, (Py_ssize_t)(n * width));
        if (b == NULL)
            return NULL;
        if (n < r->n)
            memmove(r->data, (char *)r->data + n * width, (r->n - n) * width);
        r->n -= n;
        return Py_BuildValue("(Nn)", b, (Py_ssize_t)n);
    }
    return Py_BuildValue("(yn)", "", (Py_ssize_t)0);
}

static PyObject *enable(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    if (g_sub == NULL)
        return PyList_New(0);
    PyObject *failed = PyList_New(0);
    if (failed == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < g_ncbids; i++) {
        if (p_enable(on ? 1 : 0, g_sub, (int)g_cbids[i][0], g_cbids[i][1]) != 0) {
            PyObject *t = Py_BuildValue("(II)", g_cbids[i][0], g_cbids[i][1]);
            if (t == NULL || PyList_Append(failed, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(failed);
                return NULL;
            }
            Py_DECREF(t);
        }
    }
    g_on = on;
    return failed;
}

static PyObject *uninstall(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    g_on = 0;
    if (g_sub != NULL) {
        p_unsubscribe(g_sub);
        g_sub = NULL;
    }
    PyMem_Free(g_cbids);
    g_cbids = NULL;
    g_ncbids = 0;
    Py_CLEAR(g_walk);
    Py_CLEAR(g_slow);
    Py_CLEAR(g_resolve);
    sites_clear();
    Py_RETURN_NONE; /* rows stay until taken: the sender's final drain comes after this */
}

static void sites_clear(void) {
    for (size_t i = 0; i < g_cap; i++)
        PyMem_Free(g_sites[i].key);
    PyMem_Free(g_sites);
    g_sites = NULL;
    g_cap = g_used = 0;
}

static PyObject *reset(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    sites_clear();
    Py_RETURN_NONE;
}

static PyObject *quiet(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    g_on = 0; /* a forked child: no CUPTI call, just stop recording */
    rows_clear();
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsnss}", "hits", s_hits, "walks", s_walks,
                         "dropped", s_dropped, "errors", s_errors, "slow", s_slow, "launches",
                         s_launches, "records", s_records, "cupti_dropped", s_cupti_dropped,
                         "sites", (Py_ssize_t)g_used, "frames", g_raw ? "raw" : "api");
}

/* For tests without a GPU: the stack id `frame` gets through the call-site table. */
static PyObject *site_for(PyObject *self, PyObject *args) {
    PyObject *frame, *walk_fn;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &frame, &walk_fn))
        return NULL;
    PyFrameObject *here = PyEval_GetFrame(); /* the caller's: frame's type, limited API */
    if (here == NULL || !PyObject_TypeCheck(frame, Py_TYPE((PyObject *)here))) {
        PyErr_SetString(PyExc_TypeError, "site_for() needs a frame");
        return NULL;
    }
    PyObject *saved = g_walk;
    g_walk = walk_fn;
    uint64_t errors = s_errors;
    int64_t sid = site_sid((PyFrameObject *)frame);
    g_walk = saved;
    if (s_errors != errors)
        return PyErr_Format(PyExc_RuntimeError, "walk failed");
    return PyLong_FromLongLong(sid);
}

/* Whether the interpreter frames of the calling thread, read in place with `offsets`, are
 * the frames its frame objects show: same code objects, same order, same length. */
static int raw_agrees(void) {
    PyThreadState *ts = PyThreadState_Get();
    int hops = 0;
    const char *p = raw_top(ts, &hops);
    PyFrameObject *f = PyThreadState_GetFrame(ts);
    int frames = 0, ok = f != NULL;
    while (ok && f != NULL && p != NULL) {
        PyCodeObject *co = PyFrame_GetCode(f);
        ok = (const char *)co == RAW_PTR(p, g_fo.code);
        Py_DECREF(co);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
        frames++;
        if (++hops > MAX_HOPS) {
            ok = 0;
            break;
        }
        p = raw_skip(RAW_PTR(p, g_fo.previous), &hops);
    }
    ok = ok && f == NULL && p == NULL && frames > 0;
    Py_XDECREF(f);
    return ok;
}

/* raw_frames(offsets or None) -> bool: key call sites from the interpreter frames in place
 * (offsets: tstate frame, cframe's current frame or -1, frame code, previous, instruction,
 * owner or -1, the C entry's owner value), once they agree with the frame objects on this
 * thread; None, or offsets that disagree: through the frame API. */
static PyObject *raw_frames(PyObject *self, PyObject *arg) {
    (void)self;
    g_raw = 0;
    if (arg != Py_None) {
        FrameOffsets fo;
        if (!PyArg_ParseTuple(arg, "nnnnnni", &fo.tstate_frame, &fo.cframe_frame, &fo.code,
                              &fo.previous, &fo.instr, &fo.owner, &fo.cstack))
            return NULL;
        if (fo.tstate_frame < 0 || fo.code < 0 || fo.previous < 0 || fo.instr < 0) {
            PyErr_SetString(PyExc_ValueError, "frame offsets must be >= 0");
            return NULL;
        }
        g_fo = fo;
        g_raw = raw_agrees();
    }
    /* the table keeps its sites: a key read in place (instruction addresses) never equals
     * one read through the frame API (instruction offsets), so both kinds can share it */
    return PyBool_FromLong(g_raw);
}

/* For tests without a GPU: the stack id of the caller's stack, keyed as launches are. */
static PyObject *site_here(PyObject *self, PyObject *walk_fn) {
    (void)self;
    PyObject *saved = g_walk;
    g_walk = walk_fn;
    uint64_t errors = s_errors;
    int frameless = 0;
    int64_t sid = here_sid(PyThreadState_Get(), &frameless);
    g_walk = saved;
    if (s_errors != errors)
        return PyErr_Format(PyExc_RuntimeError, "walk failed");
    return PyLong_FromLongLong(sid);
}

/* For tests without a GPU: feed one activity record (bytes laid out as CUPTI's). */
static PyObject *convert_record(PyObject *self, PyObject *args) {
    const char *buf;
    Py_ssize_t len;
    PyObject *intern;
    (void)self;
    if (!PyArg_ParseTuple(args, "y#O", &buf, &len, &intern))
        return NULL;
    PyObject *saved = g_intern;
    g_intern = intern;
    uint64_t errors = s_errors;
    if (len >= 8)
        convert(buf);
    g_intern = saved;
    if (s_errors != errors)
        return PyErr_Format(PyExc_RuntimeError, "intern failed");
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_VARARGS | METH_KEYWORDS,
     "Subscribe to CUPTI callbacks; returns the CUptiResult (0 = subscribed)."},
    {"activity", activity, METH_NOARGS,
     "Take CUPTI's activity buffers (records -> packed rows); returns the CUptiResult."},
    {"take", take, METH_VARARGS, "take(kind, max_rows) -> (packed int64 rows, count)."},
    {"enable", enable, METH_O, "Enable (True) or disable the callbacks; returns failed ids."},
    {"uninstall", uninstall, METH_NOARGS, "Unsubscribe; rows not yet taken stay."},
    {"stats", stats, METH_NOARGS, "Counters of the hot path."},
    {"site_for", site_for, METH_VARARGS, "Call-site table lookup for a frame (tests)."},
    {"site_here", site_here, METH_O, "Call-site table lookup for the caller's stack (tests)."},
    {"raw_frames", raw_frames, METH_O,
     "Key call sites from interpreter frames read in place (offsets) or not (None)."},
    {"convert_record", convert_record, METH_VARARGS, "Convert one record's bytes (tests)."},
    {"reset", reset, METH_NOARGS, "Forget every call site (tests)."},
    {"quiet", quiet, METH_NOARGS, "Stop recording without calling CUPTI (after fork)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_launchhook", "CUPTI launch callbacks in C.", -1, methods,
    NULL,                  NULL,          NULL,                           NULL};

/* WIRE_VERSION: the wire.SCHEMAS version of the rows packed here (launch rows with their
 * time since 2); the tracer refuses a build whose version is not its own. */
PyMODINIT_FUNC PyInit__launchhook(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "WIRE_VERSION", 2) < 0)
        Py_CLEAR(m);
    return m;
}
