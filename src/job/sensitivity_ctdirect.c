/* sensitivity_ctdirect.c: the compressed-tensors form's probes without a directory and a
** conversion per candidate (docs/sensitivity.md "Cache"). Each rung's scheme is applied once to
** every weight: the rung directories load_tensors_ct writes to measure the rungs' bytes are kept
** in the scratch folder (the quantized tensors of the run). A candidate is then written directly
** as the GGUF that the evidence's conversion (`tensormorph convert`, F32) of its directory gives,
** byte for byte: the source GGUF's metadata in its order with general.name the candidate's name
** (convert names a model after its directory), the source GGUF's tensors in its order, a weight
** quantized on rung r read through rung r's logical tensor (dequantized, q/k rows permuted: the
** pair reading convert does), every other tensor the source GGUF's bytes. A weight's quantized
** values depend on that weight and its scheme only, so they are the same in the rung directory
** as in a candidate directory. The dequantized tensors are kept in the run's quantized-tensor
** cache (sensitivity_cache.c, keyed by the GGUF name and TM__SENS_CT_KEY + rung). The weight
** error of every unit comes from one tm_qdiff of the first rung's directory against SRC.
** Split candidates (candidate_split, auto when they hold >= 64 MiB): the tensors of no unit (the
** norms; the embedding and head in --unit layer) are the same in every candidate, so they are
** written once as the second file of a llama.cpp split pair (split.no 1 of 2), and a candidate
** is its first file NAME-00001-of-00002.gguf (the metadata with the split keys, the units'
** tensors) and a hard link NAME-00002-of-00002.gguf of that shared file: llama.cpp loads the
** pair as one model. */
#include "sensitivity_impl.h"
#include "../core/fsutil.h"
#include "tensormorph/gguf_write.h"
#include "tensormorph/names.h"
#include "tensormorph/qdiff.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define CT_CHUNK ((int64_t)1 << 20) /* values per cached chunk */

struct sens_ctd {
    tm_file        *base;                        /* the source GGUF                          */
    tm_gguf_kvlist *kv;                          /* its metadata                             */
    tm_file        *rung[TM_SENS_MAX_LADDER];    /* the rung directories, NULL: dense        */
    tm_gguf_wtensor *wt;                         /* the candidate's tensors: the source's    */
    int64_t         n;
    int            *t_of;                        /* base tensor -> S->t index, -1: none      */
    sens_meas      *werr;                        /* per unit: its weight error on rung 0     */
    char           *shared;                      /* the second split (the tensors of no unit),
                                                    NULL: candidates are one file            */
    tm_gguf_wtensor *wt_main;                    /* with shared: the first split's tensors   */
    int64_t        *main_of;                     /*   and their base indices                 */
    int64_t         n_main;
};

#define SPLIT_AUTO_BYTES ((uint64_t)64 << 20) /* auto: split when the shared tensors hold this */

/* The split keys llama.cpp's loader reads (LLM_KV_SPLIT_*), as tm_gguf_writer_open_split
** writes them: split.no (u16), split.count (u16), split.tensors.count (i32). */
static tm_status split_keys(tm_gguf_kvlist *kv, uint16_t no, uint16_t count, int32_t n_tensors, tm_err *err) {
    tm_status s = tm_gguf_kvlist_set_raw(kv, "split.no", TM_GGUF_U16, &no, 2, err);
    if (!s) s = tm_gguf_kvlist_set_raw(kv, "split.count", TM_GGUF_U16, &count, 2, err);
    if (!s) s = tm_gguf_kvlist_set_raw(kv, "split.tensors.count", TM_GGUF_I32, &n_tensors, 4, err);
    return s;
}

/* Copy base tensor i (the source's bytes) into tensor wi of w. */
static tm_status copy_tensor(const sens_ctd *d, tm_gguf_writer *w, int64_t wi, int64_t i, tm_err *err) {
    const tm_tensor *bt = tm_file_tensor(d->base, i);
    const void *src = NULL;
    tm_status s = tm_tensor_data(d->base, i, 0, bt->n_bytes, &src, err);
    return s ? s : tm_gguf_writer_write(w, wi, 0, src, (size_t)bt->n_bytes, err);
}

/* The second split, written once: every tensor no unit holds (a probe never quantizes them),
** with general.alignment when the source has it and the split keys (no 1 of 2). */
static tm_status write_shared(sens *S, tm_err *err) {
    sens_ctd *d = S->ctd;
    int64_t ns = d->n - d->n_main, k = 0;
    tm_gguf_wtensor *wt = tm__calloc((size_t)(ns ? ns : 1), sizeof *wt);
    int64_t *of = tm__calloc((size_t)(ns ? ns : 1), sizeof *of);
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    tm_status s = wt && of && kv ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0, m = 0; !s && i < d->n; i++) {
        if (m < d->n_main && d->main_of[m] == i) { m++; continue; }
        of[k] = i;
        wt[k++] = d->wt[i];
    }
    int64_t ai = s ? -1 : tm_gguf_kvlist_find(d->kv, "general.alignment");
    if (ai >= 0) {
        size_t n = 0;
        const void *v = tm_gguf_kvlist_raw(d->kv, ai, &n);
        s = tm_gguf_kvlist_set_raw(kv, "general.alignment", tm_gguf_kvlist_type(d->kv, ai), v, n, err);
    }
    if (!s) s = split_keys(kv, 1, 2, (int32_t)d->n, err);
    if (!s && !(d->shared = tm__aprintf("%s/shared-00002-of-00002.gguf", S->work))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_gguf_writer *w = NULL;
    if (!s) s = tm_gguf_writer_open_ex(d->shared, kv, wt, k, TM_GGUF_WRITE_SCRATCH, &w, err);
    for (int64_t j = 0; j < k && !s; j++) s = copy_tensor(d, w, j, of[j], err);
    if (!s) s = tm_gguf_writer_finish(w, err);
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
    free(wt);
    free(of);
    return s;
}

/* Weight error of unit u from qdiff result r of q against the source: the sums weight_error
** makes over a candidate holding only u quantized (the same tensors, in q's order). */
static void unit_werr(const sens *S, const tm_file *q, const tm_qdiff_result *r, int u, sens_meas *m) {
    double x2 = 0, e2 = 0, l2 = 0, nn = 0;
    for (int64_t qi = 0; qi < tm_file_n_tensors(q); qi++)
        for (int64_t k = 0; k < r->n; k++) {
            const tm_qdiff_entry *e = &r->entries[k];
            if (e->q_index != qi || e->ref_index < 0 || e->ref_index >= S->n_t || S->t[e->ref_index].unit != u) continue;
            tm__sens_werr_add(e, &x2, &e2, &l2, &nn);
        }
    tm__sens_werr_finish(x2, e2, l2, nn, m);
}

tm_status tm__sens_ctd_init(sens *S, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    sens_ctd *d = tm__calloc(1, sizeof *d);
    if (!d) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    S->ctd = d;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(S->base, &op, &d->base, err);
    if (!s) s = tm_gguf_kvlist_read(S->base, &d->kv, err);
    for (int r = 0; !s && r < S->n_r; r++)
        if (S->ct_rung_dir[r]) s = tm_open(S->ct_rung_dir[r], &op, &d->rung[r], err);
    if (s) return s;
    d->n = tm_file_n_tensors(d->base);
    d->wt = tm__calloc((size_t)(d->n ? d->n : 1), sizeof *d->wt);
    d->t_of = tm__calloc((size_t)(d->n ? d->n : 1), sizeof *d->t_of);
    d->werr = tm__calloc((size_t)(S->n_u ? S->n_u : 1), sizeof *d->werr);
    if (!d->wt || !d->t_of || !d->werr) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < d->n; i++) {
        const tm_tensor *t = tm_file_tensor(d->base, i);
        if (t->dtype != TM_F32 || t->ndim < 1 || t->ndim > 4)
            return tm__err_set(err, TM_E_INTERNAL, -1, "%s: tensor '%s' is not F32 as converted", S->base, t->name);
        d->wt[i].name = t->name;
        d->wt[i].type = TM_GGML_F32;
        d->wt[i].n_dims = t->ndim;
        for (int k = 0; k < 4; k++) d->wt[i].ne[k] = k < t->ndim ? t->shape[t->ndim - 1 - k] : 1;
        d->t_of[i] = -1;
    }
    /* S->t follows SRC's tensors (Hugging Face names): each base tensor's source by its name */
    for (int64_t i = 0; i < d->n; i++) {
        char nm[160];
        for (int k = 0; k < S->n_t && d->t_of[i] < 0; k++) {
            tm_rope_rows rope;
            if (tm_name_to_gguf(S->t[k].name, nm, sizeof nm, &rope) && !strcmp(nm, d->wt[i].name)) d->t_of[i] = k;
        }
    }
    /* the weight error of every unit: one qdiff of rung 0's directory against SRC */
    if (d->rung[0]) {
        tm_file *ref = NULL;
        tm_qdiff_result *r = NULL;
        s = tm_open(p->src, &op, &ref, err);
        if (!s) {
            tm_qdiff_params qp;
            memset(&qp, 0, sizeof qp);
            qp.n_threads = p->threads;
            qp.cancel = p->cancel;
            s = tm_qdiff(ref, d->rung[0], &qp, &r, err);
        }
        for (int u = 0; !s && u < S->n_u; u++) unit_werr(S, d->rung[0], r, u, &d->werr[u]);
        tm_qdiff_free(r);
        tm_close(ref);
    }
    /* the split: the tensors of a unit in the first file (with the metadata), the rest shared */
    uint64_t shared_bytes = 0;
    d->wt_main = s ? NULL : tm__calloc((size_t)(d->n ? d->n : 1), sizeof *d->wt_main);
    d->main_of = s ? NULL : tm__calloc((size_t)(d->n ? d->n : 1), sizeof *d->main_of);
    if (!s && (!d->wt_main || !d->main_of)) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; !s && i < d->n; i++) {
        if (d->t_of[i] >= 0 && S->t[d->t_of[i]].unit >= 0) {
            d->main_of[d->n_main] = i;
            d->wt_main[d->n_main++] = d->wt[i];
        } else {
            shared_bytes += tm_file_tensor(d->base, i)->n_bytes;
        }
    }
    int split = p->candidate_split > 0 || (p->candidate_split == 0 && shared_bytes >= SPLIT_AUTO_BYTES);
    if (!s && split && d->n_main < d->n && d->n <= INT32_MAX) s = write_shared(S, err);
    return s;
}

void tm__sens_ctd_weight(const sens *S, int u, sens_meas *m) {
    if (!S->ctd || u < 0 || u >= S->n_u) return;
    m->w_have = S->ctd->werr[u].w_have;
    m->w_sqnr_db = S->ctd->werr[u].w_sqnr_db;
    m->w_rmse_lsb = S->ctd->werr[u].w_rmse_lsb;
}

/* The metadata of the candidate named `name`: the source's, general.name replaced in place. */
static tm_gguf_kvlist *cand_kv(const sens_ctd *d, const char *name, tm_err *err) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    tm_status s = kv ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; !s && i < tm_gguf_kvlist_count(d->kv); i++) {
        const char *k = tm_gguf_kvlist_key(d->kv, i);
        size_t n = 0;
        const void *v = tm_gguf_kvlist_raw(d->kv, i, &n);
        s = !strcmp(k, "general.name") ? tm_gguf_kvlist_set_str(kv, k, name, err)
                                       : tm_gguf_kvlist_set_raw(kv, k, tm_gguf_kvlist_type(d->kv, i), v, n, err);
    }
    if (s) { tm_gguf_kvlist_free(kv); return NULL; }
    return kv;
}

/* Tensor i of the candidate quantized on rung r: the dequantized values, from the cache or
** through the rung directory's logical tensor. */
static tm_status write_quantized(sens *S, tm_gguf_writer *w, int64_t wi, int64_t i, int r, float *buf, tm_err *err) {
    sens_ctd *d = S->ctd;
    const char *name = d->wt[i].name;
    const tm_tensor *bt = tm_file_tensor(d->base, i);
    int64_t n = bt->n_elems, nc = (n + CT_CHUNK - 1) / CT_CHUNK;
    uint64_t nb = (uint64_t)n * 4;
    tm_gguf_tensor_cache c;
    int cached = S->qc != NULL;
    if (cached) c = tm__sens_qcache_hooks(S->qc);
    int hit = cached && c.has(c.ud, name, TM__SENS_CT_KEY + r, 0, nb);
    tm_tensor_pair pr;
    if (!hit && tm_tensor_pair_find(d->rung[r], d->base, i, &pr) != 1)
        return tm__err_set(err, TM_E_INTERNAL, -1, "%s: no tensor pairs with '%s'", S->ct_rung_dir[r], name);
    tm_status s = TM_OK;
    for (int64_t ci = 0; ci < nc && !s; ci++) {
        int64_t e = ci * CT_CHUNK, m = n - e < CT_CHUNK ? n - e : CT_CHUNK;
        double sums[3] = {0, 0, 0};
        if (hit) {
            s = c.get(c.ud, name, TM__SENS_CT_KEY + r, 0, ci, (uint64_t)e * 4, buf, (size_t)m * 4, sums, err);
        } else {
            s = tm_tensor_pair_read_f32(d->rung[r], &pr, e, m, buf, err);
            if (!s && cached) c.put(c.ud, name, TM__SENS_CT_KEY + r, 0, nb, ci, nc, (uint64_t)e * 4, buf, (size_t)m * 4, sums);
        }
        if (!s) s = tm_gguf_writer_write(w, wi, (uint64_t)e * 4, buf, (size_t)m * 4, err);
    }
    return s;
}

tm_status tm__sens_ctd_write(sens *S, const int *a, const char *name, char *files[2], tm_err *err) {
    sens_ctd *d = S->ctd;
    files[0] = d->shared ? tm__aprintf("%s/%s-00001-of-00002.gguf", S->work, name) : tm__aprintf("%s/%s.gguf", S->work, name);
    if (!files[0]) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_gguf_kvlist *kv = cand_kv(d, name, err);
    if (!kv) return err->code ? err->code : TM_E_NOMEM;
    tm_status s = d->shared ? split_keys(kv, 0, 2, (int32_t)d->n, err) : TM_OK;
    tm_gguf_writer *w = NULL;
    const int64_t n = d->shared ? d->n_main : d->n;
    if (!s) s = tm_gguf_writer_open_ex(files[0], kv, d->shared ? d->wt_main : d->wt, n, TM_GGUF_WRITE_SCRATCH, &w, err);
    tm_gguf_kvlist_free(kv);
    float *buf = s ? NULL : malloc((size_t)CT_CHUNK * sizeof *buf);
    if (!s && !buf) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t wi = 0; wi < n && !s; wi++) {
        if (S->p->cancel && *S->p->cancel) { s = tm__err_set(err, TM_E_CANCELLED, -1, "cancelled"); break; }
        const int64_t i = d->shared ? d->main_of[wi] : wi;
        int k = d->t_of[i], r = k >= 0 ? a[k] : -1;
        if (r >= 0 && S->t[k].rung_type[r] >= 0 && d->rung[r]) s = write_quantized(S, w, wi, i, r, buf, err);
        else s = copy_tensor(d, w, wi, i, err); /* at source precision: the source's bytes */
    }
    free(buf);
    if (!s) s = tm_gguf_writer_finish(w, err);
    tm_gguf_writer_free(w);
    if (!s && d->shared) { /* the second split: the shared file, linked (one folder, one file system) */
        if (!(files[1] = tm__aprintf("%s/%s-00002-of-00002.gguf", S->work, name))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (link(d->shared, files[1]) != 0) {
            s = tm__err_sys(err, errno, "%s: cannot link %s there", files[1], d->shared);
            free(files[1]);
            files[1] = NULL;
        }
    }
    return s;
}

void tm__sens_ctd_free(sens *S) {
    sens_ctd *d = S->ctd;
    if (!d) return;
    tm_close(d->base);
    tm_gguf_kvlist_free(d->kv);
    for (int r = 0; r < TM_SENS_MAX_LADDER; r++) tm_close(d->rung[r]);
    free(d->wt);
    free(d->t_of);
    free(d->werr);
    free(d->wt_main);
    free(d->main_of);
    if (d->shared) unlink(d->shared);
    free(d->shared);
    free(d);
    S->ctd = NULL;
}
