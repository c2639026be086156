/* qdiff.c: Quantization Diff. For each quantized tensor, compare the dequantized values with
** the full-precision source of the same name, measuring error against each element's own
** scale (LSB units), and flag the tensors where error is unusually large for their scale.
** Definitions and thresholds: docs/qdiff.md. */
#include "../core/core.h"
#include "../core/pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum { QDIFF_CHUNK = 1 << 18 }; /* elements per read: 1 MiB of f32 per buffer */

typedef struct qd_ctx {
    const tm_file *ref, *q;
    tm_qdiff_entry *entries;
    const tm_tensor_pair *pair; /* [k]: how entry k's source in ref pairs with its q tensor     */
    const tm_qdiff_params *p;
    uint64_t total;
    atomic_ullong done;
    pthread_mutex_t mu;
} qd_ctx;

/* The plain figures of a float target (entry.plain): sums in double in element order. */
typedef struct plain_acc {
    int64_t n, n_nonfinite;
    double  x2, e2, q2, xq, max_abs;
} plain_acc;

static void plain_add(plain_acc *a, const float *x, const float *xq, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) { a->n_nonfinite++; continue; }
        const double d = (double)x[i] - (double)xq[i];
        a->x2 += (double)x[i] * (double)x[i];
        a->e2 += d * d;
        a->q2 += (double)xq[i] * (double)xq[i];
        a->xq += (double)x[i] * (double)xq[i];
        if (fabs(d) > a->max_abs || isnan(d)) a->max_abs = isnan(d) ? NAN : fabs(d);
        a->n++;
    }
}

/* SQNR, RMSE, max |error| and cosine as tm_erracc_summary gives them; the figures in LSB have
** no scale to be measured in: NaN (null in --json), no clipping, no worst group. */
static void plain_summary(const plain_acc *a, tm_errsum *o) {
    memset(o, 0, sizeof *o);
    o->n = a->n;
    o->n_nonfinite = a->n_nonfinite;
    o->sqnr_db = a->e2 == 0 ? INFINITY : a->x2 == 0 ? -INFINITY : 10.0 * log10(a->x2 / a->e2);
    o->rmse = a->n ? sqrt(a->e2 / (double)a->n) : 0;
    o->rmse_lsb = o->max_err_lsb = o->max_err_lsb_unclipped = o->worst_group_rmse_lsb = NAN;
    o->max_abs_err = a->max_abs;
    o->worst_group = -1;
    const double den = sqrt(a->x2) * sqrt(a->q2);
    o->cosine = den > 0 ? a->xq / den : (a->x2 == a->q2 ? 1.0 : 0.0);
}

static tm_status qdiff_one(void *vctx, int64_t k, int thread, tm_err *err) {
    (void)thread;
    qd_ctx *c = vctx;
    tm_qdiff_entry *e = &c->entries[k];
    const tm_tensor *tq = tm_file_tensor(c->q, e->q_index);
    const tm_qtensor *qt = tq->quant;
    tm_qview *v = NULL;
    tm_status s = e->plain ? TM_OK : tm_qview_open(c->q, e->q_index, &v, err);
    if (s) return s;
    const float *scale = v ? tm_qview_scale(v) : NULL;
    const int32_t *zp = v ? tm_qview_zero_point(v) : NULL;
    int64_t n_params = v ? tm_qview_n_params(v) : 0;
    tm_erracc acc;
    plain_acc pa;
    memset(&pa, 0, sizeof pa);
    s = tm_erracc_init(&acc, n_params, err);
    /* a codebook type (IQ*): one LSB is one step between its neighbouring code values */
    double cstep = qt && qt->ggml_type != 0 ? tm_ggml_code_step(qt->ggml_type) : 1.0;
    acc.lsb_mult = cstep;
    float *x = NULL, *xq = NULL;
    int64_t *param = NULL;
    if (s == TM_OK) {
        x = tm__malloc_n(QDIFF_CHUNK, sizeof(float));
        xq = tm__malloc_n(QDIFF_CHUNK, sizeof(float));
        param = tm__malloc_n(QDIFF_CHUNK, sizeof(int64_t));
        if (!x || !xq || !param) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    int64_t qmin = qt ? qt->qmin : 0, qmax = qt ? qt->qmax : 0;
    /* the importance matrix of this tensor, when one fits it: ne0 columns, one row of weights
    ** per matrix (expert) of ne1 rows */
    const float *imw = NULL;
    int64_t ne0 = tq->ndim ? tq->shape[tq->ndim - 1] : 1, ne1 = tq->ndim >= 2 ? tq->shape[tq->ndim - 2] : 1;
    if (c->p->imatrix && ne0 > 0 && ne1 > 0) {
        const tm_imatrix_entry *ie = tm_imatrix_find(c->p->imatrix, e->name);
        if (ie && ie->nval == ne0 * (tq->n_elems / (ne0 * ne1))) imw = ie->weights;
    }
    double wx2 = 0, we2 = 0, wsum = 0;
    for (int64_t start = 0; s == TM_OK && start < tq->n_elems; start += QDIFF_CHUNK) {
        if (c->p->cancel && *c->p->cancel) {
            s = tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
            break;
        }
        int64_t n = tq->n_elems - start < QDIFF_CHUNK ? tq->n_elems - start : QDIFF_CHUNK;
        s = tm_tensor_pair_read_f32(c->ref, &c->pair[k], start, n, x, err); /* in q's order */
        if (s) break;
        s = v ? tm_qview_read(v, start, n, xq, param, err) : tm_tensor_read_f32(c->q, e->q_index, start, n, xq, err);
        if (s) break;
        tm_tensor_release_elems(c->ref, e->ref_index, start, n);
        tm_tensor_release_elems(c->q, e->q_index, start, n);
        if (v) tm_erracc_add(&acc, qt->code_dtype, x, xq, param, scale, zp, qmin, qmax, n);
        else plain_add(&pa, x, xq, n);
        for (int64_t i = 0; imw && i < n; i++) {
            const int64_t g = start + i;
            const double w = imw[(g / (ne0 * ne1)) * ne0 + g % ne0], d = (double)x[i] - (double)xq[i];
            wx2 += w * (double)x[i] * (double)x[i];
            we2 += w * d * d;
            wsum += w;
        }
    }
    if (s == TM_OK && imw) {
        e->imatrix = 1;
        /* every weight 0: no weighted figure is defined (NaN: null in --json); a weighted error
        ** of 0 is exact (+inf) only when some weighted source is not 0 */
        e->imx_sqnr_db = !(wsum > 0) ? NAN : we2 > 0 ? 10 * log10(wx2 / we2) : wx2 > 0 ? INFINITY : NAN;
        e->imx_rmse = wsum > 0 ? sqrt(we2 / wsum) : NAN;
    }
    if (s == TM_OK && c->p->progress) {
        uint64_t d = atomic_fetch_add(&c->done, 1) + 1;
        pthread_mutex_lock(&c->mu); /* the callback need not be thread-safe */
        c->p->progress(c->p->progress_ud, d, c->total);
        pthread_mutex_unlock(&c->mu);
    }
    if (s == TM_OK && !v) {
        plain_summary(&pa, &e->e);
        snprintf(e->scheme, sizeof e->scheme, "%s", tm_dtype_get(tq->dtype) ? tm_dtype_get(tq->dtype)->name : "float");
    } else if (s == TM_OK) {
        tm_erracc_summary(&acc, &e->e);
        for (int64_t k2 = 0; k2 < n_params; k2++) /* ggml: step 0 for an all-zero block is llama.cpp's own */
            if (qt->ggml_type != 0 ? !isfinite(scale[k2]) : (!(scale[k2] > 0) || !isfinite(scale[k2]))) e->e.n_bad_scales++;
        tm_qtensor_label(c->q, tq, e->scheme, sizeof e->scheme);
        /* ggml codecs round the scale after choosing codes and search K-quant ranges: neither
        ** the half-LSB bound nor "no clipping" holds by design */
        if (qt->ggml_type != 0) e->clip_expected = 1;
        /* a vector codebook (IQ grids) picks whole grid points: no rounding bound applies */
        e->codebook = cstep != 1.0;
    } else {
        tm__err_prefix(err, "qdiff: tensor '%s'", tq->name);
    }
    tm_erracc_free(&acc);
    free(x); free(xq); free(param);
    tm_qview_free(v);
    return s;
}

static double sort_key(double v) { return isnan(v) ? -INFINITY : v; }

static int cmp_entry(const void *a, const void *b) {
    const tm_qdiff_entry *x = a, *y = b;
    if (x->flagged != y->flagged) return y->flagged - x->flagged;
    double kx = sort_key(x->e.sqnr_db), ky = sort_key(y->e.sqnr_db);
    if (kx != ky) return kx < ky ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* median of the SQNRs (NaN left out, +inf kept: an exact tensor) of the entries whose scheme is
** `scheme`; buf holds r->n doubles. All exact gives +inf; none measured gives NaN. */
static double scheme_median(const tm_qdiff_result *r, const char *scheme, double *buf) {
    int64_t m = 0;
    for (int64_t k = 0; k < r->n; k++)
        if (!strcmp(r->entries[k].scheme, scheme) && !isnan(r->entries[k].e.sqnr_db))
            buf[m++] = r->entries[k].e.sqnr_db;
    if (!m) return NAN;
    qsort(buf, (size_t)m, sizeof *buf, tm__cmp_double);
    return m % 2 ? buf[m / 2] : 0.5 * (buf[m / 2 - 1] + buf[m / 2]);
}

double tm_qdiff_scheme_median(const tm_qdiff_result *r, const char *scheme) {
    if (!r || !scheme || r->n <= 0) return NAN;
    double *v = tm__malloc_n((size_t)r->n, sizeof(double));
    double med = v ? scheme_median(r, scheme, v) : NAN;
    free(v);
    return med;
}

void tm_qdiff_flag(tm_qdiff_result *r) {
    double *v = tm__malloc_n((size_t)(r->n ? r->n : 1), sizeof(double));
    int64_t m = 0;
    for (int64_t i = 0; i < r->n; i++)
        if (v && !isnan(r->entries[i].e.sqnr_db)) v[m++] = r->entries[i].e.sqnr_db; /* +inf: exact */
    r->median_sqnr_db = NAN;
    if (v && m) {
        qsort(v, (size_t)m, sizeof *v, tm__cmp_double);
        r->median_sqnr_db = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    }
    r->n_flagged = 0;
    for (int64_t i = 0; i < r->n; i++) {
        tm_qdiff_entry *e = &r->entries[i];
        /* compare a tensor with the others quantized the same way: an int4 layer is not
        ** "damaged" for being 24 dB below the int8 layers of a mixed-precision model */
        double med = v ? scheme_median(r, e->scheme, v) : NAN;
        e->flagged = 0;
        e->reason[0] = '\0';
        size_t p = 0;
#define ADD_REASON(...)                                                                          \
    do {                                                                                         \
        if (p < sizeof e->reason) {                                                              \
            if (p) p += (size_t)snprintf(e->reason + p, sizeof e->reason - p, "; ");             \
            if (p < sizeof e->reason) p += (size_t)snprintf(e->reason + p, sizeof e->reason - p, __VA_ARGS__); \
        }                                                                                        \
        e->flagged = 1;                                                                          \
    } while (0)
        if (e->e.n_bad_scales > 0)
            ADD_REASON("%lld scale(s) NaN, infinite, zero or negative", (long long)e->e.n_bad_scales);
        if (e->e.n > 0 && (isnan(e->e.sqnr_db) || (!e->plain && (isnan(e->e.rmse_lsb) || isnan(e->e.max_err_lsb)))))
            ADD_REASON("error metrics are not finite");
        if (!e->codebook && e->e.rmse_lsb > TM_QDIFF_RMSE_LSB_FLAG)
            ADD_REASON("RMSE %.2f LSB (rounding alone gives 0.29)", e->e.rmse_lsb);
        if (!e->clip_expected && e->e.n_beyond_half_lsb > 0)
            ADD_REASON("%lld unclipped values off by more than half an LSB (max %.2f LSB)",
                       (long long)e->e.n_beyond_half_lsb, e->e.max_err_lsb_unclipped);
        if (!e->clip_expected && e->e.clipped_fraction > TM_QDIFF_CLIPPED_FLAG)
            ADD_REASON("%.2f%% of values clipped", 100.0 * e->e.clipped_fraction);
        if (isfinite(med) && e->e.sqnr_db < med - TM_QDIFF_SQNR_DROP_DB)
            ADD_REASON("SQNR %.1f dB, %.1f dB below the median %.1f dB of its scheme", e->e.sqnr_db,
                       med - e->e.sqnr_db, med);
        if (e->e.n_nonfinite > 0)
            ADD_REASON("%lld non-finite source values", (long long)e->e.n_nonfinite);
#undef ADD_REASON
        if (e->flagged) r->n_flagged++;
    }
    free(v);
    qsort(r->entries, (size_t)r->n, sizeof *r->entries, cmp_entry);
}

/* GPTQ/AWQ list a Linear as "P.qweight" (docs/formats.md "GPTQ and AWQ"): its float source is
** "P.weight". -1 when name is not a qweight or the source has no such tensor. */
static int64_t ref_of_qweight(const tm_file *ref, const char *name) {
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, "qweight") != 0 || (n > 7 && name[n - 8] != '.')) return -1;
    char *w = tm__aprintf("%.*sweight", (int)(n - 7), name);
    int64_t j = w ? tm_file_find(ref, w) : -1;
    free(w);
    return j;
}

/* ONNX DequantizeLinear codes named "X_quantized" (tensormorph's ONNX output and ONNX Runtime's
** quantizer name them so) pair with the reference's "X" when it has no "X_quantized". */
static int64_t ref_of_onnx_quantized(const tm_file *ref, const char *name) {
    size_t n = strlen(name);
    if (n <= 10 || strcmp(name + n - 10, "_quantized") != 0) return -1;
    char *w = tm__aprintf("%.*s", (int)(n - 10), name);
    int64_t j = w ? tm_file_find(ref, w) : -1;
    free(w);
    return j;
}

int64_t tm_ref_find(const tm_file *ref, const char *quantized_name) {
    if (!ref || !quantized_name) return -1;
    int64_t j = tm_file_find(ref, quantized_name);
    if (j < 0) j = ref_of_qweight(ref, quantized_name);
    if (j < 0) j = ref_of_onnx_quantized(ref, quantized_name);
    return j;
}

int64_t tm_ref_pair(const tm_file *ref, const tm_file *q, int64_t qi, tm_tensor_pair *out) {
    memset(out, 0, sizeof *out);
    const tm_tensor *t = tm_file_tensor(q, qi);
    out->index = t ? tm_ref_find(ref, t->name) : -1;
    /* else its name in the other convention (HF <-> llama.cpp, q/k rows un-permuted) */
    if (out->index < 0 && t) tm_tensor_pair_find(ref, q, qi, out);
    return out->index;
}

static int has_quantized(const tm_file *f) {
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++)
        if (tm_file_tensor(f, i)->quant && tm_file_tensor(f, i)->role == TM_ROLE_DATA) return 1;
    return 0;
}

tm_status tm_qdiff(const tm_file *ref, const tm_file *q, const tm_qdiff_params *p,
                   tm_qdiff_result **out, tm_err *err) {
    tm_qdiff_params defp;
    memset(&defp, 0, sizeof defp);
    if (!p) p = &defp;
    *out = NULL;
    tm_qdiff_result *r = calloc(1, sizeof *r);
    if (!r) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int64_t nq = tm_file_n_tensors(q);
    r->entries = tm__calloc((size_t)(nq ? nq : 1), sizeof *r->entries);
    tm_tensor_pair *pair = tm__calloc((size_t)(nq ? nq : 1), sizeof *pair);
    if (!r->entries || !pair) {
        free(r->entries); free(r); free(pair);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    /* neither file quantized (QUANT an F16/BF16/F32 output): its float tensors, a plain diff */
    const int plain = !has_quantized(q) && !has_quantized(ref);
    for (int64_t i = 0; i < nq; i++) {
        const tm_tensor *t = tm_file_tensor(q, i);
        if (t->role != TM_ROLE_DATA || (plain ? t->quant || !tm_dtype_get(t->dtype) || !tm_dtype_get(t->dtype)->is_float
                                              : !t->quant))
            continue;
        tm_tensor_pair *pr = &pair[r->n];
        tm_ref_pair(ref, q, i, pr);
        const tm_tensor *rt = tm_file_tensor(ref, pr->index);
        if (!rt || rt->n_elems != t->n_elems) { r->n_unmatched++; continue; }
        tm_qdiff_entry *e = &r->entries[r->n++];
        e->name = t->name;
        e->ref_name = rt->name;
        e->q_index = i;
        e->ref_index = pr->index;
        e->plain = plain;
    }
    /* an entry of another size: the importance matrix of another model, refused as quantize
    ** refuses it (token_embd.weight excepted: llama-quantize quantizes it without weights) */
    for (int64_t k = 0; p->imatrix && k < r->n; k++) {
        const tm_tensor *t = tm_file_tensor(q, r->entries[k].q_index);
        const tm_imatrix_entry *ie = tm_imatrix_find(p->imatrix, t->name);
        int64_t ne0 = t->ndim ? t->shape[t->ndim - 1] : 1, ne1 = t->ndim >= 2 ? t->shape[t->ndim - 2] : 1;
        int64_t n_mat = ne0 > 0 && ne1 > 0 ? t->n_elems / (ne0 * ne1) : 0;
        if (!ie || ie->nval == ne0 * n_mat || !strcmp(t->name, "token_embd.weight")) continue;
        free(pair);
        tm_status es = tm__err_set(err, TM_E_INVALID_ARG, -1,
                                   "%s: tensor '%s': imatrix size %lld is different from tensor size %lld (%lld columns x "
                                   "%lld matrices); the importance matrix was made for another model",
                                   p->imatrix->path, t->name, (long long)ie->nval, (long long)(ne0 * n_mat),
                                   (long long)ne0, (long long)n_mat);
        tm_qdiff_free(r);
        return es;
    }
    qd_ctx c;
    memset(&c, 0, sizeof c);
    c.ref = ref;
    c.q = q;
    c.entries = r->entries;
    c.pair = pair;
    c.p = p;
    c.total = (uint64_t)r->n;
    atomic_init(&c.done, 0);
    pthread_mutex_init(&c.mu, NULL);
    tm_status s = tm__parallel_for(r->n, p->n_threads, qdiff_one, &c, p->cancel, err);
    pthread_mutex_destroy(&c.mu);
    free(pair);
    if (s) { tm_qdiff_free(r); return s; }
    for (int64_t k = 0; k < r->n; k++) r->n_imatrix += r->entries[k].imatrix;
    tm_qdiff_flag(r);
    *out = r;
    return TM_OK;
}

void tm_qdiff_free(tm_qdiff_result *r) {
    if (!r) return;
    free(r->entries);
    free(r);
}
