/* cmd_quantize_onnx.c: `tensormorph quantize model.onnx -o OUT.onnx`: the ONNX output form of
** the quantize command (cmd_quantize.c dispatches here when OUT ends in ".onnx"); weight-only
** DequantizeLinear quantization, docs/onnx-quantize.md. */
#include "cli.h"
#include "quantize.h"
#include "recipe.h"
#include "tensormorph/onnx_quant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cmd_quantize_onnx(const cli_cmd *cmd, cli_args *a);

/* Options of the other output forms that mean nothing for ONNX output. */
static const char *const not_onnx[] = {"quantize-embeddings", "max-shard-size", "shard",
                                       "strict", "pure", "leave-output-tensor", "tensor-type", "tensor-type-exact", "imatrix", "include-weights",
                                       "exclude-weights", "output-tensor-type", "token-embedding-type",
                                       "allow-requantize", "override-kv", "keep-split",
                                       "allow-long-names", "vocab-from"};

/* tm_granularity_parse's text without an axis (each weight's consumer gives it) or blocks;
** the axis is recorded as 0. */
static int parse_gran_onnx(const char *s, tm_qgran *g) {
    if (strchr(s, ':') != strrchr(s, ':') || !strncmp(s, "channel:", 8) || tm_granularity_parse(s, g) ||
        g->kind == TM_GRAN_BLOCK || (g->kind == TM_GRAN_GROUP && g->group_size < 2))
        return -1;
    g->axis = 0;
    return 0;
}

/* tm_onnx_quantize reports weights quantized of weights to quantize */
static void onnx_progress(void *ud, const char *phase, uint64_t done, uint64_t total) {
    (void)ud;
    cli_progress_count(phase, done, total, "weights");
}

/* --recipe FILE for ONNX output (docs/recipe.md "ONNX"): the manifest's recipe object. Its
** default scheme must be one this output holds; "targets" (the fixed weight set) and "opset"
** (what the job chose) are records. Returns 0 or EXIT_INPUT / EXIT_IO. */
static int onnx_recipe(const char *path, tm_onnx_quantize_params *p, json_t **recipe) {
    static const char *const keys[] = {"default", "targets", "min_elems", "include", "exclude", "opset", NULL};
    int rc = cli_recipe_load(path, "onnx", keys, recipe);
    if (rc) return rc;
    json_t *def = json_object_get(*recipe, "default");
    const char *bad = def && !json_is_object(def) ? "must be an object" : def ? cli_recipe_scheme(def, &p->spec) : NULL;
    const tm_qspec *q = &p->spec;
    if (!bad && q->code_dtype != TM_I8 && q->code_dtype != TM_U8 && q->code_dtype != TM_I4)
        bad = "\"type\" must be int8, uint8 or int4 for ONNX output";
    if (!bad && (q->gran.kind == TM_GRAN_BLOCK || (q->gran.kind == TM_GRAN_GROUP && q->gran.group_size < 2)))
        bad = "\"granularity\" must be tensor, channel or group:N with N >= 2 for ONNX output";
    if (!bad && q->scale_dtype != TM_F32) bad = "\"scale_dtype\" must be f32 for ONNX output";
    if (bad) {
        fprintf(stderr, "tensormorph: recipe %s: \"default\": %s\n", path, bad);
        return EXIT_INPUT;
    }
    p->spec.gran.axis = 0; /* each weight's consumer gives it */
    if ((rc = cli_recipe_int(*recipe, "min_elems", path, 0, INT64_MAX, &p->min_elems)) ||
        (rc = cli_recipe_record(*recipe, "targets", JSON_STRING, path)) ||
        (rc = cli_recipe_record(*recipe, "opset", JSON_OBJECT, path)))
        return rc;
    return 0;
}

/* ---- the ONNX form of the one quantize driver (quantize.h) ---- */

static tm_status onnx_run(void *ctx, tm_file *in, const char *out, void **res, tm_err *err) {
    return tm_onnx_quantize(in, out, ctx, (tm_onnx_quantize_result **)res, err);
}
static void onnx_totals(const void *ctx, const void *vres, cli_qtotals *t) {
    const tm_onnx_quantize_result *res = vres;
    (void)ctx;
    snprintf(t->what, sizeof t->what, "weights to ONNX");
    CLI_QTOTALS_OF(t, res);
}
static void onnx_free(void *res) { tm_onnx_quantize_result_free(res); }

/* --json: the opset strategy beside the manifest */
static void onnx_json(const void *vres, json_t *d) {
    const tm_onnx_quantize_result *res = vres;
    json_t *os = json_object();
    json_object_set_new(os, "strategy", json_string(tm_onnx_opset_strategy_name(res->strategy)));
    json_object_set_new(os, "from", json_integer(res->opset_from));
    json_object_set_new(os, "to", json_integer(res->opset_to));
    json_object_set_new(os, "needed", json_integer(res->opset_needed));
    json_object_set_new(os, "reason", json_string(res->strategy_reason));
    json_object_set_new(d, "opset", os);
}

static void onnx_print(const void *ctx, const void *vres, const char *in_path, const char *out, int top) {
    const tm_onnx_quantize_result *res = vres;
    (void)ctx;
    printf("opset: %s (%s)\n", tm_onnx_opset_strategy_name(res->strategy), res->strategy_reason);
    int shown = 0;
    for (int64_t i = 0; i < res->n; i++) {
        const tm_onnx_quantize_tensor *w = &res->weights[i];
        if (w->quantized && !*w->reason) continue;
        if (shown++ < 12) printf("  %s %-40s %s\n", w->quantized ? "note:" : "kept:", w->name, w->reason);
    }
    if (shown > 12) printf("  ... and %d more (see the manifest)\n", shown - 12);
    printf("\n%-44s %-8s %8s %8s %8s %8s\n", "weight", "scheme", "SQNR dB", "RMSE LSB", "max LSB", "clipped");
    int64_t k = 0;
    for (int64_t i = 0; i < res->n && (top < 0 || k < top); i++) {
        const tm_onnx_quantize_tensor *w = &res->weights[i];
        if (!w->quantized) continue;
        k++;
        printf("%-44s %-8s %8.2f %8.3f %8.3f %7.3f%%\n", w->name, tm_granularity_kind_name(w->gran.kind), w->e.sqnr_db, w->e.rmse_lsb,
               w->e.max_err_lsb, 100 * w->e.clipped_fraction);
    }
    if (top >= 0 && res->n_quantized > top)
        printf("... %" PRId64 " more (tensormorph qdiff %s %s --top N)\n", res->n_quantized - top, in_path, out);
    printf("Manifest: %s\n", res->manifest_path);
}

static const cli_qform onnx_form = {onnx_run, onnx_totals, NULL, onnx_json, onnx_print, onnx_free};

/* The command with the recipe object (when --recipe) left in *recipe for the caller to free. */
static int quantize_onnx(const cli_cmd *cmd, cli_args *a, json_t **recipe_out) {
    const char *out = cli_get(a, "output");
    const char *in_path = a->pos[0];
    for (size_t i = 0; i < sizeof not_onnx / sizeof not_onnx[0]; i++)
        if (cli_has(a, not_onnx[i]))
            return cli_usage_error(cmd, "--%s does not apply to ONNX output (OUT ends in .onnx)", not_onnx[i]);
    if (cli_has(a, "symmetric") && cli_has(a, "asymmetric"))
        return cli_usage_error(cmd, "--symmetric and --asymmetric exclude each other");
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    const char *v, *rpath = cli_get(a, "recipe");
    int rc = rpath ? onnx_recipe(rpath, &p, recipe_out) : 0;
    json_t *recipe = *recipe_out;
    if (rc) return rc;
    if ((v = cli_get(a, "scale-dtype")) && strcasecmp(v, "f32"))
        return cli_usage_error(cmd, "--scale-dtype: ONNX output keeps float32 scales (DequantizeLinear before opset 19 takes no other)");
    if ((v = cli_get(a, "type"))) {
        if (!strcasecmp(v, "int8")) p.spec.code_dtype = TM_I8;
        else if (!strcasecmp(v, "uint8")) p.spec.code_dtype = TM_U8;
        else if (!strcasecmp(v, "int4")) p.spec.code_dtype = TM_I4;
        else return cli_usage_error(cmd, "--type: '%s' cannot be written to ONNX output (int8, uint8, int4)", v);
    }
    if ((v = cli_get(a, "granularity")) && parse_gran_onnx(v, &p.spec.gran))
        return cli_usage_error(cmd, "--granularity: '%s' cannot be written to ONNX output (tensor | channel | group:N with N >= 2; "
                               "the channel axis comes from each weight's consumer)", v);
    if (p.spec.code_dtype == TM_I4 && !cli_get(a, "granularity") && !json_object_get(json_object_get(recipe, "default"), "granularity"))
        return cli_usage_error(cmd, "--type int4 for ONNX output needs -g group:N (e.g. group:32), or -g channel / -g tensor");
    if (cli_has(a, "asymmetric")) p.spec.symmetric = 0;
    if ((v = cli_get(a, "observer")) && cli_parse_observer(v, &p.spec.observer))
        return cli_usage_error(cmd, "--observer: unknown '%s' (minmax ema_minmax histogram percentile:P with 0 < P <= 100, mse, entropy)", v);
    if ((v = cli_get(a, "convention"))) {
        if (!strcmp(v, "onnx")) p.spec.convention = TM_CONV_ONNX;
        else if (!strcmp(v, "torch")) p.spec.convention = TM_CONV_TORCH;
        else return cli_usage_error(cmd, "--convention must be onnx or torch");
    }
    int top;
    int krc = cli_quantize_kernel_top(cmd, a, &p.kernels, &top);
    if (krc) return krc;
    if (cli_has(a, "allow-nonfinite")) p.spec.allow_nonfinite = 1; /* over the recipe's */
    CLI_QUANTIZE_COMMON(p, a);
    p.allow_empty = cli_has(a, "allow-empty");
    p.progress = onnx_progress; /* the job counts weights, not bytes */
    const char **inc = cli_get_all(a, "include", &p.n_include);
    const char **exc = cli_get_all(a, "exclude", &p.n_exclude);
    if (!inc || !exc) {
        free(inc);
        free(exc);
        fprintf(stderr, "tensormorph: out of memory\n");
        return EXIT_INTERNAL;
    }
    if (recipe && ((!cli_has(a, "include") && (rc = cli_recipe_strings(recipe, "include", rpath, &inc, &p.n_include))) ||
                   (!cli_has(a, "exclude") && (rc = cli_recipe_strings(recipe, "exclude", rpath, &exc, &p.n_exclude)))))
        goto done;
    p.include = inc;
    p.exclude = exc;
    rc = cli_quantize_run(&onnx_form, &p, in_path, out, top);
done:
    free(inc);
    free(exc);
    return rc;
}

int cmd_quantize_onnx(const cli_cmd *cmd, cli_args *a) {
    json_t *recipe = NULL;
    int rc = quantize_onnx(cmd, a, &recipe);
    json_decref(recipe);
    return rc;
}
