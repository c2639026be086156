/* test_cli_reports.c: what the commands print (issue 12 items 11-13): one vocabulary of flags
** across commands (aliases accepted, listed in help and docs/cli.md), help texts that say what
** each command does, --top honoured everywhere, what quantize left dense by the user's choice
** listed first, ONNX progress in weights, compat grouping identical rows, and inspect counting
** tied .pt storage once. Real models from ../shared (skipped with the reason when absent; fails
** with TM_REQUIRE_SHARED=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_tmp[64];

static const char *model(const char *rel) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/models/%s", tmv_shared_dir(), rel);
    return buf[k];
}

/* number of lines of s that start with prefix */
static int count_lines(const char *s, const char *prefix) {
    int n = 0;
    size_t lp = strlen(prefix);
    for (const char *p = s; p && *p;) {
        if (!strncmp(p, prefix, lp)) n++;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return n;
}

/* ---- item 11: one vocabulary, help texts, --top ---------------------------------------------- */

static const char *const k_cmds[] = {"inspect", "quantize", "qdiff", "scalar", "diff", "demo", "heatmap",
                                     "calibrate", "serve", "graph", "compat", "evidence", "gate", "sensitivity", "version"};
#define N_CMDS (sizeof k_cmds / sizeof k_cmds[0])

/* `tensormorph CMD --help` (malloc'd) */
static char *help_of(const char *cmd) {
    char *o = NULL;
    int rc = tmt_run(&o, "%s %s --help", tmt_bin(), cmd);
    if (rc != 0 || !o) fail_msg("%s --help: exit %d", cmd, rc);
    char *h = strdup(o);
    free(o);
    return h;
}

/* Every command's help says what it does: usage, the one-line summary and a paragraph of
** details before the option list; and the texts the issue found wrong now say it right. */
static void test_help_texts(void **state) {
    (void)state;
    char *top = NULL;
    assert_int_equal(tmt_run(&top, "%s --help", tmt_bin()), 0);
    for (size_t i = 0; i < N_CMDS; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %-10s ", k_cmds[i]);
        assert_non_null(strstr(top, line)); /* the list covers the command table */
        char *h = help_of(k_cmds[i]);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: tensormorph %s", k_cmds[i]);
        assert_true(!strncmp(h, usage, strlen(usage)));
        /* usage, blank, summary, blank, details: at least 40 characters of prose */
        const char *sum = strstr(h, "\n\n");
        assert_non_null(sum);
        const char *det = strstr(sum + 2, "\n\n");
        assert_non_null(det);
        const char *opts = strstr(det + 2, "\n\n");
        if (!opts) opts = det + strlen(det);
        if (opts - det < 40) fail_msg("%s --help has no paragraph saying what it does", k_cmds[i]);
        free(h);
    }
    free(top);
    char *h = help_of("qdiff");
    assert_non_null(strstr(h, "ggml block types")); /* the exception docs/qdiff.md gives */
    assert_non_null(strstr(h, "median SQNR of the tensors quantized with the same scheme"));
    assert_non_null(strstr(h, "default 10"));
    free(h);
    h = help_of("inspect");
    assert_null(strstr(h, "PATH is a .safetensors file"));
    for (const char *const *x = (const char *const[]){".gguf", ".onnx", ".pt", ".npy", ".safetensors", NULL}; *x; x++)
        assert_non_null(strstr(h, *x));
    free(h);
    h = help_of("compat"); /* -t is --type everywhere: compat's target is --target, -t its old spelling */
    assert_null(strstr(h, "-t, --target"));
    assert_non_null(strstr(h, "(old spelling: -t)"));
    free(h);
    h = help_of("serve");
    assert_non_null(strstr(h, "    --target TARGET"));
    assert_non_null(strstr(h, "(old spelling: --release-target)"));
    free(h);
    h = help_of("quantize");
    assert_non_null(strstr(h, "N or all (default 10, as qdiff)"));
    free(h);
}

/* docs/cli.md names every option that two or more commands share and every old spelling. */
static void test_docs_cli_vocabulary(void **state) {
    (void)state;
    const char *src = getenv("TM_SRC");
    char path[600];
    snprintf(path, sizeof path, "%s/docs/cli.md", src ? src : "..");
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot open %s", path);
    static char doc[1 << 16];
    size_t nd = fread(doc, 1, sizeof doc - 1, fp);
    doc[nd] = '\0';
    fclose(fp);
    char names[400][40];
    int cnt[400] = {0}, n = 0, n_alias = 0;
    for (size_t i = 0; i < N_CMDS; i++) {
        char *h = help_of(k_cmds[i]);
        const char *common = strstr(h, "\ncommon options:");
        for (const char *p = strstr(h, "\noptions:"); p && (!common || p < common); p = strchr(p + 1, '\n')) {
            const char *d = strstr(p, "--");
            const char *eol = strchr(p + 1, '\n');
            if (!d || (eol && d > eol) || (common && d > common)) continue;
            char nm[40];
            size_t k = 0;
            d += 2;
            while (k < sizeof nm - 1 && ((*d >= 'a' && *d <= 'z') || *d == '-')) nm[k++] = *d++;
            nm[k] = '\0';
            int j = 0;
            while (j < n && strcmp(names[j], nm)) j++;
            if (j == n && n < 400) snprintf(names[n++], sizeof names[0], "%s", nm);
            if (j < 400) cnt[j]++;
        }
        for (const char *p = strstr(h, "(old spelling: "); p; p = strstr(p + 1, "(old spelling: ")) {
            char al[40];
            size_t k = 0;
            for (const char *q = p + 15; *q && *q != ')' && *q != ',' && k < sizeof al - 1;) al[k++] = *q++;
            al[k] = '\0';
            char want[48];
            snprintf(want, sizeof want, "`%s", al);
            if (!strstr(doc, want)) fail_msg("docs/cli.md does not list %s's old spelling %s", k_cmds[i], al);
            n_alias++;
        }
        free(h);
    }
    assert_int_equal(n_alias, 2);
    int shared = 0;
    for (int j = 0; j < n; j++) {
        if (cnt[j] < 2) continue;
        shared++;
        char want[48] = "--";
        memcpy(want + 2, names[j], sizeof names[j]); /* NUL-terminated within its 40 bytes */
        if (!strstr(doc, want)) fail_msg("docs/cli.md does not list --%s (used by %d commands)", names[j], cnt[j]);
    }
    assert_true(shared >= 10);
}

/* rows of a text table: lines that start with one of the prefixes */
static int count_rows(const char *s, const char *const *prefixes) {
    int n = 0;
    for (int k = 0; prefixes[k]; k++) n += count_lines(s, prefixes[k]);
    return n;
}

static void test_top_everywhere(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *st = model("safetensors/stories260K-f32"), *q4 = model("gguf/stories260K-Q4_K_M.gguf");
    static const char *const st_names[] = {"model.", NULL}, *const gg_names[] = {"blk.", "token_embd", NULL};
    /* an LLM checkpoint goes to GGUF through convert (llama.cpp names), its tokenizer from the GGUF */
    static const char *const cv_names[] = {"blk.", "token_embd", "output_norm", NULL};
    const char *vocab = model("gguf/stories260K-F32.gguf");
    char *o = NULL;
    /* quantize to GGUF: --top was ignored */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s/t3.gguf -t Q4_K_M --top 3 --no-checksums --vocab-from %s", tmt_bin(), st, g_tmp, vocab), 0);
    assert_int_equal(count_rows(o, cv_names), 3);
    assert_non_null(strstr(o, "... 44 more"));
    /* the three shown are the lowest SQNR of the run */
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s/tall.gguf -t Q4_K_M --top all --no-checksums --vocab-from %s", tmt_bin(), st, g_tmp, vocab), 0);
    assert_int_equal(count_rows(o, cv_names), 47);
    assert_null(strstr(o, "more (--top all"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s/tdef.gguf -t Q4_K_M --no-checksums --vocab-from %s", tmt_bin(), st, g_tmp, vocab), 0);
    assert_int_equal(count_rows(o, cv_names), 10);
    free(o);
    /* the GGUF bytes do not depend on --top */
    assert_int_equal(tmt_run(&o, "cmp %s/t3.gguf %s/tall.gguf && cmp %s/t3.gguf %s/tdef.gguf", g_tmp, g_tmp, g_tmp, g_tmp), 0);
    free(o);
    /* qdiff: the same default (10) as quantize, 'all' for every row */
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s", tmt_bin(), st, q4), 0);
    assert_int_equal(count_rows(o, gg_names), 10);
    assert_non_null(strstr(o, "... 21 more (--top all"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s --top all", tmt_bin(), st, q4), 0);
    assert_int_equal(count_rows(o, gg_names), 31);
    free(o);
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s --top 2", tmt_bin(), st, q4), 0);
    assert_int_equal(count_rows(o, gg_names), 2);
    free(o);
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s --top many 2>&1", tmt_bin(), st, q4), 2);
    free(o);
    /* compressed-tensors output: --top all lists every quantized tensor */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s/ctall --top all --no-checksums", tmt_bin(), st, g_tmp), 0);
    const char *diff = strstr(o, "Quantization Diff");
    assert_non_null(diff);
    assert_int_equal(count_rows(diff, st_names), 35);
    free(o);
}

/* The SQNR flag's median is in the header, per scheme when there are several. */
static void test_qdiff_scheme_medians(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *st = model("safetensors/stories260K-f32"), *q4 = model("gguf/stories260K-Q4_K_M.gguf");
    json_t *d = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), st, q4);
    json_t *ts = json_object_get(d, "tensors"), *t, *sch = json_object_get(d, "schemes");
    assert_int_equal(json_array_size(sch), 2);
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s", tmt_bin(), st, q4), 0);
    assert_non_null(strstr(o, "median SQNR by scheme: "));
    size_t k;
    json_t *s;
    json_array_foreach(sch, k, s) {
        const char *name = json_string_value(json_object_get(s, "scheme"));
        double v[64];
        int m = 0;
        size_t i;
        json_array_foreach(ts, i, t)
            if (!strcmp(json_string_value(json_object_get(t, "scheme")), name) && m < 64) v[m++] = tmt_num(t, "sqnr_db");
        for (int a = 1; a < m; a++) /* insertion sort */
            for (int b = a; b > 0 && v[b - 1] > v[b]; b--) { double x = v[b]; v[b] = v[b - 1]; v[b - 1] = x; }
        double med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
        assert_int_equal(json_integer_value(json_object_get(s, "n")), m);
        assert_true(fabs(tmt_num(s, "median_sqnr_db") - med) < 1e-9);
        char want[160];
        snprintf(want, sizeof want, "%s %.2f dB (%d)", name, med, m);
        if (!strstr(o, want)) fail_msg("header lacks '%s':\n%s", want, o);
    }
    assert_int_equal(json_integer_value(json_object_get(json_array_get(sch, 0), "n")) +
                         json_integer_value(json_object_get(json_array_get(sch, 1), "n")), 31);
    free(o);
    json_decref(d);
    /* a file against itself: every tensor exact, the medians are +inf (not "nan") */
    d = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), q4, q4);
    assert_string_equal(json_string_value(json_object_get(d, "median_sqnr_db")), "inf");
    json_array_foreach(json_object_get(d, "schemes"), k, s)
        assert_string_equal(json_string_value(json_object_get(s, "median_sqnr_db")), "inf");
    assert_int_equal(json_integer_value(json_object_get(d, "n_flagged")), 0);
    json_decref(d);
    o = NULL;
    assert_int_equal(tmt_run(&o, "%s qdiff %s %s", tmt_bin(), q4, q4), 0);
    assert_non_null(strstr(o, "0 flagged, median SQNR inf dB"));
    assert_null(strstr(o, "nan"));
    free(o);
}

/* Old spellings still work and mean the same; -t in compat says it is the old one. */
static void test_aliases(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *q4 = model("gguf/stories260K-Q4_K_M.gguf");
    char *o = NULL;
    json_t *a = tmt_run_json(0, "%s compat %s -t llamacpp-cpu --json 2>%s/note", tmt_bin(), q4, g_tmp);
    json_t *b = tmt_run_json(0, "%s compat %s --target llamacpp-cpu --json", tmt_bin(), q4);
    assert_string_equal(json_string_value(json_object_get(a, "target")), "llamacpp-cpu");
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    assert_int_equal(tmt_run(&o, "cat %s/note", g_tmp), 0);
    assert_non_null(strstr(o, "-t is the old spelling of --target"));
    free(o);
    /* serve: --target and its old spelling parse alike (the path error comes after parsing) */
    assert_int_equal(tmt_run(&o, "%s serve %s/missing --target x 2>&1", tmt_bin(), g_tmp), 4);
    assert_null(strstr(o, "unknown option"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s serve %s/missing --release-target x 2>&1", tmt_bin(), g_tmp), 4);
    assert_null(strstr(o, "unknown option"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s serve %s/missing --bogus x 2>&1", tmt_bin(), g_tmp), 2);
    free(o);
}

/* ---- item 12: what quantize left dense by the options given ----------------------------------- */

static void test_kept_dense_by_choice(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char *o = NULL;
    int rc = tmt_run(&o, "%s quantize %s -o %s/g32 -g group:32 --no-checksums", tmt_bin(),
                     model("safetensors/stories260K-f32"), g_tmp);
    assert_int_equal(rc, 0);
    /* counted apart from what the defaults keep dense */
    assert_non_null(strstr(o, "kept dense: 5 by the options given, 12 by default"));
    /* all five down_proj listed, before any norm */
    const char *first_norm = strstr(o, "1-D tensor (norm or bias)");
    assert_non_null(first_norm);
    for (int l = 0; l < 5; l++) {
        char nm[80];
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        const char *p = strstr(o, nm);
        assert_non_null(p);
        assert_true(p < first_norm);
        assert_non_null(strstr(p, "group_size 32 does not divide its 172 columns"));
    }
    assert_null(strstr(o, "and 5 more"));
    assert_int_equal(count_lines(o, "  kept dense: "), 17);
    free(o);
}

/* ---- item 13: ONNX progress, compat rows, tied .pt storage ------------------------------------- */

static void test_onnx_progress_counts_weights(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char *o = NULL;
    int rc = tmt_run(&o, "%s quantize %s -o %s/vad.onnx --no-checksums --progress 2>&1 >/dev/null", tmt_bin(),
                     model("onnx/npm/silero_vad/silero_vad_v5.onnx"), g_tmp);
    assert_int_equal(rc, 0);
    assert_null(strstr(o, "0.0 / 0.0 MB"));
    assert_non_null(strstr(o, "(12 / 12 weights)"));
    free(o);
    json_t *d = tmt_run_json(0, "%s inspect %s/vad.onnx --json", tmt_bin(), g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "n_quantized")), 12);
    json_decref(d);
}

static void test_compat_groups_rows(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *q4 = model("gguf/stories260K-Q4_K_M.gguf");
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s compat %s --target tensorrt:sm80", tmt_bin(), q4), 1);
    /* 3 Q8_0 and 28 Q5_0 tensors with one reason each: two rows with their counts */
    assert_int_equal(count_lines(o, "  unsupported "), 2);
    assert_non_null(strstr(o, "28 items: blk.0.attn_k.weight, blk.0.attn_output.weight"));
    assert_non_null(strstr(o, "3 items: token_embd.weight"));
    assert_non_null(strstr(o, "31 unsupported"));
    free(o);
    json_t *d = tmt_run_json(1, "%s compat %s --target tensorrt:sm80 --json", tmt_bin(), q4);
    assert_int_equal(json_array_size(json_object_get(d, "items")), 31); /* --json keeps every row */
    json_decref(d);
    /* rows that differ stay apart */
    assert_int_equal(tmt_run(&o, "%s compat %s --target llamacpp-cpu --all", tmt_bin(), q4), 0);
    assert_int_equal(count_lines(o, "  native "), 2);
    free(o);
}

static void test_inspect_pt_tied_storage(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    /* llama2.c's checkpoint ties output.weight to tok_embeddings.weight (one storage) */
    json_t *d = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), model("torch/stories260K_llama2c_ckpt.pt"));
    json_t *st = tmt_run_json(0, "%s inspect %s --json --no-tensors", tmt_bin(), model("safetensors/stories260K-f32"));
    /* the same parameters and bytes as the untied safetensors export of the same model */
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")), 260032);
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")),
                     json_integer_value(json_object_get(st, "n_parameters")));
    assert_int_equal(json_integer_value(json_object_get(d, "tensor_bytes")), 4 * 260032);
    assert_int_equal(json_integer_value(json_object_get(d, "n_tied")), 1);
    json_t *t = tmt_find_named(json_object_get(d, "tensors"), "model.output.weight");
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "tied_to")), "model.tok_embeddings.weight");
    assert_null(json_object_get(tmt_find_named(json_object_get(d, "tensors"), "model.tok_embeddings.weight"), "tied_to"));
    json_decref(d);
    json_decref(st);
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s inspect %s", tmt_bin(), model("torch/stories260K_llama2c_ckpt.pt")), 0);
    assert_non_null(strstr(o, "parameters:  260032\n"));
    assert_non_null(strstr(o, "(tied: model.tok_embeddings.weight)"));
    free(o);
    /* an untied file reports no tie */
    d = tmt_run_json(0, "%s inspect %s --json --no-tensors", tmt_bin(), model("torch/stories260K_state_dict.pt"));
    assert_int_equal(json_integer_value(json_object_get(d, "n_tied")), 0);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_texts),
        cmocka_unit_test(test_docs_cli_vocabulary),
        cmocka_unit_test(test_top_everywhere),
        cmocka_unit_test(test_qdiff_scheme_medians),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_kept_dense_by_choice),
        cmocka_unit_test(test_onnx_progress_counts_weights),
        cmocka_unit_test(test_compat_groups_rows),
        cmocka_unit_test(test_inspect_pt_tied_storage),
    };
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_reports_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char *o = NULL;
    tmt_run(&o, "rm -rf %s", g_tmp);
    free(o);
    return rc;
}
