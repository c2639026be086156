/* sensitivity_budget.c: `sensitivity --budget KLD`: the greedy plan search over the ladder
** (tensormorph/sensitivity.h "Budget"), then the plan's outputs: OUT.gguf with its manifest (the
** quantizer, the plan's exact --tensor-type list), OUT.evidence.json (the artifact re-measured as
** a whole on llama.cpp) and OUT.recipe.json (that list as a GGUF recipe `quantize --recipe`
** accepts, docs/recipe.md). */
#include "sensitivity_impl.h"
#include "../core/fsutil.h"
#include "manifest.h"
#include "tensormorph/evidence.h"
#include "tensormorph/evidence_llm.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

static int meets(const tm_sensitivity_params *p, const sens_meas *m) {
    return m->done && m->kld_mean <= p->budget_kld && (p->budget_p99 < 0 || m->kld_p99 <= p->budget_p99) &&
           (p->min_top1 < 0 || m->top1 >= p->min_top1);
}

/* The next rung above r whose types differ for unit u's tensors; -1 at the top. */
static int next_rung(const sens *S, int u, int r) {
    for (int q = r + 1; q < S->n_r; q++)
        for (int i = 0; i < S->n_t; i++)
            if (S->t[i].unit == u && S->t[i].rung_type[q] != S->t[i].rung_type[r]) return q;
    return -1;
}

static uint64_t plan_bytes(const sens *S, const int *ur, int *a) {
    tm__sens_assign(S, ur, a);
    return tm__sens_bytes(S, a);
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* A scheme object as recipes take it (docs/recipe.md "Scheme"). */
static json_t *scheme_json(const tm_qspec *sp) {
    json_t *o = json_object();
    const char *ty = tm__sens_code_type_name(sp->code_dtype);
    char g[48], ob[64];
    tm_granularity_name(&sp->gran, g, sizeof g);
    tm_observer_name(&sp->observer, ob, sizeof ob);
    json_object_set_new(o, "type", json_string(ty));
    json_object_set_new(o, "granularity", json_string(g));
    json_object_set_new(o, "symmetric", json_boolean(sp->symmetric));
    json_object_set_new(o, "observer", json_string(ob));
    json_object_set_new(o, "convention", json_string(sp->convention == TM_CONV_TORCH ? "torch" : "onnx"));
    json_object_set_new(o, "scale_dtype", json_string(sp->scale_dtype == TM_F16 ? "f16" : sp->scale_dtype == TM_BF16 ? "bf16" : "f32"));
    return o;
}

/* The evidence ran the baseline from the scratch GGUF converted from a checkpoint source: record
** the real source (its path, and {path, sha256} of its files from OUT's manifest "sources") as
** `evidence` does for a model it converts, so that `gate` matches it to the manifest. */
static char *baseline_as_source(const sens *S, char *doc) {
    const tm_sensitivity_params *p = S->p;
    if (S->base == p->src) return doc;
    char *mp = tm__aprintf(S->ct ? "%s/tensormorph-manifest.json" : "%s.manifest.json", p->out);
    json_t *man = mp ? json_load_file(mp, 0, NULL) : NULL, *d = json_loads(doc, 0, NULL);
    json_t *bm = json_object_get(json_object_get(d, "models"), "baseline");
    free(mp);
    if (!man || !bm) { json_decref(man); json_decref(d); return doc; }
    json_t *src = json_object(), *files = tm__manifest_source_files(man);
    json_object_set_new(src, "path", json_string(p->src));
    json_object_set_new(src, "files", files);
    json_object_set_new(bm, "path", json_string(p->src));
    json_object_set_new(bm, "latency_representative", json_false());
    json_object_set_new(bm, "source", src);
    char *out = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(man);
    json_decref(d);
    if (!out) return doc;
    free(doc);
    return out;
}

/* The final plan measured as a whole: the artifact at OUT with its evidence, or (no OUT) a
** candidate in the scratch folder. */
static tm_status measure_final(sens *S, const int *a, sens_meas *m, char **evidence_path, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    if (!p->out) {
        sens_eval e = {(int *)a, 0, m, 0};
        return tm__sens_eval_many(S, &e, 1, err);
    }
    tm_status s = tm__sens_write(S, a, p->out, 1, p->force, err);
    char *doc = NULL;
    if (!s) {
        tm_evidence_llm_params e = tm__sens_evidence_params(S, p->out);
        s = tm_evidence_llm_run(&e, &doc, err);
        S->n_evals++;
    }
    if (!s) {
        json_t *d = json_loads(doc, 0, NULL);
        json_t *ov = json_object_get(json_object_get(d, "llm"), "overall"), *k = json_object_get(ov, "kld");
        m->kld_mean = json_number_value(json_object_get(k, "mean"));
        m->kld_p99 = json_number_value(json_object_get(k, "p99"));
        m->top1 = json_number_value(json_object_get(ov, "same_top1"));
        m->done = json_is_number(json_object_get(k, "mean"));
        json_decref(d);
        if (!m->done) s = tm__err_set(err, TM_E_INTERNAL, -1, "the evidence of %s has no overall KLD", p->out);
    }
    if (!s) doc = baseline_as_source(S, doc);
    if (!s && !(*evidence_path = tm__aprintf("%s.evidence.json", p->out))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) s = tm_evidence_write(*evidence_path, doc, err);
    free(doc);
    return s;
}

tm_status tm__sens_budget(sens *S, json_t *doc, int *met, tm_err *err) {
    const tm_sensitivity_params *p = S->p;
    const int nu = S->n_u;
    int *ur = tm__calloc((size_t)nu, sizeof *ur), *best_ur = tm__calloc((size_t)nu, sizeof *best_ur);
    int *cand_ur = tm__calloc((size_t)nu * (size_t)nu, sizeof *cand_ur);
    int *a = tm__calloc((size_t)S->n_t * (size_t)(nu + 1), sizeof *a);
    sens_meas *cm = tm__calloc((size_t)nu, sizeof *cm);
    sens_eval *ev = tm__calloc((size_t)nu, sizeof *ev);
    int *cu = tm__calloc((size_t)nu, sizeof *cu);
    tm_status s = ur && best_ur && cand_ur && a && cm && ev && cu ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    /* the start: every unit on the first rung, measured as the uniform scheme */
    sens_meas cur, best;
    memset(&cur, 0, sizeof cur);
    json_t *u0 = json_array_get(json_object_get(doc, "uniform"), 0);
    cur.kld_mean = json_number_value(json_object_get(u0, "kld_mean"));
    cur.kld_p99 = json_number_value(json_object_get(u0, "kld_p99"));
    cur.top1 = json_number_value(json_object_get(u0, "same_top1"));
    cur.done = 1;
    best = cur;
    int steps = 0;
    while (!s && !meets(p, &cur)) {
        int nc = 0;
        uint64_t b0 = plan_bytes(S, ur, a);
        for (int u = 0; u < nu; u++) {
            int nr = next_rung(S, u, ur[u]);
            if (nr < 0) continue;
            int *c = cand_ur + (size_t)nc * (size_t)nu;
            memcpy(c, ur, (size_t)nu * sizeof *ur);
            c[u] = nr;
            memset(&cm[nc], 0, sizeof cm[nc]);
            ev[nc] = (sens_eval){a + (size_t)(nc + 1) * (size_t)S->n_t, 0, &cm[nc], 0};
            tm__sens_assign(S, c, ev[nc].a);
            cu[nc++] = u;
        }
        if (nc == 0) break; /* every unit at the top */
        if (p->progress) p->progress(p->progress_ud, "budget", (uint64_t)steps, 0);
        s = tm__sens_eval_many(S, ev, nc, err);
        if (s) break;
        int pick = -1, pick_met = 0;
        double pick_score = -INFINITY;
        uint64_t pick_bytes = 0;
        for (int c = 0; c < nc; c++) {
            uint64_t b = tm__sens_bytes(S, ev[c].a);
            int mt = meets(p, &cm[c]);
            double gain = cur.kld_mean - cm[c].kld_mean, db = (double)b - (double)b0;
            double score = db > 0 ? gain / db : gain > 0 ? INFINITY : gain;
            if (mt && (!pick_met || b < pick_bytes)) { pick = c; pick_met = 1; pick_bytes = b; }
            else if (!pick_met && score > pick_score) { pick = c; pick_score = score; pick_bytes = b; }
        }
        memcpy(ur, cand_ur + (size_t)pick * (size_t)nu, (size_t)nu * sizeof *ur);
        cur = cm[pick];
        steps++;
        if (cur.kld_mean < best.kld_mean) {
            best = cur;
            memcpy(best_ur, ur, (size_t)nu * sizeof *ur);
        }
    }
    /* the plan: the one that met the budget, else the best reached */
    const int *plan = meets(p, &cur) || s ? ur : best_ur;
    sens_meas fin;
    memset(&fin, 0, sizeof fin);
    char *evp = NULL, *rp = NULL;
    if (!s) {
        tm__sens_assign(S, plan, a);
        s = measure_final(S, a, &fin, &evp, err);
    }
    json_t *tt = json_array();
    if (!s && S->ct) { /* the compiled rules: exact names -> their rung's scheme, the rest ignored */
        tm_qrule *rules = NULL;
        int n = tm__sens_ct_rules(S, a, &rules);
        if (n < 0) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int k = 0; k < n; k++) {
            json_t *o = json_object();
            json_object_set_new(o, "pattern", json_string(rules[k].pattern));
            json_object_set_new(o, "ignore", json_boolean(rules[k].ignore));
            if (rules[k].has_spec) json_object_set_new(o, "scheme", scheme_json(&rules[k].spec));
            json_array_append_new(tt, o);
        }
        tm__sens_ct_rules_free(rules, n < 0 ? S->n_t + 1 : n);
    } else if (!s) {
        char **pats = NULL;
        int *types = NULL;
        int n = tm__sens_overrides(S, a, &pats, &types);
        if (n < 0) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int k = 0; k < n; k++) {
            json_t *o = json_object();
            json_object_set_new(o, "pattern", json_string(pats[k]));
            json_object_set_new(o, "type", json_string(tm_ggml_type_info_get(types[k])->name));
            json_array_append_new(tt, o);
        }
        tm__sens_overrides_free(pats, types, n < 0 ? S->n_t : n);
    }
    if (!s && p->out) { /* the recipe: quantize SRC -o X.gguf --recipe OUT.recipe.json gives the artifact */
        json_t *r = json_object();
        json_object_set_new(r, "format", json_string(S->ct ? "compressed-tensors" : "gguf"));
        json_object_set_new(r, "comment", json_string("tensormorph sensitivity plan: every type as measured"));
        if (S->ct) {
            json_object_set_new(r, "default", scheme_json(&S->rspec[0]));
            json_object_set_new(r, "rules", json_deep_copy(tt));
        } else {
            json_object_set_new(r, "file_type", json_string(tm_gguf_ftype_name(S->carrier)));
            json_object_set_new(r, "tensor_types", json_deep_copy(tt));
            json_object_set_new(r, "tensor_types_exact", json_true());
        }
        char *txt = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(r);
        if (!(rp = tm__aprintf("%s.recipe.json", p->out)) || !txt) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else {
            size_t n = strlen(txt);
            char *t2 = realloc(txt, n + 2);
            if (t2) { txt = t2; txt[n] = '\n'; txt[n + 1] = '\0'; }
            s = tm__write_file_atomic(rp, txt, strlen(txt), err);
        }
        free(txt);
    }
    if (!s) {
        json_t *pl = json_object(), *as = json_object(), *bud = json_object();
        uint64_t b = tm__sens_bytes(S, a);
        json_object_set_new(pl, "recipe", rp ? json_string(rp) : json_null());
        json_object_set_new(pl, "artifact", p->out ? json_string(p->out) : json_null());
        json_object_set_new(pl, "evidence", evp ? json_string(evp) : json_null());
        json_object_set_new(pl, "bytes", json_integer((json_int_t)b));
        json_object_set_new(pl, "bits_per_param", json_real(S->n_params ? 8.0 * (double)b / (double)S->n_params : 0));
        json_object_set_new(pl, "kld_mean", num(fin.kld_mean));
        json_object_set_new(pl, "kld_p99", num(fin.kld_p99));
        json_object_set_new(pl, "same_top1", num(fin.top1));
        for (int u = 0; u < nu; u++)
            json_object_set_new(as, S->unit_names[u], json_string(S->rname[plan[u]]));
        json_object_set_new(pl, "assignments", as);
        *met = meets(p, &fin);
        json_object_set_new(pl, "met", json_boolean(*met));
        json_object_set_new(bud, "kld_mean", json_real(p->budget_kld));
        json_object_set_new(bud, "kld_p99", p->budget_p99 >= 0 ? json_real(p->budget_p99) : json_null());
        json_object_set_new(bud, "min_top1", p->min_top1 >= 0 ? json_real(p->min_top1) : json_null());
        json_object_set_new(pl, "budget", bud);
        if (S->ct) json_object_set_new(pl, "rules", tt);
        else {
            json_object_set_new(pl, "file_type", json_string(tm_gguf_ftype_name(S->carrier)));
            json_object_set_new(pl, "tensor_types", tt);
        }
        tt = NULL;
        json_object_set_new(pl, "steps", json_integer(steps));
        json_object_set_new(doc, "plan", pl);
    }
    json_decref(tt);
    free(evp);
    free(rp);
    free(ur);
    free(best_ur);
    free(cand_ur);
    free(a);
    free(cm);
    free(ev);
    free(cu);
    return s;
}
