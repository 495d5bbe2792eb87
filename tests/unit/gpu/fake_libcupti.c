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
