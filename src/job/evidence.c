/* evidence.c: `tensormorph evidence` (tensormorph/evidence.h): open both models with
** tensormorph's ONNX reader (graph inputs, operator counts), prepare the sample sets, run each
** model once through the Node.js runner, then compute in C the nearest-rank latency percentiles
** and the output drift overall and per slice, and build the evidence document
** (docs/schemas/evidence.schema.json), validated before it is returned. */
#include "evidence_impl.h"
#include "../core/fsutil.h"
#include "../core/jschema.h"
#include "manifest.h"
#include "tensormorph/graph.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>

tm_status tm__ev_finish(const json_t *doc, char **json_out, tm_err *err) {
    tm_status s = tm__jschema_validate_named("evidence", doc, "evidence", err);
    if (s) {
        tm__err_prefix(err, "internal: the evidence does not satisfy docs/schemas/evidence.schema.json");
        if (err) err->code = TM_E_INTERNAL;
        return TM_E_INTERNAL;
    }
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    *json_out = text ? tm__aprintf("%s\n", text) : NULL;
    free(text);
    return *json_out ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
}

tm_evidence_params tm_evidence_params_default(void) {
    tm_evidence_params p;
    memset(&p, 0, sizeof p);
    p.n_random = 1;
    p.warmup = 3;
    p.runs = 10;
    p.threads = 1;
    p.node = "node";
    return p;
}

int tm_evidence_runtime_present(const char *node_modules) {
    if (!node_modules || !*node_modules) return 0;
    char *pj = tm__aprintf("%s/onnxruntime-node/package.json", node_modules);
    struct stat st;
    int ok = pj && stat(pj, &st) == 0 && S_ISREG(st.st_mode);
    free(pj);
    return ok;
}

tm_status tm_evidence_write(const char *path, const char *json_text, tm_err *err) {
    if (!path || !json_text) return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: NULL path or text");
    json_error_t je;
    json_t *doc = json_loads(json_text, 0, &je);
    if (!doc)
        return tm__err_set(err, TM_E_CORRUPT, je.position, "%s: evidence is not JSON: line %d: %s", path,
                           je.line, je.text);
    tm_status s = tm__jschema_validate_named("evidence", doc, path, err);
    json_decref(doc);
    if (s) return s;
    return tm__write_file_atomic(path, json_text, strlen(json_text), err);
}

double tm_percentile_nearest_rank(const double *sorted, int64_t n, int p) {
    if (n < 1 || p <= 0 || p > 100) return NAN;
    /* rank = ceil(p * n / 100), in integers so that e.g. p95 of 20 samples is rank 19 exactly */
    int64_t rank = ((int64_t)p * n + 99) / 100;
    if (rank < 1) rank = 1;
    return sorted[rank - 1];
}

/* ---- drift -------------------------------------------------------------------------------- */

/* Sums for one output of one sample; merged over any set of samples. */
typedef struct ev_stat {
    double  max_abs, sum_d2, sum_b2;
    int64_t rows, agree;
    int     nonfinite;   /* a NaN/Inf in either output */
    int     top1;        /* top-1 applies (float output, last dim > 1) */
} ev_stat;

static tm_status open_output(const char *path, tm_file **f, const tm_tensor **t, tm_err *err) {
    tm_status s = tm_open(path, NULL, f, err);
    if (!s && (tm_file_format(*f) != TM_FMT_NPY || tm_file_n_tensors(*f) != 1)) {
        tm_close(*f);
        *f = NULL;
        return tm__err_set(err, TM_E_IO, -1, "%s: the runner's output is not one .npy array", path);
    }
    if (!s) *t = tm_file_tensor(*f, 0);
    return s;
}

static tm_status drift_one(const char *bpath, const char *cpath, const char *out_name,
                           const char *sample_id, ev_stat *st, tm_err *err) {
    memset(st, 0, sizeof *st);
    tm_file *bf = NULL, *cf = NULL;
    const tm_tensor *bt = NULL, *ct = NULL;
    tm_status s = open_output(bpath, &bf, &bt, err);
    if (!s) s = open_output(cpath, &cf, &ct, err);
    if (!s) {
        int same = bt->ndim == ct->ndim;
        for (int d = 0; same && d < bt->ndim; d++) same = bt->shape[d] == ct->shape[d];
        if (!same) {
            char a[128] = "[", b[128] = "[";
            for (int d = 0; d < bt->ndim; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)bt->shape[d]);
            for (int d = 0; d < ct->ndim; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)ct->shape[d]);
            s = tm__err_set(err, TM_E_CORRUPT, -1, "output '%s' of sample '%s': the candidate's shape "
                            "%s] differs from the baseline's %s]", out_name, sample_id, b, a);
        }
    }
    float *b = NULL, *c = NULL;
    int64_t n = s ? 0 : bt->n_elems;
    if (!s) {
        b = tm__malloc_n((size_t)(n ? n : 1), sizeof *b);
        c = tm__malloc_n((size_t)(n ? n : 1), sizeof *c);
        if (!b || !c) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory for output '%s'", out_name);
    }
    if (!s && n) s = tm_tensor_read_f32(bf, 0, 0, n, b, err);
    if (!s && n) s = tm_tensor_read_f32(cf, 0, 0, n, c, err);
    if (!s) {
        for (int64_t e = 0; e < n; e++) {
            double x = b[e], y = c[e], d = y - x;
            if (!isfinite(x) || !isfinite(y)) { st->nonfinite = 1; continue; }
            if (fabs(d) > st->max_abs) st->max_abs = fabs(d);
            st->sum_d2 += d * d;
            st->sum_b2 += x * x;
        }
        int64_t last = bt->ndim ? bt->shape[bt->ndim - 1] : 0;
        st->top1 = tm_dtype_get(bt->dtype)->is_float && bt->ndim >= 1 && last > 1;
        if (st->top1) {
            st->rows = n / last;
            for (int64_t r = 0; r < st->rows; r++) {
                const float *br = b + r * last, *cr = c + r * last;
                int64_t ab = 0, ac = 0;
                for (int64_t j = 1; j < last; j++) {
                    if (br[j] > br[ab]) ab = j;
                    if (cr[j] > cr[ac]) ac = j;
                }
                st->agree += ab == ac;
            }
        }
    }
    free(b);
    free(c);
    tm_close(bf);
    tm_close(cf);
    return s;
}

/* {max_abs, rel_l2, top1_agreement[, n_inputs]} over the samples idx[0..n) of output k. */
static json_t *drift_json(const ev_stat *stats, int n_out, int k, const int64_t *idx, int64_t n,
                          int with_count) {
    ev_stat a;
    memset(&a, 0, sizeof a);
    a.top1 = 1;
    for (int64_t j = 0; j < n; j++) {
        const ev_stat *s = &stats[(idx ? idx[j] : j) * n_out + k];
        if (s->max_abs > a.max_abs) a.max_abs = s->max_abs;
        a.sum_d2 += s->sum_d2;
        a.sum_b2 += s->sum_b2;
        a.rows += s->rows;
        a.agree += s->agree;
        a.nonfinite |= s->nonfinite;
        a.top1 &= s->top1;
    }
    json_t *o = json_object();
    json_object_set_new(o, "max_abs", a.nonfinite ? json_null() : json_real(a.max_abs));
    json_t *rel;
    if (a.nonfinite) rel = json_null();
    else if (a.sum_b2 > 0) rel = json_real(sqrt(a.sum_d2) / sqrt(a.sum_b2));
    else rel = a.sum_d2 == 0 ? json_real(0.0) : json_null();
    json_object_set_new(o, "rel_l2", rel);
    json_object_set_new(o, "top1_agreement", a.top1 && a.rows > 0 && !a.nonfinite
                                                 ? json_real((double)a.agree / (double)a.rows)
                                                 : json_null());
    if (with_count) json_object_set_new(o, "n_inputs", json_integer(n));
    return o;
}

/* ---- the document ------------------------------------------------------------------------- */

static json_t *operators_json(const tm_file *f) {
    json_t *o = json_object();
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++) {
        const char *op = tm_graph_node_at(f, i)->op_type;
        json_t *c = json_object_get(o, op);
        json_object_set_new(o, op, json_integer(c ? json_integer_value(c) + 1 : 1));
    }
    return o;
}

static json_t *model_json(const char *path, const char *sha, const tm__ev_result *r, const tm_file *f) {
    json_t *m = json_object(), *lat = json_array();
    double *sorted = tm__malloc_n((size_t)r->n_latency, sizeof *sorted);
    if (!m || !lat || !sorted) { json_decref(m); json_decref(lat); free(sorted); return NULL; }
    for (int64_t i = 0; i < r->n_latency; i++) {
        json_array_append_new(lat, json_real(r->latency_ms[i]));
        sorted[i] = r->latency_ms[i];
    }
    qsort(sorted, (size_t)r->n_latency, sizeof *sorted, tm__cmp_double);
    json_object_set_new(m, "path", json_string(path));
    json_object_set_new(m, "sha256", json_string(sha));
    json_object_set_new(m, "latency_ms", lat);
    json_object_set_new(m, "p50_ms", json_real(tm_percentile_nearest_rank(sorted, r->n_latency, 50)));
    json_object_set_new(m, "p95_ms", json_real(tm_percentile_nearest_rank(sorted, r->n_latency, 95)));
    json_object_set_new(m, "p99_ms", json_real(tm_percentile_nearest_rank(sorted, r->n_latency, 99)));
    json_object_set_new(m, "peak_rss_bytes", json_integer(r->peak_rss_bytes));
    json_object_set_new(m, "operators", operators_json(f));
    free(sorted);
    return m;
}

void tm__ev_doc_head(json_t *d, json_t *runtime) {
    json_object_set_new(d, "schema", json_string("tensormorph.evidence/1"));
    json_t *tool = json_object();
    json_object_set_new(tool, "name", json_string("tensormorph"));
    json_object_set_new(tool, "version", json_string(tm_version()));
    json_object_set_new(tool, "commit", json_string(tm_git_commit()));
    json_object_set_new(d, "tool", tool);
    json_object_set_new(d, "runtime", runtime);
    tm_host_info_t h;
    tm_host_info(&h);
    json_t *dev = json_object();
    json_object_set_new(dev, "kind", json_string("cpu"));
    json_object_set_new(dev, "name", json_string(h.cpu_model));
    json_object_set_new(dev, "cores", json_integer(h.n_cores));
    json_object_set_new(dev, "measured", json_true());
    json_object_set_new(d, "device", dev);
    json_object_set_new(d, "host", tm__manifest_host());
}

static json_t *build_doc(const tm_evidence_params *p, const tm__ev_inputs *in,
                         const tm__ev_samples *smp, const tm__ev_slices *sl, const tm_file *bf,
                         const tm_file *cf, const char (*sha)[65], const tm__ev_result *res,
                         const ev_stat *stats) {
    json_t *d = json_object();
    json_t *rt = json_object();
    json_object_set_new(rt, "name", json_string("onnxruntime-node"));
    json_object_set_new(rt, "version", json_string(res[0].runtime_version));
    json_object_set_new(rt, "node", json_string(res[0].node));
    json_object_set_new(rt, "execution_provider", json_string("cpu"));
    tm__ev_doc_head(d, rt);

    json_t *proto = json_object(), *pin = json_object(), *shapes = json_object();
    json_object_set_new(pin, "mode", json_string(p->inputs_dir ? "dir" : "random"));
    json_object_set_new(pin, "path", p->inputs_dir ? json_string(p->inputs_dir) : json_null());
    json_object_set_new(pin, "count", json_integer(smp->n));
    json_object_set_new(pin, "sha256", json_string(smp->sha256));
    json_object_set_new(pin, "seed", p->inputs_dir ? json_null() : json_integer((json_int_t)p->seed));
    json_object_set_new(proto, "inputs", pin);
    for (int k = 0; k < in->n; k++) {
        json_t *a = json_array();
        for (int dd = 0; dd < in->in[k].rndim; dd++) json_array_append_new(a, json_integer(in->in[k].rshape[dd]));
        json_object_set_new(shapes, in->in[k].name, a);
    }
    json_object_set_new(proto, "input_shapes", shapes);
    json_object_set_new(proto, "warmup", json_integer(p->warmup));
    json_object_set_new(proto, "runs", json_integer(p->runs));
    json_object_set_new(proto, "threads", json_integer(p->threads));
    json_object_set_new(proto, "graph_optimization_level", json_string("all"));
    json_object_set_new(d, "protocol", proto);

    json_t *models = json_object();
    json_object_set_new(models, "baseline", model_json(p->baseline, sha[0], &res[0], bf));
    json_object_set_new(models, "candidate", model_json(p->candidate, sha[1], &res[1], cf));
    json_object_set_new(d, "models", models);

    int n_out = res[0].n_out;
    json_t *drift = json_object(), *overall = json_object(), *slices = json_object();
    for (int k = 0; k < n_out; k++)
        json_object_set_new(overall, res[0].out_names[k], drift_json(stats, n_out, k, NULL, smp->n, 0));
    for (int s = 0; s < sl->n; s++) {
        json_t *so = json_object();
        for (int k = 0; k < n_out; k++)
            json_object_set_new(so, res[0].out_names[k], drift_json(stats, n_out, k, sl->idx[s], sl->count[s], 1));
        json_object_set_new(slices, sl->names[s], so);
    }
    json_object_set_new(drift, "overall", overall);
    json_object_set_new(drift, "slices", slices);
    json_object_set_new(d, "drift", drift);
    json_object_set_new(d, "candidate_operators", operators_json(cf));
    return d;
}

/* ---- the job ------------------------------------------------------------------------------ */

static tm_status check_params(const tm_evidence_params *p, tm_err *err) {
    if (!p || !p->baseline || !p->candidate || !p->runner_script || !p->node_modules || !p->node)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: baseline, candidate, node, "
                           "runner_script and node_modules are required");
    if (p->warmup < 0 || p->runs < 1 || p->threads < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: warmup %d (>= 0), runs %d (>= 1), "
                           "threads %d (>= 1)", p->warmup, p->runs, p->threads);
    if (!p->inputs_dir && p->n_random < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: --random-inputs %lld: need at least 1",
                           (long long)p->n_random);
    if (p->seed > (uint64_t)INT64_MAX)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: seed above 2^63-1");
    if (p->slices_path && !p->inputs_dir)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: --slices needs --inputs DIR (slices "
                           "name the sample ids of DIR/inputs.json)");
    if (p->n_input_shapes && !p->input_shapes)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "evidence: input_shapes is NULL");
    return TM_OK;
}

/* Baseline and candidate outputs differ by name: say which names each has that the other lacks
** (drift compares outputs by name). Returns TM_E_CORRUPT. */
static tm_status outputs_differ(const tm_evidence_params *p, const tm__ev_result *b, const tm__ev_result *c,
                                const int *cmap, tm_err *err) {
    char only_b[220] = "", only_c[220] = "";
    size_t ub = 0, uc = 0;
    int nb = 0, nc = 0;
    for (int k = 0; k < b->n_out; k++) {
        if (cmap[k] >= 0) continue;
        nb++;
        if (ub < sizeof only_b) {
            int w = snprintf(only_b + ub, sizeof only_b - ub, "%s'%s'", ub ? ", " : "", b->out_names[k]);
            if (w > 0) ub += (size_t)w;
        }
    }
    for (int j = 0; j < c->n_out; j++) {
        int found = 0;
        for (int k = 0; k < b->n_out && !found; k++) found = !strcmp(b->out_names[k], c->out_names[j]);
        if (found) continue;
        nc++;
        if (uc < sizeof only_c) {
            int w = snprintf(only_c + uc, sizeof only_c - uc, "%s'%s'", uc ? ", " : "", c->out_names[j]);
            if (w > 0) uc += (size_t)w;
        }
    }
    return tm__err_set(err, TM_E_CORRUPT, -1,
                       "%s: the candidate's outputs are not the baseline's (drift compares outputs by name): "
                       "baseline only: %s; candidate only: %s",
                       p->candidate, nb ? only_b : "(none)", nc ? only_c : "(none)");
}

tm_status tm_evidence_run(const tm_evidence_params *p, char **json_out, tm_err *err) {
    *json_out = NULL;
    tm_status s = check_params(p, err);
    if (s) return s;
    if (!tm_evidence_runtime_present(p->node_modules))
        return tm__err_set(err, TM_E_IO, -1, "onnxruntime-node is not installed in %s", p->node_modules);
    tm_file *bf = NULL, *cf = NULL;
    tm__ev_inputs bin = {0}, cin = {0};
    tm__ev_samples smp = {0};
    tm__ev_slices sl = {0};
    tm__ev_result res[2];
    memset(res, 0, sizeof res);
    ev_stat *stats = NULL;
    char sha[2][65];
    char *scratch = tm__aprintf("%s/tensormorph-evidence-XXXXXX", p->tmp_dir ? p->tmp_dir : "/tmp");
    int made = 0;
    json_t *doc = NULL;

    char **names[2] = {NULL, NULL};
    int n_names[2] = {0, 0};

    if (!scratch) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) s = tm_open(p->baseline, NULL, &bf, err);
    if (!s) s = tm_open(p->candidate, NULL, &cf, err);
    if (!s) {
        if (mkdtemp(scratch)) made = 1;
        else s = tm__err_sys(err, errno, "%s: cannot create the scratch folder", scratch);
    }
    if (!s && p->progress) p->progress(p->progress_ud, "loading", 0, 2);
    if (!s) s = tm__ev_describe(p, "baseline", p->baseline, scratch, &names[0], &n_names[0], err);
    if (!s && p->progress) p->progress(p->progress_ud, "loading", 1, 2);
    if (!s) s = tm__ev_describe(p, "candidate", p->candidate, scratch, &names[1], &n_names[1], err);
    if (!s) s = tm__ev_model_inputs(bf, p->baseline, names[0], n_names[0], &bin, err);
    if (!s) s = tm__ev_model_inputs(cf, p->candidate, names[1], n_names[1], &cin, err);
    if (!s) s = tm__ev_resolve_shapes(&bin, &cin, p, err);
    if (!s) s = tm_sha256_file(p->baseline, sha[0], NULL, err);
    if (!s) s = tm_sha256_file(p->candidate, sha[1], NULL, err);
    if (!s && p->progress) p->progress(p->progress_ud, "inputs", 0, 1);
    if (!s) s = p->inputs_dir ? tm__ev_load_dir(p->inputs_dir, &bin, scratch, &smp, err)
                              : tm__ev_random(&bin, p->n_random, p->seed, scratch, &smp, err);
    if (!s && p->slices_path) s = tm__ev_load_slices(p->slices_path, &smp, &sl, err);
    if (!s) s = tm__ev_run_model(p, "baseline", p->baseline, &bin, &smp, scratch, &res[0], err);
    if (!s) s = tm__ev_run_model(p, "candidate", p->candidate, &bin, &smp, scratch, &res[1], err);
    /* the candidate's outputs, matched by name to the baseline's */
    int n_out = s ? 0 : res[0].n_out;
    int *cmap = NULL;
    if (!s) {
        int same = res[1].n_out == n_out;
        cmap = tm__calloc((size_t)n_out, sizeof *cmap);
        if (!cmap) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int k = 0; !s && k < n_out; k++) {
            cmap[k] = -1;
            for (int j = 0; j < res[1].n_out; j++)
                if (!strcmp(res[0].out_names[k], res[1].out_names[j])) cmap[k] = j;
            same &= cmap[k] >= 0;
        }
        if (!s && !same) s = outputs_differ(p, &res[0], &res[1], cmap, err);
    }
    if (!s) {
        stats = tm__calloc((size_t)(smp.n * n_out), sizeof *stats);
        if (!stats) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t i = 0; !s && i < smp.n; i++) {
        if (p->progress) p->progress(p->progress_ud, "drift", (uint64_t)i, (uint64_t)smp.n);
        for (int k = 0; !s && k < n_out; k++)
            s = drift_one(res[0].out_files[i * n_out + k], res[1].out_files[i * res[1].n_out + cmap[k]],
                          res[0].out_names[k], smp.ids[i], &stats[i * n_out + k], err);
    }
    if (!s) {
        doc = build_doc(p, &bin, &smp, &sl, bf, cf, (const char (*)[65])sha, res, stats);
        if (!doc) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) s = tm__ev_finish(doc, json_out, err);
    json_decref(doc);
    free(cmap);
    free(stats);
    tm__ev_result_free(&res[0], smp.n);
    tm__ev_result_free(&res[1], smp.n);
    tm__ev_slices_free(&sl);
    tm__ev_samples_free(&smp, bin.n);
    tm__ev_inputs_free(&bin);
    tm__ev_inputs_free(&cin);
    tm__ev_names_free(&names[0], &n_names[0]);
    tm__ev_names_free(&names[1], &n_names[1]);
    tm_close(bf);
    tm_close(cf);
    if (made) tm__rm_rf(scratch);
    free(scratch);
    return s;
}
