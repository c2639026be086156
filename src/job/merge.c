/* merge.c: `tensormorph merge OUT`: the output of a sharded quantize run assembled from its
** parts (tensormorph/merge.h; the parts: part.h): the files all parts wrote in OUT.parts-of-n
** hard-linked into OUT's staging path (copied where the file system has no links), part 0's
** small files copied, every segment's CRC-32C checked against its owner's record in one read
** that also computes the sha256. Memory: one part's manifest at a time besides the merged one,
** the segment table and one 4 MiB buffer, whatever the model's size. */
#define _GNU_SOURCE 1 /* copy_file_range */
#include "../core/core.h"
#include "../core/crc32c.h"
#include "../core/fsutil.h"
#include "part.h"
#include "pipeline.h"
#include "qjob_part.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

enum { COPY_BUF = 4 << 20 };

typedef struct mseg {
    uint64_t off, len;
    int      owner;
    int64_t  crc;      /* -1 until the owner's record gave it */
} mseg;

typedef struct mfile {
    char    *name;
    uint64_t bytes;
    mseg    *segs;
    int64_t  n_segs;
    int      shared;   /* in OUT.parts-of-n (written there by every part), else in part 0's */
} mfile;

typedef struct merge_state {
    const char *out;      /* normalised */
    char       *dir, *base;
    int         n;
    mfile      *files;
    int64_t     n_files;
    json_t     *man;      /* part 0's manifest, becoming the merged one */
    json_t    **records;  /* [n_tensors] the parts' tensor records      */
    int        *tensor_part; /* [n_tensors] owner seen, -1              */
    int64_t     n_tensors;
    json_t     *parts;    /* the "parts" array                           */
    int        *lock_fd;  /* [n] OUT.part-i-of-n.lock, held for the whole merge (-1: not yet) */
    char      (*lock_old)[32]; /* [n] what the lock file held before (a killed run's pid, kept
                                  for that part's re-run to clean up after it when merge fails) */
    int        *damaged;  /* [n] a segment of part i failed its checksum  */
    uint64_t   *bad_off, *bad_end; /* [n] part i's first damaged range ... */
    const mfile **bad_file;        /* ... and its file                     */
} merge_state;

void tm_merge_result_free(tm_merge_result *r) {
    if (!r) return;
    free(r->out_path);
    free(r->format);
    free(r->manifest_json);
    free(r);
}

/* N of the parts found beside OUT (0: none). */
static tm_status find_count(merge_state *m, tm_err *err) {
    DIR *d = opendir(m->dir);
    if (!d) return tm__err_sys(err, errno, "merge %s: cannot list the directory '%s'", m->out, m->dir);
    size_t bl = strlen(m->base);
    int n = 0, other = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (strncmp(nm, m->base, bl) || strncmp(nm + bl, ".part-", 6)) continue;
        int i, c, used = 0;
        if (sscanf(nm + bl + 6, "%d-of-%d%n", &i, &c, &used) != 2 || nm[bl + 6 + used] || c < 1 || i < 0 || i >= c)
            continue; /* staging paths, lock files */
        if (n && c != n) other = c;
        else n = c;
    }
    closedir(d);
    if (other)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "merge %s: parts of two runs lie beside it (%s.part-I-of-%d and %s.part-I-of-%d); "
                           "remove the parts of the run you do not want", m->out, m->out, n, m->out, other);
    if (!n)
        return tm__err_set(err, TM_E_IO, -1,
                           "merge %s: no parts found (%s.part-I-of-N); run `tensormorph quantize IN -o %s "
                           "--shard I/N` for every I first", m->out, m->out, m->out);
    m->n = n;
    return TM_OK;
}

static const char *jstr(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* Every part's lock (OUT.part-i-of-n.lock), taken as a part run takes it (pipeline.c) and held
** until the merge ends: a part being written (its lock held) refuses the merge, and a part run
** started during the merge refuses to start (docs/scale-out.md). */
static tm_status lock_parts(merge_state *m, tm_err *err) {
    m->lock_fd = tm__malloc_n((size_t)m->n, sizeof *m->lock_fd);
    m->lock_old = tm__calloc((size_t)m->n, sizeof *m->lock_old);
    if (!m->lock_fd || !m->lock_old) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int i = 0; i < m->n; i++) m->lock_fd[i] = -1;
    tm_status s = TM_OK;
    for (int i = 0; !s && i < m->n; i++) {
        char *pp = tm__part_path(m->out, i, m->n);
        char *lp = pp ? tm__aprintf("%s.lock", pp) : NULL;
        for (int attempt = 0; !s && lp && attempt < 100 && m->lock_fd[i] < 0; attempt++) {
            int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) { s = tm__err_sys(err, errno, "%s: cannot create the lock file", lp); break; }
            if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                char b[32] = "";
                ssize_t r = pread(fd, b, sizeof b - 1, 0);
                long pid = r > 0 ? strtol(b, NULL, 10) : 0;
                close(fd);
                if (pid > 0)
                    s = tm__err_set(err, TM_E_IO, -1,
                                    "merge %s: part %d of %d (%s) is still being written (pid %ld holds its lock file "
                                    "%s); wait for its job to finish, then merge", m->out, i, m->n, pp, pid, lp);
                else
                    s = tm__err_set(err, TM_E_IO, -1,
                                    "merge %s: part %d of %d (%s) is still being written (its lock file %s is held); "
                                    "wait for its job to finish, then merge", m->out, i, m->n, pp, lp);
                break;
            }
            struct stat a, b2; /* the holder before us may have removed it: lock the file at lp */
            if (fstat(fd, &a) != 0 || stat(lp, &b2) != 0 || a.st_dev != b2.st_dev || a.st_ino != b2.st_ino) {
                close(fd);
                continue;
            }
            char pid[24];
            int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            ssize_t r = pread(fd, m->lock_old[i], sizeof m->lock_old[i] - 1, 0);
            m->lock_old[i][r > 0 ? r : 0] = '\0';
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k) {
                s = tm__err_sys(err, errno, "%s: cannot write the lock file", lp);
                close(fd);
                break;
            }
            m->lock_fd[i] = fd;
        }
        if (!s && !lp) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s && m->lock_fd[i] < 0) s = tm__err_set(err, TM_E_IO, -1, "%s: cannot take the lock (it keeps being replaced)", lp);
        free(lp);
        free(pp);
    }
    return s;
}

/* The part locks, removed while still held (the next part run creates its own); after a failed
** merge, a lock file that held a killed run's pid gets it back instead. */
static void unlock_parts(merge_state *m, int merged) {
    for (int i = 0; m->lock_fd && i < m->n; i++) {
        if (m->lock_fd[i] < 0) continue;
        char *pp = tm__part_path(m->out, i, m->n);
        char *lp = pp ? tm__aprintf("%s.lock", pp) : NULL;
        size_t ol = strlen(m->lock_old[i]);
        if (!merged && ol) {
            if (ftruncate(m->lock_fd[i], 0) != 0 || pwrite(m->lock_fd[i], m->lock_old[i], ol, 0) != (ssize_t)ol) { /* best effort */ }
        } else if (lp) unlink(lp);
        close(m->lock_fd[i]);
        m->lock_fd[i] = -1;
        free(lp);
        free(pp);
    }
    free(m->lock_fd);
    free(m->lock_old);
    m->lock_fd = NULL;
    m->lock_old = NULL;
}

/* The part's manifest, or the reason it is missing. */
static tm_status load_part(merge_state *m, int i, json_t **man, json_t **rec, tm_err *err) {
    *man = NULL;
    char *pp = tm__part_path(m->out, i, m->n);
    char *mp = pp ? tm__aprintf("%s/tensormorph-manifest.json", pp) : NULL;
    char *lp = pp ? tm__aprintf("%s.lock", pp) : NULL;
    if (!mp || !lp) {
        free(pp); free(mp); free(lp);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    tm_status s = TM_OK;
    struct stat st;
    if (stat(mp, &st) != 0) { /* not being written: merge holds its lock (lock_parts) */
        s = tm__err_set(err, TM_E_IO, -1,
                        "merge %s: part %d of %d (%s) is missing: its job failed or did not run; re-run "
                        "`tensormorph quantize IN -o %s --shard %d/%d` with the same options",
                        m->out, i, m->n, pp, m->out, i, m->n);
    } else {
        json_error_t je;
        *man = json_load_file(mp, 0, &je);
        if (!*man || !json_is_object(*man))
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s is not JSON (line %d: %s); re-run --shard %d/%d",
                            m->out, mp, je.line, je.text, i, m->n);
    }
    if (!s) {
        *rec = json_object_get(*man, "part");
        json_int_t ix = json_integer_value(json_object_get(*rec, "index"));
        json_int_t ct = json_integer_value(json_object_get(*rec, "count"));
        const char *sch = jstr(*rec, "schema");
        const char *o = jstr(*rec, "out");
        const char *ob = o ? (strrchr(o, '/') ? strrchr(o, '/') + 1 : o) : NULL;
        if (!json_is_object(*rec) || !sch || strcmp(sch, "tensormorph.part/1"))
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s has no part record (\"part\", schema tensormorph.part/1)",
                            m->out, mp);
        else if (ix != i || ct != m->n || !ob || strcmp(ob, m->base))
            s = tm__err_set(err, TM_E_CORRUPT, -1,
                            "merge %s: %s records part %lld of %lld of '%s', not part %d of %d of %s; re-run --shard %d/%d",
                            m->out, pp, (long long)ix, (long long)ct, o ? o : "?", i, m->n, m->out, i, m->n);
    }
    if (s) {
        json_decref(*man);
        *man = NULL;
    }
    free(pp); free(mp); free(lp);
    return s;
}

/* Part 0's layout: the files and their segments. */
static tm_status read_layout(merge_state *m, const json_t *rec, tm_err *err) {
    const json_t *files = json_object_get(rec, "files");
    if (!json_is_array(files)) return tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: part 0 has no files list", m->out);
    m->n_files = (int64_t)json_array_size(files);
    m->files = tm__calloc((size_t)m->n_files + 1, sizeof *m->files);
    if (!m->files) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t f = 0; f < m->n_files; f++) {
        const json_t *fo = json_array_get(files, (size_t)f), *segs = json_object_get(fo, "segments");
        const char *nm = jstr(fo, "file");
        mfile *mf = &m->files[f];
        if (!nm || !*nm || strchr(nm, '/') || !strcmp(nm, "..") || !strcmp(nm, ".") || !json_is_array(segs) ||
            !json_is_integer(json_object_get(fo, "bytes")))
            return tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: part 0: files[%lld] is not {file, bytes, segments}",
                               m->out, (long long)f);
        mf->name = tm__strdup(nm);
        mf->bytes = (uint64_t)json_integer_value(json_object_get(fo, "bytes"));
        mf->shared = json_is_true(json_object_get(fo, "shared"));
        mf->n_segs = (int64_t)json_array_size(segs);
        mf->segs = tm__calloc((size_t)mf->n_segs + 1, sizeof *mf->segs);
        if (!mf->name || !mf->segs) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        uint64_t at = 0;
        for (int64_t k = 0; k < mf->n_segs; k++) {
            const json_t *a = json_array_get(segs, (size_t)k);
            mseg *sg = &mf->segs[k];
            json_int_t off = json_integer_value(json_array_get(a, 0)), len = json_integer_value(json_array_get(a, 1));
            json_int_t own = json_integer_value(json_array_get(a, 2));
            if (json_array_size(a) != 4 || off < 0 || len <= 0 || (uint64_t)off != at || own < 0 || own >= m->n)
                return tm__err_set(err, TM_E_CORRUPT, -1,
                                   "merge %s: part 0: %s segment %lld does not continue the file at byte %llu",
                                   m->out, nm, (long long)k, (unsigned long long)at);
            *sg = (mseg){(uint64_t)off, (uint64_t)len, (int)own, -1};
            at += (uint64_t)len;
        }
        if (at != mf->bytes)
            return tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: part 0: %s segments cover %llu of %llu bytes", m->out,
                               nm, (unsigned long long)at, (unsigned long long)mf->bytes);
    }
    return TM_OK;
}

/* Take what part i contributes: its segments' checksums, tensor rows and records, sources. */
static tm_status take_part(merge_state *m, int i, json_t *man, json_t *rec, const json_t *rec0, tm_err *err) {
    char *pp = tm__part_path(m->out, i, m->n);
    if (!pp) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    static const struct { const char *key, *what; } same[] = {
        {"format", "output format"},
        {"kind", "output kind"},
        {"recipe_sha256", "recipe, options or tool version"},
        {"source_sha256", "source checkpoint"},
        {"layout_sha256", "output layout"},
    };
    /* the input files a recipe names (an importance matrix) by their content, before the recipe
    ** hash that covers them: the message says which file differs */
    const char *ia = jstr(json_object_get(json_object_get(man, "recipe"), "importance_matrix"), "sha256");
    const char *ib = jstr(json_object_get(json_object_get(m->man, "recipe"), "importance_matrix"), "sha256");
    if ((ia || ib) && (!ia || !ib || strcmp(ia, ib)))
        s = tm__err_set(err, TM_E_CORRUPT, -1,
                        "merge %s: %s: imatrix differs from part 0's (sha256 %.12s... vs %.12s...: the importance "
                        "matrix file changed between the parts, or another one was given); re-run --shard %d/%d with "
                        "part 0's imatrix", m->out, pp, ia ? ia : "(none)", ib ? ib : "(none)", i, m->n);
    for (size_t k = 0; !s && k < sizeof same / sizeof same[0]; k++) {
        const char *a = jstr(rec, same[k].key), *b = jstr(rec0, same[k].key);
        if (!a || !b || strcmp(a, b))
            s = tm__err_set(err, TM_E_CORRUPT, -1,
                            "merge %s: %s was made from another %s than part 0 (%s differs); re-run --shard %d/%d "
                            "with part 0's command", m->out, pp, same[k].what, same[k].key, i, m->n);
    }
    /* checksums of its segments, in part 0's layout order */
    const json_t *files = json_object_get(rec, "files");
    if (!s && (int64_t)json_array_size(files) != m->n_files)
        s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s lists %zu files, part 0 %lld", m->out, pp,
                        json_array_size(files), (long long)m->n_files);
    for (int64_t f = 0; !s && f < m->n_files; f++) {
        const json_t *segs = json_object_get(json_array_get(files, (size_t)f), "segments");
        mfile *mf = &m->files[f];
        if ((int64_t)json_array_size(segs) != mf->n_segs) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s: %s has another layout than in part 0", m->out, pp, mf->name);
            break;
        }
        for (int64_t k = 0; k < mf->n_segs; k++) {
            if (mf->segs[k].owner != i) continue;
            json_int_t c = json_integer_value(json_array_get(json_array_get(segs, (size_t)k), 3));
            if (c < 0 || c > 0xFFFFFFFFll) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s: %s segment at byte %llu has no checksum", m->out,
                                pp, mf->name, (unsigned long long)mf->segs[k].off);
                break;
            }
            mf->segs[k].crc = c;
        }
    }
    /* its tensors' manifest rows and records */
    json_t *rows = json_object_get(man, "tensors"), *mrows = json_object_get(m->man, "tensors");
    const json_t *own = json_object_get(rec, "rows");
    if (!s && (!json_is_array(rows) || (int64_t)json_array_size(rows) != m->n_tensors || !json_is_array(own)))
        s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s: its manifest's tensors do not match part 0's", m->out, pp);
    for (size_t k = 0; !s && k < json_array_size(own); k++) {
        json_int_t t = json_integer_value(json_array_get(own, k));
        if (t < 0 || t >= m->n_tensors || m->tensor_part[t] >= 0) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s claims tensor row %lld, %s", m->out, pp, (long long)t,
                            t < 0 || t >= m->n_tensors ? "which does not exist" : "which another part owns");
            break;
        }
        m->tensor_part[t] = i;
        if (m->man != man) json_array_set(mrows, (size_t)t, json_array_get(rows, (size_t)t));
    }
    const json_t *trec = json_object_get(rec, "tensor_records");
    for (size_t k = 0; !s && k < json_array_size(trec); k++) {
        const json_t *o = json_array_get(trec, k);
        json_int_t t = json_integer_value(json_object_get(o, "index"));
        if (t < 0 || t >= m->n_tensors || m->tensor_part[t] != i) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s: a tensor record of a tensor it does not own", m->out, pp);
            break;
        }
        json_decref(m->records[t]);
        m->records[t] = json_incref(json_object_get(o, "record"));
    }
    /* the sources it hashed */
    const json_t *srcs = json_object_get(rec, "sources");
    json_t *msrc = json_object_get(m->man, "sources");
    for (size_t f = 0; !s && f < json_array_size(srcs) && f < json_array_size(msrc); f++) {
        json_t *h = json_object_get(json_array_get(srcs, f), "sha256");
        if (json_is_string(h)) json_object_set(json_array_get(msrc, f), "sha256", h);
    }
    if (!s) {
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(i));
        json_object_set_new(o, "path", json_string(pp));
        json_object_set(o, "host", json_object_get(man, "host"));
        json_object_set(o, "command_line", json_object_get(man, "command_line"));
        json_object_set(o, "times", json_object_get(man, "times"));
        json_object_set(o, "data_bytes", json_object_get(rec, "data_bytes"));
        json_object_set_new(o, "tensors", json_integer((json_int_t)json_array_size(own)));
        json_array_append_new(m->parts, o);
    }
    free(pp);
    return s;
}

static int cancelled(const tm_merge_params *p) { return p && p->cancel && *p->cancel; }

/* Copy len bytes at off of in to the same offset of out: copy_file_range(2) (in the kernel; a
** reflink or a server-side copy where the filesystem has one), else pread/pwrite. */
static tm_status copy_range(int in, int out, uint64_t off, uint64_t len, uint8_t *buf, const char *src,
                            const char *dst, tm_err *err) {
    loff_t io = (loff_t)off, oo = (loff_t)off;
    int kernel = 1;
    while (len) {
        if (kernel) {
            ssize_t r = copy_file_range(in, &io, out, &oo, len, 0);
            if (r > 0) { len -= (uint64_t)r; continue; }
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
                return tm__err_sys(err, errno, "%s -> %s: copy failed at byte %llu", src, dst, (unsigned long long)io);
            if (r == 0) return tm__err_set(err, TM_E_IO, -1, "%s: ends before byte %llu", src, (unsigned long long)io);
            kernel = 0; /* not here: copy through user space */
        }
        size_t want = len < COPY_BUF ? (size_t)len : COPY_BUF;
        ssize_t r = pread(in, buf, want, io);
        if (r != (ssize_t)want) return tm__err_sys(err, r < 0 ? errno : EIO, "%s: cannot read at byte %llu", src, (unsigned long long)io);
        for (size_t w = 0; w < want;) {
            ssize_t q = pwrite(out, buf + w, want - w, oo + (loff_t)w);
            if (q < 0 && errno == EINTR) continue;
            if (q <= 0) return tm__err_sys(err, errno, "%s: write failed", dst);
            w += (size_t)q;
        }
        io += (loff_t)want;
        oo += (loff_t)want;
        len -= want;
    }
    return TM_OK;
}

/* Copy file f from the parts into dst (each segment from its owner part). */
static tm_status copy_file(merge_state *m, const mfile *mf, const char *dst, uint8_t *buf, const tm_merge_params *p,
                           uint64_t *copied, tm_err *err) {
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) return tm__err_sys(err, errno, "%s: cannot create", dst);
    tm_status s = TM_OK;
    int in = -1, in_part = -1;
    char *src = NULL;
    for (int64_t k = 0; !s && k < mf->n_segs; k++) {
        const mseg *sg = &mf->segs[k];
        if (cancelled(p)) { s = tm__err_set(err, TM_E_CANCELLED, -1, "interrupted"); break; }
        if (sg->owner != in_part) {
            if (in >= 0) close(in);
            free(src);
            char *pp = tm__part_path(m->out, sg->owner, m->n);
            src = pp ? tm__aprintf("%s/%s", pp, mf->name) : NULL;
            free(pp);
            if (!src) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); in = -1; break; }
            in = open(src, O_RDONLY | O_CLOEXEC);
            in_part = sg->owner;
            struct stat st;
            if (in < 0) {
                s = errno == ENOENT ? tm__err_set(err, TM_E_CORRUPT, -1,
                                                  "merge %s: %s is missing from its part (bytes [%llu, %llu) of %s); "
                                                  "re-run --shard %d/%d", m->out, src, (unsigned long long)sg->off,
                                                  (unsigned long long)(sg->off + sg->len), mf->name, sg->owner, m->n)
                                    : tm__err_sys(err, errno, "%s: cannot open", src);
                break;
            }
            if (fstat(in, &st) != 0 || (uint64_t)st.st_size != mf->bytes) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s has %lld bytes, not %llu: the part is damaged; "
                                "re-run --shard %d/%d", m->out, src, (long long)st.st_size,
                                (unsigned long long)mf->bytes, sg->owner, m->n);
                break;
            }
        }
        s = copy_range(in, out, sg->off, sg->len, buf, src, dst, err);
        if (!s) *copied += sg->len;
    }
    if (in >= 0) close(in);
    free(src);
    if (!s && ftruncate(out, (off_t)mf->bytes) != 0) s = tm__err_sys(err, errno, "%s: cannot size", dst);
    if (!s && fsync(out) != 0) s = tm__err_sys(err, errno, "%s: fsync failed", dst);
    close(out);
    return s;
}

/* A shared file (OUT.parts-of-n/NAME, every part's bytes at their offsets) into dst: a hard link
** (no copy), else, where the file system has none, a copy. */
static tm_status place_shared(merge_state *m, const mfile *mf, const char *dst, uint8_t *buf, uint64_t *copied,
                              tm_err *err) {
    char *src = tm__aprintf("%s.parts-of-%d/%s", m->out, m->n, mf->name);
    if (!src) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    struct stat st;
    if (lstat(src, &st) != 0 || !S_ISREG(st.st_mode))
        s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s, where the parts write %s, is missing; re-run every part",
                        m->out, src, mf->name);
    else if ((uint64_t)st.st_size != mf->bytes)
        s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s has %lld bytes, not %llu as the parts planned; re-run "
                        "every part", m->out, src, (long long)st.st_size, (unsigned long long)mf->bytes);
    else if (link(src, dst) != 0) {
        if (errno != EPERM && errno != EXDEV && errno != EOPNOTSUPP && errno != EMLINK && errno != ENOSYS)
            s = tm__err_sys(err, errno, "%s -> %s: cannot link", src, dst);
        else { /* no hard links here: copy */
            int in = open(src, O_RDONLY | O_CLOEXEC);
            int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (in < 0 || out < 0) s = tm__err_sys(err, errno, "%s: cannot open", in < 0 ? src : dst);
            if (!s) s = copy_range(in, out, 0, mf->bytes, buf, src, dst, err);
            if (!s && fsync(out) != 0) s = tm__err_sys(err, errno, "%s: fsync failed", dst);
            if (!s) *copied += mf->bytes;
            if (in >= 0) close(in);
            if (out >= 0) close(out);
        }
    }
    free(src);
    return s;
}

/* The read of a copied file that checks every segment's CRC-32C (and, beside it, its sha256). */
typedef struct verify_state {
    merge_state        *m;
    const mfile        *mf;
    const tm_merge_params *p;
    int64_t             k;     /* current segment */
    uint32_t            crc;
} verify_state;

static tm_status verify_block(void *ud, const uint8_t *buf, size_t n, uint64_t off, tm_err *err) {
    verify_state *v = ud;
    const mfile *mf = v->mf;
    if (cancelled(v->p)) return tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
    while (n) {
        if (v->k >= mf->n_segs) return tm__err_set(err, TM_E_INTERNAL, -1, "%s: longer than its segments", mf->name);
        const mseg *sg = &mf->segs[v->k];
        uint64_t end = sg->off + sg->len;
        size_t take = end - off < n ? (size_t)(end - off) : n;
        v->crc = tm__crc32c(v->crc, buf, take);
        buf += take;
        n -= take;
        off += take;
        if (off == end) {
            if ((int64_t)v->crc != sg->crc && !v->m->damaged[sg->owner]++) { /* listed after the read */
                v->m->bad_file[sg->owner] = mf;
                v->m->bad_off[sg->owner] = sg->off;
                v->m->bad_end[sg->owner] = end;
            }
            v->crc = 0;
            v->k++;
        }
    }
    return TM_OK;
}

/* Every part whose bytes failed their checksum, in one message (not one per merge). */
static tm_status report_damage(merge_state *m, tm_err *err) {
    int nbad = 0;
    for (int i = 0; i < m->n; i++) nbad += m->damaged[i] != 0;
    if (!nbad) return TM_OK;
    char list[600] = "", rerun[600] = "";
    size_t ln = 0, rn = 0;
    for (int i = 0; i < m->n; i++) {
        if (!m->damaged[i]) continue;
        char *pp = tm__part_path(m->out, i, m->n);
        char *where = m->bad_file[i]->shared ? tm__aprintf("%s.parts-of-%d", m->out, m->n) : NULL;
        if (ln < sizeof list)
            ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s%d (%s): %s/%s bytes [%llu, %llu)%s", ln ? "; " : "",
                                   i, pp ? pp : "?", where ? where : pp ? pp : "?", m->bad_file[i]->name,
                                   (unsigned long long)m->bad_off[i], (unsigned long long)m->bad_end[i],
                                   m->damaged[i] > 1 ? " and more" : "");
        if (rn < sizeof rerun)
            rn += (size_t)snprintf(rerun + rn, sizeof rerun - rn, "%s--shard %d/%d", rn ? ", " : "", i, m->n);
        free(where);
        free(pp);
    }
    return tm__err_set(err, TM_E_CORRUPT, -1,
                       "merge %s: the bytes of %d of %d parts do not match the checksum (CRC-32C) each recorded "
                       "(damaged, or the last run did not finish writing); re-run %s: part %s", m->out, nbad, m->n,
                       rerun, list);
}

/* After OUT is in place: the parts, and the lock and staging paths of parts no process holds. */
static void remove_parts(merge_state *m) {
    char *sh = tm__aprintf("%s.parts-of-%d", m->out, m->n);
    if (sh) tm__rm_rf(sh); /* OUT's files are links to its files, or copies */
    free(sh);
    for (int i = 0; i < m->n; i++) {
        char *pp = tm__part_path(m->out, i, m->n);
        if (!pp) continue;
        tm__rm_rf(pp);
        /* merge holds every part's lock (lock_parts): what a killed part run left is stale */
        char *pb = strrchr(pp, '/') ? strrchr(pp, '/') + 1 : pp;
        size_t pl = strlen(pb);
        DIR *d = opendir(m->dir);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, pb, pl) || strncmp(de->d_name + pl, ".tmp.", 5)) continue;
            char *t = tm__aprintf("%s/%s", m->dir, de->d_name);
            if (t) tm__rm_rf(t);
            free(t);
        }
        if (d) closedir(d);
        free(pp);
    }
    tm__fsync_dir(m->dir, NULL);
}

static void free_state(merge_state *m) {
    for (int64_t f = 0; m->files && f < m->n_files; f++) {
        free(m->files[f].name);
        free(m->files[f].segs);
    }
    free(m->files);
    for (int64_t t = 0; m->records && t < m->n_tensors; t++) json_decref(m->records[t]);
    free(m->records);
    free(m->tensor_part);
    json_decref(m->man);
    json_decref(m->parts);
    free(m->dir);
    free(m->base);
    free(m->damaged);
    free(m->bad_off);
    free(m->bad_end);
    free(m->bad_file);
}

tm_status tm_merge(const char *out_arg, const tm_merge_params *p, tm_merge_result **res, tm_err *err) {
    *res = NULL;
    tm_err_clear(err);
    if (!out_arg || !*out_arg) return tm__err_set(err, TM_E_INVALID_ARG, -1, "merge: empty output path");
    merge_state m;
    memset(&m, 0, sizeof m);
    size_t ol = strlen(out_arg);
    while (ol > 1 && out_arg[ol - 1] == '/') ol--;
    char *out = tm__strndup(out_arg, ol);
    if (!out) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    m.out = out;
    m.dir = tm__dirname(out);
    const char *b = strrchr(out, '/');
    m.base = tm__strdup(b ? b + 1 : out);
    m.parts = json_array();
    tm__pipe pp;
    memset(&pp, 0, sizeof pp);
    int began = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tm_status s = !m.dir || !m.base || !m.parts ? tm__err_set(err, TM_E_NOMEM, -1, "out of memory") : TM_OK;
    if (!s) s = find_count(&m, err);
    if (!s) s = lock_parts(&m, err);
    if (!s && (!(m.damaged = tm__calloc((size_t)m.n, sizeof *m.damaged)) ||
               !(m.bad_off = tm__calloc((size_t)m.n, sizeof *m.bad_off)) ||
               !(m.bad_end = tm__calloc((size_t)m.n, sizeof *m.bad_end)) ||
               !(m.bad_file = tm__calloc((size_t)m.n, sizeof *m.bad_file))))
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* part 0 first: the layout and the manifest the merged one starts from */
    json_t *rec0 = NULL;
    if (!s) s = load_part(&m, 0, &m.man, &rec0, err);
    if (!s) s = read_layout(&m, rec0, err);
    if (!s) {
        json_t *rows = json_object_get(m.man, "tensors");
        m.n_tensors = (int64_t)json_array_size(rows);
        m.records = tm__calloc((size_t)m.n_tensors + 1, sizeof *m.records);
        m.tensor_part = tm__malloc_n((size_t)m.n_tensors + 1, sizeof *m.tensor_part);
        if (!m.records || !m.tensor_part) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int64_t t = 0; !s && t < m.n_tensors; t++) m.tensor_part[t] = -1;
    }
    if (!s) s = take_part(&m, 0, m.man, rec0, rec0, err);
    for (int i = 1; !s && i < m.n; i++) {
        json_t *man = NULL, *rec = NULL;
        s = load_part(&m, i, &man, &rec, err);
        if (!s) s = take_part(&m, i, man, rec, rec0, err);
        json_decref(man);
        if (!s && cancelled(p)) s = tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
    }
    for (int64_t t = 0; !s && t < m.n_tensors; t++)
        if (m.tensor_part[t] < 0)
            s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: no part holds tensor %lld (%s)", m.out, (long long)t,
                            jstr(json_array_get(json_object_get(m.man, "tensors"), (size_t)t), "name"));
    for (int64_t f = 0; !s && f < m.n_files; f++)
        for (int64_t k = 0; !s && k < m.files[f].n_segs; k++)
            if (m.files[f].segs[k].crc < 0)
                s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: %s bytes at %llu: part %d has no checksum for them",
                                m.out, m.files[f].name, (unsigned long long)m.files[f].segs[k].off,
                                m.files[f].segs[k].owner);
    /* OUT: checked, locked and staged as any output (pipeline.c): a directory, or one file (GGUF)
    ** with OUT.manifest.json beside it */
    const char *kind = jstr(rec0, "kind");
    const int one_file = kind && !strcmp(kind, "file"), file_set = kind && !strcmp(kind, "files");
    if (!s && one_file && (m.n_files != 1 || strcmp(m.files[0].name, m.base)))
        s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: part 0 of a single-file output lists other files than %s",
                        m.out, m.base);
    if (!s) {
        began = 1;
        s = tm__pipe_begin(&pp, NULL, m.out, one_file || file_set ? TM__PIPE_FILE : TM__PIPE_DIR,
                           one_file ? "a merged file" : "a merged output", p ? p->force : 0, 1, p ? p->cancel : NULL, err);
        if (!s && file_set) s = tm__pipe_make_file_set(&pp, err); /* GGUF split files */
    }
    uint64_t copied = 0;
    uint8_t *buf = s ? NULL : tm__malloc_n(COPY_BUF, 1);
    if (!s && !buf) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t f = 0; !s && f < m.n_files; f++) {
        char *dst = one_file ? tm__strdup(pp.stage) : tm__aprintf("%s/%s", pp.stage, m.files[f].name);
        s = !dst ? tm__err_set(err, TM_E_NOMEM, -1, "out of memory")
            : m.files[f].shared ? place_shared(&m, &m.files[f], dst, buf, &copied, err)
                                : copy_file(&m, &m.files[f], dst, buf, p, &copied, err);
        free(dst);
    }
    free(buf);
    /* one read of each copied file: every segment's CRC-32C, and the sha256 of the files the
    ** manifest lists, as a one-machine run computes them */
    const char *ck = jstr(m.man, "checksums");
    int no_ck = ck && strcmp(ck, "sha256");
    json_t *ofiles = json_object_get(json_object_get(m.man, "output"), "files");
    if (!s) s = tm__pipe_phase(&pp, "checksum", err);
    for (int64_t f = 0; !s && f < m.n_files; f++) {
        json_t *listed = NULL;
        for (size_t k = 0; k < json_array_size(ofiles) && !listed; k++) {
            const char *nm = jstr(json_array_get(ofiles, k), "file");
            if (nm && !strcmp(nm, m.files[f].name)) listed = json_array_get(ofiles, k);
        }
        char *fp = one_file ? tm__strdup(pp.stage) : tm__aprintf("%s/%s", pp.stage, m.files[f].name);
        char hex[65];
        verify_state v = {&m, &m.files[f], p, 0, 0};
        s = fp ? tm__sha256_file_visit(fp, listed && !no_ck ? hex : NULL, NULL, verify_block, &v, err)
               : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s && v.k != m.files[f].n_segs)
            s = tm__err_set(err, TM_E_INTERNAL, -1, "%s: shorter than its segments", m.files[f].name);
        if (!s && listed && !no_ck) json_object_set_new(listed, "sha256", json_string(hex));
        free(fp);
    }
    if (!s) s = report_damage(&m, err);
    /* the manifest: what depends on every tensor, the rollback list, the parts */
    if (!s) {
        const char *fmt = jstr(rec0, "format");
        if (fmt && !strcmp(fmt, "compressed-tensors")) s = tm__ct_merge_fix(m.man, m.records, m.n_tensors, err);
    }
    if (!s) {
        json_t *rb = json_object_get(json_object_get(m.man, "rollback"), "sha256");
        json_t *msrc = json_object_get(m.man, "sources");
        if (rb) json_array_clear(rb);
        for (size_t f = 0; rb && !no_ck && f < json_array_size(msrc); f++) {
            json_t *h = json_object_get(json_array_get(msrc, f), "sha256");
            if (!json_is_string(h)) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "merge %s: no part recorded the sha256 of source %s", m.out,
                                jstr(json_array_get(msrc, f), "path"));
                break;
            }
            json_array_append(rb, h);
        }
    }
    tm_merge_result *r = NULL;
    if (!s) {
        r = calloc(1, sizeof *r);
        if (!r) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) {
        r->out_path = tm__strdup(jstr(rec0, "out") ? jstr(rec0, "out") : m.out);
        r->format = tm__strdup(jstr(rec0, "format") ? jstr(rec0, "format") : "");
        r->n_parts = m.n;
        r->n_files = m.n_files + 1;
        r->copied_bytes = copied;
        json_object_del(m.man, "part");
        json_object_set(m.man, "parts", m.parts);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        s = tm__pipe_finish(&pp, m.man, NULL, 0, 0, r->seconds, &r->manifest_json, err);
    }
    if (!s) remove_parts(&m); /* only once OUT is complete */
    if (began) tm__pipe_end(&pp);
    unlock_parts(&m, !s);
    free_state(&m);
    free(out);
    if (s) tm_merge_result_free(r);
    else *res = r;
    return s;
}
