/* cmd_quantize.c: `tensormorph quantize IN -o OUT`: the main job. */
#include "cli.h"
#include "gguf_qopts.h"
#include "quantize.h"
#include "recipe.h"

#include <errno.h>
#include <regex.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const cli_opt opts_quantize[] = {
    CLI_OPT_OUTPUT("OUT", "output directory (compressed-tensors safetensors checkpoint); OUT ending in .gguf writes one GGUF file, in .onnx one ONNX model (ONNX input)"),
    CLI_OPT_TYPE("int8 (default), int4, fp8_e4m3; uint8 uint4 fp8_e5m2 are refused for this output; GGUF: a llama-quantize file type (Q4_K_M, Q2_K_S, IQ2_XS, Q8_0, F16, COPY, ...: docs/gguf-quantize.md)"),
    CLI_OPT_GRANULARITY("tensor | channel[:AXIS] (default: weights per output channel, axis 0) | group:N[:AXIS] | block:HxW"),
    CLI_OPT_SYMMETRIC("symmetric codes, zero point 0 (default)"),
    CLI_OPT_ASYMMETRIC,
    CLI_OPT_OBSERVER("minmax (default) | ema_minmax[:C] | histogram | percentile:P | mse | entropy"),
    CLI_OPT_CONVENTION("onnx (default: ONNX Runtime's scale/zero-point formulas) | torch"),
    {"include", 0, "RE", 1, "quantize only tensors whose name matches RE (POSIX extended)"},
    {"exclude", 0, "RE", 1, "never quantize tensors whose name matches RE"},
    {"recipe", 0, "FILE", 0, "JSON recipe: targets, ignore, per-target scheme (docs/recipe.md)"},
    {"scale-dtype", 0, "D", 0, "f32 (default), f16 or bf16; a scale overflowing f16 is an error"},
    {"quantize-embeddings", 0, NULL, 0, "also quantize embeddings and lm_head (kept dense by default)"},
    {"allow-nonfinite", 0, NULL, 0, "accept NaN/Inf: left out of ranges, NaN stored as the zero point, Inf clamped"},
    CLI_OPT_NO_CHECKSUMS,
    {"max-shard-size", 0, "SIZE", 0, "split the safetensors output into shards (e.g. 5GB, 500MiB); GGUF: llama.cpp gguf-split files OUT-00001-of-0000N.gguf"},
    {"shard", 0, "I/N", 0, "write only part I of N (0 <= I < N; $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT): the directory OUT.part-I-of-N, for `tensormorph merge OUT` (docs/scale-out.md); compressed-tensors and GGUF output; parts of another recipe present: refused, with --force started over"},
    {"strict", 0, NULL, 0, "fail on a tensor the output layout cannot hold instead of keeping it dense"},
    {"allow-empty", 0, NULL, 0, "write OUT even when no tensor gets quantized (else exit 2/3 saying why)"},
    CLI_OPT_FORCE,
    {"kernel", 0, "K", 0, "auto (default), ref (the scalar reference kernels), avx2 or avx512: the kernel set of the whole job, every output form (also TM_FORCE_KERNEL)"},
    CLI_OPT_TOP("rows of the summary to print, flagged and worst first: N or all (default 10, as qdiff); also for GGUF and ONNX output"),
    CLI_OPTS_GGUF_QUANT("GGUF: "),
    CLI_OPT_VOCAB_FROM("GGUF: the tokenizer (tokenizer.* keys) of an LLM checkpoint converted first (docs/convert.md)"),
    {"allow-long-names", 0, NULL, 0, "GGUF: write tensor names of 64 bytes or more, which llama.cpp refuses (default: exit 3 naming the tensor)"},
    {"allow-requantize", 0, NULL, 0, "GGUF: dequantize already-quantized tensors and quantize them again (quality loss)"},
    {"keep-split", 0, NULL, 0, "GGUF: keep the input's shards and tensor order (a single-file input gives OUT-00001-of-00001.gguf, as llama-quantize)"},
    CLI_OPT_END,
};

const char details_quantize[] =
    "IN is any checkpoint tensormorph opens. OUT is a directory: the safetensors file(s),\n"
    "config.json with a compressed-tensors quantization_config (the layout vLLM and\n"
    "llm-compressor load) and tensormorph-manifest.json. The directory is built beside OUT and\n"
    "renamed into place at the end, so an interrupted run leaves nothing at OUT.\n"
    "By default only 2-D '.weight' tensors are quantized; 1-D tensors, embeddings and lm_head\n"
    "stay dense, each listed with its reason (those left dense by the options given, e.g. a\n"
    "group size that does not divide the columns or --exclude, first and counted apart).\n"
    "int8/int4 are written pack-quantized (codes + 2^(b-1) packed into int32, weight_scale,\n"
    "weight_shape, packed weight_zero_point when asymmetric);\n"
    "fp8_e4m3 is naive-quantized (weight F8_E4M3 + weight_scale).\n"
    "Ends with the Quantization Diff summary: error in units of each tensor's own scale (LSB).\n"
    "OUT ending in .gguf writes one GGUF file instead, byte-identical to llama-quantize: --type is\n"
    "a llama-quantize file type (Q4_K_M, ...) with its per-tensor rules, unless --pure;\n"
    "OUT.gguf.manifest.json goes beside it (docs/gguf-quantize.md). --imatrix FILE (llama-imatrix's\n"
    "legacy or GGUF file) weights the K-quant/IQ searches as llama-quantize --imatrix does; with\n"
    "llama-quantize's --include/--exclude-weights, --output-tensor-type, --token-embedding-type,\n"
    "--allow-requantize, --override-kv, --keep-split. An LLM checkpoint (config.json of\n"
    "a LLaMA/Mistral model) is converted first, as `convert --type` does (llama.cpp names; tokenizer\n"
    "from --vocab-from or its tokenizer.model, else exit 3); any other non-GGUF source keeps its\n"
    "tensor names, with a warning that llama.cpp will not load it as a model (docs/convert.md).\n"
    "IN an ONNX model and OUT ending in .onnx: weight-only DequantizeLinear quantization of the\n"
    "Conv/ConvTranspose/MatMul/Gemm weights (int8 uint8 int4; tensor, channel, group:N),\n"
    "OUT.onnx.manifest.json beside it (docs/onnx-quantize.md).";

static int parse_gran(const char *s, tm_qgran *g) { return tm_granularity_parse(s, g) ? -1 : 0; }

static const tm_ct_quantize_result *g_sort_res;
/* flagged first, then lowest SQNR first */
static int cmp_flag_sqnr(const void *pa, const void *pb) {
    const tm_ct_quantize_tensor *a = &g_sort_res->tensors[*(const int64_t *)pa];
    const tm_ct_quantize_tensor *b = &g_sort_res->tensors[*(const int64_t *)pb];
    if (a->flagged != b->flagged) return b->flagged - a->flagged;
    if (a->e.sqnr_db != b->e.sqnr_db) return a->e.sqnr_db < b->e.sqnr_db ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* What was kept dense: first, every tensor left dense because of the options given (--include,
** --exclude, recipe ignore, a group size that does not divide the columns), up to 100; then
** those the default rules keep dense (norms, biases, embeddings, lm_head), up to 12. */
static void print_kept_dense(const tm_ct_quantize_result *res) {
    int64_t n_choice = 0, n_default = 0;
    for (int64_t i = 0; i < res->n; i++) {
        const tm_ct_quantize_tensor *t = &res->tensors[i];
        if (t->quantized || !strncmp(t->reason, "scale of", 8)) continue;
        if (t->kept_by_choice) n_choice++;
        else n_default++;
    }
    if (!n_choice && !n_default) return;
    printf("kept dense: %" PRId64 " by the options given, %" PRId64 " by default (norms, biases, embeddings, lm_head)\n",
           n_choice, n_default);
    for (int pass = 0; pass < 2; pass++) {
        int64_t cap = pass ? 12 : 100, shown = 0, n = pass ? n_default : n_choice;
        for (int64_t i = 0; i < res->n && shown < cap; i++) {
            const tm_ct_quantize_tensor *t = &res->tensors[i];
            if (t->quantized || !strncmp(t->reason, "scale of", 8) || t->kept_by_choice != !pass) continue;
            printf("  kept dense: %-44s %s\n", t->name, t->reason);
            shown++;
        }
        if (n > cap)
            printf("  ... and %" PRId64 " more kept dense %s (see the manifest)\n", n - cap,
                   pass ? "by default" : "by the options given");
    }
}

int cmd_quantize_gguf(const cli_cmd *cmd, cli_args *a); /* cmd_quantize_gguf.c */
int cmd_quantize_onnx(const cli_cmd *cmd, cli_args *a); /* cmd_quantize_onnx.c */

/* The scheme options given on the command line, applied over *s (they beat a recipe's
** "default"). Returns 0 or the usage exit code. */
static int apply_scheme_flags(const cli_cmd *cmd, cli_args *a, tm_qspec *s) {
    const char *v;
    if ((v = cli_get(a, "type")) && cli_parse_code_type(v, &s->code_dtype))
        return cli_usage_error(cmd, "--type: unknown type '%s' (int8 uint8 int4 uint4 fp8_e4m3 fp8_e5m2)", v);
    if ((v = cli_get(a, "granularity")) && parse_gran(v, &s->gran))
        return cli_usage_error(cmd, "--granularity: cannot parse '%s' (tensor | channel[:AXIS] | group:N[:AXIS] | block:HxW)", v);
    if (cli_has(a, "asymmetric")) s->symmetric = 0;
    if (cli_has(a, "symmetric")) s->symmetric = 1;
    if ((v = cli_get(a, "observer")) && cli_parse_observer(v, &s->observer))
        return cli_usage_error(cmd, "--observer: unknown '%s' (minmax ema_minmax histogram percentile:P with 0 < P <= 100, mse, entropy)", v);
    if ((v = cli_get(a, "convention"))) {
        if (!strcmp(v, "onnx")) s->convention = TM_CONV_ONNX;
        else if (!strcmp(v, "torch")) s->convention = TM_CONV_TORCH;
        else return cli_usage_error(cmd, "--convention must be onnx or torch");
    }
    if ((v = cli_get(a, "scale-dtype")) && cli_parse_scale_dtype(v, &s->scale_dtype))
        return cli_usage_error(cmd, "--scale-dtype must be f32, f16 or bf16");
    if (cli_has(a, "allow-nonfinite")) s->allow_nonfinite = 1;
    return 0;
}

/* One rule of the recipe: an "ignore" entry (a pattern string), or a "targets"/"rules" entry
** ({"pattern", "scheme" over the default, "ignore" as manifests write it}). */
static int add_rule(tm_ct_quantize_params *p, tm_qrule *rules, json_t *e, int is_ignore, const char *where, const char *path) {
    static const char *const target_keys[] = {"pattern", "scheme", "ignore", "comment", NULL};
    json_t *pat = is_ignore ? e : json_object_get(e, "pattern"), *ig = json_object_get(e, "ignore");
    if (!json_is_string(pat)) {
        fprintf(stderr, "tensormorph: recipe %s: %s %s\n", path, where, is_ignore ? "must be a string" : "needs a string \"pattern\"");
        return EXIT_INPUT;
    }
    if (!is_ignore && !cli_recipe_only_keys(e, target_keys, where, path)) return EXIT_INPUT;
    if (ig && !json_is_boolean(ig)) {
        fprintf(stderr, "tensormorph: recipe %s: %s.ignore must be true or false\n", path, where);
        return EXIT_INPUT;
    }
    tm_qrule *r = &rules[p->n_rules++];
    r->pattern = json_string_value(pat);
    r->ignore = is_ignore || json_is_true(ig);
    if (r->ignore) return 0;
    r->has_spec = 1;
    r->spec = p->spec;
    json_t *sch = json_object_get(e, "scheme");
    const char *bad = NULL;
    if (sch && (!json_is_object(sch) || (bad = cli_recipe_scheme(sch, &r->spec)))) {
        fprintf(stderr, "tensormorph: recipe %s: %s.scheme: %s\n", path, where, json_is_object(sch) ? bad : "must be an object");
        return EXIT_INPUT;
    }
    return 0;
}

/* --recipe FILE for the compressed-tensors output (docs/recipe.md) into p; command-line options
** beat the recipe's. *recipe and *rules stay alive for the job. Returns 0 or an exit code. */
static int ct_recipe(const cli_cmd *cmd, cli_args *a, const char *path, tm_ct_quantize_params *p, json_t **recipe,
                     tm_qrule **rules, const char ***inc, const char ***exc) {
    static const char *const top_keys[] = {"default", "ignore", "targets", "rules", "include", "exclude",
                                           "quantize_embeddings", "strict", "max_shard_bytes", "recipe_file",
                                           "recipe", NULL};
    int rc = cli_recipe_load(path, "compressed-tensors", top_keys, recipe);
    if (rc) return rc;
    json_t *r = *recipe, *def = json_object_get(r, "default");
    const char *bad;
    if (def && !json_is_object(def)) {
        fprintf(stderr, "tensormorph: recipe %s: \"default\" must be an object\n", path);
        return EXIT_INPUT;
    }
    if (def && (bad = cli_recipe_scheme(def, &p->spec))) {
        fprintf(stderr, "tensormorph: recipe %s: \"default\": %s\n", path, bad);
        return EXIT_INPUT;
    }
    /* options given on the command line beat the recipe's default */
    if ((rc = apply_scheme_flags(cmd, a, &p->spec))) return rc;
    int64_t shard = (int64_t)p->max_shard_bytes;
    if ((rc = cli_recipe_bool(r, "quantize_embeddings", path, &p->quantize_embeddings)) ||
        (rc = cli_recipe_bool(r, "strict", path, &p->strict)) ||
        (rc = cli_recipe_record(r, "recipe_file", JSON_STRING, path)) ||
        (!cli_get(a, "max-shard-size") && (rc = cli_recipe_int(r, "max_shard_bytes", path, 0, INT64_MAX, &shard))) ||
        (!cli_has(a, "include") && (rc = cli_recipe_strings(r, "include", path, inc, &p->n_include))) ||
        (!cli_has(a, "exclude") && (rc = cli_recipe_strings(r, "exclude", path, exc, &p->n_exclude))))
        return rc;
    p->max_shard_bytes = (uint64_t)shard;
    p->quantize_embeddings |= cli_has(a, "quantize-embeddings");
    p->strict |= cli_has(a, "strict");
    p->include = *inc;
    p->exclude = *exc;
    json_t *targets = json_object_get(r, "targets"), *ignore = json_object_get(r, "ignore");
    json_t *rl = json_object_get(r, "rules");
    if ((targets && !json_is_array(targets)) || (ignore && !json_is_array(ignore)) || (rl && !json_is_array(rl))) {
        fprintf(stderr, "tensormorph: recipe %s: \"targets\", \"ignore\" and \"rules\" must be arrays\n", path);
        return EXIT_INPUT;
    }
    if (rl && (targets || ignore)) {
        fprintf(stderr, "tensormorph: recipe %s: \"rules\" (as manifests write them) excludes \"targets\" and \"ignore\"\n", path);
        return EXIT_INPUT;
    }
    size_t nt = targets ? json_array_size(targets) : 0, ni = ignore ? json_array_size(ignore) : 0;
    size_t nr = rl ? json_array_size(rl) : 0;
    *rules = calloc(nt + ni + nr + 1, sizeof **rules);
    if (!*rules) return EXIT_INTERNAL;
    char where[64];
    for (size_t i = 0; i < ni && !rc; i++) {
        snprintf(where, sizeof where, "ignore[%zu]", i);
        rc = add_rule(p, *rules, json_array_get(ignore, i), 1, where, path);
    }
    for (size_t i = 0; i < nt && !rc; i++) {
        snprintf(where, sizeof where, "targets[%zu]", i);
        rc = add_rule(p, *rules, json_array_get(targets, i), 0, where, path);
    }
    for (size_t i = 0; i < nr && !rc; i++) {
        snprintf(where, sizeof where, "rules[%zu]", i);
        rc = add_rule(p, *rules, json_array_get(rl, i), 0, where, path);
    }
    if (rc) return rc;
    /* check every pattern compiles, naming the recipe */
    for (int64_t k = 0; k < p->n_rules; k++) {
        regex_t re;
        if (regcomp(&re, (*rules)[k].pattern, REG_EXTENDED | REG_NOSUB) != 0) {
            fprintf(stderr, "tensormorph: recipe %s: invalid regular expression '%s'\n", path, (*rules)[k].pattern);
            return EXIT_INPUT;
        }
        regfree(&re);
    }
    p->rules = *rules;
    p->recipe_path = path;
    return 0;
}

/* ---- the compressed-tensors form ---- */

static tm_status ct_run(void *ctx, tm_file *in, const char *out, void **res, tm_err *err) {
    return tm_ct_quantize(in, out, ctx, (tm_ct_quantize_result **)res, err);
}
static void ct_totals(const void *ctx, const void *vres, cli_qtotals *t) {
    const tm_ct_quantize_result *res = vres;
    (void)ctx;
    snprintf(t->what, sizeof t->what, "tensors");
    CLI_QTOTALS_OF(t, res);
}
static void ct_free(void *res) { tm_ct_quantize_result_free(res); }

static void ct_warn(const void *vres, const char *out) {
    const tm_ct_quantize_result *res = vres;
    (void)out;
    for (int64_t k = 0; k < res->n_warnings; k++) fprintf(stderr, "tensormorph: warning: %s\n", res->warnings[k]);
}

static void ct_print(const void *ctx, const void *vres, const char *in_path, const char *out, int top) {
    const tm_ct_quantize_result *res = vres;
    (void)ctx;
    print_kept_dense(res);
    for (int64_t i = 0; i < res->n; i++)
        if (res->tensors[i].n_degenerate > 0)
            printf("  note: %s has %" PRId64 " channel(s)/group(s) with a zero range (constant, e.g. all-zero), given a finite fallback scale\n",
                   res->tensors[i].name, res->tensors[i].n_degenerate);
    printf("\nQuantization Diff (error in units of each tensor's own scale; rounding alone gives RMSE 0.29 LSB, max 0.5 LSB)\n");
    printf("%-44s %8s %8s %8s %8s %8s  %s\n", "tensor", "SQNR dB", "RMSE LSB", "max LSB", "clipped", "worst", "flag");
    /* flagged first, worst SQNR first */
    int64_t *order = calloc((size_t)res->n + 1, sizeof *order);
    int64_t no = 0;
    for (int64_t i = 0; order && i < res->n; i++)
        if (res->tensors[i].quantized) order[no++] = i;
    g_sort_res = res;
    if (order) qsort(order, (size_t)no, sizeof *order, cmp_flag_sqnr);
    for (int64_t k = 0; k < no && (top < 0 || k < top); k++) {
        const tm_ct_quantize_tensor *t = &res->tensors[order[k]];
        printf("%-44s %8.2f %8.3f %8.3f %7.3f%% %8" PRId64 "  %s\n", t->name, t->e.sqnr_db, t->e.rmse_lsb,
               t->e.max_err_lsb, 100 * t->e.clipped_fraction, t->e.worst_group, t->flagged ? t->flag_reason : "");
    }
    if (top >= 0 && no > top) printf("... %" PRId64 " more (tensormorph qdiff %s %s --top N)\n", no - top, in_path, out);
    int64_t nf = 0;
    for (int64_t i = 0; i < res->n; i++) nf += res->tensors[i].flagged;
    printf("%" PRId64 " tensor(s) flagged. Manifest: %s/tensormorph-manifest.json\n", nf, out);
    free(order);
}

static const cli_qform ct_form = {ct_run, ct_totals, ct_warn, NULL, ct_print, ct_free};

int cmd_quantize(const cli_cmd *cmd, cli_args *a) {
    const char *out = cli_get(a, "output");
    if (!out) return cli_usage_error(cmd, "missing -o OUT");
    size_t out_len = strlen(out);
    /* the output form: OUT's suffix names a file form; anything else is a directory */
    static const struct { const char *suffix; int (*run)(const cli_cmd *, cli_args *); } forms[] = {
        {".gguf", cmd_quantize_gguf}, /* cmd_quantize_gguf.c */
        {".onnx", cmd_quantize_onnx}, /* cmd_quantize_onnx.c */
    };
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
        size_t sl = strlen(forms[k].suffix);
        if (out_len > sl && strcmp(out + out_len - sl, forms[k].suffix) == 0) return forms[k].run(cmd, a);
    }
    static const char *const gguf_only[] = {"allow-long-names", "vocab-from", "allow-requantize", "keep-split"};
    const char *given = cli_gguf_qopts_given(a);
    for (size_t k = 0; !given && k < sizeof gguf_only / sizeof gguf_only[0]; k++)
        if (cli_has(a, gguf_only[k])) given = gguf_only[k];
    if (given) return cli_usage_error(cmd, "--%s applies to GGUF output only (OUT ending in .gguf)", given);
    /* "out/" as tab completion writes it names the directory "out" */
    char outbuf[4096];
    if (out_len == 0 || out_len >= sizeof outbuf) return cli_usage_error(cmd, "-o: bad output path '%s'", out);
    memcpy(outbuf, out, out_len + 1);
    while (out_len > 1 && outbuf[out_len - 1] == '/') outbuf[--out_len] = '\0';
    out = outbuf;
    const char *in_path = a->pos[0];
    if (cli_has(a, "symmetric") && cli_has(a, "asymmetric"))
        return cli_usage_error(cmd, "--symmetric and --asymmetric exclude each other");
    tm_ct_quantize_params p = tm_ct_quantize_params_default();
    const char *v;
    int frc = apply_scheme_flags(cmd, a, &p.spec);
    if (frc) return frc;
    if ((v = cli_get(a, "max-shard-size")) && !(p.max_shard_bytes = cli_parse_size(v)))
        return cli_usage_error(cmd, "--max-shard-size: cannot parse '%s'", v);
    if (cli_quantize_shard(cmd, a, &p.shard_index, &p.shard_count)) return 2;
    int top;
    int krc = cli_quantize_kernel_top(cmd, a, &p.kernels, &top);
    if (krc) return krc;
    p.quantize_embeddings = cli_has(a, "quantize-embeddings");
    p.strict = cli_has(a, "strict");
    p.allow_empty = cli_has(a, "allow-empty");
    CLI_QUANTIZE_COMMON(p, a);
    p.n_threads = g_cli.threads;
    p.progress = cli_progress_cb;
    const char **inc = cli_get_all(a, "include", &p.n_include);
    const char **exc = cli_get_all(a, "exclude", &p.n_exclude);
    p.include = inc;
    p.exclude = exc;
    /* recipe */
    json_t *recipe = NULL;
    tm_qrule *rules = NULL;
    char *recipe_text = NULL;
    int rc = 0;
    if ((v = cli_get(a, "recipe"))) {
        rc = ct_recipe(cmd, a, v, &p, &recipe, &rules, &inc, &exc);
        if (rc) goto done;
        recipe_text = json_dumps(recipe, JSON_COMPACT);
        p.recipe_json = recipe_text;
    }
    rc = cli_quantize_run(&ct_form, &p, in_path, out, top);
done:
    free(recipe_text);
    free(rules);
    json_decref(recipe);
    free(inc);
    free(exc);
    return rc;
}
