/* evidence_llm_stats.c: the numbers of the LLM evidence (evidence_llm_impl.h): per scored
** position, from the two models' full next-token distributions, KLD in double, same top-1,
** the actual next token's log-probabilities and delta-p; sums per slice; the worst positions;
** the statistics and histogram JSON. Formulas: tensormorph/evidence_llm.h (after llama.cpp
** tools/perplexity's KL-divergence mode). */
#include "evidence_llm_impl.h"

#include <math.h>

/* p_c = 0 where p_b > 0 is read as the smallest positive float (2^-149) so that KLD stays finite. */
#define TM__LLM_PMIN 1.40129846432481707e-45

static const double hist_edges[TM__LLM_HIST] = {0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10};

void tm__llm_acc_free(tm__llm_acc *a) {
    free(a->klds);
    memset(a, 0, sizeof *a);
}

static tm_status acc_push(tm__llm_acc *a, double k, tm_err *err) {
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 1024;
        double *nk = realloc(a->klds, (size_t)nc * sizeof *nk);
        if (!nk) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        a->klds = nk;
        a->cap = nc;
    }
    a->klds[a->n++] = k;
    int b = 0;
    while (b + 1 < TM__LLM_HIST && k >= hist_edges[b + 1]) b++;
    a->hist[b]++;
    return TM_OK;
}

tm_status tm__llm_acc_merge(tm__llm_acc *dst, const tm__llm_acc *src, tm_err *err) {
    for (int64_t i = 0; i < src->n; i++) {
        tm_status s = acc_push(dst, src->klds[i], err);
        if (s) return s;
    }
    dst->same += src->same;
    dst->nan += src->nan;
    dst->sum_k += src->sum_k;     dst->sum_k2 += src->sum_k2;
    dst->sum_nb += src->sum_nb;   dst->sum_nb2 += src->sum_nb2;
    dst->sum_nc += src->sum_nc;   dst->sum_nc2 += src->sum_nc2;
    dst->sum_d += src->sum_d;     dst->sum_d2 += src->sum_d2;
    dst->sum_dp2 += src->sum_dp2;
    return TM_OK;
}

/* The TM__LLM_TOP most probable tokens of row (descending p, lower id first on ties). */
static void top_tokens(const float *row, int V, tm__llm_top *top) {
    for (int t = 0; t < TM__LLM_TOP; t++) { top[t].token = -1; top[t].p = -1.0f; }
    for (int v = 0; v < V; v++) {
        float p = row[v];
        if (!(p > top[TM__LLM_TOP - 1].p)) continue;
        int j = TM__LLM_TOP - 1;
        while (j > 0 && p > top[j - 1].p) { top[j] = top[j - 1]; j--; }
        top[j].token = v;
        top[j].p = p;
    }
}

static int argmax(const float *row, int V) {
    int best = 0;
    for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
    return best;
}

static void worst_add(tm__llm_worst *w, int slice, int64_t pos, double k, const float *b,
                      const float *c, int V) {
    if (w->n == TM__LLM_WORST && !(k > w->it[w->n - 1].kld)) return;
    int j = w->n < TM__LLM_WORST ? w->n++ : TM__LLM_WORST - 1;
    while (j > 0 && k > w->it[j - 1].kld) { w->it[j] = w->it[j - 1]; j--; }
    tm__llm_worst_item *it = &w->it[j];
    it->slice = slice;
    it->position = pos;
    it->kld = k;
    top_tokens(b, V, it->base_top);
    top_tokens(c, V, it->cand_top);
}

static tm_status read_row(FILE *f, const char *name, float *row, int V, int64_t r, tm_err *err) {
    if (fread(row, sizeof *row, (size_t)V, f) != (size_t)V)
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: the distributions end at row %lld (%d floats a row)",
                           name, (long long)r, V);
    return TM_OK;
}

tm_status tm__llm_score(FILE *bf, const char *bname, FILE *cf, const char *cname, int V,
                        const int32_t *tokens, int chunks, int ctx, int slice, tm__llm_acc *acc,
                        tm__llm_worst *w, volatile const int *cancel, tm_err *err) {
    float *b = tm__malloc_n((size_t)V, sizeof *b), *c = tm__malloc_n((size_t)V, sizeof *c);
    tm_status s = b && c ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const int first = ctx / 2;
    int64_t r = 0;
    for (int ch = 0; !s && ch < chunks; ch++) {
        if (cancel && *cancel) { s = tm__err_set(err, TM_E_CANCELLED, -1, "evidence: cancelled"); break; }
        for (int i = first; !s && i <= ctx - 2; i++, r++) {
            if ((s = read_row(bf, bname, b, V, r, err)) || (s = read_row(cf, cname, c, V, r, err))) break;
            int64_t pos = (int64_t)ch * ctx + i;
            int32_t next = tokens[pos + 1];
            int finite = next >= 0 && next < V;
            for (int v = 0; v < V && finite; v++) finite = isfinite(b[v]) && isfinite(c[v]);
            if (!finite) { acc->nan++; continue; }
            double k = 0;
            for (int v = 0; v < V; v++) {
                double pb = b[v];
                if (!(pb > 0)) continue;
                double pc = c[v] > 0 ? (double)c[v] : TM__LLM_PMIN;
                k += pb * (log(pb) - log(pc));
            }
            if (k < 0) k = 0; /* rounding of distributions that sum to 1 within float precision */
            double pb = b[next] > 0 ? (double)b[next] : TM__LLM_PMIN;
            double pc = c[next] > 0 ? (double)c[next] : TM__LLM_PMIN;
            double nb = -log(pb), nc = -log(pc), dp = (double)c[next] - (double)b[next];
            if ((s = acc_push(acc, k, err))) break;
            acc->same += argmax(b, V) == argmax(c, V);
            acc->sum_k += k;       acc->sum_k2 += k * k;
            acc->sum_nb += nb;     acc->sum_nb2 += nb * nb;
            acc->sum_nc += nc;     acc->sum_nc2 += nc * nc;
            acc->sum_d += nc - nb; acc->sum_d2 += (nc - nb) * (nc - nb);
            acc->sum_dp2 += dp * dp;
            worst_add(w, slice, pos, k, b, c, V);
        }
    }
    free(b);
    free(c);
    return s;
}

/* sqrt((mean(x^2) - mean^2) / (n - 1)): the standard error of a mean, 0 when n < 2. */
static double stderr_of(double sum, double sum2, int64_t n) {
    if (n < 2) return 0;
    double m = sum / (double)n, v = sum2 / (double)n - m * m;
    return v > 0 ? sqrt(v / (double)(n - 1)) : 0;
}

/* nearest-rank permille percentile of ascending s[0..n-1]: s[ceil(pm*n/1000)-1] */
static double pct(const double *s, int64_t n, int pm) {
    int64_t rank = ((int64_t)pm * n + 999) / 1000;
    if (rank < 1) rank = 1;
    return s[rank - 1];
}

static json_t *num_or_null(int ok, double v) {
    return ok && isfinite(v) ? json_real(v) : json_null();
}

json_t *tm__llm_stats_json(const tm__llm_acc *a) {
    json_t *o = json_object(), *k = json_object();
    if (!o || !k) { json_decref(o); json_decref(k); return NULL; }
    int ok = a->n > 0 && a->nan == 0;
    double *s = ok ? tm__malloc_n((size_t)a->n, sizeof *s) : NULL;
    if (ok && !s) { json_decref(o); json_decref(k); return NULL; }
    if (s) {
        memcpy(s, a->klds, (size_t)a->n * sizeof *s);
        qsort(s, (size_t)a->n, sizeof *s, tm__cmp_double);
    }
    double n = (double)a->n;
    json_object_set_new(k, "mean", num_or_null(ok, a->sum_k / n));
    json_object_set_new(k, "stderr", num_or_null(ok, stderr_of(a->sum_k, a->sum_k2, a->n)));
    json_object_set_new(k, "median", num_or_null(ok, s ? pct(s, a->n, 500) : 0));
    json_object_set_new(k, "p90", num_or_null(ok, s ? pct(s, a->n, 900) : 0));
    json_object_set_new(k, "p99", num_or_null(ok, s ? pct(s, a->n, 990) : 0));
    json_object_set_new(k, "p999", num_or_null(ok, s ? pct(s, a->n, 999) : 0));
    json_object_set_new(k, "max", num_or_null(ok, s ? s[a->n - 1] : 0));
    json_object_set_new(o, "kld", k);
    double same = (double)a->same / n;
    json_object_set_new(o, "same_top1", num_or_null(ok, same));
    json_object_set_new(o, "same_top1_stderr", num_or_null(ok, a->n > 1 ? sqrt(same * (1 - same) / (n - 1)) : 0));
    double pb = exp(a->sum_nb / n), pc = exp(a->sum_nc / n), ratio = exp(a->sum_d / n);
    json_object_set_new(o, "ppl_base", num_or_null(ok, pb));
    json_object_set_new(o, "ppl_base_stderr", num_or_null(ok, pb * stderr_of(a->sum_nb, a->sum_nb2, a->n)));
    json_object_set_new(o, "ppl_cand", num_or_null(ok, pc));
    json_object_set_new(o, "ppl_cand_stderr", num_or_null(ok, pc * stderr_of(a->sum_nc, a->sum_nc2, a->n)));
    json_object_set_new(o, "ppl_ratio", num_or_null(ok, ratio));
    json_object_set_new(o, "ppl_ratio_stderr", num_or_null(ok, ratio * stderr_of(a->sum_d, a->sum_d2, a->n)));
    json_object_set_new(o, "rms_dp", num_or_null(ok, sqrt(a->sum_dp2 / n)));
    json_object_set_new(o, "scored_tokens", json_integer(a->n));
    json_object_set_new(o, "nan_positions", json_integer(a->nan));
    free(s);
    return o;
}

json_t *tm__llm_hist_json(const tm__llm_acc *a) {
    json_t *o = json_object(), *e = json_array(), *c = json_array();
    if (!o || !e || !c) { json_decref(o); json_decref(e); json_decref(c); return NULL; }
    for (int b = 0; b < TM__LLM_HIST; b++) {
        json_array_append_new(e, json_real(hist_edges[b]));
        json_array_append_new(c, json_integer(a->hist[b]));
    }
    json_object_set_new(o, "edges", e);
    json_object_set_new(o, "counts", c);
    return o;
}
