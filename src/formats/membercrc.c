/* membercrc.c: CRC-32 of archive members checked when tensor data is first used (membercrc.h). */
#include "membercrc.h"
#include "../core/crc32.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

enum { CRC_UNCHECKED = 0, CRC_COMPUTING = 1, CRC_OK = 2, CRC_BAD = 3 };

typedef struct crc_member {
    int         slot;
    uint64_t    off, len;
    uint32_t    want, got;
    atomic_int  state;   /* CRC_*; `got` is set before the state says CRC_OK or CRC_BAD */
    char       *name;
} crc_member;

/* The members of one file, sorted by (slot, off). */
struct tm__crcset {
    pthread_mutex_t mu;  /* with cv: threads that need a member another thread is computing */
    pthread_cond_t  cv;  /*   wait for it (members are computed at the same time, each once) */
    crc_member     *m;
    int64_t         n, cap;
};

static int before(const crc_member *a, int slot, uint64_t off) {
    return a->slot < slot || (a->slot == slot && a->off < off);
}

tm_status tm__crc_member_add(tm_file *f, int slot, uint64_t off, uint64_t len, uint32_t want,
                             const char *member, tm_err *err) {
    struct tm__crcset *cs = f->crcs;
    if (!cs) {
        if (!(cs = tm__calloc(1, sizeof *cs))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        pthread_mutex_init(&cs->mu, NULL);
        pthread_cond_init(&cs->cv, NULL);
        f->crcs = cs;
    }
    if (cs->n == cs->cap) {
        int64_t nc = cs->cap ? cs->cap * 2 : 64;
        crc_member *m = realloc(cs->m, (size_t)nc * sizeof *m);
        if (!m) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        cs->m = m;
        cs->cap = nc;
    }
    char *nm = tm__strdup(member);
    if (!nm) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* members come in archive order as a rule: the insertion is then an append */
    int64_t k = cs->n;
    while (k > 0 && !before(&cs->m[k - 1], slot, off)) {
        cs->m[k] = cs->m[k - 1];
        atomic_init(&cs->m[k].state, atomic_load(&cs->m[k - 1].state));
        k--;
    }
    crc_member *e = &cs->m[k];
    e->slot = slot;
    e->off = off;
    e->len = len;
    e->want = want;
    e->got = 0;
    e->name = nm;
    atomic_init(&e->state, CRC_UNCHECKED);
    cs->n++;
    return TM_OK;
}

/* The member holding bytes [off, off + n) of slot, or NULL. */
static crc_member *find(const struct tm__crcset *cs, int slot, uint64_t off, uint64_t n) {
    int64_t lo = 0, hi = cs->n; /* the first member not before (slot, off + 1) */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (before(&cs->m[mid], slot, off + 1)) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    crc_member *e = &cs->m[lo - 1];
    if (e->slot != slot || off < e->off || off - e->off > e->len || n > e->len - (off - e->off)) return NULL;
    return e;
}

/* The CRC-32 of bytes [off, off + len) of map m. A file mapping is read in pieces of 8 MiB, each
** piece's whole pages dropped from the process (madvise MADV_DONTNEED; they stay in the page
** cache) after it, so a check adds no resident memory: a job that reads the tensor with pread
** (src/job/srcread.c) keeps its bounded RSS, and one that reads the map faults the pages in again. */
static uint32_t member_crc(const tm__map *m, uint64_t off, uint64_t len) {
    if (m->owned != 1) return tm__crc32(0, m->base + off, len);
    const uint64_t piece = 8u << 20, page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint32_t c = 0;
    for (uint64_t a = off, end = off + len; a < end;) {
        uint64_t b = end - a > piece ? a + piece : end;
        c = tm__crc32(c, m->base + a, b - a);
        uint64_t a2 = (a + page - 1) / page * page, b2 = b / page * page; /* whole pages inside */
        if (b2 > a2) madvise((void *)(m->base + a2), (size_t)(b2 - a2), MADV_DONTNEED);
        a = b;
    }
    return c;
}

tm_status tm__crc_tensor_check(const tm_file *f, const tm_tensor *t, tm_err *err) {
    struct tm__crcset *cs = f->crcs;
    if (!cs || !t->n_bytes) return TM_OK;
    crc_member *e = find(cs, t->file_index, t->offset, t->n_bytes);
    if (!e) return TM_OK;
    int st = atomic_load_explicit(&e->state, memory_order_acquire);
    if (st < CRC_OK) {
        int expect = CRC_UNCHECKED;
        if (atomic_compare_exchange_strong(&e->state, &expect, CRC_COMPUTING)) { /* this thread computes it */
            const tm__map *m = &f->maps[e->slot];
            e->got = e->off <= m->size && e->len <= m->size - e->off ? member_crc(m, e->off, e->len) : ~e->want;
            pthread_mutex_lock(&cs->mu);
            atomic_store_explicit(&e->state, e->got == e->want ? CRC_OK : CRC_BAD, memory_order_release);
            pthread_cond_broadcast(&cs->cv);
            pthread_mutex_unlock(&cs->mu);
        } else {
            pthread_mutex_lock(&cs->mu);
            while (atomic_load_explicit(&e->state, memory_order_acquire) == CRC_COMPUTING) pthread_cond_wait(&cs->cv, &cs->mu);
            pthread_mutex_unlock(&cs->mu);
        }
        st = atomic_load_explicit(&e->state, memory_order_acquire);
    }
    if (st == CRC_OK) return TM_OK;
    return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->off,
                       "%s: member '%s' (tensor '%s'): CRC-32 of its %llu bytes is 0x%08x, the "
                       "archive records 0x%08x: the data is damaged",
                       f->maps[e->slot].path, e->name, t->name, (unsigned long long)e->len,
                       (unsigned)e->got, (unsigned)e->want);
}

void tm__crc_free(tm_file *f) {
    struct tm__crcset *cs = f->crcs;
    if (!cs) return;
    for (int64_t i = 0; i < cs->n; i++) free(cs->m[i].name);
    free(cs->m);
    pthread_mutex_destroy(&cs->mu);
    pthread_cond_destroy(&cs->cv);
    free(cs);
    f->crcs = NULL;
}
