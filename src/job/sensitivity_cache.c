/* sensitivity_cache.c: the probes' cache of quantized tensors (docs/sensitivity.md "Cache"): a
** tm_gguf_tensor_cache keyed by (tensor name, ggml type, imatrix) whose entries are the
** quantizer's chunks with their error sums. Entries stay in memory while the total is under
** p->cache_mb MiB; later ones are written to a spill file in the scratch folder (pwrite/pread at
** an offset reserved when the entry is made). A probe then quantizes only the tensors whose
** type no earlier probe of the run quantized; the rest of its candidate is assembled from these
** bytes. Entries are filled chunk by chunk from the quantizer's threads under one lock. */
#include "sensitivity_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

typedef struct qentry {
    char     *name;
    int       type, imatrix;
    uint64_t  n_bytes;
    int64_t   n_chunks, n_filled;
    uint8_t  *filled;        /* per chunk: 1 once stored                                    */
    double   *sums;          /* 3 per chunk                                                 */
    uint8_t  *mem;           /* the bytes, or NULL: in the spill file at spill_off          */
    uint64_t  spill_off;
} qentry;

struct sens_qcache {
    pthread_mutex_t mu;
    qentry  *e;
    int      n, cap;
    uint64_t mem_bytes, mem_cap;
    int      fd;             /* the spill file, -1 until needed                             */
    char    *spill_path;
    uint64_t spill_end;
    int      failed;         /* a spill write failed: stop storing                          */
    long     n_quantized, n_reused, n_spilled;
};

static qentry *find(struct sens_qcache *c, const char *name, int type, int imatrix) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].type == type && c->e[i].imatrix == imatrix && !strcmp(c->e[i].name, name)) return &c->e[i];
    return NULL;
}

static int qc_has(void *ud, const char *name, int type, int imatrix, uint64_t n_bytes) {
    struct sens_qcache *c = ud;
    pthread_mutex_lock(&c->mu);
    qentry *e = find(c, name, type, imatrix);
    int hit = e && e->n_bytes == n_bytes && e->n_filled == e->n_chunks;
    if (hit) c->n_reused++;
    else c->n_quantized++;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

static tm_status qc_get(void *ud, const char *name, int type, int imatrix, int64_t ci, uint64_t off, void *dst, size_t len,
                        double sums[3], tm_err *err) {
    struct sens_qcache *c = ud;
    pthread_mutex_lock(&c->mu);
    qentry *e = find(c, name, type, imatrix);
    tm_status s = TM_OK;
    if (!e || ci < 0 || ci >= e->n_chunks || !e->filled[ci] || off > e->n_bytes || len > e->n_bytes - off) {
        s = tm__err_set(err, TM_E_INTERNAL, -1, "quantized-tensor cache: tensor '%s' chunk %lld (bytes %llu+%zu) not stored", name,
                        (long long)ci, (unsigned long long)off, len);
    } else {
        memcpy(sums, e->sums + 3 * ci, 3 * sizeof *sums);
        if (e->mem) memcpy(dst, e->mem + off, len);
    }
    uint8_t *mem = e ? e->mem : NULL;
    uint64_t at = e ? e->spill_off + off : 0;
    int fd = c->fd;
    pthread_mutex_unlock(&c->mu);
    if (!s && !mem) { /* entries are never removed: the spill range stays valid unlocked */
        size_t got = 0;
        while (got < len) {
            ssize_t k = pread(fd, (uint8_t *)dst + got, len - got, (off_t)(at + got));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return tm__err_sys(err, k < 0 ? errno : EIO, "%s: cannot read tensor '%s' at offset %llu", c->spill_path, name,
                                           (unsigned long long)(at + got));
            got += (size_t)k;
        }
    }
    return s;
}

static void qc_put(void *ud, const char *name, int type, int imatrix, uint64_t n_bytes, int64_t ci, int64_t n_chunks, uint64_t off,
                   const void *data, size_t len, const double sums[3]) {
    struct sens_qcache *c = ud;
    pthread_mutex_lock(&c->mu);
    qentry *e = c->failed ? NULL : find(c, name, type, imatrix);
    if (!c->failed && !e) { /* a new entry: in memory under the bound, else a range of the spill file */
        if (c->n == c->cap) {
            int nc = c->cap ? 2 * c->cap : 64;
            qentry *ne = realloc(c->e, (size_t)nc * sizeof *ne);
            if (ne) { c->e = ne; c->cap = nc; }
        }
        if (c->n < c->cap) {
            qentry q;
            memset(&q, 0, sizeof q);
            q.type = type;
            q.imatrix = imatrix;
            q.n_bytes = n_bytes;
            q.n_chunks = n_chunks;
            q.name = tm__strdup(name);
            q.filled = tm__calloc((size_t)(n_chunks ? n_chunks : 1), 1);
            q.sums = tm__calloc((size_t)(n_chunks ? n_chunks : 1) * 3, sizeof *q.sums);
            int ok = q.name && q.filled && q.sums;
            if (ok && c->mem_bytes + n_bytes <= c->mem_cap && (q.mem = malloc(n_bytes ? n_bytes : 1))) {
                c->mem_bytes += n_bytes;
            } else if (ok) {
                if (c->fd < 0) c->fd = open(c->spill_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (c->fd < 0) ok = 0, c->failed = 1;
                q.spill_off = c->spill_end;
                c->spill_end += n_bytes;
                c->n_spilled += ok;
            }
            if (ok) {
                c->e[c->n] = q;
                e = &c->e[c->n++];
            } else {
                free(q.name);
                free(q.filled);
                free(q.sums);
            }
        }
    }
    int ok = e && e->n_bytes == n_bytes && e->n_chunks == n_chunks && ci >= 0 && ci < n_chunks && off <= n_bytes &&
             len <= n_bytes - off && !e->filled[ci];
    uint8_t *mem = ok ? e->mem : NULL;
    uint64_t at = ok ? e->spill_off + off : 0;
    int fd = c->fd, ei = ok ? (int)(e - c->e) : -1; /* c->e may move while unlocked: its index */
    if (ok && mem) memcpy(mem + off, data, len);
    pthread_mutex_unlock(&c->mu);
    if (ok && !mem) {
        size_t put = 0;
        while (put < len) {
            ssize_t k = pwrite(fd, (const uint8_t *)data + put, len - put, (off_t)(at + put));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { ok = 0; break; }
            put += (size_t)k;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (ei >= 0 && !ok) c->failed = 1; /* a short spill: nothing more is stored, what is complete stays */
    e = ei >= 0 ? &c->e[ei] : NULL;
    if (ok && !e->filled[ci]) { /* two probes may fill one entry at once: the same bytes */
        memcpy(e->sums + 3 * ci, sums, 3 * sizeof *sums);
        e->filled[ci] = 1;
        e->n_filled++;
    }
    pthread_mutex_unlock(&c->mu);
}

sens_qcache *tm__sens_qcache_new(const char *work, uint64_t mem_cap) {
    sens_qcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = -1;
    c->mem_cap = mem_cap;
    if (!(c->spill_path = tm__aprintf("%s/quantized-tensors.spill", work))) { free(c); return NULL; }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

tm_gguf_tensor_cache tm__sens_qcache_hooks(sens_qcache *c) {
    tm_gguf_tensor_cache h = {c, qc_has, qc_get, qc_put};
    return h;
}

void tm__sens_qcache_counts(const sens_qcache *c, long *quantized, long *reused, long *spilled, uint64_t *mem_bytes) {
    *quantized = c ? c->n_quantized : 0;
    *reused = c ? c->n_reused : 0;
    *spilled = c ? c->n_spilled : 0;
    *mem_bytes = c ? c->mem_bytes : 0;
}

void tm__sens_qcache_free(sens_qcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].name);
        free(c->e[i].filled);
        free(c->e[i].sums);
        free(c->e[i].mem);
    }
    free(c->e);
    if (c->fd >= 0) close(c->fd);
    if (c->fd >= 0) unlink(c->spill_path);
    free(c->spill_path);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
