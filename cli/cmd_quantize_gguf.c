/* cmd_quantize_gguf.c: `tensormorph quantize IN -o OUT.gguf --type T`: the GGUF output form of
** the quantize command (cmd_quantize.c dispatches here when OUT ends in ".gguf"). */
#include "cli.h"
#include "quantize.h"
#include "recipe.h"
#include "tensormorph/ggml_quant.h"
#include "tensormorph/convert.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/gguf_write.h"
#include "tensormorph/imatrix.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_quantize_gguf(const cli_cmd *cmd, cli_args *a);

/* Options of the compressed-tensors form that mean nothing for GGUF output. */
static const char *const ct_only[] = {"granularity", "symmetric", "asymmetric", "observer",
                                      "convention", "include", "exclude",
                                      "scale-dtype", "quantize-embeddings", "allow-nonfinite"};

/* --override-kv KEY=TYPE:VALUE as llama.cpp's string_parse_kv_override reads it (common/common.cpp
** at c392e509): KEY under 128 bytes; int (written as INT32, as llama_model_quantize_impl's
** gguf_set_val_i32), float (FLOAT32), bool (true|false), str (at most 127 bytes). Unlike its
** atol/atof, a number must be whole, and an int outside int32 is refused (llama-quantize wraps
** it). 0 or the usage exit code. */
static int parse_override(const cli_cmd *cmd, const char *v, tm_gguf_kvlist *kv) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || eq - v >= 128) return cli_usage_error(cmd, "--override-kv '%s': expected KEY=TYPE:VALUE (KEY under 128 bytes)", v);
    char key[128];
    memcpy(key, v, (size_t)(eq - v));
    key[eq - v] = 0;
    const char *t = eq + 1;
    tm_err e;
    tm_status s;
    char *end;
    if (!strncmp(t, "int:", 4)) {
        errno = 0;
        long long x = strtoll(t + 4, &end, 10);
        if (!t[4] || *end || errno) return cli_usage_error(cmd, "--override-kv '%s': not an integer", v);
        /* llama-quantize writes the value as INT32 and would wrap it silently: refused instead */
        if (x < INT32_MIN || x > INT32_MAX)
            return cli_usage_error(cmd, "--override-kv '%s': key '%s': %lld is outside int32 (%d..%d), the type an "
                                   "int override is written as (llama-quantize would wrap it)", v, key, x, INT32_MIN, INT32_MAX);
        int32_t i32 = (int32_t)x;
        s = tm_gguf_kvlist_set_raw(kv, key, 5 /* INT32 */, &i32, 4, &e);
    } else if (!strncmp(t, "float:", 6)) {
        float f = strtof(t + 6, &end);
        if (!t[6] || *end) return cli_usage_error(cmd, "--override-kv '%s': not a number", v);
        s = tm_gguf_kvlist_set_raw(kv, key, 6 /* FLOAT32 */, &f, 4, &e);
    } else if (!strncmp(t, "bool:", 5)) {
        uint8_t b;
        if (!strcmp(t + 5, "true")) b = 1;
        else if (!strcmp(t + 5, "false")) b = 0;
        else return cli_usage_error(cmd, "--override-kv '%s': invalid boolean value (true or false)", v);
        s = tm_gguf_kvlist_set_raw(kv, key, 7 /* BOOL */, &b, 1, &e);
    } else if (!strncmp(t, "str:", 4)) {
        if (strlen(t + 4) > 127) return cli_usage_error(cmd, "--override-kv '%s': value cannot exceed 127 chars", v);
        s = tm_gguf_kvlist_set_str(kv, key, t + 4, &e);
    } else {
        return cli_usage_error(cmd, "--override-kv '%s': invalid type (int, float, bool or str)", v);
    }
    return s ? cli_fail(s, &e) : 0;
}

/* --output-tensor-type / --token-embedding-type: a ggml type name (case-insensitive, as
** llama-quantize's parse_ggml_type). 0 or the usage exit code. */
static int parse_type_opt(const cli_cmd *cmd, cli_args *a, const char *opt, const char *rv, int *out) {
    const char *v = cli_get(a, opt);
    if (!v) v = rv; /* the recipe's (checked by gguf_recipe_check) */
    *out = TM_GGUF_TYPE_RULES;
    if (!v) return 0;
    int t = tm_ggml_type_from_name(v);
    if (t < 0) return cli_usage_error(cmd, "--%s: invalid ggml_type '%s'", opt, v);
    *out = t;
    return 0;
}

static const tm_gguf_quantize_result *g_sort;
/* quantized first, lowest SQNR first; then the copied tensors in file order */
static int cmp_rows(const void *pa, const void *pb) {
    int64_t i = *(const int64_t *)pa, j = *(const int64_t *)pb;
    const tm_gguf_quantize_tensor *x = &g_sort->tensors[i], *y = &g_sort->tensors[j];
    if (x->quantized != y->quantized) return y->quantized - x->quantized;
    if (x->quantized && x->sqnr_db != y->sqnr_db) return x->sqnr_db < y->sqnr_db ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* An LLM checkpoint (config.json of an architecture convert handles) is converted first
** (tm_convert_gguf with the quantizer's parameters; the tokenizer from --vocab-from, else the
** checkpoint's tokenizer.model, else exit 3 naming --vocab-from: never an unloadable model
** GGUF); a GGUF is quantized as it is; any other source keeps its tensor names, which llama.cpp
** does not load as a model: said on stderr. */
static tm_status quantize_any(tm_file *in, const char *in_path, const char *out, const tm_gguf_quantize_params *p,
                              const char *vocab_from, tm_gguf_quantize_result **res, tm_err *err) {
    char *cfg = tm_file_format(in) == TM_FMT_GGUF ? NULL : tm_convert_config(in, in_path);
    char arch[64];
    /* a checkpoint directory with a LLaMA/Mistral config.json is an LLM; a file path (a bare
    ** .safetensors, even with a config.json beside it) keeps the raw path unless --vocab-from
    ** asks for the conversion (docs/convert.md) */
    struct stat st;
    int is_dir = stat(in_path, &st) == 0 && S_ISDIR(st.st_mode);
    int llm = cfg && (is_dir || vocab_from) && tm_convert_supported(cfg, arch, sizeof arch);
    free(cfg);
    if (llm) {
        tm_convert_params cp = tm_convert_params_default();
        cp.quant = p;
        cp.vocab_from = vocab_from;
        cp.force = p->force;
        cp.no_checksums = p->no_checksums;
        cp.command_line = p->command_line;
        cp.cancel = p->cancel;
        tm_convert_result *r = NULL;
        tm_status s = tm_convert_gguf(in, in_path, out, &cp, &r, err);
        if (s) return s;
        *res = r->quant; /* the result of the quantizer, as tm_gguf_quantize gives it */
        r->quant = NULL;
        tm_convert_result_free(r);
        return TM_OK;
    }
    if (vocab_from) {
        tm_err_clear(err);
        err->code = TM_E_INVALID_ARG;
        snprintf(err->msg, sizeof err->msg, "--vocab-from: %s is not an LLM checkpoint convert knows (a GGUF, or no "
                 "config.json of a LLaMA/Mistral model): there is nothing to convert", in_path);
        return TM_E_INVALID_ARG;
    }
    if (tm_file_format(in) != TM_FMT_GGUF && !g_cli.quiet)
        fprintf(stderr, "tensormorph: warning: %s: not an LLM checkpoint directory convert knows (a directory with the "
                "config.json of a LLaMA/Mistral model): tensor names are kept as they are, and llama.cpp will not load %s as a model (docs/convert.md)\n",
                in_path, out);
    return tm_gguf_quantize(in, out, p, res, err);
}

/* The JSON types of a GGUF recipe's members (manifests write all of them; "rules" and
** "default_type" are what the file type implies, recorded, not read). 0 or EXIT_INPUT. */
static int gguf_recipe_check(json_t *r, const char *path) {
    int rc = 0, v;
    int64_t id;
    json_t *im = json_object_get(r, "importance_matrix"), *ft = json_object_get(r, "file_type");
    if ((rc = cli_recipe_bool(r, "pure", path, &v)) || (rc = cli_recipe_bool(r, "leave_output_tensor", path, &v)) ||
        (rc = cli_recipe_bool(r, "strict", path, &v)) || (rc = cli_recipe_bool(r, "tensor_types_exact", path, &v)) || (rc = cli_recipe_int(r, "file_type_id", path, 0, 1 << 20, &id)) ||
        (rc = cli_recipe_record(r, "rules", JSON_STRING, path)) || (rc = cli_recipe_record(r, "default_type", JSON_STRING, path)))
        return rc;
    if (ft && !json_is_string(ft)) {
        fprintf(stderr, "tensormorph: recipe %s: \"file_type\" must be a string (Q4_K_M, ...)\n", path);
        return EXIT_INPUT;
    }
    json_t *ish = json_is_object(im) ? json_object_get(im, "sha256") : NULL;
    if (im && !json_is_null(im) && (!(json_is_object(im) && json_is_string(json_object_get(im, "file"))) ||
                                    (ish && (!json_is_string(ish) || strlen(json_string_value(ish)) != 64)))) {
        fprintf(stderr, "tensormorph: recipe %s: \"importance_matrix\": null (none) or an object with \"file\" (the "
                "imatrix path, as --imatrix; the manifest records it so) and optionally \"sha256\" (64 hex digits)\n", path);
        return EXIT_INPUT;
    }
    static const char *const tkeys[] = {"output_tensor_type", "token_embedding_type"};
    for (int k = 0; k < 2; k++) {
        json_t *t = json_object_get(r, tkeys[k]);
        if (t && (!json_is_string(t) || tm_ggml_type_from_name(json_string_value(t)) < 0)) {
            fprintf(stderr, "tensormorph: recipe %s: \"%s\" must be a ggml type name\n", path, tkeys[k]);
            return EXIT_INPUT;
        }
    }
    json_t *tt = json_object_get(r, "tensor_types");
    for (size_t i = 0; tt && i < (json_is_array(tt) ? json_array_size(tt) : 1); i++) {
        json_t *e = json_is_array(tt) ? json_array_get(tt, i) : NULL;
        static const char *const keys[] = {"pattern", "type", "comment", NULL};
        if (!json_is_object(e) || !json_is_string(json_object_get(e, "pattern")) ||
            !json_is_string(json_object_get(e, "type"))) {
            fprintf(stderr, "tensormorph: recipe %s: \"tensor_types\" must be an array of {\"pattern\", \"type\"}\n", path);
            return EXIT_INPUT;
        }
        if (!cli_recipe_only_keys(e, keys, "tensor_types", path)) return EXIT_INPUT;
    }
    return 0;
}

/* ---- the GGUF form of the one quantize driver (quantize.h) ---- */

/* The form's context: the job's parameters first (gguf_totals and gguf_print read ctx as them),
** then what quantize_any needs to route an LLM checkpoint through convert. */
typedef struct gguf_ctx {
    tm_gguf_quantize_params p;
    const char *in_path, *vocab_from;
} gguf_ctx;

static tm_status gguf_run(void *ctx, tm_file *in, const char *out, void **res, tm_err *err) {
    const gguf_ctx *c = ctx;
    return quantize_any(in, c->in_path, out, &c->p, c->vocab_from, (tm_gguf_quantize_result **)res, err);
}
static void gguf_totals(const void *ctx, const void *vres, cli_qtotals *t) {
    const tm_gguf_quantize_result *res = vres;
    snprintf(t->what, sizeof t->what, "tensors to GGUF %s", tm_gguf_ftype_name(((const tm_gguf_quantize_params *)ctx)->ftype));
    CLI_QTOTALS_OF(t, res);
}
static void gguf_free(void *res) { tm_gguf_quantize_result_free(res); }

static const tm_imatrix *g_imx; /* the run's importance matrix, for gguf_warn */
static const char *g_imx_arg;

/* One stderr line for the tensors whose imatrix_use is `use`: every name with -v, else the count
** and the first few. */
static void imx_notice(const tm_gguf_quantize_result *res, int use, const char *what) {
    int64_t n = 0;
    for (int64_t i = 0; i < res->n; i++) n += res->tensors[i].imatrix_use == use;
    if (!n) return;
    enum { FIRST = 3 };
    fprintf(stderr, "tensormorph: importance matrix %s: %lld tensor%s", g_imx_arg, (long long)n, n == 1 ? "" : "s");
    fprintf(stderr, " %s:", what);
    int64_t k = 0;
    for (int64_t i = 0; i < res->n; i++) {
        const tm_gguf_quantize_tensor *t = &res->tensors[i];
        if (t->imatrix_use != use) continue;
        if (!g_cli.verbose && k == FIRST) {
            fprintf(stderr, " ... (-v lists all)");
            break;
        }
        fprintf(stderr, "%s %s", k ? "," : "", t->name);
        k++;
    }
    fputc('\n', stderr);
}

/* The entries ggml's searches get no sane weights from (tm_imatrix_odd_entry), before the run:
** one line each for negative and all-zero entries, every name with -v, else the first few. */
static void odd_entries_warning(const tm_imatrix *m, const char *arg) {
    static const char *const why[3] = {NULL,
        "hold negative values (an imatrix holds mean squares, never negative: used as they are, as llama-quantize; "
        "llama-quantize aborts on them in its IQ1-IQ3 searches)",
        "are all zero (used as they are, as llama-quantize: their blocks may get NaN scales, which llama-quantize "
        "and tensormorph refuse)"};
    for (int kind = 1; kind <= 2; kind++) {
        int64_t n = 0, k = 0;
        for (int64_t i = 0; i < m->n; i++) n += tm_imatrix_odd_entry(&m->e[i]) == kind;
        if (!n) continue;
        fprintf(stderr, "tensormorph: warning: importance matrix %s: %lld entr%s %s:", arg, (long long)n,
                n == 1 ? "y" : "ies", why[kind]);
        for (int64_t i = 0; i < m->n; i++) {
            if (tm_imatrix_odd_entry(&m->e[i]) != kind) continue;
            if (!g_cli.verbose && k == 3) {
                fprintf(stderr, " ... (-v lists all)");
                break;
            }
            fprintf(stderr, "%s %s", k++ ? "," : "", m->e[i].name);
        }
        fputc('\n', stderr);
    }
}

static void gguf_warn(const void *vres, const char *out) {
    const tm_gguf_quantize_result *res = vres;
    if (g_imx && g_imx->n > 0) { /* llama-quantize: "did not find weights for X" per tensor */
        imx_notice(res, TM_GGUF_IMX_NO_ENTRY, "of a type that takes weights had no entry and were quantized without");
        imx_notice(res, TM_GGUF_IMX_FILTERED, "had their entry dropped by --include-weights/--exclude-weights and were "
                   "quantized without weights");
        imx_notice(res, TM_GGUF_IMX_BAD_SIZE, "(token_embd) had an entry of another size and were quantized without weights");
        if (res->n_imx_weighted == 0 && res->n_imx_unweighted > 0) {
            const char *tn = NULL;
            for (int64_t i = 0; !tn && i < res->n; i++)
                if (res->tensors[i].imatrix_use == TM_GGUF_IMX_NO_ENTRY) tn = res->tensors[i].name;
            fprintf(stderr, "tensormorph: warning: importance matrix %s matched no tensor: its entries are named like "
                    "'%s', the tensors like '%s' (a matrix of another model, or of Hugging Face names rather than "
                    "llama.cpp's): nothing was weighted\n", g_imx_arg, g_imx->e[0].name, tn ? tn : "?");
        }
    }
    for (int64_t i = 0; i < res->n; i++) /* written under --allow-long-names */
        if (strlen(res->tensors[i].name) >= TM_GGUF_MAX_NAME)
            fprintf(stderr, "tensormorph: warning: %s: tensor '%s': its name is %zu bytes; llama.cpp refuses "
                    "tensor names of %d bytes or more (GGML_MAX_NAME)\n", out, res->tensors[i].name,
                    strlen(res->tensors[i].name), TM_GGUF_MAX_NAME);
}

static void gguf_print(const void *ctx, const void *vres, const char *in_path, const char *out, int top) {
    (void)ctx;
    const tm_gguf_quantize_result *res = vres;
    printf("%-36s %-7s %-7s %9s %11s  %s\n", "tensor", "from", "type", "SQNR dB", "RMSE", "why");
    /* --top rows: the quantized tensors, lowest SQNR first, then those copied */
    int64_t *order = calloc((size_t)res->n + 1, sizeof *order), no = 0;
    for (int64_t i = 0; order && i < res->n; i++) order[i] = i;
    g_sort = res;
    if (order) qsort(order, (size_t)res->n, sizeof *order, cmp_rows);
    for (int64_t k = 0; order && k < res->n && (top < 0 || k < top); k++, no++) {
        const tm_gguf_quantize_tensor *t = &res->tensors[order[k]];
        const tm_ggml_type_info *a1 = tm_ggml_type_info_get(t->src_type);
        const tm_ggml_type_info *a2 = tm_ggml_type_info_get(t->out_type);
        if (t->quantized)
            printf("%-36s %-7s %-7s %9.2f %11.4g  %s\n", t->name, a1 ? a1->name : "?",
                   a2 ? a2->name : "?", t->sqnr_db, t->rmse, t->reason);
        else
            printf("%-36s %-7s %-7s %9s %11s  %s\n", t->name, a1 ? a1->name : "?",
                   a2 ? a2->name : "?", "-", "-", t->reason);
    }
    if (no < res->n) printf("... %" PRId64 " more (--top all lists every tensor; the manifest has them all)\n", res->n - no);
    free(order);
    printf("Manifest: %s\n", res->manifest_path);
}

static const cli_qform gguf_form = {gguf_run, gguf_totals, gguf_warn, NULL, gguf_print, gguf_free};

int cmd_quantize_gguf(const cli_cmd *cmd, cli_args *a) {
    const char *out = cli_get(a, "output");
    const char *in_path = a->pos[0];
    for (size_t i = 0; i < sizeof ct_only / sizeof ct_only[0]; i++)
        if (cli_has(a, ct_only[i]))
            return cli_usage_error(cmd, "--%s does not apply to GGUF output (OUT ends in .gguf)", ct_only[i]);
    const char *tv = cli_get(a, "type");
    json_t *recipe = NULL, *rtt = NULL;
    const char *rpath = cli_get(a, "recipe");
    if (rpath) { /* docs/recipe.md "GGUF": the manifest's recipe object */
        static const char *const keys[] = {"file_type", "file_type_id", "default_type", "rules", "pure",
                                           "leave_output_tensor", "strict", "tensor_types", "tensor_types_exact", "importance_matrix",
                                           "output_tensor_type", "token_embedding_type", NULL};
        int lrc = cli_recipe_load(rpath, "gguf", keys, &recipe);
        if (!lrc) lrc = gguf_recipe_check(recipe, rpath);
        if (lrc) { json_decref(recipe); return lrc; }
        json_t *ft = json_object_get(recipe, "file_type");
        if (!tv && ft) tv = json_string_value(ft);
        if (!cli_has(a, "tensor-type")) rtt = json_object_get(recipe, "tensor_types");
    }
    if (!tv) json_decref(recipe);
    if (!tv) return cli_usage_error(cmd, "GGUF output needs --type (a llama-quantize file type: Q4_K_M, Q8_0, IQ2_XS, ...)");
    int top;
    int trc = cli_parse_top(cmd, a, &top);
    if (trc) return trc;
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    p.ftype = tm_gguf_ftype_from_name(tv);
    if (p.ftype < 0 && !cli_get(a, "type")) {
        fprintf(stderr, "tensormorph: recipe %s: \"file_type\" '%s' is not a GGUF file type\n", rpath, tv);
        json_decref(recipe);
        return EXIT_INPUT;
    }
    if (p.ftype < 0) json_decref(recipe); /* tv is the flag's */
    if (p.ftype < 0)
        return cli_usage_error(cmd, "--type: '%s' is not a GGUF file type (llama-quantize's: Q4_0 Q4_1 Q5_0 Q5_1 IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M TQ1_0 TQ2_0 Q2_K Q2_K_S IQ3_XXS IQ3_S IQ3_M Q3_K IQ3_XS Q3_K_S Q3_K_M Q3_K_L IQ4_NL IQ4_XS Q4_K Q4_K_S Q4_K_M Q5_K Q5_K_S Q5_K_M Q6_K Q8_0 F16 BF16 F32 COPY)", tv);
    int n_tt = rtt ? (int)json_array_size(rtt) : cli_n(a, "tensor-type");
    const char **pats = calloc((size_t)n_tt + 1, sizeof *pats);
    int *types = calloc((size_t)n_tt + 1, sizeof *types);
    char **bufs = calloc((size_t)n_tt + 1, sizeof *bufs);
    int rc = 0;
    tm_imatrix *imx = NULL;
    char **dropped = NULL;
    int64_t n_dropped = 0;
    tm_gguf_kvlist *ovr = NULL;
    if (!pats || !types || !bufs) {
        fprintf(stderr, "tensormorph: out of memory\n");
        rc = EXIT_INTERNAL;
        goto done;
    }
    for (int i = 0; rtt && i < n_tt; i++) {
        json_t *e = json_array_get(rtt, i);
        pats[i] = json_string_value(json_object_get(e, "pattern"));
        types[i] = tm_ggml_type_from_name(json_string_value(json_object_get(e, "type")));
        if (!tm_gq_writable(types[i])) types[i] = -1;
        if (types[i] < 0) {
            fprintf(stderr, "tensormorph: recipe %s: tensor_types[%d]: unknown ggml type\n", rpath, i);
            rc = EXIT_INPUT;
            goto done;
        }
    }
    for (int i = 0; !rtt && i < n_tt; i++) {
        const char *v = cli_get_i(a, "tensor-type", i);
        const char *eq = strrchr(v, '=');
        if (!eq || eq == v) {
            rc = cli_usage_error(cmd, "--tensor-type '%s': expected REGEX=TYPE", v);
            goto done;
        }
        bufs[i] = strndup(v, (size_t)(eq - v));
        pats[i] = bufs[i];
        types[i] = tm_ggml_type_from_name(eq + 1);
        if (!tm_gq_writable(types[i])) types[i] = -1;
        if (!bufs[i] || types[i] < 0) {
            rc = cli_usage_error(cmd, "--tensor-type '%s': unknown ggml type '%s'", v, eq + 1);
            goto done;
        }
    }
    p.tt_patterns = pats;
    p.tt_types = types;
    p.n_tt = n_tt;
    rc = cli_quantize_kernel_top(cmd, a, &p.kernels, NULL);
    if (rc) goto done;
    p.pure = cli_has(a, "pure");
    p.leave_output_tensor = cli_has(a, "leave-output-tensor");
    p.strict = cli_has(a, "strict");
    p.tt_exact = cli_has(a, "tensor-type-exact");
    if (recipe) { /* types checked by gguf_recipe_check; the flags add to them */
        p.pure |= json_is_true(json_object_get(recipe, "pure"));
        p.leave_output_tensor |= json_is_true(json_object_get(recipe, "leave_output_tensor"));
        p.strict |= json_is_true(json_object_get(recipe, "strict"));
        p.tt_exact |= json_is_true(json_object_get(recipe, "tensor_types_exact"));
        json_t *id = json_object_get(recipe, "file_type_id");
        if (id && !cli_get(a, "type") && json_integer_value(id) != p.ftype) {
            fprintf(stderr, "tensormorph: recipe %s: \"file_type_id\" %lld is not %s's id %d\n", rpath,
                    (long long)json_integer_value(id), tm_gguf_ftype_name(p.ftype), p.ftype);
            rc = EXIT_INPUT;
            goto done;
        }
    }
    /* llama-quantize's options */
    if ((rc = parse_type_opt(cmd, a, "output-tensor-type",
                             recipe ? json_string_value(json_object_get(recipe, "output_tensor_type")) : NULL,
                             &p.output_tensor_type)) ||
        (rc = parse_type_opt(cmd, a, "token-embedding-type",
                             recipe ? json_string_value(json_object_get(recipe, "token_embedding_type")) : NULL,
                             &p.token_embedding_type)))
        goto done;
    const char *imx_path = cli_get(a, "imatrix");
    if (!imx_path && recipe) /* the manifest's record of the matrix (relative to where the run is) */
        imx_path = json_string_value(json_object_get(json_object_get(recipe, "importance_matrix"), "file"));
    p.allow_requantize = cli_has(a, "allow-requantize");
    p.allow_empty = cli_has(a, "allow-empty");
    if (cli_has(a, "include-weights") && cli_has(a, "exclude-weights")) {
        rc = cli_usage_error(cmd, "--include-weights and --exclude-weights cannot be used together");
        goto done;
    }
    if ((cli_has(a, "include-weights") || cli_has(a, "exclude-weights")) && !imx_path) {
        rc = cli_usage_error(cmd, "--include-weights / --exclude-weights select entries of --imatrix FILE: give one");
        goto done;
    }
    if (imx_path && !*imx_path) {
        rc = cli_usage_error(cmd, "--imatrix: the file name is empty");
        goto done;
    }
    if (imx_path) {
        tm_err e;
        /* llama-quantize's order: read, filter (--exclude/--include-weights), then refuse a
        ** non-finite value in an entry that was kept */
        tm_status s = tm_imatrix_load_unchecked(imx_path, &imx, &e);
        if (s) {
            rc = cli_fail(s, &e);
            goto done;
        }
        int ni = cli_n(a, "include-weights"), ne = cli_n(a, "exclude-weights");
        const int64_t n_read = imx->n;
        const char **inc = calloc((size_t)ni + 1, sizeof *inc), **exc = calloc((size_t)ne + 1, sizeof *exc);
        for (int i = 0; inc && i < ni; i++) inc[i] = cli_get_i(a, "include-weights", i);
        for (int i = 0; exc && i < ne; i++) exc[i] = cli_get_i(a, "exclude-weights", i);
        /* the names the filters drop, for the "excluded" notices */
        dropped = calloc((size_t)n_read + 1, sizeof *dropped);
        for (int64_t i = 0; dropped && i < n_read; i++) dropped[i] = strdup(imx->e[i].name);
        if (inc && exc) tm_imatrix_filter(imx, exc, ne, inc, ni);
        for (int64_t i = 0; dropped && i < n_read; i++)
            if (dropped[i] && tm_imatrix_find(imx, dropped[i])) {
                free(dropped[i]);
                dropped[i] = NULL;
            }
        int64_t nd = 0;
        for (int64_t i = 0; dropped && i < n_read; i++)
            if (dropped[i]) dropped[nd++] = dropped[i];
        n_dropped = nd;
        p.imatrix_dropped = (const char *const *)dropped;
        p.n_imatrix_dropped = n_dropped;
        free(inc);
        free(exc);
        if ((s = tm_imatrix_check_finite(imx, &e))) {
            rc = cli_fail(s, &e);
            goto done;
        }
        /* a recipe's record of the matrix: its content must be the one the recipe was made with */
        const char *rsha = recipe ? json_string_value(json_object_get(json_object_get(recipe, "importance_matrix"), "sha256")) : NULL;
        if (rsha && strcmp(rsha, imx->sha256) != 0) {
            if (!cli_get(a, "imatrix")) {
                fprintf(stderr, "tensormorph: recipe %s: importance matrix %s: imatrix differs from the recipe's (sha256 "
                        "%.12s..., the recipe's %.12s...): give the matrix it was made with, or --imatrix FILE to choose "
                        "another\n", rpath, imx_path, imx->sha256, rsha);
                rc = EXIT_INPUT;
                goto done;
            }
            if (!g_cli.quiet)
                fprintf(stderr, "tensormorph: warning: --imatrix %s: another content than recipe %s's importance matrix "
                        "(sha256 %.12s..., the recipe's %.12s...)\n", imx_path, rpath, imx->sha256, rsha);
        }
        p.imatrix_n_read = n_read;
        if (!g_cli.quiet) odd_entries_warning(imx, imx_path);
        if (imx->n == 0 && !g_cli.quiet)
            fprintf(stderr, "tensormorph: warning: %s: --%s left 0 of its %lld entries: every tensor is quantized "
                    "without weights (llama-quantize drops an empty importance matrix so)\n", imx_path,
                    ni ? "include-weights" : "exclude-weights", (long long)n_read);
        p.imatrix = imx;
        p.imatrix_arg = imx_path;
        g_imx = imx;
        g_imx_arg = imx_path;
        if (!g_cli.quiet)
            fprintf(stderr, "tensormorph: importance matrix %s: %lld entries computed on %d chunks%s%s%s\n", p.imatrix_arg,
                    (long long)imx->n, imx->chunks, imx->dataset ? " (dataset '" : "", imx->dataset ? imx->dataset : "",
                    imx->dataset ? "')" : "");
    }
    if (cli_has(a, "override-kv")) {
        if (!(ovr = tm_gguf_kvlist_new())) {
            rc = EXIT_INTERNAL;
            goto done;
        }
        for (int i = 0; i < cli_n(a, "override-kv"); i++)
            if ((rc = parse_override(cmd, cli_get_i(a, "override-kv", i), ovr))) goto done;
        p.kv_overrides = ovr;
    }
    CLI_QUANTIZE_COMMON(p, a);
    if (cli_quantize_shard(cmd, a, &p.shard_index, &p.shard_count)) {
        rc = 2;
        goto done;
    }
    const char *mss = cli_get(a, "max-shard-size");
    if (mss && !(p.max_shard_bytes = cli_parse_size(mss))) {
        rc = cli_usage_error(cmd, "--max-shard-size: cannot parse '%s'", mss);
        goto done;
    }
    p.allow_long_names = cli_has(a, "allow-long-names");
    p.keep_split = cli_has(a, "keep-split");
    if (p.keep_split && mss) {
        rc = cli_usage_error(cmd, "--keep-split keeps the input's split files; --max-shard-size makes new ones: give one of them");
        goto done;
    }
    p.n_threads = g_cli.threads;
    p.progress = cli_progress_cb;
    gguf_ctx ctx = {p, in_path, cli_get(a, "vocab-from")};
    rc = cli_quantize_run(&gguf_form, &ctx, in_path, out, top);
done:
    g_imx = NULL;
    for (int64_t i = 0; i < n_dropped; i++) free(dropped[i]);
    free(dropped);
    tm_imatrix_free(imx);
    tm_gguf_kvlist_free(ovr);
    json_decref(recipe);
    for (int i = 0; bufs && i < n_tt; i++) free(bufs[i]);
    free(bufs);
    free(pats);
    free(types);
    return rc;
}
