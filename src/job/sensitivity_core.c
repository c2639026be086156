/* sensitivity_core.c: the pieces of `sensitivity` that the run (sensitivity.c) and the budget
** search (sensitivity_budget.c) share: a unit assignment as tensor types and bytes, the exact
** --tensor-type list (GGUF) or rules (compressed-tensors) of an assignment, writing its candidate,
** and evaluating candidates on llama.cpp (tm_evidence_llm_run against the source, with the base
** cache) on --jobs workers, with their weight error (tm_qdiff). */
#include "sensitivity_impl.h"
#include "../core/fsutil.h"
#include "tensormorph/evidence_llm.h"
#include "tensormorph/qdiff.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- rung names -------------------------------------------------------------------------- */

const char *tm__sens_code_type_name(int code_dtype) {
    return code_dtype == TM_I8 ? "int8" : code_dtype == TM_U8 ? "uint8" : code_dtype == TM_I4 ? "int4" : code_dtype == TM_U4 ? "uint4"
         : code_dtype == TM_F8_E4M3 ? "fp8_e4m3" : code_dtype == TM_F8_E5M2 ? "fp8_e5m2" : "?";
}

void tm__sens_rung_name(const tm_qspec *sp, int dense, char *buf, size_t n) {
    if (dense) { snprintf(buf, n, "dense"); return; }
    char g[48], o[64];
    tm_granularity_name(&sp->gran, g, sizeof g);
    tm_observer_name(&sp->observer, o, sizeof o);
    int obs = strcmp(o, "minmax") != 0;
    snprintf(buf, n, "%s %s%s%s%s", tm__sens_code_type_name(sp->code_dtype), g, sp->symmetric ? "" : " asym", obs ? " " : "", obs ? o : "");
}

tm_status tm_sensitivity_ct_rung_parse(const char *text, const tm_qspec *base, tm_qspec *out, int *dense, tm_err *err) {
    *dense = 0;
    *out = *base;
    memset(&out->gran, 0, sizeof out->gran);
    out->gran.kind = TM_GRAN_CHANNEL; /* channel:0 unless given */
    out->symmetric = 1;
    out->observer = tm_qspec_default().observer;
    if (!text || !*text) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: an empty rung");
    if (!strcmp(text, "dense")) { *dense = 1; return TM_OK; }
    char buf[256];
    if (strlen(text) >= sizeof buf) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung '%.40s...' is too long", text);
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    int k = 0;
    tm_dtype dt;
    for (char *tok = strtok_r(buf, " /", &save); tok; tok = strtok_r(NULL, " /", &save), k++) {
        if (k == 0) {
            if (tm_dtype_from_name(tok, &dt) || !(dt == TM_I8 || dt == TM_U8 || dt == TM_I4 || dt == TM_U4 || dt == TM_F8_E4M3 || dt == TM_F8_E5M2))
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung '%s': '%s' is not a code type (int4 int8 uint4 uint8 fp8_e4m3 fp8_e5m2) nor 'dense'", text, tok);
            out->code_dtype = dt;
        } else if (!strcmp(tok, "asym")) {
            out->symmetric = 0;
        } else if (!strcmp(tok, "sym")) {
            out->symmetric = 1;
        } else if (k == 1 && tm_granularity_parse(tok, &out->gran) == TM_OK) {
        } else if (tm_observer_from_name(tok, &out->observer) != TM_OK) {
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung '%s': '%s' is none of a granularity (tensor | channel[:AXIS] | "
                               "group:N[:AXIS], second), asym, sym or an observer", text, tok);
        }
    }
    return TM_OK;
}

void tm__sens_assign(const sens *S, const int *ur, int *a) {
    for (int i = 0; i < S->n_t; i++) a[i] = S->t[i].unit >= 0 ? ur[S->t[i].unit] : -1;
}

static int type_of(const sens *S, int i, int r) { return r < 0 ? S->t[i].src_type : S->t[i].rung_type[r]; }

uint64_t tm__sens_bytes(const sens *S, const int *a) {
    uint64_t b = 0;
    for (int i = 0; i < S->n_t; i++) b += a[i] < 0 ? S->t[i].src_bytes : S->t[i].rung_bytes[a[i]];
    return b;
}

/* "^name$" with the ERE specials escaped. */
static char *exact_re(const char *name) {
    size_t n = strlen(name);
    char *o = malloc(2 * n + 3), *q = o;
    if (!o) return NULL;
    *q++ = '^';
    for (const char *c = name; *c; c++) {
        if (strchr(".[]()*+?{}|^$\\", *c)) *q++ = '\\';
        *q++ = *c;
    }
    *q++ = '$';
    *q = '\0';
    return o;
}

int tm__sens_overrides(const sens *S, const int *a, char ***pats, int **types) {
    int n = 0;
    *pats = tm__calloc((size_t)S->n_t + 1, sizeof **pats);
    *types = tm__calloc((size_t)S->n_t + 1, sizeof **types);
    if (!*pats || !*types) return -1;
    for (int i = 0; i < S->n_t; i++) {
        if (S->t[i].ndim < 2) continue;
        int ty = type_of(S, i, a[i]);
        if (ty == S->t[i].carrier_type) continue;
        if (!((*pats)[n] = exact_re(S->t[i].name))) return -1;
        (*types)[n++] = ty;
    }
    return n;
}

void tm__sens_overrides_free(char **pats, int *types, int n) {
    for (int i = 0; pats && i < n; i++) free(pats[i]);
    free(pats);
    free(types);
}

static char *exact_re(const char *name);

int tm__sens_ct_rules(const sens *S, const int *a, tm_qrule **rules) {
    int n = 0;
    *rules = tm__calloc((size_t)S->n_t + 1, sizeof **rules);
    if (!*rules) return -1;
    for (int i = 0; i < S->n_t; i++) {
        if (S->t[i].ndim < 2 || a[i] < 0 || S->t[i].rung_type[a[i]] < 0) continue;
        tm_qrule *r = &(*rules)[n];
        if (!(r->pattern = exact_re(S->t[i].name))) return -1;
        r->has_spec = 1;
        r->spec = S->rspec[a[i]];
        n++;
    }
    (*rules)[n].pattern = tm__strdup(".*");
    if (!(*rules)[n].pattern) return -1;
    (*rules)[n++].ignore = 1;
    return n;
}

void tm__sens_ct_rules_free(tm_qrule *rules, int n) {
    for (int i = 0; rules && i < n; i++) free((char *)rules[i].pattern);
    free(rules);
}

static tm_status write_ct(sens *S, const int *a, const char *path, int checksums, int force, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    tm_qrule *rules = NULL;
    int n = tm__sens_ct_rules(S, a, &rules);
    if (n < 0) { tm__sens_ct_rules_free(rules, S->n_t + 1); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    tm_file *f = NULL;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(p->src, &op, &f, err);
    if (!s) {
        tm_ct_quantize_params cp = tm_ct_quantize_params_default();
        cp.spec = S->rspec[0];
        cp.rules = rules;
        cp.n_rules = n;
        cp.allow_empty = 1;
        cp.no_checksums = !checksums;
        cp.force = force;
        cp.n_threads = p->threads;
        cp.command_line = p->command_line;
        cp.cancel = p->cancel;
        tm_ct_quantize_result *r = NULL;
        s = tm_ct_quantize(f, path, &cp, &r, err);
        tm_ct_quantize_result_free(r);
        tm_close(f);
    }
    tm__sens_ct_rules_free(rules, n);
    return s;
}

tm_status tm__sens_write(sens *S, const int *a, const char *path, int checksums, int force, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    if (S->ct) return write_ct(S, a, path, checksums, force, err);
    char **pats = NULL;
    int *types = NULL;
    int n = tm__sens_overrides(S, a, &pats, &types);
    if (n < 0) { tm__sens_overrides_free(pats, types, S->n_t); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    tm_file *f = NULL;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(S->base, &op, &f, err);
    if (!s) {
        tm_gguf_quantize_params gp = tm_gguf_quantize_params_default();
        gp.ftype = S->carrier;
        gp.tt_patterns = (const char *const *)pats;
        gp.tt_types = types;
        gp.n_tt = n;
        gp.tt_exact = 1;
        gp.no_checksums = !checksums;
        gp.scratch = !checksums; /* a probe's candidate (the artifact has checksums): not fsynced */
        gp.force = force;
        gp.n_threads = p->threads;
        gp.command_line = p->command_line;
        gp.cancel = p->cancel;
        tm_gguf_tensor_cache tc;
        if (S->qc) {
            tc = tm__sens_qcache_hooks(S->qc);
            gp.tensor_cache = &tc;
        }
        tm_gguf_quantize_result *r = NULL;
        s = tm_gguf_quantize(f, path, &gp, &r, err);
        tm_gguf_quantize_result_free(r);
        tm_close(f);
    }
    tm__sens_overrides_free(pats, types, n);
    return s;
}

/* ---- one evaluation ----------------------------------------------------------------------- */

static pthread_mutex_t seq_mu = PTHREAD_MUTEX_INITIALIZER;

/* Weight error of the candidate against the source over the tensors it quantized. */
static tm_status weight_error(sens *S, const char *cand, sens_meas *m, tm_err *err) {
    tm_file *ref = NULL, *q = NULL;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(S->ct ? S->p->src : S->base, &op, &ref, err);
    if (!s) s = tm_open(cand, &op, &q, err);
    tm_qdiff_result *r = NULL;
    if (!s) {
        tm_qdiff_params qp;
        memset(&qp, 0, sizeof qp);
        qp.n_threads = S->p->threads;
        qp.cancel = S->p->cancel;
        s = tm_qdiff(ref, q, &qp, &r, err);
    }
    if (!s) {
        /* sums in the candidate's tensor order, whatever order qdiff sorted its entries in */
        double x2 = 0, e2 = 0, l2 = 0, nn = 0;
        for (int64_t qi = 0; qi < tm_file_n_tensors(q); qi++)
            for (int64_t k = 0; k < r->n; k++)
                if (r->entries[k].q_index == qi) tm__sens_werr_add(&r->entries[k], &x2, &e2, &l2, &nn);
        tm__sens_werr_finish(x2, e2, l2, nn, m);
    }
    tm_qdiff_free(r);
    tm_close(q);
    tm_close(ref);
    return s;
}

tm_evidence_llm_params tm__sens_evidence_params(const sens *S, const char *candidate) {
    tm_evidence_llm_params e = S->p->ev;
    e.baseline = S->base;
    e.candidate = candidate;
    e.base_cache = S->cache;
    e.threads = S->p->threads;
    e.gen = 0;
    e.warmup = 0;
    e.progress = NULL;
    e.cancel = S->p->cancel;
    return e;
}

static tm_status eval_one(sens *S, const sens_eval *ev, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    const int seq = ev->seq, dir = S->ct && !S->ctd; /* the candidate: a directory (ct without the cache) or a GGUF */
    char name[32];
    snprintf(name, sizeof name, "cand-%d", seq);
    /* files[0] is the candidate evaluated; a ct direct candidate may be two split files */
    char *files[2] = {S->ctd ? NULL : tm__aprintf(dir ? "%s/%s" : "%s/%s.gguf", S->work, name), NULL};
    char *man = tm__aprintf("%s/%s.gguf.manifest.json", S->work, name);
    tm_status s = (files[0] || S->ctd) && man ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!s && S->ctd) s = tm__sens_ctd_write(S, ev->a, name, files, err);
    else if (!s) s = tm__sens_write(S, ev->a, files[0], 0, 0, err);
    const char *cand = files[0];
    if (!s && ev->weights && S->ctd) tm__sens_ctd_weight(S, ev->weights - 1, ev->m);
    else if (!s && ev->weights) s = weight_error(S, cand, ev->m, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char *doc = NULL;
    if (!s) {
        tm_evidence_llm_params e = tm__sens_evidence_params(S, cand);
        s = tm_evidence_llm_run(&e, &doc, err);
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    pthread_mutex_lock(&seq_mu);
    S->cand_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    S->eval_seconds += (double)(t2.tv_sec - t1.tv_sec) + 1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    pthread_mutex_unlock(&seq_mu);
    if (!s) {
        json_t *d = json_loads(doc, 0, NULL);
        json_t *ov = json_object_get(json_object_get(d, "llm"), "overall"), *k = json_object_get(ov, "kld");
        json_t *mean = json_object_get(k, "mean"), *p99 = json_object_get(k, "p99"), *t1 = json_object_get(ov, "same_top1");
        if (!json_is_number(mean) || !json_is_number(p99) || !json_is_number(t1))
            s = tm__err_set(err, TM_E_INTERNAL, -1, "the evidence of %s has no overall KLD", cand);
        else {
            ev->m->kld_mean = json_number_value(mean);
            ev->m->kld_p99 = json_number_value(p99);
            ev->m->top1 = json_number_value(t1);
            ev->m->done = 1;
        }
        json_decref(d);
    }
    free(doc);
    for (int k = 0; k < 2; k++) {
        if (!files[k]) continue;
        const char *base = strrchr(files[k], '/');
        char *keep = p->keep_candidates ? tm__aprintf("%s/%s", p->keep_candidates, base ? base + 1 : files[k]) : NULL;
        if (keep && rename(files[k], keep) == 0) { /* kept for inspection (--keep-candidates) */
        } else if (dir) tm__rm_rf(files[k]);
        else unlink(files[k]);
        free(keep);
        free(files[k]);
    }
    if (man) unlink(man);
    free(man);
    return s;
}

typedef struct pool_ctx {
    sens *S;
    sens_eval *evals;
    int n, next, done;
    tm_status s;
    tm_err err;
    pthread_mutex_t mu;
} pool_ctx;

static void *worker(void *arg) {
    pool_ctx *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int k = c->s || (c->S->p->cancel && *c->S->p->cancel) || c->next >= c->n ? c->n : c->next++;
        pthread_mutex_unlock(&c->mu);
        if (k >= c->n) break;
        tm_err e;
        tm_err_clear(&e);
        tm_status s = eval_one(c->S, &c->evals[k], &e);
        pthread_mutex_lock(&c->mu);
        if (s && !c->s) { c->s = s; c->err = e; }
        c->done++;
        c->S->n_evals++;
        if (c->S->p->progress) c->S->p->progress(c->S->p->progress_ud, "probes", (uint64_t)c->done, (uint64_t)c->n);
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

tm_status tm__sens_eval_many(sens *S, sens_eval *evals, int n, tm_err *err) {
    if (n <= 0) return TM_OK;
    for (int k = 0; k < n; k++) evals[k].seq = S->cand_seq + k; /* names in the order of evals, whatever --jobs */
    S->cand_seq += n;
    pool_ctx c;
    memset(&c, 0, sizeof c);
    c.S = S;
    c.evals = evals;
    c.n = n;
    pthread_mutex_init(&c.mu, NULL);
    struct stat st;
    if (stat(S->cache, &st) != 0) { /* the first alone: it writes the base cache */
        c.n = 1;
        worker(&c);
        c.n = n;
    }
    int nw = S->p->jobs < 1 ? 1 : S->p->jobs;
    if (nw > n - c.next) nw = n - c.next;
    pthread_t *th = nw > 1 ? tm__calloc((size_t)nw, sizeof *th) : NULL;
    int started = 0;
    for (int w = 0; th && w < nw; w++)
        if (pthread_create(&th[w], NULL, worker, &c) == 0) started++;
    worker(&c);
    for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
    free(th);
    pthread_mutex_destroy(&c.mu);
    if (!c.s && S->p->cancel && *S->p->cancel) return tm__err_set(err, TM_E_CANCELLED, -1, "cancelled");
    if (c.s && err) *err = c.err;
    return c.s;
}

