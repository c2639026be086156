/* sensitivity.c: `tensormorph sensitivity SRC --text FILE -t TYPE` (tensormorph/sensitivity.h,
** docs/sensitivity.md): the source as a GGUF, its units, each rung's tensor types (the quantizer's
** dry plan, tm_gguf_quantize_plan), the probes (a candidate GGUF per measurement, scored by
** tm_evidence_llm_run against the source with one base cache), the partial and final documents
** ("tensormorph.sensitivity/1") and their merge. The budget search is sensitivity_budget.c, the
** candidates and their evaluation sensitivity_core.c. */
#include "sensitivity_impl.h"
#include "../core/fsutil.h"
#include "../core/jschema.h"
#include "tensormorph/convert.h"
#include "tensormorph/evidence_llm.h"
#include "tensormorph/hash.h"
#include "tensormorph/qdiff.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

tm_sensitivity_params tm_sensitivity_params_default(void) {
    tm_sensitivity_params p;
    memset(&p, 0, sizeof p);
    p.ftype = TM_FTYPE_Q2_K;
    p.unit = TM_SENS_UNIT_LAYER;
    p.budget_kld = p.budget_p99 = p.min_top1 = -1;
    p.jobs = 1;
    p.threads = 1;
    p.cache_mb = 1024;
    p.ev = tm_evidence_llm_params_default();
    p.spec = tm_qspec_default();
    return p;
}

static const int default_ladder[] = {TM_FTYPE_Q2_K, TM_FTYPE_Q3_K_M, TM_FTYPE_Q4_K_M, TM_FTYPE_Q5_K_M,
                                     TM_FTYPE_Q6_K, TM_FTYPE_Q8_0, TM_FTYPE_F16};

int tm_sensitivity_ladder_default(int ftype, int *out, int cap) {
    int n = 0, start = -1;
    const int nl = (int)(sizeof default_ladder / sizeof default_ladder[0]);
    for (int i = 0; i < nl; i++)
        if (default_ladder[i] == ftype) start = i;
    if (cap > 0) out[n++] = ftype;
    if (start < 0) { /* a type off the ladder: the rungs with more bits per weight above it */
        const int bits[] = {26, 39, 49, 57, 66, 85, 160}; /* x10 bits/weight of the rungs, llama.cpp's table */
        int own = ftype == TM_FTYPE_Q4_0 ? 45 : ftype == TM_FTYPE_Q4_1 ? 50 : ftype == TM_FTYPE_Q5_0 ? 55
                : ftype == TM_FTYPE_Q5_1 ? 60 : ftype == TM_FTYPE_IQ4_NL ? 45 : ftype == TM_FTYPE_Q3_K_S ? 34
                : ftype == TM_FTYPE_Q3_K_L ? 43 : ftype == TM_FTYPE_Q4_K_S ? 46 : ftype == TM_FTYPE_Q5_K_S ? 55 : 160;
        for (int i = 0; i < nl && n < cap; i++)
            if (bits[i] > own) out[n++] = default_ladder[i];
        return n;
    }
    for (int i = start + 1; i < nl && n < cap; i++) out[n++] = default_ladder[i];
    return n;
}

/* ---- units -------------------------------------------------------------------------------- */

static const char *const class_names[] = {"q", "k", "v", "o", "gate", "up", "down", "embedding", "head"};
#define N_CLASSES 9

/* The class of a llama.cpp tensor name, -1 for none. */
static int class_of(const char *name) {
    if (!strcmp(name, "token_embd.weight") || strstr(name, "embed_tokens.")) return 7;
    if (!strcmp(name, "output.weight") || !strncmp(name, "lm_head.", 8)) return 8;
    static const char *const pat[] = {".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.", ".ffn_gate.", ".ffn_up.", ".ffn_down."};
    static const char *const hf[] = {".q_proj.", ".k_proj.", ".v_proj.", ".o_proj.", ".gate_proj.", ".up_proj.", ".down_proj."};
    for (int c = 0; c < 7; c++)
        if (strstr(name, pat[c]) || strstr(name, hf[c])) return c;
    return -1;
}

/* The layer index of "blk.N." (llama.cpp) or "model.layers.N." (Hugging Face) names, else -1. */
static int layer_of(const char *name) {
    size_t k = !strncmp(name, "blk.", 4) ? 4 : !strncmp(name, "model.layers.", 13) ? 13 : 0;
    if (!k || name[k] < '0' || name[k] > '9') return -1;
    char *end;
    long v = strtol(name + k, &end, 10);
    return *end == '.' && v < 1000000 ? (int)v : -1;
}

static int add_unit(sens *S, const char *name) {
    for (int u = 0; u < S->n_u; u++)
        if (!strcmp(S->unit_names[u], name)) return u;
    char **nn = realloc(S->unit_names, (size_t)(S->n_u + 1) * sizeof *nn);
    if (!nn) return -1;
    S->unit_names = nn;
    if (!(nn[S->n_u] = tm__strdup(name))) return -1;
    return S->n_u++;
}

/* Units in their order: layers by index, tensors in output order, classes as class_names. */
static tm_status make_units(sens *S, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    if (p->unit == TM_SENS_UNIT_LAYER) {
        int maxl = -1;
        for (int i = 0; i < S->n_t; i++)
            if (S->t[i].ndim >= 2 && layer_of(S->t[i].name) > maxl) maxl = layer_of(S->t[i].name);
        for (int l = 0; l <= maxl; l++) {
            char nm[32];
            snprintf(nm, sizeof nm, S->ct ? "model.layers.%d" : "blk.%d", l);
            int have = 0;
            for (int i = 0; i < S->n_t; i++) have |= S->t[i].ndim >= 2 && layer_of(S->t[i].name) == l;
            if (have && add_unit(S, nm) < 0) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
    } else if (p->unit == TM_SENS_UNIT_CLASS) {
        for (int c = 0; c < N_CLASSES; c++) {
            int have = 0;
            for (int i = 0; i < S->n_t; i++) have |= S->t[i].ndim >= 2 && class_of(S->t[i].name) == c;
            if (have && add_unit(S, class_names[c]) < 0) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
    } else {
        for (int i = 0; i < S->n_t; i++)
            if (S->t[i].ndim >= 2 && add_unit(S, S->t[i].name) < 0) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    /* the filter */
    if (p->units_regex) {
        regex_t re;
        int rc = regcomp(&re, p->units_regex, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char eb[128];
            regerror(rc, &re, eb, sizeof eb);
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "--units '%s': %s", p->units_regex, eb);
        }
        int k = 0;
        for (int u = 0; u < S->n_u; u++) {
            if (regexec(&re, S->unit_names[u], 0, NULL, 0) == 0) S->unit_names[k++] = S->unit_names[u];
            else free(S->unit_names[u]);
        }
        regfree(&re);
        if (k == 0) {
            S->n_u = 0;
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "--units '%s' matches no unit of %s (--unit %s)", p->units_regex,
                               p->src, p->unit == TM_SENS_UNIT_LAYER ? (S->ct ? "layer: model.layers.0, ..." : "layer: blk.0, blk.1, ...") : p->unit == TM_SENS_UNIT_CLASS
                               ? "class: q k v o gate up down embedding head" : "tensor: the weight names");
        }
        S->n_u = k;
    }
    if (S->n_u == 0) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: no quantizable unit (no 2-D weight)", p->src);
    for (int i = 0; i < S->n_t; i++) {
        sens_tensor *t = &S->t[i];
        t->unit = -1;
        if (t->ndim < 2) continue;
        char nm[32];
        const char *key = NULL;
        if (p->unit == TM_SENS_UNIT_LAYER) {
            if (layer_of(t->name) < 0) continue; /* embedding and head stay at source precision */
            snprintf(nm, sizeof nm, S->ct ? "model.layers.%d" : "blk.%d", layer_of(t->name));
            key = nm;
        } else if (p->unit == TM_SENS_UNIT_CLASS) {
            if (class_of(t->name) < 0) continue;
            key = class_names[class_of(t->name)];
        } else {
            key = t->name;
        }
        for (int u = 0; u < S->n_u; u++)
            if (!strcmp(S->unit_names[u], key)) t->unit = u;
    }
    return TM_OK;
}

/* ---- the source and the rungs ------------------------------------------------------------- */

static int ftype_quantized(int ft) { return ft != TM_FTYPE_F16 && ft != TM_FTYPE_BF16 && ft != TM_FTYPE_F32; }

static tm_status load_tensors(sens *S, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    tm_file *f = NULL;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(S->base, &op, &f, err);
    if (s) return s;
    /* an already-quantized source is refused here, by sensitivity's rule, before the quantizer's
    ** own requantize refusal (which names an option sensitivity does not have) */
    for (int64_t i = 0; i < tm_file_n_tensors(f) && !s; i++) {
        const tm_tensor *tt = tm_file_tensor(f, i);
        if (tt && tt->quant && tt->ndim >= 2)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' is already quantized (%s); sensitivity needs "
                            "F32/F16/BF16 weights: give the checkpoint it was quantized from", p->src, tt->name,
                            tt->quant->ggml_type && tm_ggml_type_info_get(tt->quant->ggml_type)
                                ? tm_ggml_type_info_get(tt->quant->ggml_type)->name : tt->quant->layout ? tt->quant->layout : "quantized");
    }
    if (s) { tm_close(f); return s; }
    tm_gguf_quantize_tensor *rows = NULL;
    int64_t nr = 0;
    for (int r = -1; r < S->n_r && !s; r++) {
        tm_gguf_quantize_params gp = tm_gguf_quantize_params_default();
        gp.ftype = r < 0 ? S->carrier : S->rung[r];
        s = tm_gguf_quantize_plan(f, &gp, &rows, &nr, err);
        if (s) break;
        if (r < 0) {
            S->n_t = (int)nr;
            S->t = tm__calloc((size_t)(nr ? nr : 1), sizeof *S->t);
            if (!S->t) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
        for (int64_t i = 0; i < nr && !s; i++) {
            sens_tensor *t = &S->t[i];
            if (r < 0) {
                int64_t fi = tm_file_find(f, rows[i].name);
                const tm_tensor *tt = fi >= 0 ? tm_file_tensor(f, fi) : NULL;
                if (!tt) { s = tm__err_set(err, TM_E_INTERNAL, -1, "tensor '%s' not found", rows[i].name); break; }
                if (!(t->name = tm__strdup(rows[i].name))) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
                t->src_type = rows[i].src_type;
                t->src_bytes = tt->n_bytes;
                t->n_elems = rows[i].n_elems;
                int nd = tt->ndim;
                t->ndim = nd;
                t->carrier_type = rows[i].out_type;
                S->n_params += rows[i].n_elems;
                if (t->src_type != TM_GGML_F32 && t->src_type != TM_GGML_F16 && t->src_type != TM_GGML_BF16 && nd >= 2)
                    s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' is already quantized (%s); sensitivity needs "
                                    "F32/F16/BF16 weights", p->src, t->name, tm_ggml_type_info_get(t->src_type)
                                    ? tm_ggml_type_info_get(t->src_type)->name : "?");
            } else if (strcmp(t->name, rows[i].name) != 0) {
                s = tm__err_set(err, TM_E_INTERNAL, -1, "plans of two file types differ in order at '%s'", t->name);
            } else {
                t->rung_type[r] = rows[i].out_type;
                t->rung_bytes[r] = rows[i].quantized ? rows[i].out_bytes : t->src_bytes;
            }
        }
        free(rows);
        rows = NULL;
    }
    tm_close(f);
    return s;
}

/* ct: the tensors of SRC (2-D float weights are candidates), each rung's bytes measured on a
** uniform quantize of every candidate tensor into the scratch folder (the output's tensors named
** W or W_* belong to weight W: codes, scale, zero point, shape). */
static tm_status load_tensors_ct(sens *S, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    tm_file *f = NULL;
    tm_open_params op = tm_open_params_default();
    tm_status s = tm_open(p->src, &op, &f, err);
    if (s) return s;
    S->n_t = (int)tm_file_n_tensors(f);
    S->t = tm__calloc((size_t)(S->n_t ? S->n_t : 1), sizeof *S->t);
    if (!S->t) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int i = 0; !s && i < S->n_t; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        sens_tensor *st = &S->t[i];
        if (t->quant) { s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' is already quantized", p->src, t->name); break; }
        if (!(st->name = tm__strdup(t->name))) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        st->src_type = st->carrier_type = -2;
        st->src_bytes = t->n_bytes;
        st->n_elems = 1;
        for (int d = 0; d < t->ndim; d++) st->n_elems *= t->shape[d];
        int fl = t->dtype == TM_F32 || t->dtype == TM_F16 || t->dtype == TM_BF16;
        st->ndim = fl ? t->ndim : 0;
        S->n_params += st->n_elems;
    }
    tm_close(f);
    int *a = s ? NULL : tm__calloc((size_t)(S->n_t ? S->n_t : 1), sizeof *a);
    if (!s && !a) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int r = 0; !s && r < S->n_r; r++) {
        for (int i = 0; i < S->n_t; i++) {
            S->t[i].rung_type[r] = -2;
            S->t[i].rung_bytes[r] = S->t[i].src_bytes;
        }
        if (S->rdense[r]) continue;
        for (int i = 0; i < S->n_t; i++) {
            S->t[i].rung_type[r] = r; /* provisional: what tm__sens_ct_rules asks for */
            a[i] = S->t[i].ndim >= 2 ? r : -1;
        }
        char *dir = tm__aprintf("%s/rung-%d", S->work, r);
        if (!dir) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        s = tm__sens_write(S, a, dir, 0, 0, err);
        tm_file *o = NULL;
        if (!s) s = tm_open(dir, &op, &o, err);
        for (int i = 0; !s && i < S->n_t; i++) {
            sens_tensor *st = &S->t[i];
            if (st->ndim < 2) { st->rung_type[r] = -2; continue; }
            size_t nl = strlen(st->name);
            uint64_t b = 0;
            int quantized = 0;
            for (int64_t k = 0; k < tm_file_n_tensors(o); k++) {
                const tm_tensor *t = tm_file_tensor(o, k);
                const char *pn = t->phys_name ? t->phys_name : t->name;
                if (!strncmp(pn, st->name, nl) && (pn[nl] == '\0' || pn[nl] == '_')) {
                    b += t->n_bytes;
                    quantized |= pn[nl] == '_';
                }
            }
            st->rung_type[r] = quantized ? r : -2; /* a weight the scheme cannot hold stays dense */
            st->rung_bytes[r] = quantized ? b : st->src_bytes;
        }
        tm_close(o);
        if (S->qc && !s) { /* kept: the quantized tensors of the direct candidates (sensitivity_ctdirect.c) */
            S->ct_rung_dir[r] = dir;
            continue;
        }
        tm__rm_rf(dir);
        free(dir);
    }
    free(a);
    return s;
}

/* ---- documents ---------------------------------------------------------------------------- */

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }


static json_t *header_doc(const sens *S) {
    const tm_sensitivity_params *p = S->p;
    json_t *d = json_object();
    json_object_set_new(d, "schema", json_string("tensormorph.sensitivity/1"));
    json_t *src = json_object();
    json_object_set_new(src, "path", json_string(p->src));
    json_object_set_new(src, "sha256", json_string(S->src_sha));
    json_object_set_new(src, "params", json_integer(S->n_params));
    json_object_set_new(d, "source", src);
    json_object_set_new(d, "form", json_string(S->ct ? "compressed-tensors" : "gguf"));
    json_object_set_new(d, "scheme", json_string(S->rname[0]));
    json_object_set_new(d, "unit", json_string(p->unit == TM_SENS_UNIT_LAYER ? "layer" : p->unit == TM_SENS_UNIT_CLASS ? "class" : "tensor"));
    json_t *lad = json_array();
    for (int r = 0; r < S->n_r; r++) json_array_append_new(lad, json_string(S->rname[r]));
    json_object_set_new(d, "ladder", lad);
    json_t *pr = json_object(), *tx = json_array();
    json_object_set_new(pr, "runtime", json_string("node-llama-cpp"));
    json_object_set_new(pr, "ctx", json_integer(p->ev.ctx));
    json_object_set_new(pr, "chunks", json_integer(p->ev.chunks));
    for (int k = 0; k < p->ev.n_texts; k++) {
        json_t *o = json_object();
        char sha[65] = "";
        tm_err e;
        if (tm_sha256_file(p->ev.texts[k].path, sha, NULL, &e)) sha[0] = '\0';
        json_object_set_new(o, "name", json_string(p->ev.texts[k].name));
        json_object_set_new(o, "sha256", json_string(sha));
        json_array_append_new(tx, o);
    }
    json_object_set_new(pr, "texts", tx);
    json_object_set_new(d, "protocol", pr);
    json_t *un = json_array();
    for (int u = 0; u < S->n_u; u++) json_array_append_new(un, json_string(S->unit_names[u]));
    json_object_set_new(d, "unit_names", un);
    return d;
}

/* Average ranks (1-based) of v[n], ascending. */
static void avg_ranks(const double *v, int n, double *rk) {
    for (int i = 0; i < n; i++) {
        int less = 0, eq = 0;
        for (int j = 0; j < n; j++) less += v[j] < v[i], eq += v[j] == v[i];
        rk[i] = less + (eq + 1) / 2.0;
    }
}

static double spearman(const double *x, const double *y, int n) {
    if (n < 2) return NAN;
    double *rx = tm__calloc((size_t)n, sizeof *rx), *ry = tm__calloc((size_t)n, sizeof *ry);
    double r = NAN;
    if (rx && ry) {
        avg_ranks(x, n, rx);
        avg_ranks(y, n, ry);
        double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
        for (int i = 0; i < n; i++) mx += rx[i], my += ry[i];
        mx /= n;
        my /= n;
        for (int i = 0; i < n; i++) {
            sxy += (rx[i] - mx) * (ry[i] - my);
            sxx += (rx[i] - mx) * (rx[i] - mx);
            syy += (ry[i] - my) * (ry[i] - my);
        }
        if (sxx > 0 && syy > 0) r = sxy / sqrt(sxx * syy);
    }
    free(rx);
    free(ry);
    return r;
}

static double jnum(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Partial -> final: units in unit order with ranks, uniform in ladder order, Spearman. Checks
** every item is there exactly once. */
static tm_status finish_doc(json_t *d, tm_err *err) {
    json_t *names = json_object_get(d, "unit_names"), *units = json_object_get(d, "units"), *uni = json_object_get(d, "uniform");
    json_t *lad = json_object_get(d, "ladder");
    size_t nu = json_array_size(names), nr = json_array_size(lad);
    json_t *su = json_array(), *sr = json_array();
    for (size_t u = 0; u < nu; u++) {
        const char *nm = json_string_value(json_array_get(names, u));
        json_t *found = NULL;
        size_t i;
        json_t *o;
        json_array_foreach(units, i, o) if (nm && !strcmp(json_string_value(json_object_get(o, "name")) ? json_string_value(json_object_get(o, "name")) : "", nm)) {
            if (found) { json_decref(su); json_decref(sr); return tm__err_set(err, TM_E_CORRUPT, -1, "unit '%s' measured twice", nm); }
            found = o;
        }
        if (!found) { json_decref(su); json_decref(sr); return tm__err_set(err, TM_E_CORRUPT, -1, "unit '%s' was not measured (a probe is missing)", nm ? nm : "?"); }
        json_array_append(su, found);
    }
    for (size_t r = 0; r < nr; r++) {
        const char *nm = json_string_value(json_array_get(lad, r));
        json_t *found = NULL;
        size_t i;
        json_t *o;
        json_array_foreach(uni, i, o) if (nm && json_string_value(json_object_get(o, "scheme")) && !strcmp(json_string_value(json_object_get(o, "scheme")), nm)) {
            if (found) { json_decref(su); json_decref(sr); return tm__err_set(err, TM_E_CORRUPT, -1, "uniform %s measured twice", nm); }
            found = o;
        }
        if (!found) { json_decref(su); json_decref(sr); return tm__err_set(err, TM_E_CORRUPT, -1, "uniform %s was not measured (a probe is missing)", nm ? nm : "?"); }
        json_array_append(sr, found);
    }
    if (json_array_size(units) != nu || json_array_size(uni) != nr) {
        json_decref(su);
        json_decref(sr);
        return tm__err_set(err, TM_E_CORRUPT, -1, "units or uniform rows that belong to no unit/rung of this run");
    }
    /* ranks: kld_mean_only descending, ties by unit order */
    int n = (int)nu;
    double *k = tm__calloc((size_t)(n ? n : 1), sizeof *k), *w = tm__calloc((size_t)(n ? n : 1), sizeof *w);
    if (!k || !w) { free(k); free(w); json_decref(su); json_decref(sr); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    for (int u = 0; u < n; u++) {
        json_t *o = json_array_get(su, (size_t)u);
        k[u] = jnum(o, "kld_mean_only");
        double sq = jnum(o, "weight_sqnr_db");
        w[u] = isnan(sq) ? -1e300 : -sq; /* no error (null): the least */
    }
    for (int u = 0; u < n; u++) {
        int rank = 1;
        for (int v = 0; v < n; v++) rank += k[v] > k[u] || (k[v] == k[u] && v < u);
        json_object_set_new(json_array_get(su, (size_t)u), "rank", json_integer(rank));
    }
    double rho = spearman(w, k, n);
    free(k);
    free(w);
    json_object_set_new(d, "units", su);
    json_object_set_new(d, "uniform", sr);
    json_object_set_new(d, "spearman_weight_vs_kld", num(rho));
    json_object_del(d, "probe");
    return TM_OK;
}

tm_status tm_sensitivity_write(const char *path, const char *json_text, tm_err *err) {
    if (!path || !json_text) return tm__err_set(err, TM_E_INVALID_ARG, -1, "sensitivity: NULL path or text");
    json_error_t je;
    json_t *doc = json_loads(json_text, 0, &je);
    if (!doc) return tm__err_set(err, TM_E_CORRUPT, je.position, "%s: not JSON: line %d: %s", path, je.line, je.text);
    tm_status s = tm__jschema_validate_named("sensitivity", doc, path, err);
    json_decref(doc);
    return s ? s : tm__write_file_atomic(path, json_text, strlen(json_text), err);
}

/* The document as text, checked against its schema. */
static char *dump_checked(json_t *d, tm_status *s, tm_err *err);

static char *dump(json_t *d) {
    char *t = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!t) return NULL;
    size_t n = strlen(t);
    char *o = realloc(t, n + 2);
    if (!o) { free(t); return NULL; }
    o[n] = '\n';
    o[n + 1] = '\0';
    return o;
}

static char *dump_checked(json_t *d, tm_status *s, tm_err *err) {
    *s = tm__jschema_validate_named("sensitivity", d, "the sensitivity document", err);
    if (*s) { *s = TM_E_INTERNAL; return NULL; }
    char *t = dump(d);
    if (!t) *s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return t;
}

/* ---- the run ------------------------------------------------------------------------------ */

static void sens_free(sens *S) {
    for (int i = 0; S->t && i < S->n_t; i++) free(S->t[i].name);
    free(S->t);
    for (int u = 0; u < S->n_u; u++) free(S->unit_names[u]);
    free(S->unit_names);
    tm__sens_ctd_free(S);
    for (int r = 0; r < TM_SENS_MAX_LADDER; r++) free(S->ct_rung_dir[r]);
    tm__sens_qcache_free(S->qc);
    if (S->work) tm__rm_rf(S->work);
    free(S->work);
    if (S->base != S->p->src) free(S->base);
    if (S->cache != S->p->ev.base_cache) free(S->cache);
}

static tm_status check_params(const tm_sensitivity_params *p, tm_err *err) {
    if (!p->src) return tm__err_set(err, TM_E_INVALID_ARG, -1, "no SRC");
    if (tm_gguf_ftype_default_type(p->ftype) < 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown GGUF file type %d", p->ftype);
    if (p->n_ladder > TM_SENS_MAX_LADDER) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: at most %d rungs", TM_SENS_MAX_LADDER);
    if (p->ladder && p->n_ladder > 0 && p->ladder[0] != p->ftype)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder must start at the scheme (%s), got %s", tm_gguf_ftype_name(p->ftype),
                           tm_gguf_ftype_name(p->ladder[0]));
    for (int r = 0; p->ladder && r < p->n_ladder; r++) {
        if (tm_gguf_ftype_default_type(p->ladder[r]) < 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung %d is not a GGUF file type", r + 1);
        for (int q = 0; q < r; q++)
            if (p->ladder[q] == p->ladder[r]) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: %s given twice", tm_gguf_ftype_name(p->ladder[r]));
    }
    if (p->ct_ladder && !p->ct) return tm__err_set(err, TM_E_INVALID_ARG, -1, "a compressed-tensors --ladder needs the compressed-tensors form");
    if (p->ct_ladder && (p->n_ct_ladder < 1 || p->n_ct_ladder > TM_SENS_MAX_LADDER))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: 1 to %d rungs, got %d", TM_SENS_MAX_LADDER, p->n_ct_ladder);
    for (int r = 0; p->ct_ladder && r < p->n_ct_ladder; r++) {
        char a[160], b[160];
        int dr = p->ct_dense && p->ct_dense[r];
        tm__sens_rung_name(&p->ct_ladder[r], dr, a, sizeof a);
        if (r == 0) {
            tm__sens_rung_name(&p->spec, 0, b, sizeof b);
            if (dr || strcmp(a, b)) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder must start at the scheme (%s), got '%s'", b, a);
        }
        if (dr && r != p->n_ct_ladder - 1) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung %d 'dense' must be the last", r + 1);
        for (int q = 0; q < r; q++) {
            tm__sens_rung_name(&p->ct_ladder[q], p->ct_dense && p->ct_dense[q], b, sizeof b);
            if (!strcmp(a, b)) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--ladder: rung %d '%s' given twice", r + 1, a);
        }
    }
    if (p->probe_n < 0 || (p->probe_n > 0 && (p->probe_i < 0 || p->probe_i >= p->probe_n)))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--probe %d/%d: i must be in [0, n)", p->probe_i, p->probe_n);
    if (p->probe_n > 0 && p->budget_kld >= 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "--probe and --budget: run the budget on the merged result's run");
    if (p->budget_kld < 0 && (p->budget_p99 >= 0 || p->min_top1 >= 0))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--budget-p99 and --min-top1 refine --budget KLD, which is missing");
    if (p->ev.n_texts < 1) return tm__err_set(err, TM_E_INVALID_ARG, -1, "no --text");
    if (p->ct && tm_is_gguf_file(p->src))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: the compressed-tensors form needs a safetensors SRC (a GGUF SRC makes a GGUF plan: -t Q2_K ...)", p->src);
    if (p->ct && !p->ev.vocab_from)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "the compressed-tensors form needs --vocab-from X.gguf (candidates are converted to GGUF for llama.cpp)");
    if (p->out && p->budget_kld >= 0) {
        struct stat st;
        if (!p->ct && !tm__ends_with(p->out, ".gguf"))
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s: a GGUF plan is written to OUT ending in .gguf", p->out);
        if (p->ct && tm__ends_with(p->out, ".gguf"))
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s: the compressed-tensors plan is a directory", p->out);
        if (!p->force && stat(p->out, &st) == 0)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s exists (--force replaces a previous tensormorph output)", p->out);
    }
    return TM_OK;
}

tm_status tm_sensitivity_run(const tm_sensitivity_params *p, char **json_out, int *met, tm_err *err) {
    *json_out = NULL;
    if (met) *met = -1;
    tm_err_clear(err);
    tm_status s = check_params(p, err);
    if (s) return s;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sens S;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.base = (char *)p->src;
    S.cache = (char *)p->ev.base_cache;
    if (p->ladder && p->n_ladder > 0) {
        memcpy(S.rung, p->ladder, (size_t)p->n_ladder * sizeof *p->ladder);
        S.n_r = p->n_ladder;
    } else {
        S.n_r = tm_sensitivity_ladder_default(p->ftype, S.rung, TM_SENS_MAX_LADDER);
    }
    S.carrier = ftype_quantized(S.rung[0]) ? S.rung[0] : TM_FTYPE_Q8_0;
    for (int r = 0; r < S.n_r; r++) snprintf(S.rname[r], sizeof S.rname[r], "%s", tm_gguf_ftype_name(S.rung[r]));
    if (p->ct && p->ct_ladder) { /* the rungs as given */
        S.ct = 1;
        S.n_r = p->n_ct_ladder;
        for (int r = 0; r < S.n_r; r++) {
            S.rspec[r] = p->ct_ladder[r];
            S.rdense[r] = p->ct_dense && p->ct_dense[r];
            tm__sens_rung_name(&S.rspec[r], S.rdense[r], S.rname[r], sizeof S.rname[r]);
        }
    } else if (p->ct) { /* rungs: the scheme -> int8 channel -> dense */
        S.ct = 1;
        S.n_r = 0;
        S.rspec[S.n_r++] = p->spec;
        tm_qspec i8 = tm_qspec_default();
        i8.convention = p->spec.convention;
        i8.scale_dtype = p->spec.scale_dtype;
        if (!(p->spec.code_dtype == TM_I8 && p->spec.gran.kind == TM_GRAN_CHANNEL && p->spec.symmetric)) S.rspec[S.n_r++] = i8;
        S.rdense[S.n_r] = 1;
        S.rspec[S.n_r++] = i8;
        for (int r = 0; r < S.n_r; r++) tm__sens_rung_name(&S.rspec[r], S.rdense[r], S.rname[r], sizeof S.rname[r]);
    }
    S.work = tm__aprintf("%s/tensormorph-sensitivity-XXXXXX", p->ev.tmp_dir ? p->ev.tmp_dir : "/tmp");
    if (!S.work) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    else if (!mkdtemp(S.work)) {
        s = tm__err_sys(err, errno, "%s: cannot create the scratch folder", S.work);
        free(S.work);
        S.work = NULL;
    }
    /* the source as a GGUF */
    if (!s && !tm_is_gguf_file(p->src)) {
        S.base = tm__aprintf("%s/source-F32.gguf", S.work);
        tm_file *f = NULL;
        tm_open_params op = tm_open_params_default();
        if (!S.base) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s) s = tm_open(p->src, &op, &f, err);
        if (!s) {
            tm_convert_params cp = tm_convert_params_default();
            cp.vocab_from = p->ev.vocab_from;
            cp.no_checksums = 1;
            cp.n_threads = p->threads;
            cp.cancel = p->cancel;
            tm_convert_result *cr = NULL;
            s = tm_convert_gguf(f, p->src, S.base, &cp, &cr, err);
            tm_convert_result_free(cr);
        }
        tm_close(f);
    }
    if (!s && !p->no_cache && !(S.qc = tm__sens_qcache_new(S.work, (uint64_t)(p->cache_mb > 0 ? p->cache_mb : 0) << 20)))
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s && !S.cache && !(S.cache = tm__aprintf("%s/base.cache", S.work))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) s = tm_sha256_file(S.base, S.src_sha, NULL, err);
    if (!s) s = S.ct ? load_tensors_ct(&S, err) : load_tensors(&S, err);
    if (!s) s = make_units(&S, err);
    if (!s && S.ct && S.qc) s = tm__sens_ctd_init(&S, err);
    /* the items of this process: unit u (only / all-but / weight error) = item u, uniform rung r
    ** = item n_u + r; probe i/n takes the items k with k % n == i */
    const int n_items = S.n_u + S.n_r;
    sens_meas *mo = s ? NULL : tm__calloc((size_t)n_items, sizeof *mo), *mb = s ? NULL : tm__calloc((size_t)n_items, sizeof *mb);
    int *abuf = s ? NULL : tm__calloc((size_t)(2 * n_items) * (size_t)(S.n_t ? S.n_t : 1), sizeof *abuf);
    int *ur = s ? NULL : tm__calloc((size_t)(S.n_u ? S.n_u : 1), sizeof *ur);
    sens_eval *ev = s ? NULL : tm__calloc((size_t)(2 * n_items), sizeof *ev);
    if (!s && (!mo || !mb || !abuf || !ur || !ev)) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int ne = 0;
    for (int k = 0; !s && k < n_items; k++) {
        if (p->probe_n > 0 && k % p->probe_n != p->probe_i) continue;
        if (k < S.n_u) {
            for (int u = 0; u < S.n_u; u++) ur[u] = u == k ? 0 : -1;
            ev[ne] = (sens_eval){abuf + (size_t)ne * (size_t)S.n_t, k + 1, &mo[k], 0};
            tm__sens_assign(&S, ur, ev[ne++].a);
            for (int u = 0; u < S.n_u; u++) ur[u] = u == k ? -1 : 0;
            ev[ne] = (sens_eval){abuf + (size_t)ne * (size_t)S.n_t, 0, &mb[k], 0};
            tm__sens_assign(&S, ur, ev[ne++].a);
        } else {
            for (int u = 0; u < S.n_u; u++) ur[u] = k - S.n_u;
            ev[ne] = (sens_eval){abuf + (size_t)ne * (size_t)S.n_t, 0, &mo[k], 0};
            tm__sens_assign(&S, ur, ev[ne++].a);
        }
    }
    if (!s) s = tm__sens_eval_many(&S, ev, ne, err);
    json_t *doc = NULL;
    if (!s) {
        doc = header_doc(&S);
        json_t *units = json_array(), *uni = json_array();
        for (int k = 0; k < n_items; k++) {
            if (p->probe_n > 0 && k % p->probe_n != p->probe_i) continue;
            if (k < S.n_u) {
                json_t *o = json_object(), *tl = json_array();
                uint64_t bq = 0, bs = 0;
                for (int i = 0; i < S.n_t; i++)
                    if (S.t[i].unit == k) {
                        json_array_append_new(tl, json_string(S.t[i].name));
                        bq += S.t[i].rung_bytes[0];
                        bs += S.t[i].src_bytes;
                    }
                json_object_set_new(o, "name", json_string(S.unit_names[k]));
                json_object_set_new(o, "rank", json_null());
                json_object_set_new(o, "kld_mean_only", num(mo[k].kld_mean));
                json_object_set_new(o, "kld_p99_only", num(mo[k].kld_p99));
                json_object_set_new(o, "same_top1_only", num(mo[k].top1));
                json_object_set_new(o, "kld_mean_all_but", num(mb[k].kld_mean));
                json_object_set_new(o, "kld_p99_all_but", num(mb[k].kld_p99));
                json_object_set_new(o, "same_top1_all_but", num(mb[k].top1));
                json_object_set_new(o, "bytes_quantized", json_integer((json_int_t)bq));
                json_object_set_new(o, "bytes_source", json_integer((json_int_t)bs));
                json_object_set_new(o, "weight_sqnr_db", mo[k].w_have ? num(mo[k].w_sqnr_db) : json_null());
                json_object_set_new(o, "weight_rmse_lsb", mo[k].w_have ? num(mo[k].w_rmse_lsb) : json_null());
                json_object_set_new(o, "tensors", tl);
                json_array_append_new(units, o);
            } else {
                json_t *o = json_object();
                int r = k - S.n_u;
                for (int u = 0; u < S.n_u; u++) ur[u] = r;
                tm__sens_assign(&S, ur, abuf);
                uint64_t b = tm__sens_bytes(&S, abuf);
                json_object_set_new(o, "scheme", json_string(S.rname[r]));
                json_object_set_new(o, "bytes", json_integer((json_int_t)b));
                json_object_set_new(o, "bits_per_param", json_real(S.n_params ? 8.0 * (double)b / (double)S.n_params : 0));
                json_object_set_new(o, "kld_mean", num(mo[k].kld_mean));
                json_object_set_new(o, "kld_p99", num(mo[k].kld_p99));
                json_object_set_new(o, "same_top1", num(mo[k].top1));
                json_array_append_new(uni, o);
            }
        }
        json_object_set_new(doc, "units", units);
        json_object_set_new(doc, "uniform", uni);
        if (p->probe_n > 0) {
            json_t *pr = json_object();
            json_object_set_new(pr, "i", json_integer(p->probe_i));
            json_object_set_new(pr, "n", json_integer(p->probe_n));
            json_object_set_new(doc, "probe", pr);
        } else {
            s = finish_doc(doc, err);
        }
    }
    if (!s && p->budget_kld >= 0) s = tm__sens_budget(&S, doc, met, err);
    if (!s) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        json_t *tm = json_object();
        json_object_set_new(tm, "seconds", json_real(sec));
        json_object_set_new(tm, "evaluations", json_integer(S.n_evals));
        json_object_set_new(tm, "probes_per_minute", json_real(sec > 0 ? 60.0 * S.n_evals / sec : 0));
        json_object_set_new(tm, "candidate_seconds", json_real(S.cand_seconds));
        json_object_set_new(tm, "evaluation_seconds", json_real(S.eval_seconds));
        long nq, nr, nsp;
        uint64_t mb;
        tm__sens_qcache_counts(S.qc, &nq, &nr, &nsp, &mb);
        json_t *qc = json_object();
        json_object_set_new(qc, "enabled", json_boolean(S.qc != NULL));
        json_object_set_new(qc, "tensors_quantized", json_integer(nq));
        json_object_set_new(qc, "tensors_reused", json_integer(nr));
        json_object_set_new(qc, "entries_spilled", json_integer(nsp));
        json_object_set_new(qc, "bytes_in_memory", json_integer((json_int_t)mb));
        json_object_set_new(tm, "tensor_cache", qc);
        json_object_set_new(doc, "timings", tm);
        *json_out = dump_checked(doc, &s, err);
    }
    json_decref(doc);
    free(mo);
    free(mb);
    free(abuf);
    free(ur);
    free(ev);
    sens_free(&S);
    return s;
}

/* ---- merge -------------------------------------------------------------------------------- */

tm_status tm_sensitivity_merge(const char *const *parts, int n, char **json_out, tm_err *err) {
    *json_out = NULL;
    tm_err_clear(err);
    if (n < 1) return tm__err_set(err, TM_E_INVALID_ARG, -1, "merge: no partial result given");
    static const char *const same[] = {"source", "form", "scheme", "unit", "ladder", "protocol", "unit_names"};
    json_t *acc = NULL;
    tm_status s = TM_OK;
    double sec = 0;
    json_int_t evals = 0, pn = 0;
    char *seen = NULL;
    for (int i = 0; i < n && !s; i++) {
        json_error_t je;
        json_t *d = json_loads(parts[i], 0, &je);
        json_t *pr = json_object_get(d, "probe");
        if (!d || !json_is_string(json_object_get(d, "schema")) ||
            strcmp(json_string_value(json_object_get(d, "schema")), "tensormorph.sensitivity/1") != 0 || !json_is_object(pr)) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "part %d: not a partial tensormorph.sensitivity/1 document (--probe i/n)%s%s", i + 1,
                            d ? "" : ": ", d ? "" : je.text);
            json_decref(d);
            break;
        }
        json_int_t pi = json_integer_value(json_object_get(pr, "i")), pnn = json_integer_value(json_object_get(pr, "n"));
        if (i == 0) {
            pn = pnn;
            if (pn < 1 || pn > 1000000 || !(seen = tm__calloc((size_t)pn, 1))) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "part 1: probe n %lld", (long long)pn);
                json_decref(d);
                break;
            }
        }
        if (pnn != pn || pi < 0 || pi >= pn) s = tm__err_set(err, TM_E_CORRUPT, -1, "part %d: probe %lld/%lld of a split into %lld", i + 1, (long long)pi, (long long)pnn, (long long)pn);
        else if (seen[pi]) s = tm__err_set(err, TM_E_CORRUPT, -1, "part %d: probe %lld/%lld given twice", i + 1, (long long)pi, (long long)pn);
        else seen[pi] = 1;
        json_t *tm = json_object_get(d, "timings");
        sec += jnum(tm, "seconds") == jnum(tm, "seconds") ? jnum(tm, "seconds") : 0;
        evals += json_integer_value(json_object_get(tm, "evaluations"));
        if (!s && !acc) {
            acc = json_deep_copy(d);
        } else if (!s) {
            for (size_t k = 0; k < sizeof same / sizeof same[0] && !s; k++)
                if (!json_equal(json_object_get(acc, same[k]), json_object_get(d, same[k])))
                    s = tm__err_set(err, TM_E_CORRUPT, -1, "part %d: \"%s\" differs from part 1's: parts of different runs", i + 1, same[k]);
            json_array_extend(json_object_get(acc, "units"), json_object_get(d, "units"));
            json_array_extend(json_object_get(acc, "uniform"), json_object_get(d, "uniform"));
        }
        json_decref(d);
    }
    for (json_int_t k = 0; !s && k < pn; k++)
        if (!seen[k]) s = tm__err_set(err, TM_E_CORRUPT, -1, "probe %lld/%lld is missing", (long long)k, (long long)pn);
    free(seen);
    if (!s) json_object_del(acc, "timings");
    if (!s) s = finish_doc(acc, err);
    if (!s) {
        json_t *tm = json_object();
        json_object_set_new(tm, "seconds", json_real(sec));
        json_object_set_new(tm, "evaluations", json_integer(evals));
        json_object_set_new(tm, "probes_per_minute", json_real(sec > 0 ? 60.0 * (double)evals / sec : 0));
        json_object_set_new(acc, "timings", tm);
        *json_out = dump_checked(acc, &s, err);
    }
    json_decref(acc);
    return s;
}
