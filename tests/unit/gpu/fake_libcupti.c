/* A stand-in libcupti for testing the C launch hook without a GPU: it holds the one
 * subscriber and lets a test fire API callbacks the way CUPTI does at a launch. */
#include <stdint.h>
#include <stddef.h>
#include <pthread.h>

typedef struct {
    int callbackSite;
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

static CbFunc cb;
static void *ud;
static int subscribed;
static unsigned char enabled[8][4096];

int cuptiSubscribe(void **sub, CbFunc f, void *userdata) {
    if (subscribed)
        return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
    subscribed = 1;
    cb = f;
    ud = userdata;
    *sub = (void *)&cb;
    return 0;
}

int cuptiUnsubscribe(void *sub) {
    (void)sub;
    subscribed = 0;
    cb = NULL;
    return 0;
}

int cuptiEnableCallback(uint32_t on, void *sub, int domain, uint32_t cbid) {
    (void)sub;
    if (domain < 0 || domain >= 8 || cbid >= 4096 || (domain == 2 && cbid == 311))
        return 1; /* cudaGraphLaunch: an id "this libcupti" does not know (as fake_cupti) */
    enabled[domain][cbid] = (unsigned char)on;
    return 0;
}

/* One callback, as CUPTI makes it on the calling thread. */
void fake_api(int domain, uint32_t cbid, int site, uint32_t corr, const char *name) {
    CbData d = {0};
    d.callbackSite = site;
    d.functionName = name;
    d.correlationId = corr;
    if (cb != NULL && enabled[domain][cbid])
        cb(ud, domain, cbid, &d);
}

typedef struct {
    int domain;
    uint32_t cbid;
    int site;
    uint32_t corr;
    const char *name;
} Args;

static void *native(void *p) {
    Args *a = p;
    fake_api(a->domain, a->cbid, a->site, a->corr, a->name);
    return NULL;
}

/* The same callback from a new native thread (no Python frames), as autograd's engine. */
int fake_api_native(int domain, uint32_t cbid, int site, uint32_t corr, const char *name) {
    Args a = {domain, cbid, site, corr, name};
    pthread_t t;
    if (pthread_create(&t, NULL, native, &a) != 0)
        return -1;
    return pthread_join(t, NULL);
}

/* Activity buffers: records appended as the real library lays them out, handed over on
 * flush through the registered callbacks (the hook allocates and frees the buffer). */
typedef void (*BufRequested)(uint8_t **, size_t *, size_t *);
typedef void (*BufCompleted)(void *, uint32_t, uint8_t *, size_t, size_t);
static BufRequested requested;
static BufCompleted completed;
static uint8_t *buf;
static size_t buf_size, used;

int cuptiActivityRegisterCallbacks(BufRequested r, BufCompleted c) {
    requested = r;
    completed = c;
    return 0;
}

static size_t record_size(int kind) {
    switch (kind) {
    case 3:
    case 10:
        return 248; /* CUpti_ActivityKernel13 */
    case 1:
        return 112; /* Memcpy7 */
    case 2:
        return 104; /* Memset5 */
    default:
        return 56; /* Synchronization2, Marker2 */
    }
}

int cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **rec) {
    uint8_t *next = *rec == NULL ? buffer : (uint8_t *)*rec + record_size(*(int *)*rec);
    if (next >= buffer + valid)
        return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
    *rec = next;
    return 0;
}

int fake_record(const void *bytes, size_t n) {
    if (buf == NULL) {
        size_t max = 0;
        if (requested == NULL)
            return -1;
        requested(&buf, &buf_size, &max);
        used = 0;
    }
    if (used + n > buf_size)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[used + i] = ((const uint8_t *)bytes)[i];
    used += n;
    return 0;
}

void fake_flush(void) {
    if (buf != NULL && completed != NULL) {
        uint8_t *b = buf;
        buf = NULL;
        completed(NULL, 0, b, buf_size, used);
    }
}
