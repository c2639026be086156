/* qjob_plan.c: the plan of the compressed-tensors quantize job (qjob.c): for every source tensor,
** quantize (with which scheme) or copy, and why; the layout checks; the safetensors entries of
** the output (formats/ctensors_write.h), which fix every byte offset before any data is
** written; the runtime notes on the plan. */
#include "qjob_impl.h"
#include "../formats/ctensors_write.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>

static int re_match(const char *pattern, const char *s, tm_err *err, int *bad) {
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
        *bad = 1;
        tm__err_set(err, TM_E_INVALID_ARG, -1, "invalid regular expression '%s'", pattern);
        return 0;
    }
    int m = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return m;
}

static int is_float_dtype(tm_dtype d) { return d == TM_F32 || d == TM_F16 || d == TM_BF16 || d == TM_F64; }

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

int tm__qjob_is_embedding(const char *n) {
    return contains(n, "embed_tokens") || contains(n, "tok_embeddings") || contains(n, "wte.") ||
           contains(n, "word_embeddings") || contains(n, "token_embd") || contains(n, ".embed.") ||
           contains(n, "embeddings.");
}
static int is_lm_head(const char *n) {
    return contains(n, "lm_head") || !strcmp(n, "output.weight") || contains(n, "classifier.weight");
}

/* Can compressed-tensors hold this scheme at all? TM_E_INVALID_ARG (exit 2) when not. */
static tm_status check_layout_scheme(const tm_qspec *s, tm_err *err) {
    const tm_dtype_traits *t = tm_dtype_get(s->code_dtype);
    switch (s->code_dtype) {
    case TM_I8: case TM_I4: case TM_F8_E4M3: break;
    case TM_U8: case TM_U4:
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "--type %s: the compressed-tensors layout stores only signed integer codes "
                           "(it converts to unsigned itself when packing); use int8/int4 --asymmetric",
                           t ? t->name : "?");
    case TM_F8_E5M2:
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "--type fp8_e5m2: compressed-tensors has no e5m2 weight format (only "
                           "float8_e4m3fn); use fp8_e4m3");
    default:
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--type %s is not a quantized code type",
                           t ? t->name : "?");
    }
    int fp8 = s->code_dtype == TM_F8_E4M3;
    switch (s->gran.kind) {
    case TM_GRAN_TENSOR: break;
    case TM_GRAN_CHANNEL:
        if (s->gran.axis < -2 || s->gran.axis > 1)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "--granularity channel:%d: axis %d out of range for a 2-D weight "
                               "(0 or -2: output channels; 1 or -1: input)", s->gran.axis, s->gran.axis);
        if (s->gran.axis != 0 && s->gran.axis != -2)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "--granularity channel:%d: compressed-tensors keeps one scale per output "
                               "channel (axis 0) only", s->gran.axis);
        break;
    case TM_GRAN_GROUP:
        if (fp8)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "fp8 weights in compressed-tensors take tensor, channel or block scales, "
                               "not groups");
        if (s->gran.axis < -2 || s->gran.axis > 1)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "--granularity group:%lld:%d: axis %d out of range for a 2-D weight "
                               "(1 or -1: input dimension)", (long long)s->gran.group_size, s->gran.axis,
                               s->gran.axis);
        if (s->gran.axis != 1 && s->gran.axis != -1)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "--granularity group:%lld:%d: compressed-tensors groups run along the "
                               "input dimension (axis 1) only", (long long)s->gran.group_size, s->gran.axis);
        break;
    case TM_GRAN_BLOCK: break;
    default: return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown granularity");
    }
    if (fp8 && !s->symmetric)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "fp8 codes have no zero point: use --symmetric with fp8_e4m3");
    if (s->scale_dtype != TM_F32 && s->scale_dtype != TM_F16 && s->scale_dtype != TM_BF16)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "--scale-dtype must be f32, f16 or bf16");
    return TM_OK;
}

int tm__qjob_filtered_by_option(const char *reason) {
    return !strncmp(reason, "excluded by --exclude", 21) || !strncmp(reason, "not matched by any --include", 28) ||
           !strncmp(reason, "ignored by recipe", 17);
}

/* After every tensor is decided: when none is quantized, say why (unless allow_empty) instead
** of writing a copy of the input. A filter that matches nothing is an argument error
** (TM_E_INVALID_ARG); a group size that divides no weight, or a checkpoint without a
** quantizable weight, is TM_E_UNSUPPORTED (docs/exit-codes.md). */
static tm_status check_something_quantized(const job_t *j, tm_err *err) {
    const tm_ct_quantize_params *p = j->p;
    int64_t n_group = 0, n_filtered = 0, n_inc_match = 0, n_data = 0;
    int64_t cols[2] = {-1, -1};
    for (int64_t i = 0; i < j->n_plans; i++) {
        const plan_t *pl = &j->plans[i];
        if (pl->kind != OUT_COPY) return TM_OK;
        const tm_tensor *t = tm_file_tensor(j->in, pl->src);
        if (t->role != TM_ROLE_DATA) continue;
        n_data++;
        if (!strncmp(pl->reason, "group_size ", 11)) {
            if (cols[0] < 0) cols[0] = pl->cols;
            else if (cols[1] < 0 && pl->cols != cols[0]) cols[1] = pl->cols;
            n_group++;
        }
        if (tm__qjob_filtered_by_option(pl->reason)) n_filtered++;
        int bad = 0;
        for (int64_t k = 0; k < p->n_include; k++)
            if (re_match(p->include[k], t->name, err, &bad)) { n_inc_match++; break; }
    }
    const char *in_path = tm_file_path(j->in, 0);
    if (p->n_include > 0 && n_inc_match == 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%s: --include '%s'%s matched no tensor (of %lld); nothing to quantize "
                           "(--allow-empty writes the unchanged copy anyway)",
                           in_path, p->include[0], p->n_include > 1 ? " (and the other --include patterns)" : "",
                           (long long)n_data);
    if (n_group > 0) {
        char seen[64] = "";
        if (cols[1] >= 0) snprintf(seen, sizeof seen, "%lld, %lld, ...", (long long)cols[0], (long long)cols[1]);
        else snprintf(seen, sizeof seen, "%lld", (long long)cols[0]);
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "%s: group:%lld does not divide the input dimension (columns: %s) of any of its %lld "
                           "2-D weights, so no tensor was quantized; choose a group size that divides it "
                           "(--allow-empty writes the unchanged copy anyway)",
                           in_path, (long long)p->spec.gran.group_size, seen, (long long)n_group);
    }
    if (n_filtered > 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%s: --include/--exclude/recipe ignore left no tensor to quantize (%lld filtered out) "
                           "(--allow-empty writes the unchanged copy anyway)",
                           in_path, (long long)n_filtered);
    return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                       "%s: no tensor can be quantized: none is a 2-D float '.weight' outside embeddings/lm_head "
                       "(see the reasons with --allow-empty, or --quantize-embeddings)",
                       in_path);
}

/* Decide one tensor. Returns TM_OK, or an error for --strict / bad regex. */
static tm_status decide(job_t *j, plan_t *pl, tm_err *err) {
    const tm_ct_quantize_params *p = j->p;
    const tm_tensor *t = tm_file_tensor(j->in, pl->src);
    pl->kind = OUT_COPY;
    pl->spec = p->spec;
    int bad = 0;
    if (t->role != TM_ROLE_DATA) {
        snprintf(pl->reason, sizeof pl->reason, "%s of %s, copied with it",
                 t->role == TM_ROLE_SCALE ? "scale" : t->role == TM_ROLE_ZERO_POINT ? "zero point" : "metadata",
                 tm_file_tensor(j->in, t->owner) ? tm_file_tensor(j->in, t->owner)->name : "?");
        return TM_OK;
    }
    if (t->quant) { snprintf(pl->reason, sizeof pl->reason, "already quantized"); return TM_OK; }
    if (!is_float_dtype(t->dtype)) {
        snprintf(pl->reason, sizeof pl->reason, "dtype %s is not a float dtype", tm_dtype_get(t->dtype)->name);
        return TM_OK;
    }
    for (int64_t k = 0; k < p->n_exclude; k++) {
        if (re_match(p->exclude[k], t->name, err, &bad)) {
            snprintf(pl->reason, sizeof pl->reason, "excluded by --exclude '%s'", p->exclude[k]);
            return TM_OK;
        }
        if (bad) return TM_E_INVALID_ARG;
    }
    if (p->n_include > 0) {
        int any = 0;
        for (int64_t k = 0; k < p->n_include && !any; k++) {
            any = re_match(p->include[k], t->name, err, &bad);
            if (bad) return TM_E_INVALID_ARG;
        }
        if (!any) { snprintf(pl->reason, sizeof pl->reason, "not matched by any --include"); return TM_OK; }
    }
    int targeted = 0;
    for (int64_t k = 0; k < p->n_rules; k++) {
        const tm_qrule *r = &p->rules[k];
        int m = re_match(r->pattern, t->name, err, &bad);
        if (bad) return TM_E_INVALID_ARG;
        if (!m) continue;
        if (r->ignore) {
            snprintf(pl->reason, sizeof pl->reason, "ignored by recipe pattern '%s'", r->pattern);
            return TM_OK;
        }
        if (r->has_spec) pl->spec = r->spec;
        targeted = 1;
        break;
    }
    pl->spec.kernels = p->kernels; /* the job's kernel set, whichever spec */
    if (t->ndim == 1) { snprintf(pl->reason, sizeof pl->reason, "1-D tensor (norm or bias)"); return TM_OK; }
    if (t->ndim != 2) {
        snprintf(pl->reason, sizeof pl->reason, "%d-D tensor (only 2-D Linear weights are quantized)", t->ndim);
        return TM_OK;
    }
    if (!targeted && !p->quantize_embeddings) {
        if (tm__qjob_is_embedding(t->name)) { snprintf(pl->reason, sizeof pl->reason, "embedding (kept dense by default)"); return TM_OK; }
        if (is_lm_head(t->name)) { snprintf(pl->reason, sizeof pl->reason, "lm_head (kept dense by default)"); return TM_OK; }
    }
    if (!tm__ends_with(t->name, ".weight")) {
        snprintf(pl->reason, sizeof pl->reason, "not a '.weight' tensor");
        return TM_OK;
    }
    tm_status s = check_layout_scheme(&pl->spec, err);
    if (s) return s;
    pl->rows = t->shape[0];
    pl->cols = t->shape[1];
    if (pl->rows == 0 || pl->cols == 0) {
        snprintf(pl->reason, sizeof pl->reason, "empty tensor");
        return TM_OK;
    }
    if (pl->spec.gran.kind == TM_GRAN_GROUP && pl->cols % pl->spec.gran.group_size != 0) {
        snprintf(pl->reason, sizeof pl->reason,
                 "group_size %lld does not divide its %lld columns (compressed-tensors has no ragged groups)",
                 (long long)pl->spec.gran.group_size, (long long)pl->cols);
        if (p->strict)
            return tm__err_set(err, TM_E_UNSUPPORTED, -1, "--strict: tensor '%s': %s", t->name, pl->reason);
        return TM_OK;
    }
    /* one group per row is per-channel: compressed-tensors infers the strategy from the scale's
    ** shape ([rows, 1] = channel), so say so in the config too */
    if (pl->spec.gran.kind == TM_GRAN_GROUP && pl->spec.gran.group_size >= pl->cols) {
        pl->spec.gran.kind = TM_GRAN_CHANNEL;
        pl->spec.gran.axis = 0;
    }
    /* normalise axes to the 2-D convention */
    if (pl->spec.gran.kind == TM_GRAN_CHANNEL) pl->spec.gran.axis = 0;
    if (pl->spec.gran.kind == TM_GRAN_GROUP) pl->spec.gran.axis = 1;
    pl->kind = pl->spec.code_dtype == TM_F8_E4M3 ? OUT_FP8 : OUT_PACK;
    s = tm_qgran_param_shape(&pl->spec.gran, t->ndim, t->shape, &pl->pndim, pl->pshape, &pl->n_params, err);
    if (s) { tm__err_prefix(err, "tensor '%s'", t->name); return s; }
    pl->module = tm__strndup(t->name, strlen(t->name) - strlen(".weight"));
    if (!pl->module) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return TM_OK;
}


tm_status tm__qjob_plan(job_t *j, tm_st_entry **entries, char ***names, int64_t *n_entries, int64_t *ne,
                        tm_err *err) {
    const tm_ct_quantize_params *p = j->p;
    tm_file *in = j->in;
    *entries = NULL;
    *names = NULL;
    tm_status s = check_layout_scheme(&p->spec, err);
    for (int64_t k = 0; !s && k < p->n_rules; k++)
        if (p->rules[k].has_spec && !p->rules[k].ignore) {
            s = check_layout_scheme(&p->rules[k].spec, err);
            if (s) tm__err_prefix(err, "recipe target '%s'", p->rules[k].pattern);
        }
    if (s) return s;
    int64_t n = tm_file_n_tensors(in);
    for (int64_t i = 0; !s && i < n; i++)
        if (tm_file_tensor(in, i)->quant)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s is already quantized (e.g. '%s'); quantize its full-precision source "
                            "instead (re-quantizing codes would compound the error)",
                            tm_file_path(in, 0), tm_file_tensor(in, i)->name);
    if (s) return s;
    j->plans = tm__calloc((size_t)(n ? n : 1), sizeof(plan_t));
    if (!j->plans) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    j->n_plans = n;
    *n_entries = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        plan_t *pl = &j->plans[i];
        pl->src = i;
        pl->e_codes = pl->e_scale = pl->e_shape = pl->e_zp = pl->e_copy = -1;
        s = decide(j, pl, err);
        *n_entries += pl->kind == OUT_COPY ? 1 : 4;
    }
    if (!s && !p->allow_empty) s = check_something_quantized(j, err);
    if (s) return s;
    size_t ncap = (size_t)(*n_entries ? *n_entries : 1);
    *entries = tm__calloc(ncap, sizeof(tm_st_entry));
    *names = tm__calloc(ncap, sizeof(char *));
    if (!*entries || !*names) {
        free(*entries);
        free(*names);
        *entries = NULL;
        *names = NULL;
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    *ne = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        plan_t *pl = &j->plans[i];
        const tm_tensor *t = tm_file_tensor(in, i);
        if (pl->kind == OUT_COPY) {
            tm_st_entry *e = &(*entries)[*ne];
            e->name = t->phys_name;
            e->dtype = t->phys_dtype;
            e->ndim = t->phys_ndim;
            memcpy(e->shape, t->phys_shape, sizeof e->shape);
            pl->e_copy = (*ne)++;
            j->total_bytes += t->n_bytes;
            continue;
        }
        tm__ct_weight cw = {pl->module, pl->kind == OUT_FP8, &pl->spec, pl->rows, pl->cols, pl->pndim, pl->pshape,
                            pl->n_params};
        int64_t idx[4];
        s = tm__ct_weight_entries(&cw, *entries, *names, ne, idx, &pl->row_bytes, err);
        pl->e_codes = idx[TM__CT_CODES];
        pl->e_scale = idx[TM__CT_SCALE];
        pl->e_shape = idx[TM__CT_SHAPE];
        pl->e_zp = idx[TM__CT_ZP];
        j->total_bytes += t->n_bytes;
    }
    return s;
}

int tm__qjob_same_scheme(const tm_qspec *a, const tm_qspec *b) {
    return a->code_dtype == b->code_dtype && a->symmetric == b->symmetric &&
           a->gran.kind == b->gran.kind && a->gran.group_size == b->gran.group_size &&
           a->gran.block_h == b->gran.block_h && a->gran.block_w == b->gran.block_w;
}

static void add_warning(tm_ct_quantize_result *r, const char *fmt, ...) TM_PRINTF(2, 3);
static void add_warning(tm_ct_quantize_result *r, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(r->warnings, (size_t)(r->n_warnings + 1) * sizeof *w);
    if (!w) return;
    r->warnings = w;
    if ((w[r->n_warnings] = tm__strdup(buf)) != NULL) r->n_warnings++;
}

/* Runtime notes (../shared/formats/compressed-tensors.md §7, marked "verify" there): vLLM's
** weight-only integer kernels take channel or group scales; vLLM fuses q/k/v and gate/up and
** needs one scheme (or all ignored) across a fused layer's shards. */
void tm__qjob_runtime_warnings(const job_t *j, tm_ct_quantize_result *r) {
    int block_int = 0;
    for (int64_t i = 0; i < j->n_plans; i++)
        if (j->plans[i].kind == OUT_PACK && j->plans[i].spec.gran.kind == TM_GRAN_BLOCK) block_int = 1;
    if (block_int)
        add_warning(r, "int codes with block scales: compressed-tensors decodes them, but vLLM's "
                       "weight-only int kernels take channel or group scales only");
    static const char *const fused[][3] = {{"q_proj", "k_proj", "v_proj"}, {"gate_proj", "up_proj", NULL}};
    for (int64_t i = 0; i < j->n_plans; i++) {
        const char *name = tm_file_tensor(j->in, j->plans[i].src)->name;
        for (size_t f = 0; f < 2; f++) {
            const char *first = strstr(name, fused[f][0]);
            if (!first || !tm__ends_with(name, ".weight")) continue;
            size_t pre = (size_t)(first - name);
            for (int k = 1; k < 3 && fused[f][k]; k++) {
                char *other = tm__aprintf("%.*s%s%s", (int)pre, name, fused[f][k], first + strlen(fused[f][0]));
                int64_t oi = other ? tm_file_find(j->in, other) : -1;
                if (oi >= 0 && oi < j->n_plans) {
                    const plan_t *a = &j->plans[i], *b = &j->plans[oi];
                    int differ = (a->kind == OUT_COPY) != (b->kind == OUT_COPY) ||
                                 (a->kind != OUT_COPY && !tm__qjob_same_scheme(&a->spec, &b->spec));
                    if (differ)
                        add_warning(r, "%s and %s are fused by vLLM but get different schemes", name, other);
                }
                free(other);
            }
        }
    }
}

