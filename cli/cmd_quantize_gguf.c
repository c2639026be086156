/* cmd_quantize_gguf.c: `tensormorph quantize IN -o OUT.gguf --type T`: the GGUF output form of
** the quantize command (cmd_quantize.c dispatches here when OUT ends in ".gguf"). */
#include "cli.h"
#include "gguf_qopts.h"
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
    json_t *recipe = NULL;
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
    if (p.ftype < 0) {
        char names[512];
        tm_gguf_ftype_list(names, sizeof names);
        return cli_usage_error(cmd, "--type: '%s' is not a GGUF file type (llama-quantize's: %s)", tv, names);
    }
    cli_gguf_qopts own;
    int rc = cli_gguf_qopts_parse(cmd, a, recipe, rpath, &p, &own);
    if (rc) goto done;
    g_imx = own.imx; /* for gguf_warn's notices */
    g_imx_arg = p.imatrix_arg;
    rc = cli_quantize_kernel_top(cmd, a, &p.kernels, NULL);
    if (rc) goto done;
    p.strict = cli_has(a, "strict");
    if (recipe) { /* types checked by gguf_recipe_check; the flags add to them */
        p.strict |= json_is_true(json_object_get(recipe, "strict"));
        json_t *id = json_object_get(recipe, "file_type_id");
        if (id && !cli_get(a, "type") && json_integer_value(id) != p.ftype) {
            fprintf(stderr, "tensormorph: recipe %s: \"file_type_id\" %lld is not %s's id %d\n", rpath,
                    (long long)json_integer_value(id), tm_gguf_ftype_name(p.ftype), p.ftype);
            rc = EXIT_INPUT;
            goto done;
        }
    }
    p.allow_requantize = cli_has(a, "allow-requantize");
    p.allow_empty = cli_has(a, "allow-empty");
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
    cli_gguf_qopts_free(&own);
    json_decref(recipe);
    return rc;
}
