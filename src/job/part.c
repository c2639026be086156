/* part.c: the parts of a sharded quantize run: the partition, the part's layout and checksums,
** its "part" record (part.h). */
#include "part.h"
#include "part_crc.h"
#include "../core/crc32c.h"
#include "../core/fsutil.h"

#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Atomic uint64_t tm__part_readback_bytes;

/* ---------------------------------------------------------------------------------------- */
/* partition                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static const uint64_t *g_sort_bytes; /* only during tm__shard_assign's qsort (under g_sort_mu) */
static pthread_mutex_t g_sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int by_bytes_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    if (g_sort_bytes[x] != g_sort_bytes[y]) return g_sort_bytes[x] > g_sort_bytes[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

tm_status tm__shard_assign(const uint64_t *bytes, int64_t n_items, int n_parts, int *owner, tm_err *err) {
    if (n_parts < 1) return tm__err_set(err, TM_E_INVALID_ARG, -1, "no parts");
    int64_t *ord = tm__malloc_n((size_t)(n_items ? n_items : 1), sizeof *ord);
    uint64_t *load = tm__calloc((size_t)n_parts, sizeof *load);
    if (!ord || !load) {
        free(ord);
        free(load);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t k = 0; k < n_items; k++) ord[k] = k;
    pthread_mutex_lock(&g_sort_mu);
    g_sort_bytes = bytes;
    qsort(ord, (size_t)n_items, sizeof *ord, by_bytes_desc);
    g_sort_bytes = NULL;
    pthread_mutex_unlock(&g_sort_mu);
    for (int64_t k = 0; k < n_items; k++) {
        int best = 0;
        for (int p = 1; p < n_parts; p++)
            if (load[p] < load[best]) best = p;
        owner[ord[k]] = best;
        load[best] += bytes[ord[k]];
    }
    free(ord);
    free(load);
    return TM_OK;
}

char *tm__part_path(const char *out, int i, int n) { return tm__aprintf("%s.part-%d-of-%d", out, i, n); }

tm_status tm__part_begin(tm__pipe *pp, const tm_file *in, tm_err *err) {
    int64_t nt = tm_file_n_tensors(in);
    int nf = tm_file_n_paths(in);
    uint64_t *b = tm__malloc_n((size_t)(nt > nf ? nt : nf) + 1, sizeof *b);
    pp->tensor_owner = tm__calloc((size_t)nt + 1, sizeof(int));
    pp->source_owner = tm__calloc((size_t)nf + 1, sizeof(int));
    if (!b || !pp->tensor_owner || !pp->source_owner) {
        free(b);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t t = 0; t < nt; t++) b[t] = tm_file_tensor(in, t)->n_bytes;
    tm_status s = tm__shard_assign(b, nt, pp->shard_n, pp->tensor_owner, err);
    for (int f = 0; f < nf; f++) b[f] = tm_file_size(in, f);
    if (!s) s = tm__shard_assign(b, nf, pp->shard_n, pp->source_owner, err);
    free(b);
    /* the directory of the output files every part writes into: made by the first part */
    if (!s && !(pp->shared = tm__aprintf("%s.parts-of-%d", pp->final_out, pp->shard_n)))
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* the writers log what they write, with its CRC-32C, for the record (tm__part_record) */
    if (!s && !pp->crclog && !(pp->crclog = tm__crclog_new())) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    struct stat st;
    if (!s && mkdir(pp->shared, 0755) == 0) pp->shared_made = 1;
    else if (!s && errno != EEXIST) s = tm__err_sys(err, errno, "%s: cannot create directory", pp->shared);
    if (!s && (lstat(pp->shared, &st) != 0 || !S_ISDIR(st.st_mode)))
        s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s exists and is not a directory (the parts' shared output); "
                        "remove it", pp->shared);
    return s;
}

/* The note in OUT.parts-of-n of the run that laid its files out (its command line), for the
** refusal of a part of another plan. */
static char *plan_note(const tm__pipe *pp) { return tm__aprintf("%s/.tensormorph-plan", pp->shared); }

static void layout_unlock(tm__pipe *pp) {
    if (pp->layout_fd > 0) close(pp->layout_fd - 1); /* releases the flock */
    pp->layout_fd = 0;
}

void tm__part_planned(tm__pipe *pp, const char *command_line, tm_status s, tm_err *err) {
    layout_unlock(pp);
    char *np = pp->shared ? plan_note(pp) : NULL;
    if (!np) return;
    if (!s) { /* the first part that sized the shared files writes it; the others keep it */
        int fd = open(np, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            const char *c = command_line ? command_line : "";
            if (write(fd, c, strlen(c)) < 0) { /* a note only */ }
            close(fd);
        }
    } else if (s == TM_E_INVALID_ARG && err && strstr(err->msg, "was laid out by another plan")) {
        char note[512] = "";
        int fd = open(np, O_RDONLY | O_CLOEXEC);
        ssize_t r = fd >= 0 ? read(fd, note, sizeof note - 1) : -1;
        if (fd >= 0) close(fd);
        char *at = strstr(err->msg, "another plan");
        if (r > 0 && at) { /* "another plan (`COMMAND`)" */
            note[r] = '\0';
            at += strlen("another plan");
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%.*s (`%s`)%s", (int)(at - err->msg), err->msg, note, at);
            snprintf(err->msg, sizeof err->msg, "%s", msg);
        }
    }
    free(np);
}

void tm__part_refused(tm__pipe *pp) {
    layout_unlock(pp);
    if (pp->shared && pp->shared_made) rmdir(pp->shared); /* only while empty: nothing was written */
}

tm_status tm__part_probe(const char *path, uint64_t bytes, char hex[65], tm_err *err) {
    enum { END = 64 << 10 }; /* the bytes probed at each end: the header and the first data */
    size_t n1 = bytes < END ? (size_t)bytes : END;
    size_t n2 = bytes <= 2 * (uint64_t)END ? (size_t)(bytes - n1) : END;
    uint8_t *buf = tm__malloc_n(n1 + n2 + 8, 1);
    if (!buf) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    tm_status s = fd < 0 ? tm__err_sys(err, errno, "%s: cannot open", path) : TM_OK;
    if (!s && (pread(fd, buf, n1, 0) != (ssize_t)n1 || pread(fd, buf + n1, n2, (off_t)(bytes - n2)) != (ssize_t)n2))
        s = tm__err_sys(err, errno, "%s: cannot read (it changed size during the run?)", path);
    if (fd >= 0) close(fd);
    for (int k = 0; k < 8; k++) buf[n1 + n2 + k] = (uint8_t)(bytes >> (8 * k)); /* the size too */
    if (!s) tm_sha256_buffer(buf, n1 + n2 + 8, hex);
    free(buf);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* layout                                                                                    */
/* ---------------------------------------------------------------------------------------- */

typedef struct seg {
    int      file;
    uint64_t off, len;
    int      owner;
} seg;

static int seg_cmp(const void *a, const void *b) {
    const seg *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files in the staging directory (the manifest excepted), sorted. */
static tm_status stage_files(const char *dir, char ***names, int *n, tm_err *err) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return tm__err_sys(err, errno, "%s: cannot list", dir);
    int cap = 0;
    tm_status s = TM_OK;
    struct dirent *de;
    while (!s && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "tensormorph-manifest.json"))
            continue;
        char *p = tm__aprintf("%s/%s", dir, de->d_name);
        struct stat st;
        if (!p) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if (lstat(p, &st) != 0) s = tm__err_sys(err, errno, "%s: cannot stat", p);
        else if (!S_ISREG(st.st_mode))
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: a sharded run (--shard) writes plain files only", p);
        free(p);
        if (s) break;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
            *names = nn;
        }
        if (!((*names)[*n] = tm__strdup(de->d_name))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else (*n)++;
    }
    closedir(d);
    if (!s && *n > 1) qsort(*names, (size_t)*n, sizeof **names, str_cmp);
    return s;
}

/* CRC-32C of len bytes at off of the file: through a map of the page cache (no copy), else,
** where the file cannot be mapped, with pread into buf. */
static tm_status crc_range(int fd, const char *path, uint64_t off, uint64_t len, uint8_t *buf, size_t bufn,
                           uint32_t *crc, tm_err *err) {
    uint32_t c = 0;
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), a = off & ~(pg - 1);
    if (len && len + (off - a) <= (uint64_t)SIZE_MAX) {
        void *m = mmap(NULL, (size_t)(len + (off - a)), PROT_READ, MAP_SHARED, fd, (off_t)a);
        if (m != MAP_FAILED) {
            *crc = tm__crc32c(0, (const uint8_t *)m + (off - a), (size_t)len);
            munmap(m, (size_t)(len + (off - a)));
            return TM_OK;
        }
    }
    while (len) {
        size_t k = len < bufn ? (size_t)len : bufn;
        ssize_t r = pread(fd, buf, k, (off_t)off);
        if (r != (ssize_t)k) return tm__err_sys(err, r < 0 ? errno : EIO, "%s: cannot read back at byte %llu", path, (unsigned long long)off);
        c = tm__crc32c(c, buf, k);
        off += k;
        len -= k;
    }
    *crc = c;
    return TM_OK;
}

static json_t *hash_json(json_t *v) { /* sha256 of v's compact, key-sorted text; steals v */
    char *t = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(v);
    if (!t) return NULL;
    char hex[65];
    tm_sha256_buffer(t, strlen(t), hex);
    free(t);
    return json_string(hex);
}

json_t *tm__part_recipe_sha256(const json_t *man, const char *format, int64_t nt) {
    json_t *rid = json_object();
    const char *keys[] = {"tool", "checksums", "recipe", "calibration"};
    for (int q = 0; q < 4; q++) {
        json_t *v = json_object_get(man, keys[q]);
        json_object_set(rid, keys[q], v ? v : json_null());
    }
    json_object_set_new(rid, "format", json_string(format));
    json_object_set_new(rid, "n_tensors", json_integer((json_int_t)nt));
    return hash_json(rid);
}

/* The writer's files that lie in the shared directory (their names, appended to *names). */
static tm_status shared_files(tm__pipe *pp, const tm__qwriter *w, void *job, char ***names, int *n, tm_err *err) {
    const char *file1 = tm__pipe_file_target(pp);
    const char *const *files = &file1;
    int nf = w->output_files ? w->output_files(job, &files) : (file1 ? 1 : 0);
    if (nf < 0) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    size_t dl = strlen(pp->shared);
    char **nn = realloc(*names, (size_t)(*n + nf + 1) * sizeof *nn);
    if (!nn) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    *names = nn;
    for (int k = 0; k < nf; k++) {
        if (!files[k] || strncmp(files[k], pp->shared, dl) || files[k][dl] != '/' || strchr(files[k] + dl + 1, '/'))
            continue; /* in the part's own directory */
        if (!((*names)[*n] = tm__strdup(files[k] + dl + 1))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        (*n)++;
    }
    return TM_OK;
}

/* Is names[f] one of the shared files? (the first n_own names are the part's own) */
#define IS_SHARED(f) ((f) >= n_own)

tm_status tm__part_record(tm__pipe *pp, const tm__qwriter *w, void *job, json_t *man, tm_err *err) {
    const tm_file *in = pp->in;
    int64_t nt = tm_file_n_tensors(in);
    char **names = NULL;
    int nfiles = 0, n_own = 0;
    seg *sg = NULL;
    int64_t ns = 0, cap = 0;
    uint64_t *fsize = NULL;
    uint8_t *buf = NULL;
    json_t *rec = json_object(), *files = json_array(), *layout = json_array();
    /* the files: the part's own (small ones: the index, config.json, side files), then those of
    ** the shared directory, each list sorted by name */
    tm_status s = stage_files(pp->stage, &names, &nfiles, err);
    n_own = nfiles;
    if (!s && pp->shared) {
        s = shared_files(pp, w, job, &names, &nfiles, err);
        if (!s) qsort(names + n_own, (size_t)(nfiles - n_own), sizeof *names, str_cmp);
        if (!s) s = tm__fsync_dir(pp->shared, err);
    }
    for (int f = 0; !s && f < nfiles; f++)
        for (int g = 0; g < f; g++)
            if (!strcmp(names[f], names[g])) {
                s = tm__err_set(err, TM_E_INTERNAL, -1, "%s: in the part and in %s", names[f], pp->shared);
                break;
            }
    if (!s && !(fsize = tm__calloc((size_t)nfiles + 1, sizeof *fsize))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int f = 0; !s && f < nfiles; f++) {
        char *p = tm__aprintf("%s/%s", IS_SHARED(f) ? pp->shared : pp->stage, names[f]);
        struct stat st;
        if (!p || stat(p, &st) != 0) s = tm__err_sys(err, errno, "%s: cannot stat", p ? p : names[f]);
        else fsize[f] = (uint64_t)st.st_size;
        free(p);
    }
    /* every tensor's spans, from the plan (the same in every part) */
    for (int64_t t = 0; !s && t < nt; t++) {
        tm__span sp[8];
        int k = w->tensor_spans(job, t, sp, 8);
        if (k < 0) { s = tm__err_set(err, TM_E_INTERNAL, -1, "tensor %lld: no output spans", (long long)t); break; }
        for (int q = 0; q < k && !s; q++) {
            if (!sp[q].len) continue;
            const char *base = strrchr(sp[q].file, '/') ? strrchr(sp[q].file, '/') + 1 : sp[q].file;
            int f = 0;
            while (f < nfiles && strcmp(names[f], base)) f++;
            if (f == nfiles || sp[q].off + sp[q].len > fsize[f] || sp[q].off + sp[q].len < sp[q].off) {
                s = tm__err_set(err, TM_E_INTERNAL, -1, "tensor %s: span outside the staged output %s",
                                tm_file_tensor(in, t)->name, base);
                break;
            }
            if (ns == cap) {
                cap = cap ? 2 * cap : 256;
                seg *n2 = realloc(sg, (size_t)cap * sizeof *sg);
                if (!n2) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
                sg = n2;
            }
            sg[ns++] = (seg){f, sp[q].off, sp[q].len, pp->tensor_owner[t]};
        }
    }
    if (!s) qsort(sg, (size_t)ns, sizeof *sg, seg_cmp);
    if (!s && !(buf = tm__malloc_n(1 << 20, 1))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    uint64_t data_bytes = 0;
    int64_t k = 0;
    for (int f = 0; !s && f < nfiles; f++) {
        char *p = tm__aprintf("%s/%s", IS_SHARED(f) ? pp->shared : pp->stage, names[f]);
        int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
        if (fd < 0) { s = tm__err_sys(err, errno, "%s: cannot open", p ? p : names[f]); free(p); break; }
        json_t *segs = json_array(), *lsegs = json_array();
        uint64_t at = 0;
        int mine = 0;
        while (!s && at < fsize[f]) {
            seg cur;
            if (k < ns && sg[k].file == f && sg[k].off == at) {
                cur = sg[k++];
                while (k < ns && sg[k].file == f && sg[k].off == cur.off + cur.len && sg[k].owner == cur.owner)
                    cur.len += sg[k++].len; /* one segment per run of one owner */
            } else if (k < ns && sg[k].file == f && sg[k].off < at) {
                s = tm__err_set(err, TM_E_INTERNAL, -1, "%s: overlapping tensor spans at byte %llu", names[f],
                                (unsigned long long)sg[k].off);
                break;
            } else { /* bytes no tensor owns: part 0's */
                uint64_t end = k < ns && sg[k].file == f ? sg[k].off : fsize[f];
                cur = (seg){f, at, end - at, 0};
            }
            json_int_t crc = -1;
            if (cur.owner == pp->shard_i) {
                uint32_t c = 0;
                if (!IS_SHARED(f) || !tm__crclog_range(pp->crclog, names[f], cur.off, cur.len, &c)) {
                    s = crc_range(fd, names[f], cur.off, cur.len, buf, 1 << 20, &c, err); /* not all logged */
                    atomic_fetch_add(&tm__part_readback_bytes, cur.len);
                }
                crc = c;
                mine = 1;
                data_bytes += cur.len;
            }
            json_t *a = json_pack("[IIiI]", (json_int_t)cur.off, (json_int_t)cur.len, cur.owner, crc);
            json_array_append_new(segs, a);
            json_array_append_new(lsegs, json_pack("[IIi]", (json_int_t)cur.off, (json_int_t)cur.len, cur.owner));
            at = cur.off + cur.len;
        }
        close(fd);
        if (!s && !mine && !IS_SHARED(f) && pp->shard_i != 0 && unlink(p) != 0) s = tm__err_sys(err, errno, "%s: cannot remove", p);
        free(p);
        json_array_append_new(files, json_pack("{sssIsosb}", "file", names[f], "bytes", (json_int_t)fsize[f], "segments", segs,
                                               "shared", IS_SHARED(f)));
        json_array_append_new(layout, json_pack("{sssIsosb}", "file", names[f], "bytes", (json_int_t)fsize[f], "segments", lsegs,
                                                "shared", IS_SHARED(f)));
    }
    /* identity of the recipe and the sources */
    json_t *srcs = json_array(), *ident = json_array();
    json_t *msrc = json_object_get(man, "sources");
    for (int f = 0; !s && f < tm_file_n_paths(in); f++) {
        char hex[65];
        s = tm__part_probe(tm_file_path(in, f), tm_file_size(in, f), hex, err);
        if (s) break;
        int hashed = pp->source_owner[f] == pp->shard_i && pp->hex[f][0];
        json_t *o = json_pack("{sIss}", "bytes", (json_int_t)tm_file_size(in, f), "probe_sha256", hex);
        json_array_append_new(ident, json_pack("{sIss}", "bytes", (json_int_t)tm_file_size(in, f), "probe_sha256", hex));
        json_object_set_new(o, "sha256", hashed ? json_string(pp->hex[f]) : json_null());
        json_array_append_new(srcs, o);
        if (!hashed) json_object_set_new(json_array_get(msrc, (size_t)f), "sha256", json_null());
    }
    if (!s) {
        json_t *owned = json_array(), *trec = json_array(), *rows = json_array();
        json_t *mrows = json_object_get(man, "tensors");
        for (size_t r = 0; r < json_array_size(mrows); r++) {
            int64_t t = w->row_tensor ? w->row_tensor(job, (int64_t)r) : (int64_t)r;
            if (t >= 0 && t < nt && pp->tensor_owner[t] == pp->shard_i) json_array_append_new(rows, json_integer((json_int_t)r));
        }
        for (int64_t t = 0; t < nt; t++) {
            if (pp->tensor_owner[t] != pp->shard_i) continue;
            json_array_append_new(owned, json_integer((json_int_t)t));
            json_t *r = w->part_tensor ? w->part_tensor(job, t) : NULL;
            if (r) json_array_append_new(trec, json_pack("{sIso}", "index", (json_int_t)t, "record", r));
        }
        json_object_set_new(rec, "schema", json_string("tensormorph.part/1"));
        json_object_set_new(rec, "out", json_string(pp->final_out));
        json_object_set_new(rec, "index", json_integer(pp->shard_i));
        json_object_set_new(rec, "count", json_integer(pp->shard_n));
        json_object_set_new(rec, "format", json_string(w->format));
        const char *ob = strrchr(pp->final_out, '/') ? strrchr(pp->final_out, '/') + 1 : pp->final_out;
        json_object_set_new(rec, "kind", json_string(w->kind != TM__PIPE_FILE ? "directory"
                                                     : nfiles == 1 && !strcmp(names[0], ob) ? "file" : "files"));
        json_object_set_new(rec, "recipe_sha256", tm__part_recipe_sha256(man, w->format, nt));
        json_object_set_new(rec, "source_sha256", hash_json(ident));
        ident = NULL;
        json_object_set_new(rec, "layout_sha256", hash_json(layout));
        layout = NULL;
        json_object_set_new(rec, "sources", srcs);
        srcs = NULL;
        json_object_set_new(rec, "files", files);
        files = NULL;
        json_object_set_new(rec, "tensors", owned);
        json_object_set_new(rec, "rows", rows);
        json_object_set_new(rec, "tensor_records", trec);
        json_object_set_new(rec, "data_bytes", json_integer((json_int_t)data_bytes));
        /* the manifest names OUT, not the part; the rollback list holds the sha256 this part made */
        json_object_set_new(json_object_get(man, "output"), "path", json_string(pp->final_out));
        json_t *rb = json_object_get(json_object_get(man, "rollback"), "sha256");
        if (rb) {
            json_array_clear(rb);
            for (size_t q = 0; q < json_array_size(msrc); q++) {
                json_t *h = json_object_get(json_array_get(msrc, q), "sha256");
                if (json_is_string(h)) json_array_append(rb, h);
            }
        }
        json_object_set_new(man, "part", rec);
        rec = NULL;
    }
    json_decref(rec);
    json_decref(files);
    json_decref(layout);
    json_decref(srcs);
    json_decref(ident);
    for (int f = 0; f < nfiles; f++) free(names[f]);
    free(names);
    free(fsize);
    free(sg);
    free(buf);
    return s;
}
