/*
** gguf_write.c: the GGUF v3 writer and its raw metadata list (tensormorph/gguf_write.h).
**
** Open serialises the header once (metadata in list order, tensor infos with offsets
** accumulated in tensor order, each padded to the alignment), creates "<path>.tmp.<pid>"
** with O_EXCL, sizes it with ftruncate (so every padding byte reads as zero) and writes the
** header. Tensor data then arrives by pwrite at fixed offsets, in any order, from any thread.
** Finish fsyncs, renames onto the target and fsyncs the directory: a killed run leaves at most
** a temporary file, never a half-written target. TM_GGUF_WRITE_SEQUENTIAL stages the file
** instead and writes it front to back in 8 MiB pieces, with O_DIRECT where it is taken: three
** stage buffers and one I/O thread, so the caller fills one piece while the next is queued and
** the one before it is written (the device never waits for a hand-over).
*/
#define _GNU_SOURCE 1 /* O_DIRECT (fcntl.h) */
#include "file.h"
#include "../core/fsutil.h"
#include "tensormorph/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DEPTH 4
#define GGUF_HEADER_CAP (1ull << 30)

/* ---------------------------------------------------------------------------------------- */
/* Raw metadata list                                                                         */
/* ---------------------------------------------------------------------------------------- */

typedef struct kv_entry {
    char    *key;
    uint32_t type;
    uint8_t *val;
    size_t   n;
} kv_entry;

struct tm_gguf_kvlist {
    kv_entry *e;
    int64_t   n, cap;
};

static const uint64_t scalar_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

tm_gguf_kvlist *tm_gguf_kvlist_new(void) { return calloc(1, sizeof(tm_gguf_kvlist)); }

void tm_gguf_kvlist_free(tm_gguf_kvlist *l) {
    if (!l) return;
    for (int64_t i = 0; i < l->n; i++) {
        free(l->e[i].key);
        free(l->e[i].val);
    }
    free(l->e);
    free(l);
}

int64_t tm_gguf_kvlist_count(const tm_gguf_kvlist *l) { return l ? l->n : 0; }
const char *tm_gguf_kvlist_key(const tm_gguf_kvlist *l, int64_t i) {
    return l && i >= 0 && i < l->n ? l->e[i].key : NULL;
}
uint32_t tm_gguf_kvlist_type(const tm_gguf_kvlist *l, int64_t i) {
    return l && i >= 0 && i < l->n ? l->e[i].type : UINT32_MAX;
}
const void *tm_gguf_kvlist_raw(const tm_gguf_kvlist *l, int64_t i, size_t *n) {
    if (!l || i < 0 || i >= l->n) { if (n) *n = 0; return NULL; }
    if (n) *n = l->e[i].n;
    return l->e[i].val;
}

int64_t tm_gguf_kvlist_find(const tm_gguf_kvlist *l, const char *key) {
    for (int64_t i = 0; l && i < l->n; i++)
        if (strcmp(l->e[i].key, key) == 0) return i;
    return -1;
}

int64_t tm_gguf_kvlist_get_int(const tm_gguf_kvlist *l, const char *key, int *found) {
    int64_t i = tm_gguf_kvlist_find(l, key);
    if (found) *found = 0;
    if (i < 0) return 0;
    const kv_entry *e = &l->e[i];
    int64_t v;
    switch (e->type) {
    case TM_GGUF_U8: case TM_GGUF_BOOL: v = e->val[0]; break;
    case TM_GGUF_I8: v = (int8_t)e->val[0]; break;
    case TM_GGUF_U16: v = tm__ld16(e->val); break;
    case TM_GGUF_I16: v = (int16_t)tm__ld16(e->val); break;
    case TM_GGUF_U32: v = tm__ld32(e->val); break;
    case TM_GGUF_I32: v = (int32_t)tm__ld32(e->val); break;
    case TM_GGUF_U64: case TM_GGUF_I64: v = (int64_t)tm__ld64(e->val); break;
    default: return 0;
    }
    if (found) *found = 1;
    return v;
}

char *tm_gguf_kvlist_get_str(const tm_gguf_kvlist *l, const char *key) {
    int64_t i = tm_gguf_kvlist_find(l, key);
    if (i < 0 || l->e[i].type != TM_GGUF_STRING) return NULL;
    return tm__strndup((const char *)l->e[i].val + 8, l->e[i].n - 8);
}

/* Bytes of one encoded value of type t at p (at most `left` bytes), 0 when malformed. */
static uint64_t value_size(uint32_t t, const uint8_t *p, uint64_t left, int depth) {
    if (t > TM_GGUF_F64) return 0;
    if (t == TM_GGUF_STRING) {
        if (left < 8) return 0;
        uint64_t len = tm__ld64(p);
        if (len > left - 8) return 0;
        return 8 + len;
    }
    if (t == TM_GGUF_ARRAY) {
        if (depth >= GGUF_MAX_DEPTH || left < 12) return 0;
        uint32_t et = tm__ld32(p);
        uint64_t cnt = tm__ld64(p + 4), pos = 12;
        if (et > TM_GGUF_F64) return 0;
        if (et != TM_GGUF_STRING && et != TM_GGUF_ARRAY) {
            uint64_t nb;
            if (!tm__mul_u64_ok(cnt, scalar_size[et], &nb) || nb > left - pos) return 0;
            return pos + nb;
        }
        if (cnt > (left - pos) / (et == TM_GGUF_STRING ? 8 : 12)) return 0;
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t s = value_size(et, p + pos, left - pos, depth + 1);
            if (!s) return 0;
            pos += s;
        }
        return pos;
    }
    return left >= scalar_size[t] ? scalar_size[t] : 0;
}

void tm_gguf_kvlist_remove(tm_gguf_kvlist *l, const char *key) {
    int64_t i = tm_gguf_kvlist_find(l, key);
    if (i < 0) return;
    free(l->e[i].key);
    free(l->e[i].val);
    memmove(&l->e[i], &l->e[i + 1], (size_t)(l->n - i - 1) * sizeof(kv_entry));
    l->n--;
}

tm_status tm_gguf_kvlist_set_raw(tm_gguf_kvlist *l, const char *key, uint32_t type,
                                 const void *val, size_t n, tm_err *err) {
    if (!l || !key || !*key) return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf: empty metadata key");
    if (value_size(type, val, n, 0) != n)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "gguf: metadata '%s': %zu bytes are not one value of type %u", key, n, type);
    tm_gguf_kvlist_remove(l, key);
    if (l->n == l->cap) {
        int64_t nc = l->cap ? 2 * l->cap : 32;
        kv_entry *ne = realloc(l->e, (size_t)nc * sizeof *ne);
        if (!ne) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        l->e = ne;
        l->cap = nc;
    }
    kv_entry *e = &l->e[l->n];
    e->key = tm__strdup(key);
    e->val = malloc(n ? n : 1);
    if (!e->key || !e->val) {
        free(e->key);
        free(e->val);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    memcpy(e->val, val, n);
    e->n = n;
    e->type = type;
    l->n++;
    return TM_OK;
}

tm_status tm_gguf_kvlist_set_u32(tm_gguf_kvlist *l, const char *key, uint32_t v, tm_err *err) {
    uint8_t b[4];
    tm__st32(b, v);
    return tm_gguf_kvlist_set_raw(l, key, TM_GGUF_U32, b, 4, err);
}

tm_status tm_gguf_kvlist_set_str(tm_gguf_kvlist *l, const char *key, const char *v, tm_err *err) {
    size_t len = strlen(v);
    uint8_t *b = malloc(8 + len);
    if (!b) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm__st64(b, len);
    memcpy(b + 8, v, len);
    tm_status s = tm_gguf_kvlist_set_raw(l, key, TM_GGUF_STRING, b, 8 + len, err);
    free(b);
    return s;
}

/* Read up to n bytes at offset off of fd into buf; returns bytes read or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Parse the metadata of the first nread bytes of a GGUF file into a new list. */
static tm_status parse_kv(const uint8_t *b, uint64_t nread, const char *path, tm_gguf_kvlist **out,
                          tm_err *err) {
    tm_status s = TM_OK;
    tm_gguf_kvlist *l = tm_gguf_kvlist_new();
    if (!l) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (nread < 24 || memcmp(b, "GGUF", 4) != 0)
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a GGUF file (no \"GGUF\" magic and header)", path);
    uint32_t version = s ? 0 : tm__ld32(b + 4);
    if (!s && version != 2 && version != 3)
        s = tm__err_set(err, TM_E_UNSUPPORTED, 4, "%s: GGUF version %u (only 2 and 3, little-endian)",
                        path, version);
    uint64_t n_kv = s ? 0 : tm__ld64(b + 16), pos = 24;
    if (!s && n_kv > (nread - pos) / 13)
        s = tm__err_set(err, TM_E_CORRUPT, 16, "%s: %llu metadata entries cannot fit in the file",
                        path, (unsigned long long)n_kv);
    for (uint64_t k = 0; k < n_kv && !s; k++) {
        uint64_t at = pos;
        if (nread - pos < 8) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)pos, "%s: metadata entry %llu: truncated key",
                            path, (unsigned long long)k);
            break;
        }
        uint64_t klen = tm__ld64(b + pos);
        if (klen == 0 || klen > nread - pos - 8 || nread - pos - 8 - klen < 4) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)pos,
                            "%s: metadata entry %llu: key length %llu runs past the header", path,
                            (unsigned long long)k, (unsigned long long)klen);
            break;
        }
        char *key = tm__strndup((const char *)b + pos + 8, (size_t)klen);
        pos += 8 + klen;
        uint32_t t = tm__ld32(b + pos);
        pos += 4;
        uint64_t vs = value_size(t, b + pos, nread - pos, 0);
        if (!key) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if (!vs)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)at,
                            "%s: metadata '%s': value of type %u is malformed or runs past the header",
                            path, key, t);
        else if (tm_gguf_kvlist_find(l, key) >= 0)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)at, "%s: metadata key '%s' appears twice", path, key);
        else s = tm_gguf_kvlist_set_raw(l, key, t, b + pos, (size_t)vs, err);
        free(key);
        pos += vs;
    }
    if (s) {
        tm_gguf_kvlist_free(l);
        return s;
    }
    *out = l;
    return TM_OK;
}

tm_status tm_gguf_kvlist_read(const char *path, tm_gguf_kvlist **out, tm_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tm__err_sys(err, e, "%s: cannot stat", path);
    }
    const uint64_t size = (uint64_t)st.st_size;
    const uint64_t limit = size < GGUF_HEADER_CAP ? size : GGUF_HEADER_CAP;
    /* Read 1 MiB first and 4x more while the metadata runs past what was read: a big model's
    ** header is read, never its tensor data. */
    uint64_t want = 1u << 20;
    tm_status s = TM_OK;
    for (;;) {
        uint64_t nread = want < limit ? want : limit;
        uint8_t *b = malloc(nread ? nread : 1);
        if (!b) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        ssize_t r = pread_full(fd, b, (size_t)nread, 0);
        int e = errno;
        if (r < 0 || (uint64_t)r != nread) {
            free(b);
            s = r < 0 ? tm__err_sys(err, e, "%s: cannot read", path)
                      : tm__err_set(err, TM_E_IO, -1, "%s: file shrank while reading", path);
            break;
        }
        s = parse_kv(b, nread, path, out, err);
        free(b);
        if (s == TM_OK || s == TM_E_NOMEM || s == TM_E_UNSUPPORTED || nread >= limit) break;
        want *= 4; /* perhaps only truncated by the read: try again with more */
    }
    close(fd);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Writer                                                                                    */
/* ---------------------------------------------------------------------------------------- */

struct tm_gguf_writer {
    char     *target, *tmp;
    int       fd, created, finished, ok;
    int64_t   n;
    uint64_t *offset;  /* absolute file offset of each tensor's data */
    uint64_t *n_bytes;
    /* TM_GGUF_WRITE_SEQUENTIAL: the file is staged in `stage` (SEQ_STAGE bytes, SEQ_ALIGN-aligned)
    ** and written in whole pieces, through dfd (O_DIRECT) when the file system takes it, else fd.
    ** SEQ_NBUF buffers used in turn: the caller fills buf[cur] while up to SEQ_NBUF - 1 earlier
    ** pieces wait in the queue q (io_n of them from io_head, the first being written); without
    ** the thread (pthread_create failed) pieces are written inline. */
    int       seq, dfd;
    int       shared;    /* TM_GGUF_WRITE_SHARED: fd is the target itself             */
    int       scratch;   /* TM_GGUF_WRITE_SCRATCH: finish neither fsyncs nor syncs the folder */
    uint8_t  *stage;     /* = buf[cur]                                                */
    uint8_t  *buf[3];
    int       cur;
    size_t    fill;      /* bytes staged                                              */
    size_t    span;      /* bytes at stage + fill the last span handed out (0: none)   */
    uint64_t  stage_pos; /* file offset of stage[0]                                   */
    uint64_t  total;     /* the file's size                                           */
    pthread_t       io;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             io_tried, io_on;
    int             io_head, io_n, io_quit, io_errno;  /* guarded by mu             */
    uint64_t        io_pos;                            /* where a write failed       */
    struct { const uint8_t *p; size_t len; uint64_t pos; } q[3];
    /* a split set (tm_gguf_writer_open_split): one writer per file, tensor -> (file, index) */
    int              n_sub;
    tm_gguf_writer **sub;
    int             *sub_of;
    int64_t         *local;
};

#define SEQ_ALIGN 4096u            /* O_DIRECT: buffer, offset and length alignment     */
#define SEQ_STAGE (8u << 20)       /* bytes per write in sequential mode                */
#define SEQ_NBUF 3                 /* stage buffers (= the sizes of buf and q)          */

typedef struct obuf { uint8_t *p; size_t n, cap; int oom; } obuf;

static void ob_add(obuf *b, const void *p, size_t k) {
    if (b->oom) return;
    if (b->cap - b->n < k) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc - b->n < k) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, k);
    b->n += k;
}
static void ob_u32(obuf *b, uint32_t v) { uint8_t t[4]; tm__st32(t, v); ob_add(b, t, 4); }
static void ob_u64(obuf *b, uint64_t v) { uint8_t t[8]; tm__st64(t, v); ob_add(b, t, 8); }
static void ob_str(obuf *b, const char *s) { size_t k = strlen(s); ob_u64(b, k); ob_add(b, s, k); }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void tm_gguf_writer_free(tm_gguf_writer *w) {
    if (!w) return;
    for (int k = 0; k < w->n_sub; k++) tm_gguf_writer_free(w->sub[k]);
    free(w->sub);
    free(w->sub_of);
    free(w->local);
    if (w->io_on) { /* the piece being written finishes, the queued ones are dropped; the thread ends */
        pthread_mutex_lock(&w->mu);
        w->io_quit = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->io, NULL);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        w->io_on = 0;
    }
    if (w->fd >= 0) close(w->fd);
    if (w->dfd >= 0) close(w->dfd);
    for (int b = 0; b < SEQ_NBUF; b++) free(w->buf[b]);
    if (w->created && !w->ok) unlink(w->tmp);
    free(w->target);
    free(w->tmp);
    free(w->offset);
    free(w->n_bytes);
    free(w);
}

/* Sequential mode: pwrite len bytes of p at file offset pos, through dfd while the file system
** takes O_DIRECT, else through fd. Returns 0 or the errno. Only one thread writes at a time
** (the I/O thread, or the caller when there is none), and only it touches dfd meanwhile. */
static int seq_pwrite(tm_gguf_writer *w, const uint8_t *p, size_t len, uint64_t pos) {
    size_t done = 0;
    while (done < len) {
        int fd = w->dfd >= 0 ? w->dfd : w->fd;
        ssize_t r = pwrite(fd, p + done, len - done, (off_t)(pos + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL && w->dfd >= 0) { /* O_DIRECT refused at write time */
            close(w->dfd);
            w->dfd = -1;
            continue;
        }
        if (r < 0) return errno;
        if (r == 0) return EIO;
        done += (size_t)r;
    }
    return 0;
}

/* The I/O thread: write the queued pieces in order, each dequeued once written, until io_quit
** with nothing queued. */
static void *seq_io_main(void *arg) {
    tm_gguf_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->io_n && !w->io_quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->io_n) break;
        const uint8_t *p = w->q[w->io_head].p;
        size_t len = w->q[w->io_head].len;
        uint64_t pos = w->q[w->io_head].pos;
        int skip = w->io_errno || w->io_quit; /* after an error, or abandoned: nothing more */
        pthread_mutex_unlock(&w->mu);
        int e = skip ? 0 : seq_pwrite(w, p, len, pos);
        pthread_mutex_lock(&w->mu);
        if (e && !w->io_errno) {
            w->io_errno = e;
            w->io_pos = pos;
        }
        w->io_head = (w->io_head + 1) % SEQ_NBUF;
        w->io_n--;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Sequential mode: wait until at most `left` pieces are queued; TM_E_IO when one failed. */
static tm_status seq_wait_n(tm_gguf_writer *w, int left, tm_err *err) {
    if (!w->io_on) return TM_OK;
    pthread_mutex_lock(&w->mu);
    while (w->io_n > left && !w->io_errno) pthread_cond_wait(&w->cv, &w->mu);
    int e = w->io_errno;
    uint64_t at = w->io_pos;
    pthread_mutex_unlock(&w->mu);
    return e ? tm__err_sys(err, e, "%s: cannot write at offset %llu", w->tmp, (unsigned long long)at) : TM_OK;
}

/* Sequential mode: wait until every queued piece is written; TM_E_IO when one failed. */
static tm_status seq_wait(tm_gguf_writer *w, tm_err *err) { return seq_wait_n(w, 0, err); }

/* Sequential mode: write the first `len` staged bytes (a multiple of SEQ_ALIGN) at stage_pos:
** queue them for the I/O thread once a buffer is free (at most SEQ_NBUF - 1 queued), and stage
** into the next buffer (inline, without the thread). */
static tm_status seq_flush(tm_gguf_writer *w, size_t len, tm_err *err) {
    if (!w->io_tried) { /* the first full piece: the other buffers and the thread (a file of one
                        ** piece never needs them); on failure pieces are written inline */
        w->io_tried = 1;
        int got = 1;
        for (int b = 1; b < SEQ_NBUF && got; b++) {
            void *st = NULL;
            got = posix_memalign(&st, SEQ_ALIGN, SEQ_STAGE) == 0;
            w->buf[b] = got ? st : NULL;
        }
        if (got) {
            if (pthread_mutex_init(&w->mu, NULL) == 0) {
                if (pthread_cond_init(&w->cv, NULL) != 0) pthread_mutex_destroy(&w->mu);
                else if (pthread_create(&w->io, NULL, seq_io_main, w) != 0) {
                    pthread_cond_destroy(&w->cv);
                    pthread_mutex_destroy(&w->mu);
                } else w->io_on = 1;
            }
        }
    }
    if (!w->io_on) {
        int e = seq_pwrite(w, w->stage, len, w->stage_pos);
        if (e) return tm__err_sys(err, e, "%s: cannot write at offset %llu", w->tmp, (unsigned long long)w->stage_pos);
    } else {
        tm_status s = seq_wait_n(w, SEQ_NBUF - 2, err); /* then the next buffer is not queued */
        if (s) return s;
        pthread_mutex_lock(&w->mu);
        int at = (w->io_head + w->io_n) % SEQ_NBUF;
        w->q[at].p = w->stage;
        w->q[at].len = len;
        w->q[at].pos = w->stage_pos;
        w->io_n++;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        w->cur = (w->cur + 1) % SEQ_NBUF;
        w->stage = w->buf[w->cur];
    }
    w->stage_pos += len;
    w->fill = 0;
    return TM_OK;
}

/* Sequential mode: append n bytes (NULL: zeros) at file offset stage_pos + fill. */
static tm_status seq_put(tm_gguf_writer *w, const void *data, size_t n, tm_err *err) {
    w->span = 0;
    while (n) {
        size_t k = SEQ_STAGE - w->fill < n ? SEQ_STAGE - w->fill : n;
        if (data) memcpy(w->stage + w->fill, data, k);
        else memset(w->stage + w->fill, 0, k);
        w->fill += k;
        n -= k;
        if (data) data = (const char *)data + k;
        if (w->fill == SEQ_STAGE) {
            tm_status s = seq_flush(w, SEQ_STAGE, err);
            if (s) return s;
        }
    }
    return TM_OK;
}

tm_status tm_gguf_writer_open(const char *path, const tm_gguf_kvlist *kv,
                              const tm_gguf_wtensor *t, int64_t n, tm_gguf_writer **out,
                              tm_err *err) {
    return tm_gguf_writer_open_ex(path, kv, t, n, 0, out, err);
}

tm_status tm_gguf_writer_open_ex(const char *path, const tm_gguf_kvlist *kv,
                                 const tm_gguf_wtensor *t, int64_t n, unsigned flags,
                                 tm_gguf_writer **out, tm_err *err) {
    *out = NULL;
    if (!path || !*path || n < 0 || (n > 0 && !t))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: bad arguments");
    uint64_t align = GGUF_DEFAULT_ALIGNMENT;
    if (tm_gguf_kvlist_find(kv, "general.alignment") >= 0) {
        int found = 0;
        int64_t a = tm_gguf_kvlist_get_int(kv, "general.alignment", &found);
        if (!found || tm_gguf_kvlist_type(kv, tm_gguf_kvlist_find(kv, "general.alignment")) != TM_GGUF_U32 ||
            a <= 0 || (a & (a - 1)) != 0)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "%s: general.alignment must be a u32 power of two", path);
        align = (uint64_t)a;
    }
    tm_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    w->fd = -1;
    w->dfd = -1;
    w->n = n;
    w->target = tm__strdup(path);
    w->tmp = tm__aprintf("%s.tmp.%ld", path, (long)getpid());
    w->offset = tm__calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    w->n_bytes = tm__calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    const char **names = tm__calloc((size_t)(n ? n : 1), sizeof(char *));
    obuf hb = {0};
    tm_status s = TM_OK;
    if (!w->target || !w->tmp || !w->offset || !w->n_bytes || !names)
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* tensor sizes and relative offsets */
    uint64_t rel = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(t[i].type);
        if (!t[i].name || !*t[i].name)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor %lld has no name", path, (long long)i);
        else if (!ti)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor '%s': unknown ggml type %d", path, t[i].name, t[i].type);
        else if (t[i].n_dims < 1 || t[i].n_dims > 4)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor '%s': %d dims (1..4)", path, t[i].name, t[i].n_dims);
        else if (strlen(t[i].name) >= TM_GGUF_MAX_NAME && !(flags & TM_GGUF_WRITE_LONG_NAMES))
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s: tensor '%s': its name is %zu bytes; llama.cpp refuses tensor names of "
                            "%d bytes or more (GGML_MAX_NAME); --allow-long-names writes it anyway",
                            path, t[i].name, strlen(t[i].name), TM_GGUF_MAX_NAME);
        if (s) break;
        names[i] = t[i].name;
        uint64_t ne = 1;
        for (int d = 0; d < t[i].n_dims && !s; d++)
            if (t[i].ne[d] < 0 || !tm__mul_u64_ok(ne, (uint64_t)t[i].ne[d], &ne))
                s = tm__err_set(err, TM_E_LIMIT, -1, "%s: tensor '%s': element count overflows", path, t[i].name);
        if (s) break;
        if (t[i].ne[0] % ti->block_size != 0) {
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor '%s': row of %lld is not a multiple of the %s block (%lld)",
                            path, t[i].name, (long long)t[i].ne[0], ti->name, (long long)ti->block_size);
            break;
        }
        uint64_t nb, padded;
        if (!tm__mul_u64_ok(ne / (uint64_t)ti->block_size, ti->type_size, &nb) ||
            !tm__add_u64_ok(nb, align - 1, &padded)) {
            s = tm__err_set(err, TM_E_LIMIT, -1, "%s: tensor '%s': byte size overflows", path, t[i].name);
            break;
        }
        padded &= ~(align - 1);
        w->offset[i] = rel;
        w->n_bytes[i] = nb;
        if (!tm__add_u64_ok(rel, padded, &rel)) s = tm__err_set(err, TM_E_LIMIT, -1, "%s: data size overflows", path);
    }
    if (!s && n > 1) {
        const char **sorted = tm__malloc_n((size_t)n, sizeof(char *));
        if (!sorted) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else {
            memcpy(sorted, names, (size_t)n * sizeof(char *));
            qsort(sorted, (size_t)n, sizeof(char *), cmp_str);
            for (int64_t i = 1; i < n && !s; i++)
                if (strcmp(sorted[i - 1], sorted[i]) == 0)
                    s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor name '%s' appears twice", path, sorted[i]);
            free(sorted);
        }
    }
    /* header */
    if (!s) {
        ob_add(&hb, "GGUF", 4);
        ob_u32(&hb, 3);
        ob_u64(&hb, (uint64_t)n);
        ob_u64(&hb, (uint64_t)tm_gguf_kvlist_count(kv));
        for (int64_t k = 0; k < tm_gguf_kvlist_count(kv); k++) {
            ob_str(&hb, kv->e[k].key);
            ob_u32(&hb, kv->e[k].type);
            ob_add(&hb, kv->e[k].val, kv->e[k].n);
        }
        for (int64_t i = 0; i < n; i++) {
            ob_str(&hb, t[i].name);
            ob_u32(&hb, (uint32_t)t[i].n_dims);
            for (int d = 0; d < t[i].n_dims; d++) ob_u64(&hb, (uint64_t)t[i].ne[d]);
            ob_u32(&hb, (uint32_t)t[i].type);
            ob_u64(&hb, w->offset[i]);
        }
        if (hb.oom) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    uint64_t data_start = 0, total = 0;
    if (!s) {
        data_start = ((uint64_t)hb.n + align - 1) & ~(align - 1);
        if (!tm__add_u64_ok(data_start, rel, &total) || total > (uint64_t)INT64_MAX)
            s = tm__err_set(err, TM_E_LIMIT, -1, "%s: file size overflows", path);
        for (int64_t i = 0; i < n && !s; i++) w->offset[i] += data_start;
    }
    const int shared = (flags & TM_GGUF_WRITE_SHARED) != 0;
    w->scratch = (flags & TM_GGUF_WRITE_SCRATCH) != 0;
    if (!s && shared && (flags & TM_GGUF_WRITE_SEQUENTIAL))
        s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: a shared file is not written sequentially", path);
    if (!s && shared) { /* the parts' file (part.h): no temporary name, never removed here */
        w->shared = 1;
        free(w->tmp);
        if (!(w->tmp = tm__strdup(path))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if ((w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
            s = tm__err_sys(err, errno, "%s: cannot open", w->tmp);
        else
            s = tm__shared_size_check(w->fd, w->tmp, total, err); /* another part's plan: refuse, untouched */
    } else if (!s) {
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd < 0) s = tm__err_sys(err, errno, "%s: cannot create", w->tmp);
        else w->created = 1;
    }
    if (!s && ftruncate(w->fd, (off_t)total) != 0) s = tm__err_sys(err, errno, "%s: cannot size to %llu bytes", w->tmp, (unsigned long long)total);
    w->total = total;
    if (!s && (flags & TM_GGUF_WRITE_SEQUENTIAL)) { /* the header is the first staged bytes */
        w->seq = 1;
        void *st = NULL;
        if (posix_memalign(&st, SEQ_ALIGN, SEQ_STAGE) != 0) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        w->stage = w->buf[0] = st;
#ifdef O_DIRECT
        if (!s) w->dfd = open(w->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC); /* -1 (e.g. tmpfs): fd */
#endif
        if (!s) s = seq_put(w, hb.p, hb.n, err);
    }
    if (!s && shared && (flags & TM_GGUF_WRITE_HEADER)) { /* the bytes no tensor owns: zeros */
        static const uint8_t zero[256];
        uint64_t at = hb.n;
        for (int64_t i = 0; i <= n && !s; i++) {
            uint64_t end = i < n ? w->offset[i] : total;
            while (at < end && !s) {
                size_t k = end - at < sizeof zero ? (size_t)(end - at) : sizeof zero;
                ssize_t r = pwrite(w->fd, zero, k, (off_t)at);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) s = tm__err_sys(err, errno, "%s: cannot write the padding at byte %llu", w->tmp, (unsigned long long)at);
                else at += (uint64_t)r;
            }
            if (i < n) at = w->offset[i] + w->n_bytes[i];
        }
    }
    if (!s && !w->seq && (!shared || (flags & TM_GGUF_WRITE_HEADER))) {
        size_t done = 0;
        while (done < hb.n && !s) {
            ssize_t r = pwrite(w->fd, hb.p + done, hb.n - done, (off_t)done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) s = tm__err_sys(err, errno, "%s: cannot write the header", w->tmp);
            else done += (size_t)r;
        }
    }
    free(hb.p);
    free(names);
    if (s) {
        tm_gguf_writer_free(w);
        return s;
    }
    *out = w;
    return TM_OK;
}

uint64_t tm_gguf_writer_tensor_bytes(const tm_gguf_writer *w, int64_t i) {
    if (w && w->n_sub) return i >= 0 && i < w->n ? tm_gguf_writer_tensor_bytes(w->sub[w->sub_of[i]], w->local[i]) : 0;
    return w && i >= 0 && i < w->n ? w->n_bytes[i] : 0;
}

uint64_t tm_gguf_writer_tensor_offset(const tm_gguf_writer *w, int64_t i) {
    if (w && w->n_sub) return i >= 0 && i < w->n ? tm_gguf_writer_tensor_offset(w->sub[w->sub_of[i]], w->local[i]) : 0;
    return w && i >= 0 && i < w->n ? w->offset[i] : 0;
}

int tm_gguf_writer_n_files(const tm_gguf_writer *w) { return !w ? 0 : w->n_sub ? w->n_sub : 1; }

const char *tm_gguf_writer_file(const tm_gguf_writer *w, int k) {
    if (!w || k < 0 || k >= tm_gguf_writer_n_files(w)) return NULL;
    return w->n_sub ? w->sub[k]->target : w->target;
}

int tm_gguf_writer_tensor_file(const tm_gguf_writer *w, int64_t i) {
    if (!w || i < 0 || i >= w->n) return -1;
    return w->n_sub ? w->sub_of[i] : 0;
}

tm_status tm_gguf_writer_write(tm_gguf_writer *w, int64_t i, uint64_t off, const void *data,
                               size_t n, tm_err *err) {
    if (w && w->n_sub) {
        if (i < 0 || i >= w->n)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: write outside tensor %lld", (long long)i);
        return tm_gguf_writer_write(w->sub[w->sub_of[i]], w->local[i], off, data, n, err);
    }
    if (!w || w->finished || i < 0 || i >= w->n || off > w->n_bytes[i] || n > w->n_bytes[i] - off)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: write outside tensor %lld", (long long)i);
    if (w->seq) { /* in file order only; the gap before it is zero padding */
        uint64_t at = w->offset[i] + off, pos = w->stage_pos + w->fill;
        if (at < pos)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: sequential mode: tensor %lld offset %llu comes "
                               "before what is already written", (long long)i, (unsigned long long)off);
        tm_status s = seq_put(w, NULL, (size_t)(at - pos), err);
        return s ? s : seq_put(w, data, n, err);
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(w->fd, (const char *)data + done, n - done,
                           (off_t)(w->offset[i] + off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return tm__err_sys(err, errno, "%s: cannot write", w->tmp);
        done += (size_t)r;
    }
    return TM_OK;
}

tm_status tm_gguf_writer_span(tm_gguf_writer *w, int64_t i, uint64_t off, size_t n, void **p, size_t *avail,
                              tm_err *err) {
    *p = NULL;
    *avail = 0;
    if (!w || w->n_sub || !w->seq || w->finished || i < 0 || i >= w->n || n == 0 || off > w->n_bytes[i] ||
        n > w->n_bytes[i] - off)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: span outside tensor %lld (or not sequential mode)",
                           (long long)i);
    uint64_t at = w->offset[i] + off, pos = w->stage_pos + w->fill;
    if (at < pos)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: sequential mode: tensor %lld offset %llu comes "
                           "before what is already written", (long long)i, (unsigned long long)off);
    tm_status s = seq_put(w, NULL, (size_t)(at - pos), err); /* the padding before it */
    if (s) return s;
    *p = w->stage + w->fill;
    *avail = w->span = SEQ_STAGE - w->fill < n ? SEQ_STAGE - w->fill : n;
    return TM_OK;
}

tm_status tm_gguf_writer_commit(tm_gguf_writer *w, size_t k, tm_err *err) {
    if (!w || w->n_sub || !w->seq || w->finished || k > w->span)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: commit of %zu bytes outside the span", k);
    w->span = 0;
    w->fill += k;
    return w->fill == SEQ_STAGE ? seq_flush(w, SEQ_STAGE, err) : TM_OK;
}

tm_status tm_gguf_writer_finish(tm_gguf_writer *w, tm_err *err) {
    if (!w || w->finished) return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: already finished");
    w->finished = 1;
    if (w->n_sub) {
        tm_status s = TM_OK;
        for (int k = 0; k < w->n_sub && !s; k++) s = tm_gguf_writer_finish(w->sub[k], err);
        w->ok = !s;
        return s;
    }
    tm_status s = TM_OK;
    if (w->seq) { /* the rest: zeros to the end, the last piece rounded up, then the exact size */
        uint64_t pos = w->stage_pos + w->fill;
        if (pos < w->total) s = seq_put(w, NULL, (size_t)(w->total - pos), err);
        if (!s && w->fill) {
            size_t len = (w->fill + SEQ_ALIGN - 1) & ~(size_t)(SEQ_ALIGN - 1);
            memset(w->stage + w->fill, 0, len - w->fill);
            s = seq_flush(w, len, err);
        }
        if (!s) s = seq_wait(w, err); /* the last piece on disk before the size and fsync */
        if (!s && ftruncate(w->fd, (off_t)w->total) != 0) s = tm__err_sys(err, errno, "%s: cannot size", w->tmp);
    }
    if (!s && !w->scratch && fsync(w->fd) != 0) s = tm__err_sys(err, errno, "%s: fsync failed", w->tmp);
    if (close(w->fd) != 0 && !s) s = tm__err_sys(err, errno, "%s: close failed", w->tmp);
    w->fd = -1;
    if (w->shared) { /* the parts' file: stays where it is (part.h) */
        w->ok = !s;
        return s;
    }
    if (!s && rename(w->tmp, w->target) != 0) s = tm__err_sys(err, errno, "%s: cannot rename into place", w->target);
    if (!s) {
        w->ok = 1;
        w->created = 0;
        char *dir = w->scratch ? NULL : tm__dirname(w->target);
        if (dir) {
            s = tm__fsync_dir(dir, err);
            free(dir);
        }
    } else if (w->created) {
        unlink(w->tmp);
        w->created = 0;
    }
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* split sets (llama.cpp gguf-split)                                                         */
/* ---------------------------------------------------------------------------------------- */

tm_status tm_gguf_writer_open_split(const char *path, const tm_gguf_kvlist *kv, const tm_gguf_wtensor *t, int64_t n,
                                    uint64_t max_split_bytes, unsigned flags, tm_gguf_writer **out, tm_err *err) {
    if (!max_split_bytes) return tm_gguf_writer_open_ex(path, kv, t, n, flags, out, err);
    *out = NULL;
    if (!path || !*path || n < 1 || !t)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: a split set needs a path and tensors");
    int found = 0;
    int64_t a = tm_gguf_kvlist_get_int(kv, "general.alignment", &found);
    uint64_t align = found && a > 0 && (a & (a - 1)) == 0 ? (uint64_t)a : GGUF_DEFAULT_ALIGNMENT;
    int *file_of = tm__calloc((size_t)n, sizeof *file_of);
    if (!file_of) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* gguf-split's rule: a tensor starts a new file when the data so far (each tensor padded to
    ** the alignment) plus it would exceed the limit; a file holds at least one tensor */
    int n_files = 1;
    uint64_t cur = 0;
    int64_t in_file = 0;
    for (int64_t i = 0; i < n; i++) {
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(t[i].type);
        uint64_t ne = 1;
        for (int d = 0; ti && d < t[i].n_dims && d < 4; d++) ne *= (uint64_t)(t[i].ne[d] > 0 ? t[i].ne[d] : 0);
        uint64_t nb = ti && ti->block_size ? ne / (uint64_t)ti->block_size * ti->type_size : 0;
        uint64_t padded = (nb + align - 1) & ~(align - 1);
        if (in_file > 0 && cur + padded > max_split_bytes) {
            n_files = n_files < 65536 ? n_files + 1 : n_files; /* refused below */
            cur = 0;
            in_file = 0;
        }
        cur += padded;
        file_of[i] = n_files - 1;
        in_file++;
    }
    tm_status s = n_files > 65535 ? tm__err_set(err, TM_E_LIMIT, -1, "%s: more than 65535 split files; split.count is "
                                                "a u16 (at most 65535)", path)
                                  : tm_gguf_writer_open_split_as(path, kv, t, n, file_of, n_files, flags, out, err);
    free(file_of);
    return s;
}

tm_status tm_gguf_writer_open_split_as(const char *path, const tm_gguf_kvlist *kv, const tm_gguf_wtensor *t, int64_t n,
                                       const int *file_of, int n_files, unsigned flags, tm_gguf_writer **out,
                                       tm_err *err) {
    *out = NULL;
    if (!path || !*path || n < 1 || !t || !file_of || n_files < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gguf writer: a split set needs a path and tensors");
    tm_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    w->fd = -1;
    w->n = n;
    w->sub_of = tm__calloc((size_t)n, sizeof *w->sub_of);
    w->local = tm__calloc((size_t)n, sizeof *w->local);
    int64_t *count = tm__calloc((size_t)n_files, sizeof *count);
    tm_status s = !w->sub_of || !w->local || !count ? tm__err_set(err, TM_E_NOMEM, -1, "out of memory") : TM_OK;
    for (int64_t i = 0; i < n && !s; i++) {
        if (file_of[i] < 0 || file_of[i] >= n_files) {
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: tensor '%s' in split file %d of %d", path, t[i].name,
                            file_of[i], n_files);
            break;
        }
        w->sub_of[i] = file_of[i];
        w->local[i] = count[file_of[i]]++;
    }
    free(count);
    if (!s && n_files > 65535)
        s = tm__err_set(err, TM_E_LIMIT, -1, "%s: %d split files; split.count is a u16 (at most 65535)", path, n_files);
    if (!s && n > INT32_MAX) s = tm__err_set(err, TM_E_LIMIT, -1, "%s: split.tensors.count is an i32", path);
    if (!s && !(w->sub = tm__calloc((size_t)n_files, sizeof *w->sub))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    size_t pl = strlen(path);
    if (pl > 5 && !strcmp(path + pl - 5, ".gguf")) pl -= 5;
    tm_gguf_wtensor *sub_t = s ? NULL : tm__malloc_n((size_t)n, sizeof *sub_t);
    if (!s && !sub_t) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int k = 0; k < n_files && !s; k++) {
        /* the first file: every key and the split keys; the others: the split keys only, as
        ** gguf-split and llama-quantize --keep-split write them (no general.alignment either:
        ** such a file is laid out with the default alignment) */
        tm_gguf_kvlist *sk = tm_gguf_kvlist_new();
        if (!sk) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        for (int64_t e = 0; k == 0 && e < tm_gguf_kvlist_count(kv) && !s; e++) {
            const char *key = tm_gguf_kvlist_key(kv, e);
            if (!strncmp(key, "split.", 6)) continue; /* a split input's own keys */
            size_t vn;
            const void *v = tm_gguf_kvlist_raw(kv, e, &vn);
            s = tm_gguf_kvlist_set_raw(sk, key, tm_gguf_kvlist_type(kv, e), v, vn, err);
        }
        uint16_t no = (uint16_t)k, cnt = (uint16_t)n_files;
        int32_t nt = (int32_t)n;
        uint8_t b2[2], b4[4];
        b2[0] = (uint8_t)no; b2[1] = (uint8_t)(no >> 8);
        /* llama-quantize --keep-split sets the split keys only for 2 or more files */
        const int split_keys = !(flags & TM_GGUF_WRITE_KEEP_SPLIT) || n_files > 1;
        if (!s && split_keys) s = tm_gguf_kvlist_set_raw(sk, "split.no", TM_GGUF_U16, b2, 2, err);
        b2[0] = (uint8_t)cnt; b2[1] = (uint8_t)(cnt >> 8);
        if (!s && split_keys) s = tm_gguf_kvlist_set_raw(sk, "split.count", TM_GGUF_U16, b2, 2, err);
        for (int q = 0; q < 4; q++) b4[q] = (uint8_t)((uint32_t)nt >> (8 * q));
        if (!s && split_keys) s = tm_gguf_kvlist_set_raw(sk, "split.tensors.count", TM_GGUF_I32, b4, 4, err);
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (w->sub_of[i] == k) sub_t[m++] = t[i];
        /* llama.cpp's llama_split_path: "%s-%05d-of-%05d.gguf", numbered from 1 */
        char *fp = s ? NULL : tm__aprintf("%.*s-%05d-of-%05d.gguf", (int)pl, path, k + 1, n_files);
        if (!s && !fp) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s) s = tm_gguf_writer_open_ex(fp, sk, sub_t, m, flags, &w->sub[k], err);
        if (!s) w->n_sub = k + 1;
        free(fp);
        tm_gguf_kvlist_free(sk);
    }
    free(sub_t);
    if (s) {
        for (int k = 0; w->sub && k < n_files; k++)
            if (k >= w->n_sub) tm_gguf_writer_free(w->sub[k]), w->sub[k] = NULL;
        if (!w->n_sub) { free(w->sub); w->sub = NULL; }
        tm_gguf_writer_free(w);
        return s;
    }
    *out = w;
    return TM_OK;
}
