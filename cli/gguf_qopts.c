/* gguf_qopts.c: the GGUF quantizer's options of quantize and convert, parsed once (gguf_qopts.h). */
#include "gguf_qopts.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const cli_opt k_opts[] = {CLI_OPTS_GGUF_QUANT(""), CLI_OPT_END};

const char *cli_gguf_qopts_given(const cli_args *a) {
    for (const cli_opt *o = k_opts; o->name; o++)
        if (cli_has(a, o->name)) return o->name;
    return NULL;
}

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
** llama-quantize's parse_ggml_type); rv: the recipe's (checked by the caller). 0 or the usage
** exit code. */
static int parse_type_opt(const cli_cmd *cmd, const cli_args *a, const char *opt, const char *rv, int *out) {
    const char *v = cli_get(a, opt);
    if (!v) v = rv;
    *out = TM_GGUF_TYPE_RULES;
    if (!v) return 0;
    int t = tm_ggml_type_from_name(v);
    if (t < 0) return cli_usage_error(cmd, "--%s: invalid ggml_type '%s'", opt, v);
    *out = t;
    return 0;
}

/* --tensor-type RE=TYPE (each given), else the recipe's "tensor_types" array rtt, into o. */
static int parse_tensor_types(const cli_cmd *cmd, const cli_args *a, json_t *rtt, const char *rpath,
                              cli_gguf_qopts *o) {
    int n = rtt ? (int)json_array_size(rtt) : cli_n(a, "tensor-type");
    o->pats = calloc((size_t)n + 1, sizeof *o->pats);
    o->types = calloc((size_t)n + 1, sizeof *o->types);
    o->bufs = calloc((size_t)n + 1, sizeof *o->bufs);
    if (!o->pats || !o->types || !o->bufs) {
        fprintf(stderr, "tensormorph: out of memory\n");
        return EXIT_INTERNAL;
    }
    o->n_tt = n;
    for (int i = 0; rtt && i < n; i++) {
        json_t *e = json_array_get(rtt, i);
        o->pats[i] = json_string_value(json_object_get(e, "pattern"));
        o->types[i] = tm_ggml_type_from_name(json_string_value(json_object_get(e, "type")));
        if (!tm_gq_writable(o->types[i])) {
            fprintf(stderr, "tensormorph: recipe %s: tensor_types[%d]: unknown ggml type\n", rpath, i);
            return EXIT_INPUT;
        }
    }
    for (int i = 0; !rtt && i < n; i++) {
        const char *v = cli_get_i(a, "tensor-type", i);
        const char *eq = strrchr(v, '=');
        if (!eq || eq == v) return cli_usage_error(cmd, "--tensor-type '%s': expected REGEX=TYPE", v);
        o->bufs[i] = strndup(v, (size_t)(eq - v));
        o->pats[i] = o->bufs[i];
        o->types[i] = tm_ggml_type_from_name(eq + 1);
        if (!o->bufs[i] || !tm_gq_writable(o->types[i]))
            return cli_usage_error(cmd, "--tensor-type '%s': unknown ggml type '%s'", v, eq + 1);
    }
    return 0;
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

/* --imatrix FILE (else the recipe's record of it, relative to where the run is), filtered by
** --include-weights / --exclude-weights, into p; llama-quantize's order: read, filter, then refuse
** a non-finite value in an entry that was kept. The recipe's sha256 of the matrix, when it has
** one, must be this file's (else exit 3, or a warning when --imatrix chose the file). */
static int parse_imatrix(const cli_cmd *cmd, const cli_args *a, json_t *recipe, const char *rpath,
                         tm_gguf_quantize_params *p, cli_gguf_qopts *o) {
    const char *path = cli_get(a, "imatrix");
    if (!path && recipe) path = json_string_value(json_object_get(json_object_get(recipe, "importance_matrix"), "file"));
    if (cli_has(a, "include-weights") && cli_has(a, "exclude-weights"))
        return cli_usage_error(cmd, "--include-weights and --exclude-weights cannot be used together");
    /* llama-quantize filters an importance matrix it does not have: nothing (said here) */
    if ((cli_has(a, "include-weights") || cli_has(a, "exclude-weights")) && !path && !g_cli.quiet)
        fprintf(stderr, "tensormorph: warning: --include-weights / --exclude-weights select entries of --imatrix FILE, "
                "and there is none: they change nothing\n");
    if (!path) return 0;
    if (!*path) return cli_usage_error(cmd, "--imatrix: the file name is empty");
    tm_err e;
    tm_status s = tm_imatrix_load_unchecked(path, &o->imx, &e);
    if (s) return cli_fail(s, &e);
    tm_imatrix *imx = o->imx;
    int ni = cli_n(a, "include-weights"), ne = cli_n(a, "exclude-weights");
    const int64_t n_read = imx->n;
    const char **inc = calloc((size_t)ni + 1, sizeof *inc), **exc = calloc((size_t)ne + 1, sizeof *exc);
    /* the names the filters drop, for the "excluded" notices */
    o->dropped = calloc((size_t)n_read + 1, sizeof *o->dropped);
    int rc = inc && exc && o->dropped ? 0 : EXIT_INTERNAL;
    for (int i = 0; !rc && i < ni; i++) inc[i] = cli_get_i(a, "include-weights", i);
    for (int i = 0; !rc && i < ne; i++) exc[i] = cli_get_i(a, "exclude-weights", i);
    for (int64_t i = 0; !rc && i < n_read; i++)
        if (!(o->dropped[i] = strdup(imx->e[i].name))) rc = EXIT_INTERNAL;
    o->n_dropped = o->dropped ? n_read : 0; /* owned so far: every copy */
    if (!rc) tm_imatrix_filter(imx, exc, ne, inc, ni);
    free(inc);
    free(exc);
    if (rc) return rc;
    int64_t nd = 0;
    for (int64_t i = 0; i < n_read; i++) {
        if (tm_imatrix_find(imx, o->dropped[i])) free(o->dropped[i]);
        else o->dropped[nd++] = o->dropped[i];
    }
    o->n_dropped = nd;
    p->imatrix_dropped = (const char *const *)o->dropped;
    p->n_imatrix_dropped = nd;
    if ((s = tm_imatrix_check_finite(imx, &e))) return cli_fail(s, &e);
    /* a recipe's record of the matrix: its content must be the one the recipe was made with */
    const char *rsha = recipe ? json_string_value(json_object_get(json_object_get(recipe, "importance_matrix"), "sha256")) : NULL;
    if (rsha && strcmp(rsha, imx->sha256) != 0) {
        if (!cli_get(a, "imatrix")) {
            fprintf(stderr, "tensormorph: recipe %s: importance matrix %s: imatrix differs from the recipe's (sha256 "
                    "%.12s..., the recipe's %.12s...): give the matrix it was made with, or --imatrix FILE to choose "
                    "another\n", rpath, path, imx->sha256, rsha);
            return EXIT_INPUT;
        }
        if (!g_cli.quiet)
            fprintf(stderr, "tensormorph: warning: --imatrix %s: another content than recipe %s's importance matrix "
                    "(sha256 %.12s..., the recipe's %.12s...)\n", path, rpath, imx->sha256, rsha);
    }
    p->imatrix_n_read = n_read;
    if (!g_cli.quiet) odd_entries_warning(imx, path);
    if (imx->n == 0 && !g_cli.quiet)
        fprintf(stderr, "tensormorph: warning: %s: --%s left 0 of its %lld entries: every tensor is quantized "
                "without weights (llama-quantize drops an empty importance matrix so)\n", path,
                ni ? "include-weights" : "exclude-weights", (long long)n_read);
    p->imatrix = imx;
    p->imatrix_arg = path;
    if (!g_cli.quiet)
        fprintf(stderr, "tensormorph: importance matrix %s: %lld entries computed on %d chunks%s%s%s\n", path,
                (long long)imx->n, imx->chunks, imx->dataset ? " (dataset '" : "", imx->dataset ? imx->dataset : "",
                imx->dataset ? "')" : "");
    return 0;
}

int cli_gguf_qopts_parse(const cli_cmd *cmd, const cli_args *a, json_t *recipe, const char *rpath,
                         tm_gguf_quantize_params *p, cli_gguf_qopts *o) {
    memset(o, 0, sizeof *o);
    json_t *rtt = recipe && !cli_has(a, "tensor-type") ? json_object_get(recipe, "tensor_types") : NULL;
    int rc = parse_tensor_types(cmd, a, rtt, rpath, o);
    if (rc) return rc;
    p->tt_patterns = o->pats;
    p->tt_types = o->types;
    p->n_tt = o->n_tt;
    p->pure = cli_has(a, "pure");
    p->leave_output_tensor = cli_has(a, "leave-output-tensor");
    p->tt_exact = cli_has(a, "tensor-type-exact");
    if (recipe) { /* the flags add to the recipe's */
        p->pure |= json_is_true(json_object_get(recipe, "pure"));
        p->leave_output_tensor |= json_is_true(json_object_get(recipe, "leave_output_tensor"));
        p->tt_exact |= json_is_true(json_object_get(recipe, "tensor_types_exact"));
    }
    if ((rc = parse_type_opt(cmd, a, "output-tensor-type",
                             recipe ? json_string_value(json_object_get(recipe, "output_tensor_type")) : NULL,
                             &p->output_tensor_type)) ||
        (rc = parse_type_opt(cmd, a, "token-embedding-type",
                             recipe ? json_string_value(json_object_get(recipe, "token_embedding_type")) : NULL,
                             &p->token_embedding_type)) ||
        (rc = parse_imatrix(cmd, a, recipe, rpath, p, o)))
        return rc;
    if (cli_has(a, "override-kv")) {
        if (!(o->ovr = tm_gguf_kvlist_new())) return EXIT_INTERNAL;
        for (int i = 0; i < cli_n(a, "override-kv"); i++)
            if ((rc = parse_override(cmd, cli_get_i(a, "override-kv", i), o->ovr))) return rc;
        p->kv_overrides = o->ovr;
    }
    return 0;
}

void cli_gguf_qopts_free(cli_gguf_qopts *o) {
    tm_imatrix_free(o->imx);
    for (int64_t i = 0; i < o->n_dropped; i++) free(o->dropped[i]);
    free(o->dropped);
    tm_gguf_kvlist_free(o->ovr);
    for (int i = 0; o->bufs && i < o->n_tt; i++) free(o->bufs[i]);
    free(o->bufs);
    free(o->pats);
    free(o->types);
    memset(o, 0, sizeof *o);
}
