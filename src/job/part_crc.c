/* part_crc.c: the log of a part's writes and their CRC-32C (part_crc.h). */
#include "part_crc.h"
#include "../core/crc32c.h"

#include <pthread.h>

typedef struct crcrec {
    int      file;
    uint64_t off, len;
    uint32_t crc;
} crcrec;

struct tm__crclog {
    pthread_mutex_t mu;
    char          **names;
    int             n_names;
    crcrec         *r;
    size_t          n, cap;
    int             bad;    /* out of memory once: every range is read back */
    int             sorted;
};

tm__crclog *tm__crclog_new(void) {
    tm__crclog *l = tm__calloc(1, sizeof *l);
    if (l) pthread_mutex_init(&l->mu, NULL);
    return l;
}

void tm__crclog_free(tm__crclog *l) {
    if (!l) return;
    for (int k = 0; k < l->n_names; k++) free(l->names[k]);
    free(l->names);
    free(l->r);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static const char *base_of(const char *p) { return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; }

static int name_index(const tm__crclog *l, const char *base) {
    for (int k = 0; k < l->n_names; k++)
        if (!strcmp(l->names[k], base)) return k;
    return -1;
}

void tm__crclog_add(tm__crclog *l, const char *file, uint64_t off, const void *data, size_t n) {
    if (!l || !n) return;
    uint32_t c = tm__crc32c(0, data, n); /* outside the lock: the bytes are hot in this thread's cache */
    const char *base = base_of(file);
    pthread_mutex_lock(&l->mu);
    int f = l->bad ? -1 : name_index(l, base);
    if (!l->bad && f < 0) {
        char **nn = realloc(l->names, (size_t)(l->n_names + 1) * sizeof *nn);
        char *d = nn ? tm__strdup(base) : NULL;
        if (nn) l->names = nn;
        if (d) l->names[f = l->n_names++] = d;
        else l->bad = 1;
    }
    if (!l->bad && l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        crcrec *r = realloc(l->r, cap * sizeof *r);
        if (r) { l->r = r; l->cap = cap; }
        else l->bad = 1;
    }
    if (!l->bad) {
        l->r[l->n++] = (crcrec){f, off, (uint64_t)n, c};
        l->sorted = 0;
    }
    pthread_mutex_unlock(&l->mu);
}

static int rec_cmp(const void *a, const void *b) {
    const crcrec *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

int tm__crclog_range(tm__crclog *l, const char *file, uint64_t off, uint64_t len, uint32_t *crc) {
    if (!l || !len) return 0;
    pthread_mutex_lock(&l->mu);
    int f = l->bad ? -1 : name_index(l, base_of(file)), ok = 0;
    if (f >= 0 && !l->sorted) {
        qsort(l->r, l->n, sizeof *l->r, rec_cmp);
        l->sorted = 1;
    }
    if (f >= 0) {
        size_t lo = 0, hi = l->n; /* the first record of file f at or after off */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (l->r[mid].file < f || (l->r[mid].file == f && l->r[mid].off < off)) lo = mid + 1;
            else hi = mid;
        }
        uint64_t at = off, end = off + len;
        uint32_t c = 0;
        size_t k = lo;
        /* no record may reach into the range from before it, none may start inside it but where
        ** the previous one ended (a byte written twice: read back) */
        if (lo > 0 && l->r[lo - 1].file == f && l->r[lo - 1].off + l->r[lo - 1].len > off) at = UINT64_MAX;
        for (; at < end && k < l->n && l->r[k].file == f && l->r[k].off == at; k++) {
            if (l->r[k].len > end - at) { at = UINT64_MAX; break; } /* runs past the range */
            c = at == off ? l->r[k].crc : tm__crc32c_combine(c, l->r[k].crc, l->r[k].len);
            at += l->r[k].len;
        }
        if (at == end && k < l->n && l->r[k].file == f && l->r[k].off < end) at = UINT64_MAX;
        if (at == end) {
            *crc = c;
            ok = 1;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}
