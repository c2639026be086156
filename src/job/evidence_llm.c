/* evidence_llm.c: `tensormorph evidence BASE.gguf CAND.gguf --text FILE` (tensormorph/
** evidence_llm.h): run each model once through runner/llm_evidence.js (or take the baseline's
** distributions from the base cache), check that both share one vocabulary and tokenization,
** score every slice in C (evidence_llm_stats.c) and build the LLM variant of the evidence
** document (docs/schemas/evidence.schema.json), validated before it is returned. */
#include "evidence_impl.h"
#include "evidence_llm_impl.h"
#include "../core/crc32c.h"
#include "../core/fsutil.h"
#include "../core/jschema.h"
#include "manifest.h"
#include "tensormorph/convert.h"
#include "tensormorph/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "TMLLMKL2"     /* 2: a CRC-32C trailer over header and rows */
#define CACHE_MAGIC_V1 "TMLLMKL1"

tm_evidence_llm_params tm_evidence_llm_params_default(void) {
    tm_evidence_llm_params p;
    memset(&p, 0, sizeof p);
    p.ctx = 512;
    p.gen = 16;
    p.warmup = 1;
    p.threads = 1;
    p.node = "node";
    return p;
}

static int is_reg(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tm_evidence_llm_runtime_present(const char *node_modules) {
    if (!node_modules || !*node_modules) return 0;
    char *a = tm__aprintf("%s/node-llama-cpp/package.json", node_modules);
    char *b = tm__aprintf("%s/@node-llama-cpp/linux-x64/package.json", node_modules);
    int ok = is_reg(a) && is_reg(b);
    free(a);
    free(b);
    return ok;
}

int tm_is_gguf_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char m[4];
    int ok = f && fread(m, 1, 4, f) == 4 && !memcmp(m, "GGUF", 4);
    if (f) fclose(f);
    return ok;
}

/* ---- one model's run ---------------------------------------------------------------------- */

typedef struct llm_run {
    json_t  *doc;          /* the runner's result.json (or the cache's copy)                 */
    int      V;
    int32_t **tokens;      /* [n_texts][n_tokens[k]]                                         */
    int64_t *n_tokens;
    int     *chunks;
    char    *probs;        /* the distributions file                                         */
    long     probs_off;    /* where the rows start in it                                     */
} llm_run;

static void run_free(llm_run *r, int n_texts) {
    for (int k = 0; r->tokens && k < n_texts; k++) free(r->tokens[k]);
    free(r->tokens);
    free(r->n_tokens);
    free(r->chunks);
    free(r->probs);
    json_decref(r->doc);
    memset(r, 0, sizeof *r);
}

/* Check the runner's result (or the cache's copy of it) and pull the token lists out. */
static tm_status run_parse(const tm_evidence_llm_params *p, const char *what, llm_run *r, tm_err *err) {
    json_t *d = r->doc, *texts = json_object_get(d, "texts"), *vocab = json_object_get(d, "vocab");
    json_t *pieces = json_object_get(d, "pieces");
    json_int_t V = json_integer_value(json_object_get(d, "vocab_size"));
    if (!json_is_string(json_object_get(d, "runtime_version")) || !json_is_string(json_object_get(d, "node")) ||
        V < 1 || V > (1 << 24) || !json_is_array(vocab) || (json_int_t)json_array_size(vocab) != V ||
        !json_is_array(pieces) || (json_int_t)json_array_size(pieces) != V || !json_is_array(texts) ||
        (int)json_array_size(texts) != p->n_texts || !json_is_array(json_object_get(d, "decode_ms")) ||
        !json_is_number(json_object_get(d, "prompt_tokens_per_s")) ||
        !json_is_integer(json_object_get(d, "peak_rss_bytes")) || !json_is_integer(json_object_get(d, "nan_positions")))
        return tm__err_set(err, TM_E_IO, -1, "%s: not the runner's result (runtime_version, node, vocab_size, "
                           "vocab, pieces, texts [%d], decode_ms, prompt_tokens_per_s, peak_rss_bytes)", what, p->n_texts);
    r->V = (int)V;
    r->tokens = tm__calloc((size_t)p->n_texts, sizeof *r->tokens);
    r->n_tokens = tm__calloc((size_t)p->n_texts, sizeof *r->n_tokens);
    r->chunks = tm__calloc((size_t)p->n_texts, sizeof *r->chunks);
    if (!r->tokens || !r->n_tokens || !r->chunks) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int k = 0; k < p->n_texts; k++) {
        json_t *t = json_array_get(texts, (size_t)k), *tk = json_object_get(t, "tokens");
        json_int_t ch = json_integer_value(json_object_get(t, "chunks"));
        size_t n = json_array_size(tk);
        if (!json_is_array(tk) || ch < 2 || (int64_t)n < ch * p->ctx)
            return tm__err_set(err, TM_E_IO, -1, "%s: texts[%d]: tokens or chunks missing or too few", what, k);
        r->n_tokens[k] = (int64_t)n;
        r->chunks[k] = (int)ch;
        if (!(r->tokens[k] = tm__malloc_n(n, sizeof **r->tokens))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_int_t v = json_integer_value(json_array_get(tk, i));
            if (!json_is_integer(json_array_get(tk, i)) || v < 0 || v >= V)
                return tm__err_set(err, TM_E_IO, -1, "%s: texts[%d].tokens[%zu] is not a token id below %lld", what, k, i, (long long)V);
            r->tokens[k][i] = (int32_t)v;
        }
    }
    return TM_OK;
}

static tm_status write_job(const tm_evidence_llm_params *p, const char *model, int probs, const char *out_dir,
                           const char *job_path, tm_err *err) {
    json_t *job = json_object(), *texts = json_array();
    json_object_set_new(job, "node_modules", json_string(p->node_modules));
    json_object_set_new(job, "model", json_string(model));
    json_object_set_new(job, "threads", json_integer(p->threads));
    json_object_set_new(job, "ctx", json_integer(p->ctx));
    json_object_set_new(job, "chunks", json_integer(p->chunks));
    json_object_set_new(job, "gen", json_integer(p->gen));
    json_object_set_new(job, "warmup", json_integer(p->warmup));
    json_object_set_new(job, "probs", json_boolean(probs));
    json_object_set_new(job, "out_dir", json_string(out_dir));
    for (int k = 0; k < p->n_texts; k++) {
        json_t *t = json_object();
        json_object_set_new(t, "name", json_string(p->texts[k].name));
        json_object_set_new(t, "file", json_string(p->texts[k].path));
        json_array_append_new(texts, t);
    }
    json_object_set_new(job, "texts", texts);
    int rc = json_dump_file(job, job_path, JSON_COMPACT);
    json_decref(job);
    return rc ? tm__err_sys(err, errno, "%s: cannot write the runner's job", job_path) : TM_OK;
}

static tm_status run_model(const tm_evidence_llm_params *p, const char *phase, const char *model,
                           const char *scratch, llm_run *r, tm_err *err) {
    memset(r, 0, sizeof *r);
    char *out_dir = tm__aprintf("%s/%s", scratch, phase), *job = tm__aprintf("%s/%s.job.json", scratch, phase);
    char *errp = tm__aprintf("%s/%s.stderr", scratch, phase), *res = tm__aprintf("%s/%s/result.json", scratch, phase);
    r->probs = tm__aprintf("%s/%s/probs.bin", scratch, phase);
    tm_status s = out_dir && job && errp && res && r->probs ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s && mkdir(out_dir, 0700) != 0) s = tm__err_sys(err, errno, "%s: cannot create", out_dir);
    if (!s) s = write_job(p, model, 1, out_dir, job, err);
    if (!s) {
        tm_evidence_params ep = tm_evidence_params_default();
        ep.node = p->node;
        ep.runner_script = p->runner_script;
        ep.node_modules = p->node_modules;
        ep.tmp_dir = p->tmp_dir;
        ep.progress = p->progress;
        ep.progress_ud = p->progress_ud;
        ep.cancel = p->cancel;
        s = tm__ev_run_llm_job(&ep, phase, model, job, errp, err);
    }
    if (!s) {
        json_error_t je;
        if (!(r->doc = json_load_file(res, JSON_ALLOW_NUL, &je)))
            s = tm__err_set(err, TM_E_IO, -1, "%s: the runner left no readable %s: %s", phase, res, je.text);
    }
    if (!s) s = run_parse(p, res, r, err);
    free(out_dir); free(job); free(errp); free(res);
    return s;
}

/* ---- the base cache ----------------------------------------------------------------------- */

static int64_t scored_rows(const llm_run *r, int n_texts, int ctx) {
    int64_t rows = 0;
    for (int k = 0; k < n_texts; k++) rows += (int64_t)r->chunks[k] * (ctx / 2 - 1);
    return rows;
}

/* The key a cache must match: base sha256, protocol and texts. */
static json_t *cache_key(const tm_evidence_llm_params *p, const char *base_sha, char (*text_sha)[65]) {
    json_t *k = json_object(), *t = json_array();
    json_object_set_new(k, "base_sha256", json_string(base_sha));
    json_object_set_new(k, "ctx", json_integer(p->ctx));
    json_object_set_new(k, "chunks", json_integer(p->chunks));
    for (int i = 0; i < p->n_texts; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(p->texts[i].name));
        json_object_set_new(o, "sha256", json_string(text_sha[i]));
        json_array_append_new(t, o);
    }
    json_object_set_new(k, "texts", t);
    return k;
}

/* The cache's last 4 bytes: CRC-32C (little-endian) of every byte before them. A mismatch is
** TM_E_CORRUPT naming the file: a damaged cache would silently move every KLD. */
static tm_status cache_check_crc(const char *path, int64_t size, tm_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open the base cache", path);
    static const size_t B = 1 << 20;
    unsigned char *buf = malloc(B);
    tm_status s = buf ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    uint32_t crc = 0;
    for (int64_t off = 0; !s && off < size - 4;) {
        size_t want = (size_t)(size - 4 - off < (int64_t)B ? size - 4 - off : (int64_t)B);
        ssize_t n = pread(fd, buf, want, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { s = tm__err_sys(err, n < 0 ? errno : EIO, "%s: read at byte %lld", path, (long long)off); break; }
        crc = tm__crc32c(crc, buf, (size_t)n);
        off += n;
    }
    unsigned char t[4];
    if (!s && pread(fd, t, 4, size - 4) != 4) s = tm__err_sys(err, errno ? errno : EIO, "%s: read at byte %lld", path, (long long)(size - 4));
    if (!s) {
        uint32_t want = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
        if (want != crc)
            s = tm__err_set(err, TM_E_CORRUPT, size - 4, "%s: the base cache is damaged: CRC-32C of its %lld bytes is %08x, its "
                            "trailer (byte %lld) says %08x; delete it, the next run writes it again", path,
                            (long long)(size - 4), crc, (long long)(size - 4), want);
    }
    free(buf);
    close(fd);
    return s;
}

/* Read the cache when it exists: *hit 1 and r filled when it matches key; a cache of another
** base, text or protocol is TM_E_CORRUPT naming what differs. */
static tm_status cache_read(const tm_evidence_llm_params *p, const json_t *key, llm_run *r, int *hit,
                            int64_t *bytes, tm_err *err) {
    *hit = 0;
    const char *path = p->base_cache;
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? TM_OK : tm__err_sys(err, errno, "%s: cannot open the base cache", path);
    unsigned char hd[16];
    tm_status s = TM_OK;
    struct stat st;
    uint64_t H = 0;
    if (fstat(fileno(f), &st) != 0 || fread(hd, 1, 16, f) != 16)
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a tensormorph base cache (%lld bytes, shorter than its 16-byte start)",
                        path, (long long)st.st_size);
    else if (!memcmp(hd, CACHE_MAGIC_V1, 8))
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: a base cache of an older tensormorph (\"" CACHE_MAGIC_V1 "\", no checksum): "
                        "delete it, the next run writes it again", path);
    else if (memcmp(hd, CACHE_MAGIC, 8))
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a tensormorph base cache (magic \"" CACHE_MAGIC "\")", path);
    for (int i = 0; !s && i < 8; i++) H |= (uint64_t)hd[8 + i] << (8 * i);
    if (!s && (H < 2 || st.st_size < 20 || H > (uint64_t)st.st_size - 20))
        s = tm__err_set(err, TM_E_CORRUPT, 8, "%s: header length %llu runs past the end of the file (%lld bytes)",
                        path, (unsigned long long)H, (long long)st.st_size);
    char *txt = s ? NULL : malloc((size_t)H + 1);
    if (!s && !txt) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s && fread(txt, 1, (size_t)H, f) != (size_t)H) s = tm__err_set(err, TM_E_CORRUPT, 16, "%s: truncated header", path);
    fclose(f);
    json_t *h = NULL;
    if (!s) {
        txt[H] = '\0';
        json_error_t je;
        if (!(h = json_loadb(txt, (size_t)H, JSON_ALLOW_NUL, &je))) s = tm__err_set(err, TM_E_CORRUPT, 16, "%s: header is not JSON: %s", path, je.text);
    }
    free(txt);
    const char *k;
    json_t *v;
    if (!s) json_object_foreach((json_t *)key, k, v) {
        if (!json_equal(v, json_object_get(h, k))) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: the base cache belongs to another %s (it was made for a "
                            "different base model, text or protocol): delete it or give another --base-cache", path,
                            !strcmp(k, "base_sha256") ? "base model (sha256)" : !strcmp(k, "texts") ? "text set"
                            : !strcmp(k, "ctx") ? "protocol (--ctx)" : !strcmp(k, "chunks") ? "protocol (--chunks)" : k);
            break;
        }
    }
    if (!s) {
        r->doc = json_incref(json_object_get(h, "result"));
        s = run_parse(p, path, r, err);
    }
    if (!s) {
        int64_t want = 16 + (int64_t)H + scored_rows(r, p->n_texts, p->ctx) * r->V * 4 + 4;
        if ((int64_t)st.st_size != want)
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: %lld bytes, the header says %lld (truncated or grown)", path,
                            (long long)st.st_size, (long long)want);
    }
    if (!s) s = cache_check_crc(path, (int64_t)st.st_size, err);
    if (!s && !(r->probs = tm__strdup(path))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    r->probs_off = (long)(16 + H);
    json_decref(h);
    if (!s) { *hit = 1; *bytes = (int64_t)st.st_size; }
    return s;
}

/* Write the cache: header + a copy of the baseline's distributions, temp beside it, fsync, rename. */
static tm_status cache_write(const tm_evidence_llm_params *p, json_t *key, const llm_run *r, int64_t *bytes,
                             tm_err *err) {
    json_t *h = json_deep_copy(key);
    json_object_set(h, "result", r->doc);
    json_object_set_new(h, "vocab_size", json_integer(r->V));
    char *txt = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    char *tmp = tm__aprintf("%s.tmp.%ld", p->base_cache, (long)getpid());
    if (!txt || !tmp) { free(txt); free(tmp); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    uint64_t H = strlen(txt);
    unsigned char hd[16];
    memcpy(hd, CACHE_MAGIC, 8);
    for (int i = 0; i < 8; i++) hd[8 + i] = (unsigned char)(H >> (8 * i));
    tm_status s = TM_OK;
    FILE *o = fopen(tmp, "wb"), *in = o ? fopen(r->probs, "rb") : NULL;
    if (!o || !in) s = o ? tm__err_sys(err, errno, "%s: cannot read the baseline's rows", r->probs)
                         : tm__err_sys(err, errno, "%s: cannot write the base cache", p->base_cache);
    if (!s && (fwrite(hd, 1, 16, o) != 16 || fwrite(txt, 1, H, o) != H)) s = tm__err_sys(err, errno, "%s: cannot write the base cache", p->base_cache);
    uint32_t crc = s ? 0 : tm__crc32c(tm__crc32c(0, hd, 16), txt, (size_t)H);
    char buf[1 << 16];
    size_t n;
    while (!s && (n = fread(buf, 1, sizeof buf, in)) > 0) {
        crc = tm__crc32c(crc, buf, n);
        if (fwrite(buf, 1, n, o) != n) s = tm__err_sys(err, errno, "%s: cannot write the base cache", p->base_cache);
    }
    if (!s && in && ferror(in)) s = tm__err_sys(err, errno ? errno : EIO, "%s: cannot read the baseline's rows", r->probs);
    const unsigned char tr[4] = {(unsigned char)crc, (unsigned char)(crc >> 8), (unsigned char)(crc >> 16), (unsigned char)(crc >> 24)};
    if (!s && fwrite(tr, 1, 4, o) != 4) s = tm__err_sys(err, errno, "%s: cannot write the base cache", p->base_cache);
    if (in) fclose(in);
    if (o && (fflush(o) != 0 || fsync(fileno(o)) != 0) && !s) s = tm__err_sys(err, errno, "%s: cannot write the base cache (fsync)", p->base_cache);
    if (o && fclose(o) != 0 && !s) s = tm__err_sys(err, errno, "%s: cannot write the base cache (close)", p->base_cache);
    if (!s && rename(tmp, p->base_cache) != 0) s = tm__err_sys(err, errno, "%s: cannot rename the base cache into place", p->base_cache);
    if (!s) {
        char *dir = tm__dirname(p->base_cache);
        if (dir) tm__fsync_dir(dir, NULL);
        free(dir);
        struct stat st;
        *bytes = stat(p->base_cache, &st) == 0 ? (int64_t)st.st_size : 0;
    } else if (o) {
        unlink(tmp);
    }
    free(txt);
    free(tmp);
    return s;
}

/* ---- the models' sha256, beside the runs -------------------------------------------------- */

/* Hashing a GGUF of realistic size takes seconds (1.1 GB: about 1.3 s), so the files whose hash
** is not needed before the runs (the candidate; the baseline too without --base-cache, whose key
** holds the baseline's hash) are hashed on one thread while the runners run; inline, after the
** runs, when the thread cannot start. Same digests either way. */
typedef struct bg_hash {
    int          n;
    const char  *path[2];
    char        *hex[2];
    uint64_t    *bytes[2];
    volatile const int *cancel;
    atomic_int   stop;
    int          started;
    pthread_t    th;
    tm_status    s;
    tm_err       err;
} bg_hash;

static int bg_stop(void *ud) {
    bg_hash *h = ud;
    return atomic_load(&h->stop) || (h->cancel && *h->cancel);
}

static void *bg_main(void *ud) {
    bg_hash *h = ud;
    h->s = TM_OK;
    for (int i = 0; i < h->n && !h->s; i++) h->s = tm__sha256_file_stop(h->path[i], h->hex[i], h->bytes[i], bg_stop, h, &h->err);
    return NULL;
}

static void bg_hash_start(bg_hash *h) {
    atomic_init(&h->stop, 0);
    h->started = h->n > 0 && pthread_create(&h->th, NULL, bg_main, h) == 0;
}

/* The hashes' status (computed here when the thread did not start); `abandon`: the job failed,
** stop the thread and wait for it, TM_OK. */
static tm_status bg_hash_wait(bg_hash *h, int abandon, tm_err *err) {
    if (abandon) atomic_store(&h->stop, 1);
    if (h->started) pthread_join(h->th, NULL);
    else if (!abandon) bg_main(h);
    h->started = 0;
    if (abandon) return TM_OK;
    if (h->s) *err = h->err;
    return h->s;
}

/* ---- checks ------------------------------------------------------------------------------- */

static tm_status same_vocab(const tm_evidence_llm_params *p, const llm_run *b, const llm_run *c, tm_err *err) {
    if (b->V != c->V)
        return tm__err_set(err, TM_E_CORRUPT, -1, "the vocabularies differ: baseline %s has %d tokens, candidate %s "
                           "has %d (KL divergence compares distributions over one vocabulary)",
                           p->baseline, b->V, p->candidate, c->V);
    json_t *bv = json_object_get(b->doc, "vocab"), *cv = json_object_get(c->doc, "vocab");
    for (int i = 0; i < b->V; i++) {
        const char *x = json_string_value(json_array_get(bv, (size_t)i)), *y = json_string_value(json_array_get(cv, (size_t)i));
        if (!x || !y || strcmp(x, y))
            return tm__err_set(err, TM_E_CORRUPT, -1, "the vocabularies differ: both have %d tokens but token %d is "
                               "'%.40s' in baseline %s and '%.40s' in candidate %s", b->V, i, x ? x : "?", p->baseline,
                               y ? y : "?", p->candidate);
    }
    for (int k = 0; k < p->n_texts; k++) {
        int same = b->n_tokens[k] == c->n_tokens[k] && b->chunks[k] == c->chunks[k];
        for (int64_t i = 0; same && i < b->n_tokens[k]; i++) same = b->tokens[k][i] == c->tokens[k][i];
        if (!same)
            return tm__err_set(err, TM_E_CORRUPT, -1, "%s: the two models tokenize the text differently (%lld vs "
                               "%lld tokens) although their vocabularies are equal", p->texts[k].path,
                               (long long)b->n_tokens[k], (long long)c->n_tokens[k]);
    }
    return TM_OK;
}

static tm_status check_params(const tm_evidence_llm_params *p, tm_err *err) {
    if (!p || !p->baseline || !p->candidate || !p->texts || p->n_texts < 1 || !p->runner_script ||
        !p->node_modules || !p->node)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: baseline, candidate, texts, node, runner_script "
                           "and node_modules are required");
    if (p->ctx < 4 || p->ctx > 65536 || p->ctx % 2 || p->chunks < 0 || p->gen < 0 || p->gen > p->ctx / 2 ||
        p->warmup < 0 || p->threads < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: ctx %d (even, 4..65536), chunks %d (>= 0), gen %d "
                           "(0..ctx/2), warmup %d (>= 0), threads %d (>= 1)", p->ctx, p->chunks, p->gen, p->warmup, p->threads);
    for (int i = 0; i < p->n_texts; i++) {
        if (!p->texts[i].name || !p->texts[i].name[0] || !p->texts[i].path)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: --text %d has no name or file", i + 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(p->texts[i].name, p->texts[j].name))
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: two --text slices are named '%s'", p->texts[i].name);
    }
    const char *m[2] = {p->baseline, p->candidate};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (stat(m[i], &st) != 0) return tm__err_sys(err, errno, "%s: cannot open", m[i]);
    }
    return TM_OK;
}

/* ---- the document ------------------------------------------------------------------------- */

static json_t *model_json(const char *path, const char *sha, int64_t bytes, const json_t *res, json_t *source) {
    json_t *m = json_object(), *dm = json_object_get(res, "decode_ms"), *lat = json_array();
    size_t n = json_array_size(dm);
    double *s = tm__malloc_n(n ? n : 1, sizeof *s);
    if (!m || !lat || !s) { json_decref(m); json_decref(lat); free(s); return NULL; }
    for (size_t i = 0; i < n; i++) {
        double v = json_number_value(json_array_get(dm, i));
        s[i] = v > 0 ? v : 0;
        json_array_append_new(lat, json_real(s[i]));
    }
    qsort(s, n, sizeof *s, tm__cmp_double);
    json_object_set_new(m, "path", json_string(path));
    json_object_set_new(m, "sha256", json_string(sha));
    json_object_set_new(m, "file_bytes", json_integer(bytes));
    json_object_set_new(m, "peak_rss_bytes", json_integer(json_integer_value(json_object_get(res, "peak_rss_bytes"))));
    double tps = json_number_value(json_object_get(res, "prompt_tokens_per_s"));
    json_object_set_new(m, "prompt_tokens_per_s", json_real(isfinite(tps) && tps > 0 ? tps : 0));
    json_object_set_new(m, "decode_ms", lat);
    int pc[3] = {50, 95, 99};
    const char *pk[3] = {"decode_p50_ms", "decode_p95_ms", "decode_p99_ms"};
    for (int i = 0; i < 3; i++)
        json_object_set_new(m, pk[i], n ? json_real(tm_percentile_nearest_rank(s, (int64_t)n, pc[i])) : json_null());
    /* a converted checkpoint ran with dequantized weights: its latency is not the release's */
    json_object_set_new(m, "latency_representative", json_boolean(source == NULL));
    if (source) json_object_set(m, "source", source);
    free(s);
    return m;
}

/* A JSON string of n bytes; bytes that are not valid UTF-8 (a token can be half a character)
** become '?'. */
static json_t *utf8_json(const char *b, size_t n) {
    json_t *j = json_stringn(b, n);
    if (j) return j;
    char *c = malloc(n + 1);
    if (!c) return json_string("");
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)b[i] < 0x80 ? b[i] : '?';
    j = json_stringn(c, n);
    free(c);
    return j ? j : json_string("");
}

/* The decoded text of tokens[from..to] (inclusive) through the runner's per-token pieces. */
static json_t *decode(const json_t *pieces, const int32_t *tokens, int64_t from, int64_t to) {
    size_t cap = 256, n = 0;
    char *b = malloc(cap);
    for (int64_t i = from; b && i <= to; i++) {
        const char *s = json_string_value(json_array_get(pieces, (size_t)tokens[i]));
        size_t l = s ? strlen(s) : 0;
        if (n + l + 1 > cap) {
            while (n + l + 1 > cap) cap *= 2;
            char *nb = realloc(b, cap);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
        }
        memcpy(b + n, s ? s : "", l);
        n += l;
    }
    if (!b) return json_string("");
    json_t *j = utf8_json(b, n);
    free(b);
    return j;
}

static json_t *top_json(const tm__llm_top *t, const json_t *pieces) {
    json_t *a = json_array();
    for (int i = 0; i < TM__LLM_TOP && t[i].token >= 0; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "token", json_integer(t[i].token));
        const char *s = json_string_value(json_array_get(pieces, (size_t)t[i].token));
        json_object_set_new(o, "text", utf8_json(s ? s : "", s ? strlen(s) : 0));
        json_object_set_new(o, "p", json_real(t[i].p < 0 ? 0 : t[i].p > 1 ? 1 : t[i].p));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *llm_json(const tm_evidence_llm_params *p, const llm_run *b, char (*text_sha)[65], const char *all_sha,
                        const tm__llm_acc *acc, const tm__llm_acc *overall, const tm__llm_worst *w) {
    json_t *l = json_object(), *pr = json_object(), *sl = json_object(), *hist = json_object(), *worst = json_array();
    int chunks = 0;
    for (int k = 0; k < p->n_texts; k++) chunks += b->chunks[k];
    json_object_set_new(pr, "ctx", json_integer(p->ctx));
    json_object_set_new(pr, "chunks", json_integer(chunks));
    json_object_set_new(pr, "scored_tokens", json_integer(overall->n + overall->nan));
    json_object_set_new(pr, "vocab_size", json_integer(b->V));
    json_object_set_new(pr, "text_sha256", json_string(all_sha));
    json_object_set_new(l, "protocol", pr);
    json_object_set_new(l, "overall", tm__llm_stats_json(overall));
    for (int k = 0; k < p->n_texts; k++) {
        json_t *o = tm__llm_stats_json(&acc[k]);
        json_object_set_new(o, "text_sha256", json_string(text_sha[k]));
        json_object_set_new(o, "chunks", json_integer(b->chunks[k]));
        json_object_set_new(sl, p->texts[k].name, o);
        json_object_set_new(hist, p->texts[k].name, tm__llm_hist_json(&acc[k]));
    }
    json_object_set_new(l, "slices", sl);
    json_object_set_new(l, "histogram", hist);
    const json_t *pieces = json_object_get(b->doc, "pieces");
    for (int i = 0; i < w->n; i++) {
        const tm__llm_worst_item *it = &w->it[i];
        const int32_t *tk = b->tokens[it->slice];
        int64_t cstart = it->position / p->ctx * p->ctx, from = it->position - 31 > cstart ? it->position - 31 : cstart;
        json_t *o = json_object();
        json_object_set_new(o, "slice", json_string(p->texts[it->slice].name));
        json_object_set_new(o, "position", json_integer(it->position));
        json_object_set_new(o, "kld", json_real(it->kld));
        /* the chunk's first token is BOS in the protocol: decode from the next one */
        json_object_set_new(o, "context", decode(pieces, tk, from == cstart ? from + 1 : from, it->position));
        json_object_set_new(o, "next", decode(pieces, tk, it->position + 1, it->position + 1));
        json_object_set_new(o, "base_top", top_json(it->base_top, pieces));
        json_object_set_new(o, "cand_top", top_json(it->cand_top, pieces));
        json_array_append_new(worst, o);
    }
    json_object_set_new(l, "worst", worst);
    return l;
}

/* ---- a non-GGUF model: converted first ------------------------------------------------------ */

/* Convert the checkpoint at path (tensormorph/convert.h, F32, p->vocab_from's tokenizer) into
** <scratch>/<phase>.gguf: *gguf gets that path (malloc'd) and *source {"path", "sha256": the
** source files' sha256 from the conversion manifest, "architecture"}. */
static tm_status convert_model(const tm_evidence_llm_params *p, const char *phase, const char *path, const char *scratch,
                               char **gguf, json_t **source, tm_err *err) {
    *gguf = tm__aprintf("%s/%s.gguf", scratch, phase);
    if (!*gguf) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_file *f = NULL;
    tm_status s = tm_open(path, NULL, &f, err);
    tm_convert_params cp = tm_convert_params_default();
    cp.vocab_from = p->vocab_from;
    cp.no_checksums = 0;
    cp.cancel = p->cancel;
    cp.command_line = "tensormorph evidence (conversion of a non-GGUF model)";
    tm_convert_result *r = NULL;
    if (!s && p->progress) p->progress(p->progress_ud, "converting", 0, 1);
    if (!s) s = tm_convert_gguf(f, path, *gguf, &cp, &r, err);
    if (s) tm__err_prefix(err, "%s model %s: conversion to GGUF (tensormorph convert%s) failed", phase, path,
                          p->vocab_from ? "" : "; give --vocab-from X.gguf for the tokenizer");
    if (!s) {
        json_t *man = r->manifest_json ? json_loads(r->manifest_json, 0, NULL) : NULL;
        *source = json_object();
        json_object_set_new(*source, "path", json_string(path));
        json_object_set_new(*source, "architecture", json_string(r->architecture));
        json_object_set_new(*source, "files", tm__manifest_source_files(man));
        json_decref(man);
    }
    tm_convert_result_free(r);
    tm_close(f);
    return s;
}

/* ---- the job ------------------------------------------------------------------------------ */

static tm_status score_all(const tm_evidence_llm_params *p, const llm_run *b, const llm_run *c, tm__llm_acc *acc,
                           tm__llm_acc *overall, tm__llm_worst *w, tm_err *err) {
    FILE *bf = fopen(b->probs, "rb"), *cf = fopen(c->probs, "rb");
    tm_status s = TM_OK;
    if (!bf || !cf) s = tm__err_sys(err, errno, "%s: cannot open", !bf ? b->probs : c->probs);
    if (!s && fseek(bf, b->probs_off, SEEK_SET) != 0) s = tm__err_sys(err, errno, "%s: seek", b->probs);
    for (int k = 0; !s && k < p->n_texts; k++) {
        if (p->progress) p->progress(p->progress_ud, "scoring", (uint64_t)k, (uint64_t)p->n_texts);
        s = tm__llm_score(bf, b->probs, cf, c->probs, b->V, b->tokens[k], b->chunks[k], p->ctx, k, &acc[k], w,
                          p->cancel, err);
        if (!s) s = tm__llm_acc_merge(overall, &acc[k], err);
    }
    if (bf) fclose(bf);
    if (cf) fclose(cf);
    return s;
}

/* Before running anything: the tokenizer.ggml.tokens of the two GGUFs (read from their headers)
** must be one vocabulary, as same_vocab checks the runner's afterwards: a size that differs (both
** named) or a token that differs is refused at once, with no runner started and nothing written.
** A GGUF without a tokens array is left to the runner (llama.cpp's own refusal). */
static tm_status same_vocab_header(const tm_evidence_llm_params *p, const char *const path[2], tm_err *err) {
    tm_gguf_kvlist *kv[2] = {NULL, NULL};
    const uint8_t *v[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    uint64_t cnt[2] = {0, 0};
    tm_status s = TM_OK;
    for (int i = 0; i < 2 && !s; i++) {
        s = tm_gguf_kvlist_read(path[i], &kv[i], err);
        int64_t k = s ? -1 : tm_gguf_kvlist_find(kv[i], "tokenizer.ggml.tokens");
        if (k >= 0 && tm_gguf_kvlist_type(kv[i], k) == TM_GGUF_ARRAY) v[i] = tm_gguf_kvlist_raw(kv[i], k, &n[i]);
        uint32_t et = 0;
        if (v[i] && n[i] >= 12) memcpy(&et, v[i], 4);
        if (v[i] && n[i] >= 12 && et == TM_GGUF_STRING) memcpy(&cnt[i], v[i] + 4, 8);
        else v[i] = NULL;
    }
    if (!s && v[0] && v[1] && cnt[0] != cnt[1])
        s = tm__err_set(err, TM_E_CORRUPT, -1, "the vocabularies differ: baseline %s has %llu tokens, candidate %s has %llu "
                        "(KL divergence compares distributions over one vocabulary)", p->baseline,
                        (unsigned long long)cnt[0], p->candidate, (unsigned long long)cnt[1]);
    if (!s && v[0] && v[1]) { /* the elements: u64 length + bytes each, checked by the kv reader */
        size_t o[2] = {12, 12};
        for (uint64_t t = 0; t < cnt[0] && !s; t++) {
            uint64_t l[2];
            int in = 1;
            for (int i = 0; i < 2; i++) {
                in = in && o[i] + 8 <= n[i];
                if (in) memcpy(&l[i], v[i] + o[i], 8);
                in = in && l[i] <= n[i] - o[i] - 8;
            }
            if (!in) break; /* cannot happen after the reader's checks; the runner checks again */
            if (l[0] != l[1] || memcmp(v[0] + o[0] + 8, v[1] + o[1] + 8, (size_t)l[0]))
                s = tm__err_set(err, TM_E_CORRUPT, -1, "the vocabularies differ: both have %llu tokens but token %llu is "
                                "'%.*s' in baseline %s and '%.*s' in candidate %s", (unsigned long long)cnt[0],
                                (unsigned long long)t, (int)(l[0] < 40 ? l[0] : 40), (const char *)v[0] + o[0] + 8, p->baseline,
                                (int)(l[1] < 40 ? l[1] : 40), (const char *)v[1] + o[1] + 8, p->candidate);
            for (int i = 0; i < 2; i++) o[i] += 8 + (size_t)l[i];
        }
    }
    tm_gguf_kvlist_free(kv[0]);
    tm_gguf_kvlist_free(kv[1]);
    return s;
}

tm_status tm_evidence_llm_run(const tm_evidence_llm_params *p, char **json_out, tm_err *err) {
    *json_out = NULL;
    tm_status s = check_params(p, err);
    if (s) return s;
    if (!tm_evidence_llm_runtime_present(p->node_modules))
        return tm__err_set(err, TM_E_IO, -1, "node-llama-cpp is not installed in %s", p->node_modules);
    char sha[2][65], (*text_sha)[65] = tm__calloc((size_t)p->n_texts, sizeof *text_sha), all_sha[65];
    uint64_t bytes[2] = {0, 0};
    llm_run run[2];
    memset(run, 0, sizeof run);
    tm__llm_acc *acc = tm__calloc((size_t)p->n_texts, sizeof *acc), overall;
    memset(&overall, 0, sizeof overall);
    tm__llm_worst *w = tm__calloc(1, sizeof *w);
    char *scratch = tm__aprintf("%s/tensormorph-evidence-XXXXXX", p->tmp_dir ? p->tmp_dir : "/tmp");
    int made = 0, hit = 0;
    int64_t cache_bytes = 0;
    json_t *doc = NULL, *key = NULL, *source[2] = {NULL, NULL};
    char *conv[2] = {NULL, NULL};
    const char *path[2] = {p->baseline, p->candidate}, *phase[2] = {"baseline", "candidate"};
    if (!text_sha || !acc || !w || !scratch) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) {
        if (mkdtemp(scratch)) made = 1;
        else s = tm__err_sys(err, errno, "%s: cannot create the scratch folder", scratch);
    }
    for (int i = 0; !s && i < 2; i++) /* a non-GGUF checkpoint runs as the GGUF it converts to */
        if (!tm_is_gguf_file(path[i]) && !(s = convert_model(p, phase[i], path[i], scratch, &conv[i], &source[i], err)))
            path[i] = conv[i];
    if (!s) s = same_vocab_header(p, path, err);
    bg_hash bh;
    memset(&bh, 0, sizeof bh);
    bh.cancel = p->cancel;
    if (!s && p->base_cache) s = tm_sha256_file(path[0], sha[0], &bytes[0], err); /* the cache's key */
    for (int i = p->base_cache ? 1 : 0; !s && i < 2; i++) {
        bh.path[bh.n] = path[i];
        bh.hex[bh.n] = sha[i];
        bh.bytes[bh.n++] = &bytes[i];
    }
    if (!s) bg_hash_start(&bh);
    char *joined = tm__calloc((size_t)p->n_texts, 64);
    if (!s && !joined) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int k = 0; !s && k < p->n_texts; k++) {
        s = tm_sha256_file(p->texts[k].path, text_sha[k], NULL, err);
        if (!s) memcpy(joined + 64 * k, text_sha[k], 64);
    }
    if (!s) {
        if (p->n_texts == 1) memcpy(all_sha, text_sha[0], 65);
        else tm_sha256_buffer(joined, (size_t)p->n_texts * 64, all_sha);
    }
    free(joined);
    if (!s && p->base_cache) {
        key = cache_key(p, sha[0], text_sha);
        if (!key) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s) s = cache_read(p, key, &run[0], &hit, &cache_bytes, err);
    }
    if (!s && !hit) s = run_model(p, "baseline", path[0], scratch, &run[0], err);
    if (!s) s = run_model(p, "candidate", path[1], scratch, &run[1], err);
    if (!s) s = same_vocab(p, &run[0], &run[1], err);
    if (!s) s = score_all(p, &run[0], &run[1], acc, &overall, w, err);
    if (!s && p->base_cache && !hit) s = cache_write(p, key, &run[0], &cache_bytes, err);
    if (!s) s = bg_hash_wait(&bh, 0, err);
    else bg_hash_wait(&bh, 1, NULL);
    if (!s) {
        doc = json_object();
        json_t *rt = json_object();
        json_object_set_new(rt, "name", json_string("node-llama-cpp"));
        json_object_set(rt, "version", json_object_get(run[1].doc, "runtime_version"));
        json_object_set(rt, "node", json_object_get(run[1].doc, "node"));
        json_object_set_new(rt, "execution_provider", json_string("cpu"));
        json_object_set_new(rt, "backend", json_string("llama.cpp"));
        tm__ev_doc_head(doc, rt);
        json_t *pr = json_object();
        int chunks = 0;
        for (int k = 0; k < p->n_texts; k++) chunks += run[0].chunks[k];
        json_object_set_new(pr, "ctx", json_integer(p->ctx));
        json_object_set_new(pr, "chunks", json_integer(chunks));
        json_object_set_new(pr, "warmup", json_integer(p->warmup));
        json_object_set_new(pr, "gen", json_integer(p->gen));
        json_object_set_new(pr, "threads", json_integer(p->threads));
        json_object_set_new(pr, "scored_tokens", json_integer(overall.n + overall.nan));
        json_object_set_new(pr, "vocab_size", json_integer(run[0].V));
        json_object_set_new(pr, "text_sha256", json_string(all_sha));
        json_object_set_new(pr, "flash_attention", json_false());
        json_t *bc = json_null();
        if (p->base_cache) {
            bc = json_object();
            json_object_set_new(bc, "path", json_string(p->base_cache));
            json_object_set_new(bc, "hit", json_boolean(hit));
            json_object_set_new(bc, "bytes", json_integer(cache_bytes));
        }
        json_object_set_new(pr, "base_cache", bc);
        json_object_set_new(doc, "protocol", pr);
        json_t *models = json_object();
        json_object_set_new(models, "baseline", model_json(p->baseline, sha[0], (int64_t)bytes[0], run[0].doc, source[0]));
        json_object_set_new(models, "candidate", model_json(p->candidate, sha[1], (int64_t)bytes[1], run[1].doc, source[1]));
        json_object_set_new(doc, "models", models);
        json_object_set_new(doc, "llm", llm_json(p, &run[0], text_sha, all_sha, acc, &overall, w));
    }
    if (!s) s = tm__ev_finish(doc, json_out, err);
    if (!s && overall.nan > 0)
        s = tm__err_set(err, TM_E_NONFINITE, -1, "%lld scored positions hold NaN probabilities (%s or %s): every "
                        "statistic is null in the evidence and the gate fails it", (long long)overall.nan,
                        p->baseline, p->candidate);
    json_decref(doc);
    json_decref(key);
    json_decref(source[0]);
    json_decref(source[1]);
    free(conv[0]);
    free(conv[1]);
    run_free(&run[0], p->n_texts);
    run_free(&run[1], p->n_texts);
    for (int k = 0; acc && k < p->n_texts; k++) tm__llm_acc_free(&acc[k]);
    tm__llm_acc_free(&overall);
    free(acc);
    free(w);
    free(text_sha);
    if (made) tm__rm_rf(scratch);
    free(scratch);
    return s;
}
