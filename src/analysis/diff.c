/* diff.c: weight diff of two checkpoints by tensor name. */
#include "../core/core.h"
#include "../core/pool.h"

#include <math.h>

enum { DIFF_CHUNK = 1 << 18 };

/* pair[k]: how entry k's tensor of b pairs with its tensor of a (names.c) */
typedef struct diff_ctx { const tm_file *a, *b; tm_diff_entry *e; const tm_tensor_pair *pair; } diff_ctx;

static tm_status diff_one(void *vctx, int64_t k, int thread, tm_err *err) {
    (void)thread;
    diff_ctx *c = vctx;
    tm_diff_entry *e = &c->e[k];
    if (e->kind != TM_DIFF_SAME && e->kind != TM_DIFF_DTYPE) return TM_OK;
    const tm_tensor *ta = tm_file_tensor(c->a, e->a_index), *tb = tm_file_tensor(c->b, e->b_index);
    const tm_tensor_pair *pb = &c->pair[k];
    /* identical bytes of identical plain tensors in the same element order: nothing to compute */
    if (pb->rope == TM_ROPE_NONE && !ta->quant && !tb->quant && ta->dtype == tb->dtype && ta->n_bytes == tb->n_bytes &&
        ta->fortran_order == tb->fortran_order && ta->big_endian == tb->big_endian) {
        const void *pa, *pb;
        if (tm_tensor_data(c->a, e->a_index, 0, ta->n_bytes, &pa, NULL) == TM_OK &&
            tm_tensor_data(c->b, e->b_index, 0, tb->n_bytes, &pb, NULL) == TM_OK &&
            memcmp(pa, pb, (size_t)ta->n_bytes) == 0) {
            e->max_abs_diff = 0; e->rel_l2 = 0; e->cosine = 1;
            return TM_OK;
        }
    }
    float *x = tm__malloc_n(DIFF_CHUNK, sizeof(float)), *y = tm__malloc_n(DIFF_CHUNK, sizeof(float));
    if (!x || !y) { free(x); free(y); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    double maxd = 0, sd2 = 0, sa2 = 0, sb2 = 0, sab = 0;
    int nan_mismatch = 0;
    tm_status s = TM_OK;
    for (int64_t st = 0; st < ta->n_elems; st += DIFF_CHUNK) {
        int64_t n = ta->n_elems - st < DIFF_CHUNK ? ta->n_elems - st : DIFF_CHUNK;
        s = tm_tensor_read_f32(c->a, e->a_index, st, n, x, err);
        if (!s) s = tm_tensor_pair_read_f32(c->b, pb, st, n, y, err); /* in a's element order */
        if (s) break;
        for (int64_t i = 0; i < n; i++) {
            double av = x[i], bv = y[i];
            if (isnan(av) || isnan(bv)) { if (isnan(av) != isnan(bv)) nan_mismatch = 1; continue; }
            double d = fabs(av - bv);
            if (av == bv) d = 0; /* inf == inf */
            if (d > maxd || isnan(d)) maxd = d;
            sd2 += d * d; sa2 += av * av; sb2 += bv * bv; sab += av * bv;
        }
        tm_tensor_release_elems(c->a, e->a_index, st, n);
        tm_tensor_release_elems(c->b, e->b_index, st, n);
    }
    free(x); free(y);
    if (s) { tm__err_prefix(err, "diff: tensor '%s'", ta->name); return s; }
    e->max_abs_diff = nan_mismatch ? NAN : maxd;
    e->rel_l2 = sa2 > 0 ? sqrt(sd2) / sqrt(sa2) : (sd2 > 0 ? INFINITY : 0);
    e->cosine = (sa2 > 0 && sb2 > 0) ? sab / (sqrt(sa2) * sqrt(sb2)) : (sa2 == sb2 ? 1 : 0);
    if (e->kind == TM_DIFF_SAME && (maxd > 0 || nan_mismatch)) e->kind = TM_DIFF_CHANGED;
    return TM_OK;
}

tm_status tm_diff(const tm_file *a, const tm_file *b, int n_threads, tm_diff_result **out,
                  tm_err *err) {
    *out = NULL;
    int64_t na = tm_file_n_tensors(a), nb = tm_file_n_tensors(b);
    tm_diff_result *r = calloc(1, sizeof *r);
    if (!r) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    r->entries = tm__calloc((size_t)(na + nb + 1), sizeof *r->entries);
    tm_tensor_pair *pair = tm__calloc((size_t)(na + nb + 1), sizeof *pair);
    if (!r->entries || !pair) {
        free(r->entries); free(r); free(pair);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t i = 0; i < na; i++) {
        const tm_tensor *t = tm_file_tensor(a, i);
        if (t->role != TM_ROLE_DATA) continue;
        tm_tensor_pair *pb = &pair[r->n];
        tm_diff_entry *e = &r->entries[r->n++];
        e->name = t->name;
        e->a_index = i;
        /* the same name, else its name in the other convention (HF <-> llama.cpp) */
        tm_tensor_pair_find(b, a, i, pb);
        const tm_tensor *u = tm_file_tensor(b, pb->index);
        if (u && u->role != TM_ROLE_DATA) u = NULL;
        e->b_index = u ? pb->index : -1;
        e->b_name = u ? u->name : NULL;
        if (!u) { e->kind = TM_DIFF_REMOVED; continue; }
        if (strcmp(u->name, t->name)) r->n_renamed++;
        int same_shape = t->ndim == u->ndim;
        for (int d = 0; same_shape && d < t->ndim; d++) same_shape = t->shape[d] == u->shape[d];
        if (!same_shape) e->kind = TM_DIFF_SHAPE;
        else if (t->dtype != u->dtype || (t->quant != NULL) != (u->quant != NULL)) e->kind = TM_DIFF_DTYPE;
        else e->kind = TM_DIFF_SAME;
    }
    for (int64_t j = 0; j < nb; j++) {
        const tm_tensor *u = tm_file_tensor(b, j);
        if (u->role != TM_ROLE_DATA) continue;
        tm_tensor_pair pa;
        tm_tensor_pair_find(a, b, j, &pa);
        const tm_tensor *t = tm_file_tensor(a, pa.index);
        if (t && t->role == TM_ROLE_DATA) continue;
        tm_diff_entry *e = &r->entries[r->n++];
        e->name = u->name;
        e->b_name = u->name;
        e->a_index = -1;
        e->b_index = j;
        e->kind = TM_DIFF_ADDED;
    }
    diff_ctx c = {a, b, r->entries, pair};
    tm_status s = tm__parallel_for(r->n, n_threads, diff_one, &c, NULL, err);
    free(pair);
    if (s) { tm_diff_free(r); return s; }
    for (int64_t k = 0; k < r->n; k++) if (r->entries[k].kind != TM_DIFF_SAME) r->n_differ++;
    *out = r;
    return TM_OK;
}

void tm_diff_free(tm_diff_result *r) {
    if (!r) return;
    free(r->entries);
    free(r);
}
