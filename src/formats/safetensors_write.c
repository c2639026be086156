/*
** safetensors_write.c: the streaming, atomic safetensors writer (tensormorph/safetensors.h).
**
** Open fixes everything: the shard plan, each header (jansson, keys in a stable order:
** "__metadata__" first, then the entries in the caller's order, each {"dtype", "shape",
** "data_offsets"}), space padding to a multiple of 8 bytes, and each tensor's byte offset
** (contiguous in entry order). Each target gets "<target>.tmp.<pid>" (O_EXCL), ftruncate'd to
** its final size and holding its header; data then arrives by pwrite in any order from any
** thread. Finish fsyncs every temporary file, renames each onto its target, writes the index
** (sharded) the same way, and fsyncs the directory. Until finish succeeds nothing exists at a
** target path; on error or free the temporary files are removed.
*/
#include "file.h"
#include "../core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>


typedef struct st_wshard {
    char    *target;    /* final path                          */
    char    *tmp;       /* "<target>.tmp.<pid>"                */
    int      fd;        /* -1 once closed                      */
    int      created;   /* 1 while tmp exists on disk           */
    uint64_t data_start;/* 8 + padded header length             */
    uint64_t size;      /* whole file                           */
} st_wshard;

struct tm_st_writer {
    int64_t    n_entries;
    int       *shard_of;     /* per entry                        */
    uint64_t  *offset;       /* per entry: absolute file offset  */
    uint64_t  *n_bytes;      /* per entry                        */
    st_wshard *shards;
    int        n_shards;
    char      *index_path;   /* sharded: the index target, else NULL */
    char      *index_text;   /* its JSON, written at finish          */
    int        finished;     /* 1 after finish (either outcome)      */
    int        ok;           /* 1 when finish succeeded              */
    int        shared, shared_header; /* tm_st_write_params                */
};

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copy of n names; returns the first duplicate or NULL; *oom on allocation failure. */
static const char *first_duplicate(const char *const *names, int64_t n, int *oom) {
    *oom = 0;
    if (n < 2) return NULL;
    const char **v = tm__malloc_n((size_t)n, sizeof *v);
    if (!v) { *oom = 1; return NULL; }
    for (int64_t i = 0; i < n; i++) v[i] = names[i];
    qsort(v, (size_t)n, sizeof *v, name_cmp);
    const char *dup = NULL;
    for (int64_t i = 1; i < n && !dup; i++)
        if (strcmp(v[i - 1], v[i]) == 0) dup = v[i];
    free(v);
    return dup;
}

static void remove_temps(tm_st_writer *w) {
    for (int i = 0; i < w->n_shards; i++) {
        st_wshard *s = &w->shards[i];
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
        }
        if (s->created) {
            unlink(s->tmp);
            s->created = 0;
        }
    }
}

void tm_st_writer_free(tm_st_writer *w) {
    if (!w) return;
    remove_temps(w);
    for (int i = 0; i < w->n_shards; i++) {
        free(w->shards[i].target);
        free(w->shards[i].tmp);
    }
    free(w->shards);
    free(w->shard_of);
    free(w->offset);
    free(w->n_bytes);
    free(w->index_path);
    free(w->index_text);
    free(w);
}

static tm_status pwrite_all(int fd, const void *data, size_t n, uint64_t off, const char *path,
                            tm_err *err) {
    const uint8_t *p = data;
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return tm__err_sys(err, errno, "%s: write of %zu bytes at %llu failed", path, n,
                               (unsigned long long)off);
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return TM_OK;
}

/* Header JSON of shard k (entries [e0, e1)), padded with spaces to a multiple of 8. */
static tm_status build_header(const tm_st_entry *entries, int64_t e0, int64_t e1,
                              const tm_st_write_params *p, const uint64_t *n_bytes, char **out,
                              size_t *out_len, tm_err *err) {
    json_t *root = json_object();
    tm_status s = TM_OK;
    if (!root) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (p && p->n_meta > 0) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) != 0) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto done;
        }
        for (int64_t i = 0; i < p->n_meta; i++) {
            json_t *v = json_string(p->meta_values[i]);
            if (!v || json_object_set_new(m, p->meta_keys[i], v) != 0) {
                s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                                "metadata key '%s': key or value is not valid UTF-8",
                                p->meta_keys[i]);
                goto done;
            }
        }
    }
    uint64_t off = 0;
    for (int64_t i = e0; i < e1; i++) {
        const tm_st_entry *e = &entries[i];
        json_t *ent = json_object(), *shape = json_array(), *offs = json_array();
        json_t *dt = json_string(tm_dtype_get(e->dtype)->name);
        int bad = !ent || !shape || !offs || !dt;
        for (int d = 0; !bad && d < e->ndim; d++)
            bad = json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) != 0;
        if (!bad)
            bad = json_array_append_new(offs, json_integer((json_int_t)off)) != 0 ||
                  json_array_append_new(offs, json_integer((json_int_t)(off + n_bytes[i]))) != 0;
        if (!bad) {
            bad = json_object_set_new(ent, "dtype", dt) != 0;
            dt = NULL;
        }
        if (!bad) {
            bad = json_object_set_new(ent, "shape", shape) != 0;
            shape = NULL;
        }
        if (!bad) {
            bad = json_object_set_new(ent, "data_offsets", offs) != 0;
            offs = NULL;
        }
        if (!bad) {
            bad = json_object_set_new(root, e->name, ent) != 0;
            ent = NULL;
        }
        json_decref(ent);
        json_decref(shape);
        json_decref(offs);
        json_decref(dt);
        if (bad) {
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "tensor '%s': cannot build its header entry (name not valid UTF-8?)",
                            e->name);
            goto done;
        }
        off += n_bytes[i];
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory serialising a header");
        goto done;
    }
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *buf = malloc(padded ? padded : 1);
    if (!buf) {
        free(text);
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto done;
    }
    memcpy(buf, text, n);
    memset(buf + n, ' ', padded - n);
    free(text);
    *out = buf;
    *out_len = padded;
done:
    json_decref(root);
    return s;
}

static tm_status validate(const tm_st_entry *entries, int64_t n, const tm_st_write_params *p,
                          uint64_t *n_bytes, tm_err *err) {
    if (n < 0 || (n > 0 && !entries))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "bad entry list (%lld entries)", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const tm_st_entry *e = &entries[i];
        if (!e->name)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "entry %lld has no name", (long long)i);
        if (strcmp(e->name, "__metadata__") == 0)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "entry %lld: '__metadata__' is reserved, not a tensor name",
                               (long long)i);
        if (!tm__st_dtype_ok(e->dtype) || !tm_dtype_get(e->dtype))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "tensor '%s': dtype %d has no safetensors name (I4/U4 must be "
                               "packed into a container dtype)",
                               e->name, (int)e->dtype);
        if (e->ndim < 0 || e->ndim > TM_MAX_DIMS)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor '%s': ndim %d outside 0..%d",
                               e->name, e->ndim, TM_MAX_DIMS);
        int ok;
        int64_t numel = tm__shape_numel(e->ndim, e->shape, &ok);
        uint64_t nb;
        if (!ok || !tm__mul_u64_ok((uint64_t)numel, (uint64_t)(tm_dtype_get(e->dtype)->bits / 8),
                                   &nb) || nb > (uint64_t)INT64_MAX)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "tensor '%s': negative dim or byte size overflows", e->name);
        n_bytes[i] = nb;
    }
    if (p && p->n_meta > 0) {
        int oom;
        if (!p->meta_keys || !p->meta_values)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "metadata arrays are NULL");
        for (int64_t i = 0; i < p->n_meta; i++)
            if (!p->meta_keys[i] || !p->meta_values[i])
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "metadata entry %lld is NULL",
                                   (long long)i);
        const char *mdup = first_duplicate(p->meta_keys, p->n_meta, &oom);
        if (oom) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (mdup)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "duplicate metadata key '%s'", mdup);
    }
    return TM_OK;
}

static tm_status check_unique_names(const tm_st_entry *entries, int64_t n, tm_err *err) {
    if (n < 2) return TM_OK;
    const char **v = tm__malloc_n((size_t)n, sizeof *v);
    if (!v) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = entries[i].name;
    int oom;
    const char *dup = first_duplicate(v, n, &oom);
    tm_status s = TM_OK;
    if (oom) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    else if (dup) s = tm__err_set(err, TM_E_INVALID_ARG, -1, "duplicate tensor name '%s'", dup);
    free(v);
    return s;
}

tm_status tm_st_writer_open(const char *path, const tm_st_entry *entries, int64_t n,
                            const tm_st_write_params *p, tm_st_writer **out, tm_err *err) {
    tm_err_clear(err);
    if (!out) return tm__err_set(err, TM_E_INVALID_ARG, -1, "out is NULL");
    *out = NULL;
    if (!path || !*path) return tm__err_set(err, TM_E_INVALID_ARG, -1, "empty output path");
    tm_st_writer *w = calloc(1, sizeof *w);
    if (!w) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    w->n_entries = n;
    w->shard_of = tm__malloc_n(n > 0 ? (size_t)n : 1, sizeof *w->shard_of);
    w->offset = tm__malloc_n(n > 0 ? (size_t)n : 1, sizeof *w->offset);
    w->n_bytes = tm__malloc_n(n > 0 ? (size_t)n : 1, sizeof *w->n_bytes);
    int64_t *first = NULL;
    char *dir = NULL, *stem = NULL;
    tm_status s = TM_OK;
    if (!w->shard_of || !w->offset || !w->n_bytes) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto fail;
    }
    if ((s = validate(entries, n, p, w->n_bytes, err)) != TM_OK) goto fail;
    if ((s = check_unique_names(entries, n, err)) != TM_OK) goto fail;

    /* Shard plan: greedy in entry order; a tensor larger than the cap gets its own shard. */
    uint64_t cap = p ? p->max_shard_bytes : 0;
    int n_shards = 1;
    uint64_t cur = 0;
    int64_t in_cur = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t sum;
        if (cap && in_cur > 0 && (!tm__add_u64_ok(cur, w->n_bytes[i], &sum) || sum > cap)) {
            n_shards++;
            cur = 0;
            in_cur = 0;
        }
        w->shard_of[i] = n_shards - 1;
        cur += w->n_bytes[i];
        in_cur++;
    }
    w->shards = calloc((size_t)n_shards, sizeof *w->shards);
    first = tm__malloc_n((size_t)n_shards + 1, sizeof *first);
    if (!w->shards || !first) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto fail;
    }
    for (int k = 0; k < n_shards; k++) w->shards[k].fd = -1;
    w->n_shards = n_shards;
    for (int k = 0; k <= n_shards; k++) first[k] = n;
    for (int64_t i = n - 1; i >= 0; i--) first[w->shard_of[i]] = i;
    if (n == 0) first[0] = 0;

    /* Names: unsharded = path; sharded = <dir>/<stem>-0000k-of-0000N.safetensors + index. */
    if (n_shards == 1) {
        w->shards[0].target = tm__strdup(path);
        if (!w->shards[0].target) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
    } else {
        dir = tm__dirname(path);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t bl = strlen(base);
        static const char ext[] = ".safetensors";
        if (bl > sizeof ext - 1 && strcmp(base + bl - (sizeof ext - 1), ext) == 0)
            stem = tm__strndup(base, bl - (sizeof ext - 1));
        else
            stem = tm__strdup(base);
        if (!dir || !stem) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
        for (int k = 0; k < n_shards; k++) {
            w->shards[k].target = tm__aprintf("%s/%s-%05d-of-%05d.safetensors", dir, stem, k + 1,
                                              n_shards);
            if (!w->shards[k].target) {
                s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
                goto fail;
            }
        }
        w->index_path = tm__aprintf("%s/%s.safetensors.index.json", p && p->index_dir ? p->index_dir : dir, stem);
        if (!w->index_path) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
    }

    /* Headers, offsets, temporary files. */
    for (int k = 0; k < n_shards; k++) {
        st_wshard *sh = &w->shards[k];
        char *hdr = NULL;
        size_t hlen = 0;
        int64_t e0 = first[k], e1 = k + 1 < n_shards ? first[k + 1] : n;
        if ((s = build_header(entries, e0, e1, p, w->n_bytes, &hdr, &hlen, err)) != TM_OK)
            goto fail;
        sh->data_start = 8 + (uint64_t)hlen;
        uint64_t off = sh->data_start;
        for (int64_t i = e0; i < e1; i++) {
            w->offset[i] = off;
            off += w->n_bytes[i];
        }
        sh->size = off;
        const int shared = p && p->shared, header = !shared || p->shared_header;
        w->shared = shared;
        w->shared_header = header;
        sh->tmp = shared ? tm__strdup(sh->target) : tm__aprintf("%s.tmp.%ld", sh->target, (long)getpid());
        if (!sh->tmp) {
            free(hdr);
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
        sh->fd = open(sh->tmp, O_RDWR | O_CREAT | (shared ? 0 : O_EXCL) | O_CLOEXEC, 0644);
        if (sh->fd < 0) {
            free(hdr);
            s = tm__err_sys(err, errno, "%s: cannot create", sh->tmp);
            goto fail;
        }
        sh->created = !shared; /* a shared file is never removed here */
        if (shared && (s = tm__shared_size_check(sh->fd, sh->tmp, sh->size, err)) != TM_OK) {
            free(hdr);
            goto fail; /* another part's plan: refuse, untouched */
        }
        if (ftruncate(sh->fd, (off_t)sh->size) != 0) {
            free(hdr);
            s = tm__err_sys(err, errno, "%s: cannot size to %llu bytes", sh->tmp,
                            (unsigned long long)sh->size);
            goto fail;
        }
        uint8_t len8[8];
        tm__st64(len8, (uint64_t)hlen);
        if (header) s = pwrite_all(sh->fd, len8, 8, 0, sh->tmp, err);
        if (s == TM_OK && header) s = pwrite_all(sh->fd, hdr, hlen, 8, sh->tmp, err);
        free(hdr);
        if (s != TM_OK) goto fail;
    }

    /* Index text (HF layout): {"metadata": {"total_size": N}, "weight_map": {name: file}}. */
    if (w->index_path) {
        json_t *root = json_object(), *md = json_object(), *wm = json_object();
        uint64_t total = 0;
        int bad = !root || !md || !wm;
        for (int64_t i = 0; !bad && i < n; i++) {
            const char *t = w->shards[w->shard_of[i]].target;
            const char *b = strrchr(t, '/');
            bad = json_object_set_new(wm, entries[i].name, json_string(b ? b + 1 : t)) != 0;
            total += w->n_bytes[i];
        }
        if (!bad) bad = json_object_set_new(md, "total_size", json_integer((json_int_t)total)) != 0;
        if (!bad) {
            bad = json_object_set_new(root, "metadata", md) != 0;
            md = NULL;
        }
        if (!bad) {
            bad = json_object_set_new(root, "weight_map", wm) != 0;
            wm = NULL;
        }
        if (!bad) w->index_text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(root);
        json_decref(md);
        json_decref(wm);
        if (bad || !w->index_text) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory building the index");
            goto fail;
        }
    }
    free(first);
    free(dir);
    free(stem);
    *out = w;
    return TM_OK;
fail:
    free(first);
    free(dir);
    free(stem);
    tm_st_writer_free(w);
    return s;
}

tm_status tm_st_writer_write(tm_st_writer *w, int64_t entry, uint64_t off, const void *data,
                             size_t n, tm_err *err) {
    if (!w || w->finished)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "writer is NULL or already finished");
    if (entry < 0 || entry >= w->n_entries)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "entry %lld out of range (%lld entries)",
                           (long long)entry, (long long)w->n_entries);
    uint64_t end;
    if (!tm__add_u64_ok(off, (uint64_t)n, &end) || end > w->n_bytes[entry])
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "entry %lld: bytes [%llu, +%zu) outside its %llu bytes",
                           (long long)entry, (unsigned long long)off, n,
                           (unsigned long long)w->n_bytes[entry]);
    if (n == 0) return TM_OK;
    if (!data) return tm__err_set(err, TM_E_INVALID_ARG, -1, "data is NULL");
    const st_wshard *sh = &w->shards[w->shard_of[entry]];
    return pwrite_all(sh->fd, data, n, w->offset[entry] + off, sh->tmp, err);
}

tm_status tm_st_writer_finish(tm_st_writer *w, tm_err *err) {
    if (!w || w->finished)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "writer is NULL or already finished");
    w->finished = 1;
    tm_status s = TM_OK;
    for (int k = 0; k < w->n_shards && s == TM_OK; k++) {
        st_wshard *sh = &w->shards[k];
        if (fsync(sh->fd) != 0) s = tm__err_sys(err, errno, "%s: fsync failed", sh->tmp);
        else if (close(sh->fd) != 0) s = tm__err_sys(err, errno, "%s: close failed", sh->tmp);
        sh->fd = -1;
    }
    for (int k = 0; k < w->n_shards && s == TM_OK; k++) {
        st_wshard *sh = &w->shards[k];
        if (w->shared) continue; /* the parts' files stay where they are */
        if (rename(sh->tmp, sh->target) != 0)
            s = tm__err_sys(err, errno, "%s: cannot rename into place", sh->target);
        else
            sh->created = 0;
    }
    if (s == TM_OK && w->index_path)
        s = tm__write_file_atomic(w->index_path, w->index_text, strlen(w->index_text), err);
    if (s == TM_OK) {
        char *dir = tm__dirname(w->shards[0].target);
        if (!dir) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else s = tm__fsync_dir(dir, err);
        free(dir);
    }
    if (s != TM_OK) {
        remove_temps(w);
        return s;
    }
    w->ok = 1;
    return TM_OK;
}

int tm_st_writer_n_files(const tm_st_writer *w) {
    return w ? w->n_shards + (w->index_path ? 1 : 0) : 0;
}

const char *tm_st_writer_file(const tm_st_writer *w, int i) {
    if (!w || i < 0) return NULL;
    if (i < w->n_shards) return w->shards[i].target;
    if (i == w->n_shards && w->index_path) return w->index_path;
    return NULL;
}

tm_status tm_st_writer_entry_span(const tm_st_writer *w, int64_t entry, int *file, uint64_t *off, uint64_t *n) {
    if (!w || entry < 0 || entry >= w->n_entries)
        return tm__err_set(NULL, TM_E_INVALID_ARG, -1, "entry out of range");
    *file = w->shard_of[entry];
    *off = w->offset[entry];
    *n = w->n_bytes[entry];
    return TM_OK;
}
