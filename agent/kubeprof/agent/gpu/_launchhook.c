/* The per-launch hot path of the GPU tracer, in C: CUPTI's callback subscriber.
 *
 * Through cupti-python every traced API call runs a Python callback, four per PyTorch launch
 * (runtime enter/exit, the nested driver enter/exit), each taking the GIL and building
 * Python objects: about 9 us a launch on the H200. Here the exits and nested driver calls
 * cost a thread-local read, and a launch costs one GIL acquisition plus a walk of the
 * innermost `key_depth` frames (code object + last instruction), looked up in a call-site
 * table; only a new site, a revalidation (every `revalidate_every`-th hit) or a site seen with
 * two stacks calls back into Python (StackTable.walk). Launches from threads without Python
 * frames (autograd's engine, XLA's runtime threads) call the Python `slow` path, which owns
 * the backward and main-thread fallbacks. The semantics are tracer.py's pure-Python callback;
 * that one is used whenever this module is absent.
 *
 * libcupti is not linked: its three callback functions are looked up in the copy that
 * cupti-python already loaded (dlopen RTLD_NOLOAD), so one libcupti serves both, and
 * cupti-python keeps the activity API. Nothing here may raise into the workload: errors are
 * counted (stats()["errors"]) and cleared.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

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
#define MAX_KEY 16
#define AMBIGUOUS (-1)
#define NONE_SEQ (-1)

/* ---- state: written with the GIL held (or before subscribing) ---- */
static CUpti_SubscriberHandle g_sub;
static volatile int g_on;
static int g_key_depth = 8;
static uint32_t g_revalidate = 64;
static Py_ssize_t g_max_queued = 1000000;
static PyObject *g_queue, *g_queue_append, *g_aqueue_append;
static PyObject *g_walk, *g_slow, *g_intern, *g_resolve;
static uint64_t (*g_peek)(void);
static int g_peek_state; /* 0 unresolved, 1 resolved, -1 unavailable / not wanted */
static unsigned char g_alias[MAX_CBID];
static int64_t g_api[3][MAX_CBID];
static uint32_t (*g_cbids)[2];
static Py_ssize_t g_ncbids;
static uint64_t s_hits, s_walks, s_reval, s_ambiguous, s_dropped, s_errors, s_slow, s_launches;

/* ---- per thread: the runtime call a driver callback is nested in ---- */
static __thread int tl_in_rt;
static __thread int64_t tl_sid, tl_api, tl_seq;
static __thread int tl_has_peek;
static __thread uint64_t tl_last_peek;

/* ---- call-site table: open addressing, keys of (code, lasti) pairs ---- */
typedef struct {
    uint64_t hash; /* 0 = empty */
    int n;
    int64_t sid;
    uint32_t hits;
    uintptr_t key[2 * MAX_KEY];
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

static void count_error(void) {
    s_errors++;
    PyErr_Clear();
}

static int64_t walk(PyFrameObject *f) {
    PyObject *r = PyObject_CallOneArg(g_walk, (PyObject *)f);
    s_walks++;
    if (r == NULL) {
        count_error();
        return 0;
    }
    int64_t sid = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (sid == -1 && PyErr_Occurred()) {
        count_error();
        return 0;
    }
    return sid;
}

/* Stack id for the stack ending at `f` (borrowed). */
static int64_t site_sid(PyFrameObject *f) {
    uintptr_t key[2 * MAX_KEY];
    int n = 0;
    uint64_t h = 1469598103934665603ULL;
    PyFrameObject *cur = f;
    Py_INCREF(cur);
    for (int d = 0; d < g_key_depth && cur != NULL; d++) {
        PyCodeObject *co = PyFrame_GetCode(cur);
        key[n] = (uintptr_t)co;
        key[n + 1] = (uintptr_t)PyFrame_GetLasti(cur);
        Py_DECREF(co);
        h = (h ^ key[n]) * 1099511628211ULL;
        h = (h ^ key[n + 1]) * 1099511628211ULL;
        n += 2;
        PyFrameObject *back = PyFrame_GetBack(cur);
        Py_DECREF(cur);
        cur = back;
    }
    Py_XDECREF(cur);
    if (h == 0)
        h = 1;
    if (g_used * 2 >= g_cap && sites_grow() < 0)
        return walk(f);
    Site *s = site_find(h, key, n);
    if (s->hash == 0) {
        int64_t sid = walk(f);
        s->hash = h;
        s->n = n;
        memcpy(s->key, key, n * sizeof(uintptr_t));
        s->sid = sid;
        s->hits = 0;
        g_used++;
        return sid;
    }
    if (s->sid == AMBIGUOUS)
        return walk(f);
    if (++s->hits % g_revalidate == 0) {
        s_reval++;
        int64_t fresh = walk(f);
        if (fresh != s->sid) {
            s->sid = AMBIGUOUS;
            s_ambiguous++;
        }
        return fresh;
    }
    s_hits++;
    return s->sid;
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
    PyObject *r = PyObject_CallOneArg(g_intern, text);
    Py_DECREF(text);
    if (r == NULL) {
        count_error();
        return 0;
    }
    int64_t id = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (id == -1 && PyErr_Occurred()) {
        count_error();
        return 0;
    }
    if (slot != NULL)
        *slot = id;
    return id;
}

static void append4(PyObject *append, int64_t a, int64_t b, int64_t c, int64_t d) {
    PyObject *t = Py_BuildValue("(LLLL)", (long long)a, (long long)b, (long long)c, (long long)d);
    if (t == NULL) {
        count_error();
        return;
    }
    PyObject *r = PyObject_CallOneArg(append, t);
    Py_DECREF(t);
    if (r == NULL)
        count_error();
    else
        Py_DECREF(r);
}

static int queue_full(void) {
    Py_ssize_t n = PyObject_Size(g_queue);
    if (n < 0) {
        count_error();
        return 1;
    }
    return n >= g_max_queued;
}

static void forward_seq(uint32_t corr, int64_t tid) {
    if (g_peek_state == 0) { /* until torch is imported: ask Python to resolve the read */
        PyObject *r = PyObject_CallNoArgs(g_resolve);
        if (r == NULL) {
            count_error();
            return;
        }
        long long addr = PyLong_AsLongLong(r);
        Py_DECREF(r);
        if (addr == -1 && PyErr_Occurred()) {
            count_error();
            g_peek_state = -1;
            return;
        }
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
        append4(g_aqueue_append, corr, (int64_t)peek, tid, 0);
    }
}

/* An API call that may start GPU work, not nested in a runtime call; GIL held. */
static void launch(int domain, uint32_t cbid, const CbData *d) {
    uint32_t corr = d->correlationId;
    int64_t tid = (int64_t)PyThread_get_thread_ident();
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    s_launches++;
    if (f == NULL) { /* no Python frames on this thread: the Python fallbacks */
        s_slow++;
        PyObject *r = PyObject_CallFunction(g_slow, "iIIs", domain, cbid, corr,
                                            d->functionName ? d->functionName : "");
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
        return;
    }
    int64_t sid = site_sid(f);
    Py_DECREF(f);
    if (g_peek_state >= 0)
        forward_seq(corr, tid);
    int64_t api = api_id(domain, cbid, d->functionName);
    if (domain == DOMAIN_RUNTIME) {
        tl_in_rt = 1;
        tl_sid = sid;
        tl_api = api;
        tl_seq = NONE_SEQ;
    }
    if (queue_full()) {
        s_dropped++;
        return;
    }
    append4(g_queue_append, corr, sid, api, tid);
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
        PyGILState_STATE g = PyGILState_Ensure();
        if (g_on && !queue_full()) {
            int64_t tid = (int64_t)PyThread_get_thread_ident();
            if (tl_seq != NONE_SEQ)
                append4(g_aqueue_append, d->correlationId, tl_seq, tid, 1);
            append4(g_queue_append, d->correlationId, tl_sid, tl_api, tid);
        }
        PyGILState_Release(g);
        return;
    }
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    if (g_on)
        launch(domain, cbid, d);
    PyGILState_Release(g);
}

/* ---- module functions ---- */
static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (p == NULL)
        PyErr_Format(PyExc_OSError, "%s not found in libcupti", name);
    return p;
}

static PyObject *install(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"libcupti", "cbids", "alias", "queue", "autograd_queue", "walk",
                            "slow", "intern", "resolve_peek", "key_depth", "revalidate_every",
                            "max_queued", NULL};
    const char *path;
    PyObject *cbids, *alias, *queue, *aqueue, *walk_fn, *slow, *intern, *resolve;
    int key_depth, revalidate;
    Py_ssize_t max_queued;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOOOOOOOiin", names, &path, &cbids, &alias,
                                     &queue, &aqueue, &walk_fn, &slow, &intern, &resolve,
                                     &key_depth, &revalidate, &max_queued))
        return NULL;
    if (g_sub != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "already installed");
        return NULL;
    }
    void *lib = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
    if (lib == NULL)
        return PyErr_Format(PyExc_OSError, "libcupti is not loaded: %s", dlerror());
    if (!(p_subscribe = sym(lib, "cuptiSubscribe")) ||
        !(p_unsubscribe = sym(lib, "cuptiUnsubscribe")) ||
        !(p_enable = sym(lib, "cuptiEnableCallback")))
        return NULL;
    PyObject *seq = PySequence_Fast(cbids, "cbids must be a sequence of (domain, cbid)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint32_t (*ids)[2] = PyMem_Calloc(n ? n : 1, sizeof *ids);
    for (Py_ssize_t i = 0; ids != NULL && i < n; i++) {
        unsigned int dom, cb;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "II", &dom, &cb)) {
            PyMem_Free(ids);
            Py_DECREF(seq);
            return NULL;
        }
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
    PyObject *qa = PyObject_GetAttrString(queue, "append");
    PyObject *aqa = qa ? PyObject_GetAttrString(aqueue, "append") : NULL;
    if (aqa == NULL) {
        Py_XDECREF(qa);
        PyMem_Free(ids);
        return NULL;
    }
    CUpti_SubscriberHandle sub = NULL;
    CUptiResult rc = p_subscribe(&sub, on_api, NULL);
    if (rc != 0) {
        Py_DECREF(qa);
        Py_DECREF(aqa);
        PyMem_Free(ids);
        return PyLong_FromLong(rc);
    }
    g_sub = sub;
    g_cbids = ids;
    g_ncbids = n;
    Py_INCREF(queue);
    g_queue = queue;
    g_queue_append = qa;
    g_aqueue_append = aqa;
    Py_INCREF(walk_fn);
    g_walk = walk_fn;
    Py_INCREF(slow);
    g_slow = slow;
    Py_INCREF(intern);
    g_intern = intern;
    Py_INCREF(resolve);
    g_resolve = resolve;
    g_peek_state = resolve == Py_None ? -1 : 0;
    sites_clear(); /* ids of another StackTable's stacks must not leak into this one */
    s_hits = s_walks = s_reval = s_ambiguous = s_dropped = s_errors = s_slow = s_launches = 0;
    g_peek = NULL;
    g_key_depth = key_depth < 1 ? 1 : key_depth > MAX_KEY ? MAX_KEY : key_depth;
    g_revalidate = revalidate < 1 ? 1 : (uint32_t)revalidate;
    g_max_queued = max_queued;
    for (int dd = 0; dd < 3; dd++)
        for (int c = 0; c < MAX_CBID; c++)
            g_api[dd][c] = -1;
    return PyLong_FromLong(0);
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
    Py_CLEAR(g_queue);
    Py_CLEAR(g_queue_append);
    Py_CLEAR(g_aqueue_append);
    Py_CLEAR(g_walk);
    Py_CLEAR(g_slow);
    Py_CLEAR(g_intern);
    Py_CLEAR(g_resolve);
    sites_clear();
    Py_RETURN_NONE;
}

static PyObject *quiet(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    g_on = 0; /* a forked child: no CUPTI call, just stop recording */
    Py_RETURN_NONE;
}

static void sites_clear(void) {
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

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsn}", "hits", s_hits, "walks", s_walks,
                         "revalidations", s_reval, "ambiguous_sites", s_ambiguous, "dropped",
                         s_dropped, "errors", s_errors, "slow", s_slow, "launches", s_launches,
                         "sites", (Py_ssize_t)g_used);
}

/* For tests without a GPU: the stack id `frame` gets through the call-site table. */
static PyObject *site_for(PyObject *self, PyObject *args) {
    PyObject *frame, *walk_fn;
    int key_depth, revalidate;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!Oii", &PyFrame_Type, &frame, &walk_fn, &key_depth,
                          &revalidate))
        return NULL;
    PyObject *saved = g_walk;
    g_walk = walk_fn;
    g_key_depth = key_depth < 1 ? 1 : key_depth > MAX_KEY ? MAX_KEY : key_depth;
    g_revalidate = revalidate < 1 ? 1 : (uint32_t)revalidate;
    uint64_t errors = s_errors;
    int64_t sid = site_sid((PyFrameObject *)frame);
    g_walk = saved;
    if (s_errors != errors)
        return PyErr_Format(PyExc_RuntimeError, "walk failed");
    return PyLong_FromLongLong(sid);
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_VARARGS | METH_KEYWORDS,
     "Subscribe to CUPTI callbacks; returns the CUptiResult (0 = subscribed)."},
    {"enable", enable, METH_O, "Enable (True) or disable the callbacks; returns failed ids."},
    {"uninstall", uninstall, METH_NOARGS, "Unsubscribe and drop every reference."},
    {"stats", stats, METH_NOARGS, "Counters of the hot path."},
    {"reset", reset, METH_NOARGS, "Forget every call site (tests)."},
    {"quiet", quiet, METH_NOARGS, "Stop recording without calling CUPTI (after fork)."},
    {"site_for", site_for, METH_VARARGS, "Call-site table lookup for a frame (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_launchhook", "CUPTI launch callbacks in C.", -1, methods,
    NULL,                  NULL,          NULL,                           NULL};

PyMODINIT_FUNC PyInit__launchhook(void) { return PyModule_Create(&module); }
