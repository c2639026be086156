/* test_sensitivity.c: `tensormorph sensitivity` end to end on stories260K-F32.gguf (../shared),
** scored on llama.cpp through node-llama-cpp on models/text/stories260K-eval.txt (ctx 128, 4
** chunks: lean enough for 2 cores).
**   - tm_gguf_quantize_plan gives exactly the types tm_gguf_quantize writes (Q4_K_M, Q2_K), and
**     tt_exact overrides apply where the rules fell back (64-wide rows: K types fall back);
**   - ranking with the GGUF Q2_K ladder: ranks a permutation of 1..5 ordered by kld_mean_only;
**     one block quantized hurts less than all of them, all-but-one less than all; weight SQNR
**     finite; Spearman in [-1, 1];
**   - a budget between the uniform Q2_K and Q4_K_M KLDs is met with fewer bytes than uniform
**     Q4_K_M (the next uniform scheme up); the artifact's own evidence has that KLD, within
**     budget; `quantize --recipe OUT.recipe.json` rebuilds the artifact byte for byte;
**   - --probe 0/2 (with --threads 2) + --probe 1/2 + merge equals one run (timings aside);
**   - bad input: a budget no plan meets (exit 1, met false, the best plan written), a --units
**     pattern matching nothing (exit 2, nothing at OUT), OUT already there (exit 2), merge of a
**     missing probe (exit 3).
** Skips visibly without ../shared (fails when TM_REQUIRE_SHARED=1) and without node-llama-cpp
** (fails when TM_REQUIRE_LLAMA=1). */
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
#include <sys/stat.h>
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/evidence_llm.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/sensitivity.h"
#include "core/jschema.h"
#include "helpers/cli_run.h"
#include "helpers/llama_rt.h"
#include "helpers/vectors.h"

static char g_tmp[256];
static char g_src[1024], g_text[1024];

static int env_is(const char *k) {
    const char *r = getenv(k);
    return r && !strcmp(r, "1");
}

static void skip_or_fail(const char *why, const char *req) {
    if (env_is(req)) {
        fail_msg("%s and %s=1", why, req);
        return;
    }
    printf("SKIP: %s\n", why);
    fflush(stdout);
    skip();
}

static int require_model(void) {
    if (!tmv_require_shared()) return 0;
    if (access(g_src, R_OK) != 0 || access(g_text, R_OK) != 0) {
        skip_or_fail("stories260K-F32.gguf or the eval text not in ../shared", "TM_REQUIRE_SHARED");
        return 0;
    }
    return 1;
}

static int require_llama(void) {
    if (!require_model()) return 0;
    if (!tmt_llama_modules()) { skip(); return 0; }
    return 1;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_test_sens_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    const char *sh = tmv_shared_dir();
    snprintf(g_src, sizeof g_src, "%s/models/gguf/stories260K-F32.gguf", sh ? sh : "/nonexistent");
    snprintf(g_text, sizeof g_text, "%s/models/text/stories260K-eval.txt", sh ? sh : "/nonexistent");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* sensitivity of stories260K-F32 with extra options; expect exit rc; stdout parsed (--json). */
static json_t *sens(int rc, const char *extra) {
    char *out = NULL;
    int got = tmt_run(&out, "'%s' sensitivity '%s' --text '%s' --ctx 128 --chunks 4 %s --json 2>'%s/stderr.txt'", tmt_bin(), g_src,
                      g_text, extra, g_tmp);
    if (got != rc) {
        char p[400];
        snprintf(p, sizeof p, "%s/stderr.txt", g_tmp);
        char *e = tmt_read_file(p);
        print_message("exit %d (want %d): %s\n", got, rc, e ? e : "");
        free(e);
    }
    assert_int_equal(got, rc);
    json_t *d = NULL;
    if (out && out[0] == '{') {
        json_error_t je;
        d = json_loads(out, 0, &je);
        if (!d) print_message("not JSON: %s\n", je.text);
        assert_non_null(d);
        if (rc >= 2) { /* the --json error document */
            assert_non_null(json_object_get(d, "error"));
            json_decref(d);
            free(out);
            return NULL;
        }
        tm_err err;
        tm_status s = tm__jschema_validate_named("sensitivity", d, "sensitivity", &err);
        if (s) print_message("%s\n", err.msg);
        assert_int_equal(s, TM_OK);
    }
    free(out);
    return d;
}

static json_t *uniform(json_t *d, const char *scheme) {
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(d, "uniform"), i, o) if (!strcmp(json_string_value(json_object_get(o, "scheme")), scheme)) return o;
    fail_msg("no uniform %s", scheme);
    return NULL;
}

/* ---- the dry plan and exact overrides (no runtime needed) --------------------------------- */

static void test_plan_matches_quantizer(void **state) {
    (void)state;
    if (!require_model()) return;
    tm_file *f = NULL;
    tm_err err;
    assert_int_equal(tm_open(g_src, NULL, &f, &err), TM_OK);
    const int fts[] = {TM_FTYPE_Q4_K_M, TM_FTYPE_Q2_K};
    for (int k = 0; k < 2; k++) {
        tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
        p.ftype = fts[k];
        p.no_checksums = 1;
        p.n_threads = 1;
        tm_gguf_quantize_tensor *rows = NULL;
        int64_t n = 0;
        assert_int_equal(tm_gguf_quantize_plan(f, &p, &rows, &n, &err), TM_OK);
        char out[400];
        snprintf(out, sizeof out, "%s/plan%d.gguf", g_tmp, k);
        tm_gguf_quantize_result *r = NULL;
        assert_int_equal(tm_gguf_quantize(f, out, &p, &r, &err), TM_OK);
        assert_int_equal(n, r->n);
        for (int64_t i = 0; i < n; i++) {
            assert_string_equal(rows[i].name, r->tensors[i].name);
            assert_int_equal(rows[i].out_type, r->tensors[i].out_type);
            assert_int_equal(rows[i].out_bytes, r->tensors[i].out_bytes);
        }
        tm_gguf_quantize_result_free(r);
        free(rows);
    }
    /* 64-wide rows: Q2_K falls back to IQ4_NL (llama.cpp@c392e509); llama-quantize ignores an override there, tt_exact
    ** applies it */
    const char *pat[] = {"^blk\\.0\\.ffn_up\\.weight$"};
    const int ty[] = {TM_GGML_Q8_0};
    for (int exact = 0; exact < 2; exact++) {
        tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
        p.ftype = TM_FTYPE_Q2_K;
        p.tt_patterns = pat;
        p.tt_types = ty;
        p.n_tt = 1;
        p.tt_exact = exact;
        tm_gguf_quantize_tensor *rows = NULL;
        int64_t n = 0;
        assert_int_equal(tm_gguf_quantize_plan(f, &p, &rows, &n, &err), TM_OK);
        int found = 0;
        for (int64_t i = 0; i < n; i++)
            if (!strcmp(rows[i].name, "blk.0.ffn_up.weight")) {
                found = 1;
                assert_int_equal(rows[i].out_type, exact ? TM_GGML_Q8_0 : TM_GGML_IQ4_NL);
            }
        assert_true(found);
        free(rows);
    }
    tm_close(f);
}

/* synth256 (rows of 256: real K-quant blocks, nothing falls back): the dry plan of Q2_K gives the
** types llama-quantize wrote into ../shared's synth256-Q2_K.gguf, tensor by tensor. */
static void test_plan_synth256_reference(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *sh = tmv_shared_dir();
    char src[1200], ref[1200];
    snprintf(src, sizeof src, "%s/models/gguf/imatrix/synth256-F32.gguf", sh);
    snprintf(ref, sizeof ref, "%s/models/gguf/imatrix/synth256-Q2_K.gguf", sh);
    if (access(src, R_OK) || access(ref, R_OK)) { skip_or_fail("synth256-F32.gguf / synth256-Q2_K.gguf not in ../shared", "TM_REQUIRE_SHARED"); return; }
    tm_file *f = NULL, *r = NULL;
    tm_err err;
    assert_int_equal(tm_open(src, NULL, &f, &err), TM_OK);
    assert_int_equal(tm_open(ref, NULL, &r, &err), TM_OK);
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    p.ftype = TM_FTYPE_Q2_K;
    tm_gguf_quantize_tensor *rows = NULL;
    int64_t n = 0;
    assert_int_equal(tm_gguf_quantize_plan(f, &p, &rows, &n, &err), TM_OK);
    assert_int_equal(n, tm_file_n_tensors(r));
    int n_k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = tm_file_find(r, rows[i].name);
        assert_true(j >= 0);
        const tm_tensor *t = tm_file_tensor(r, j);
        int ref_type = t->quant ? t->quant->ggml_type : TM_GGML_F32;
        if (ref_type != rows[i].out_type) fail_msg("%s: plan %d, llama-quantize %d", rows[i].name, rows[i].out_type, ref_type);
        assert_int_equal(rows[i].out_bytes, t->n_bytes);
        n_k += rows[i].out_type == TM_GGML_Q2_K || rows[i].out_type == TM_GGML_Q3_K || rows[i].out_type == TM_GGML_Q4_K;
    }
    assert_true(n_k >= 10); /* real K blocks: 2 blocks x 7 weights, most of them K types */
    free(rows);
    tm_close(r);
    tm_close(f);
}

/* serve --sensitivity FILE: /api/v1/arch carries each unit's rank, KLD, tensors and planned
** scheme; a --probe part is refused (exit 3). */
static void test_serve_field(void **state) {
    (void)state;
    if (!require_model()) return;
    char p[600], bad[600];
    snprintf(p, sizeof p, "%s/serve.sensitivity.json", g_tmp);
    snprintf(bad, sizeof bad, "%s/part.json", g_tmp);
    const char *doc =
        "{\"schema\": \"tensormorph.sensitivity/1\", \"scheme\": \"Q2_K\", \"unit\": \"layer\", \"spearman_weight_vs_kld\": 0.5,"
        " \"units\": [{\"name\": \"blk.0\", \"rank\": 2, \"kld_mean_only\": 0.01, \"kld_mean_all_but\": 0.05, \"weight_sqnr_db\": 22.5,"
        " \"tensors\": [\"blk.0.attn_q.weight\"]}, {\"name\": \"blk.1\", \"rank\": 1, \"kld_mean_only\": 0.02,"
        " \"kld_mean_all_but\": 0.04, \"weight_sqnr_db\": 22.0, \"tensors\": [\"blk.1.attn_q.weight\"]}],"
        " \"plan\": {\"recipe\": \"x.gguf.recipe.json\", \"met\": true, \"assignments\": {\"blk.0\": \"Q2_K\", \"blk.1\": \"Q4_K_M\"},"
        " \"file_type\": \"Q2_K\", \"tensor_types\": [{\"pattern\": \"^blk\\\\.1\\\\.attn_q\\\\.weight$\", \"type\": \"Q5_0\"}], \"steps\": [{}]},"
        " \"form\": \"gguf\"}";
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(doc, f);
    fclose(f);
    f = fopen(bad, "w");
    assert_non_null(f);
    fputs("{\"schema\": \"tensormorph.sensitivity/1\", \"probe\": {\"i\": 0, \"n\": 2}, \"units\": []}", f);
    fclose(f);
    assert_int_equal(tmt_run(NULL, "'%s' serve '%s' --sensitivity '%s' --port 0 -q 2>/dev/null", tmt_bin(), g_src, bad), 3);
    const char *args[] = {g_src, "--sensitivity", p, NULL};
    int port = 0;
    FILE *in = NULL;
    int pid = tmt_serve_start(args, &port, &in);
    int status = 0;
    json_t *d = tmt_http_json(port, "/api/v1/arch", &status);
    tmt_serve_stop(pid, in);
    assert_int_equal(status, 200);
    json_t *sv = json_object_get(d, "sensitivity");
    assert_non_null(sv);
    assert_string_equal(json_string_value(json_object_get(sv, "recipe")), "x.gguf.recipe.json");
    assert_true(json_is_true(json_object_get(sv, "met")));
    json_t *u1 = json_array_get(json_object_get(sv, "units"), 1);
    assert_string_equal(json_string_value(json_object_get(u1, "name")), "blk.1");
    assert_int_equal(json_integer_value(json_object_get(u1, "rank")), 1);
    assert_string_equal(json_string_value(json_object_get(u1, "scheme")), "Q4_K_M");
    assert_string_equal(json_string_value(json_array_get(json_object_get(u1, "tensors"), 0)), "blk.1.attn_q.weight");
    assert_true(tmt_num(u1, "kld_mean_only") == 0.02);
    /* the plan itself (for "start from this plan"), without its search steps */
    assert_string_equal(json_string_value(json_object_get(sv, "form")), "gguf");
    json_t *pl = json_object_get(sv, "plan");
    assert_string_equal(json_string_value(json_object_get(pl, "file_type")), "Q2_K");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(pl, "tensor_types"), 0), "pattern")), "^blk\\.1\\.attn_q\\.weight$");
    assert_string_equal(json_string_value(json_object_get(json_object_get(pl, "assignments"), "blk.1")), "Q4_K_M");
    assert_null(json_object_get(pl, "steps"));
    json_decref(d);
}

/* ---- ranking, budget, artifact, recipe ----------------------------------------------------- */

static void test_ranking_and_budget(void **state) {
    (void)state;
    if (!require_llama()) return;
    const double budget = 0.03;
    char extra[1200];
    snprintf(extra, sizeof extra, "-t Q2_K --ladder Q2_K,Q4_K_M --budget %g -o '%s/plan.gguf' --jobs 2", budget, g_tmp);
    json_t *d = sens(0, extra);
    json_t *units = json_object_get(d, "units");
    assert_int_equal(json_array_size(units), 5); /* stories260K: 5 decoder blocks */
    json_t *q2 = uniform(d, "Q2_K"), *q4 = uniform(d, "Q4_K_M");
    double k2 = tmt_num(q2, "kld_mean"), k4 = tmt_num(q4, "kld_mean");
    /* the budget lies between the uniform schemes (else the test would prove nothing) */
    assert_true(k4 < budget && budget < k2);
    int seen[6] = {0};
    size_t i;
    json_t *u;
    json_array_foreach(units, i, u) {
        char nm[32];
        snprintf(nm, sizeof nm, "blk.%zu", i);
        assert_string_equal(json_string_value(json_object_get(u, "name")), nm);
        json_int_t r = json_integer_value(json_object_get(u, "rank"));
        assert_true(r >= 1 && r <= 5);
        seen[r]++;
        double only = tmt_num(u, "kld_mean_only"), allbut = tmt_num(u, "kld_mean_all_but");
        assert_true(only > 0 && only < k2);
        assert_true(allbut > 0 && allbut < k2);
        assert_true(isfinite(tmt_num(u, "weight_sqnr_db")) && tmt_num(u, "weight_sqnr_db") > 5);
        assert_true(json_integer_value(json_object_get(u, "bytes_quantized")) < json_integer_value(json_object_get(u, "bytes_source")));
        size_t j;
        json_t *v;
        json_array_foreach(units, j, v) { /* rank order = kld_mean_only order */
            json_int_t rv = json_integer_value(json_object_get(v, "rank"));
            if (rv < r) assert_true(tmt_num(v, "kld_mean_only") >= only);
        }
    }
    for (int r = 1; r <= 5; r++) assert_int_equal(seen[r], 1);
    double rho = tmt_num(d, "spearman_weight_vs_kld");
    assert_true(rho >= -1 && rho <= 1);
    /* the plan */
    json_t *plan = json_object_get(d, "plan");
    assert_non_null(plan);
    assert_true(json_is_true(json_object_get(plan, "met")));
    double pk = tmt_num(plan, "kld_mean");
    assert_true(pk <= budget);
    json_int_t pb = json_integer_value(json_object_get(plan, "bytes"));
    assert_true(pb < json_integer_value(json_object_get(q4, "bytes")));
    assert_true(pb > json_integer_value(json_object_get(q2, "bytes")));
    /* some units promoted, some not */
    int n4 = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(plan, "assignments"), k, v) n4 += !strcmp(json_string_value(v), "Q4_K_M");
    assert_true(n4 >= 1 && n4 <= 4);
    /* the artifact's own evidence: the plan's numbers, within budget */
    char p[600];
    snprintf(p, sizeof p, "%s/plan.gguf.evidence.json", g_tmp);
    char *et = tmt_read_file(p);
    assert_non_null(et);
    json_t *ev = json_loads(et, 0, NULL);
    free(et);
    assert_non_null(ev);
    double ek = json_number_value(json_object_get(json_object_get(json_object_get(json_object_get(ev, "llm"), "overall"), "kld"), "mean"));
    assert_true(ek == pk);
    json_decref(ev);
    snprintf(p, sizeof p, "%s/plan.gguf.manifest.json", g_tmp);
    assert_true(tmt_exists(p));
    /* the recipe rebuilds the artifact byte for byte */
    assert_int_equal(tmt_run(NULL, "'%s' quantize '%s' -o '%s/re.gguf' --recipe '%s/plan.gguf.recipe.json' -q", tmt_bin(), g_src, g_tmp, g_tmp), 0);
    assert_int_equal(tmt_run(NULL, "cmp -s '%s/re.gguf' '%s/plan.gguf'", g_tmp, g_tmp), 0);
    json_decref(d);
}

/* ---- the compressed-tensors form: int4 per channel -> int8 channel -> dense ------------------- */

static void test_ct_int4_budget(void **state) {
    (void)state;
    if (!require_llama()) return;
    const char *sh = tmv_shared_dir();
    char st[1200], extra[3000], p[600];
    snprintf(st, sizeof st, "%s/models/safetensors/stories260K-f32", sh);
    if (access(st, R_OK)) { skip_or_fail("safetensors/stories260K-f32 not in ../shared", "TM_REQUIRE_SHARED"); return; }
    const double budget = 0.045;
    snprintf(extra, sizeof extra, "--vocab-from '%s' -t int4 -g channel --units 'layers\\.[34]$' --budget %g -o '%s/ctplan' --jobs 2",
             g_src, budget, g_tmp);
    /* the helper runs SRC = the GGUF; here SRC is the safetensors directory */
    char *out = NULL;
    int rc = tmt_run(&out, "'%s' sensitivity '%s' --text '%s' --ctx 128 --chunks 4 %s --json 2>'%s/stderr.txt'", tmt_bin(), st, g_text,
                     extra, g_tmp);
    if (rc) {
        snprintf(p, sizeof p, "%s/stderr.txt", g_tmp);
        char *e = tmt_read_file(p);
        print_message("exit %d: %s\n", rc, e ? e : "");
        free(e);
    }
    assert_int_equal(rc, 0);
    json_t *d = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "form")), "compressed-tensors");
    json_t *units = json_object_get(d, "units");
    assert_int_equal(json_array_size(units), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(units, 0), "name")), "model.layers.3");
    json_t *i4 = uniform(d, "int4 channel:0"), *i8 = uniform(d, "int8 channel:0");
    assert_non_null(uniform(d, "dense"));
    assert_true(tmt_num(i8, "kld_mean") < budget && budget < tmt_num(i4, "kld_mean"));
    size_t i;
    json_t *u;
    json_array_foreach(units, i, u) {
        json_int_t r = json_integer_value(json_object_get(u, "rank"));
        assert_true(r == 1 || r == 2);
        assert_true(tmt_num(u, "kld_mean_only") > 0 && tmt_num(u, "kld_mean_only") < tmt_num(i4, "kld_mean"));
        /* int4 per channel: RMSE in LSB near rounding's 0.29 */
        assert_true(tmt_num(u, "weight_rmse_lsb") > 0.2 && tmt_num(u, "weight_rmse_lsb") < 0.4);
    }
    json_t *plan = json_object_get(d, "plan");
    assert_true(json_is_true(json_object_get(plan, "met")));
    assert_true(tmt_num(plan, "kld_mean") <= budget);
    assert_true(json_integer_value(json_object_get(plan, "bytes")) < json_integer_value(json_object_get(i8, "bytes")));
    /* the artifact's evidence and the recipe that rebuilds it */
    snprintf(p, sizeof p, "%s/ctplan.evidence.json", g_tmp);
    char *et = tmt_read_file(p);
    assert_non_null(et);
    json_t *ev = json_loads(et, 0, NULL);
    free(et);
    assert_true(json_number_value(json_object_get(json_object_get(json_object_get(json_object_get(ev, "llm"), "overall"), "kld"), "mean")) ==
                tmt_num(plan, "kld_mean"));
    json_decref(ev);
    assert_int_equal(tmt_run(NULL, "'%s' quantize '%s' -o '%s/ctre' --recipe '%s/ctplan.recipe.json' -q", tmt_bin(), st, g_tmp, g_tmp), 0);
    assert_int_equal(tmt_run(NULL, "cmp -s '%s/ctre/model.safetensors' '%s/ctplan/model.safetensors'", g_tmp, g_tmp), 0);
    json_decref(d);
}

/* ---- a compressed-tensors --ladder ------------------------------------------------------------ */

static void test_ct_ladder(void **state) {
    (void)state;
    if (!require_llama()) return;
    const char *sh = tmv_shared_dir();
    char st[1200], p[600];
    snprintf(st, sizeof st, "%s/models/safetensors/stories260K-f32", sh);
    if (access(st, R_OK)) { skip_or_fail("safetensors/stories260K-f32 not in ../shared", "TM_REQUIRE_SHARED"); return; }
    /* bad rungs: exit 2 before any probe, the message naming the rung */
    static const char *const bad[][2] = {{"int4/chanel,dense", "'int4/chanel': 'chanel'"}, {"int4,int5", "'int5'"},
                                         {"int4,dense,int8", "rung 2 'dense' must be the last"},
                                         {"int8,dense", "must start at the scheme (int4 channel:0)"},
                                         {"int4,int4 channel:0", "rung 2 'int4 channel:0' given twice"}};
    snprintf(p, sizeof p, "%s/stderr.txt", g_tmp);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(tmt_run(NULL, "'%s' sensitivity '%s' --text '%s' --vocab-from '%s' -t int4 --ladder '%s' -q 2>'%s'", tmt_bin(), st,
                                 g_text, g_src, bad[k][0], p), 2);
        char *e = tmt_read_file(p);
        assert_non_null(e);
        if (!strstr(e, bad[k][1])) print_message("--ladder '%s': %s\n", bad[k][0], e);
        assert_non_null(strstr(e, bad[k][1]));
        free(e);
    }
    /* the GGUF form refuses a scheme rung */
    json_decref(sens(2, "-t Q2_K --ladder Q2_K,int8"));
    /* no -t: the first rung is the scheme and says the form; the printed names parse back */
    char *out = NULL;
    int rc = tmt_run(&out, "'%s' sensitivity '%s' --text '%s' --vocab-from '%s' --ladder 'int4 channel:0,int8/group:32/asym,dense' "
                     "--units 'layers\\.3$' --ctx 128 --chunks 2 --json 2>'%s'", tmt_bin(), st, g_text, g_src, p);
    assert_int_equal(rc, 0);
    json_t *d = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "form")), "compressed-tensors");
    assert_string_equal(json_string_value(json_object_get(d, "scheme")), "int4 channel:0");
    json_t *lad = json_object_get(d, "ladder");
    assert_int_equal(json_array_size(lad), 3);
    assert_string_equal(json_string_value(json_array_get(lad, 1)), "int8 group:32:-1 asym");
    assert_string_equal(json_string_value(json_array_get(lad, 2)), "dense");
    json_t *i4 = uniform(d, "int4 channel:0"), *i8 = uniform(d, "int8 group:32:-1 asym"), *dn = uniform(d, "dense");
    assert_true(tmt_num(i8, "kld_mean") < tmt_num(i4, "kld_mean"));
    assert_true(tmt_num(dn, "kld_mean") < 1e-9);
    assert_true(tmt_num(i4, "bytes") < tmt_num(i8, "bytes") && tmt_num(i8, "bytes") < tmt_num(dn, "bytes"));
    json_decref(d);
}

/* ---- probes + merge == one run -------------------------------------------------------------- */

static char *strip_timings(const char *path) {
    char *t = tmt_read_file(path);
    assert_non_null(t);
    json_t *d = json_loads(t, 0, NULL);
    free(t);
    assert_non_null(d);
    json_object_del(d, "timings");
    char *o = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(d);
    return o;
}

static void test_probe_merge(void **state) {
    (void)state;
    if (!require_llama()) return;
    char extra[1200];
    const char *cfg = "-t Q2_K --ladder Q2_K,Q4_K_M --units 'blk\\.[03]$'";
    snprintf(extra, sizeof extra, "%s --jobs 2 -o '%s/one.gguf'", cfg, g_tmp);
    json_decref(sens(0, extra));
    snprintf(extra, sizeof extra, "%s --probe 0/2 --threads 2 -o '%s/p0.json'", cfg, g_tmp);
    json_decref(sens(0, extra));
    snprintf(extra, sizeof extra, "%s --probe 1/2 -o '%s/p1.json'", cfg, g_tmp);
    json_decref(sens(0, extra));
    /* a missing probe: refused */
    assert_int_equal(tmt_run(NULL, "'%s' sensitivity merge '%s/p0.json' -o '%s/bad.json' 2>/dev/null", tmt_bin(), g_tmp, g_tmp), 3);
    char p[600];
    snprintf(p, sizeof p, "%s/bad.json", g_tmp);
    assert_false(tmt_exists(p));
    assert_int_equal(tmt_run(NULL, "'%s' sensitivity merge '%s/p1.json' '%s/p0.json' -o '%s/merged.json' -q", tmt_bin(), g_tmp, g_tmp, g_tmp), 0);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/one.gguf.sensitivity.json", g_tmp);
    snprintf(b, sizeof b, "%s/merged.json", g_tmp);
    char *ta = strip_timings(a), *tb = strip_timings(b);
    assert_string_equal(ta, tb);
    json_t *d = json_loads(ta, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(d, "units")), 2);
    assert_int_equal(json_array_size(json_object_get(d, "uniform")), 2);
    json_decref(d);
    free(ta);
    free(tb);
}

/* ---- the quantized-tensor cache: same results on, off and spilled; counted -------------------- */

static long cache_count(const char *path, const char *key) {
    char *t = tmt_read_file(path);
    assert_non_null(t);
    json_t *d = json_loads(t, 0, NULL);
    free(t);
    assert_non_null(d);
    json_t *c = json_object_get(json_object_get(d, "timings"), "tensor_cache");
    assert_true(json_is_object(c));
    long v = (long)json_integer_value(json_object_get(c, key));
    json_decref(d);
    return v;
}

static void test_tensor_cache(void **state) {
    (void)state;
    if (!require_llama()) return;
    char extra[1200];
    const char *cfg = "-t Q2_K --ladder Q2_K,Q4_K_M --units 'blk\\.[03]$' --budget 1e-12";
    static const char *const mode[] = {"", "--no-cache", "--cache-mb 0"};
    static const char *const tag[] = {"on", "off", "spill"};
    for (int m = 0; m < 3; m++) { /* the budget is never met: every step of the search is probed */
        snprintf(extra, sizeof extra, "%s %s -o '%s/cache-%s.gguf'", cfg, mode[m], g_tmp, tag[m]);
        json_decref(sens(1, extra));
    }
    char p[3][600];
    for (int m = 0; m < 3; m++) snprintf(p[m], sizeof p[m], "%s/cache-%s.gguf.sensitivity.json", g_tmp, tag[m]);
    /* off: nothing counted; on and spilled: each (tensor, type) quantized once, the rest reused */
    assert_int_equal(cache_count(p[1], "tensors_quantized") + cache_count(p[1], "tensors_reused"), 0);
    long q = cache_count(p[0], "tensors_quantized"), r = cache_count(p[0], "tensors_reused");
    print_message("cache: %ld tensors quantized, %ld reused\n", q, r);
    assert_true(q > 0 && r > q);
    assert_int_equal(cache_count(p[0], "entries_spilled"), 0);
    assert_int_equal(cache_count(p[2], "tensors_quantized"), q);
    assert_int_equal(cache_count(p[2], "tensors_reused"), r);
    assert_int_equal(cache_count(p[2], "entries_spilled"), q);
    assert_int_equal(cache_count(p[2], "bytes_in_memory"), 0);
    /* the same document (but the timings and the plan's file names) and the same artifact */
    char *doc[3];
    for (int m = 0; m < 3; m++) {
        char *t = tmt_read_file(p[m]);
        json_t *d = json_loads(t, 0, NULL);
        free(t);
        assert_non_null(d);
        json_t *plan = json_object_get(d, "plan");
        assert_true(json_is_object(plan));
        json_object_del(d, "timings");
        json_object_del(plan, "artifact");
        json_object_del(plan, "evidence");
        json_object_del(plan, "recipe");
        doc[m] = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        json_decref(d);
    }
    for (int m = 1; m < 3; m++) {
        assert_string_equal(doc[0], doc[m]);
        assert_int_equal(tmt_run(NULL, "cmp -s '%s/cache-on.gguf' '%s/cache-%s.gguf'", g_tmp, g_tmp, tag[m]), 0);
    }
    for (int m = 0; m < 3; m++) free(doc[m]);
}

/* ---- the compressed-tensors form's direct candidates: the bytes the old path gives ------------- */

static void test_ct_direct(void **state) {
    (void)state;
    if (!require_llama()) return;
    const char *sh = tmv_shared_dir();
    char st[1200], extra[5000], p[5][300];
    snprintf(st, sizeof st, "%s/models/safetensors/stories260K-f32", sh);
    if (access(st, R_OK)) { skip_or_fail("safetensors/stories260K-f32 not in ../shared", "TM_REQUIRE_SHARED"); return; }
    /* direct (cached), the directory path (--no-cache), direct spilled, direct on 2 jobs and 2 threads, direct as
    ** split pairs */
    static const char *const mode[] = {"", "--no-cache", "--cache-mb 0", "--jobs 2 --threads 2", "--candidate-split on"};
    static const char *const tag[] = {"on", "off", "spill", "jobs", "split"};
    for (int m = 0; m < 5; m++) {
        snprintf(p[m], sizeof p[m], "%s/ctd-%s", g_tmp, tag[m]);
        assert_int_equal(mkdir(p[m], 0755), 0);
        snprintf(extra, sizeof extra, "--vocab-from '%s' -t int4 -g channel --units 'layers\\.[14]$' %s --keep-candidates '%s' -o '%s.json'",
                 g_src, mode[m], p[m], p[m]);
        int rc = tmt_run(NULL, "'%s' sensitivity '%s' --text '%s' --ctx 128 --chunks 4 %s --json >/dev/null 2>'%s/stderr.txt'", tmt_bin(), st,
                         g_text, extra, g_tmp);
        assert_int_equal(rc, 0);
    }
    /* the same measurements and weight errors: llama.cpp gives the split pairs the same probabilities */
    char *d[5], jp[1600];
    for (int m = 0; m < 5; m++) {
        snprintf(jp, sizeof jp, "%s.json.sensitivity.json", p[m]);
        d[m] = strip_timings(jp);
    }
    for (int m = 1; m < 5; m++) assert_string_equal(d[0], d[m]);
    for (int m = 0; m < 5; m++) free(d[m]);
    /* 2 units x 2 + 3 rungs = 7 candidates; the directory path's, converted as the evidence converts them, are the
    ** direct candidates byte for byte, and every direct run writes the same bytes */
    for (int k = 0; k < 7; k++) {
        assert_int_equal(tmt_run(NULL, "'%s' convert '%s/cand-%d' -o '%s/cand-%d.gguf' --vocab-from '%s' >/dev/null 2>&1", tmt_bin(), p[1], k,
                                 p[1], k, g_src), 0);
        for (int m = 0; m < 4; m++)
            if (m != 1) assert_int_equal(tmt_run(NULL, "cmp '%s/cand-%d.gguf' '%s/cand-%d.gguf'", p[1], k, p[m], k), 0);
        /* a split pair: the first file holds the units' tensors, the second is the one shared file (7 links) */
        char f2[400];
        snprintf(f2, sizeof f2, "%s/cand-%d-00002-of-00002.gguf", p[4], k);
        struct stat sb;
        assert_int_equal(stat(f2, &sb), 0);
        assert_int_equal((int)sb.st_nlink, 7);
        assert_int_equal(tmt_run(NULL, "test -s '%s/cand-%d-00001-of-00002.gguf'", p[4], k), 0);
    }
    assert_int_not_equal(tmt_run(NULL, "test -e '%s/cand-7.gguf'", p[0]), 0);
    /* the direct path counts its dequantized tensors: each (weight, rung) made once */
    snprintf(jp, sizeof jp, "%s.json.sensitivity.json", p[0]);
    long q = cache_count(jp, "tensors_quantized"), r = cache_count(jp, "tensors_reused");
    print_message("ct direct: %ld tensors dequantized, %ld reused\n", q, r);
    /* misses: 7 weights x 2 layers on each quantized rung; hits: the second ONLY and ALL-BUT (7 each) and uniform
    ** int4 (14) take rung 0's from the first two candidates */
    assert_int_equal(q, 2 * 14);
    assert_int_equal(r, 7 + 7 + 14);
    snprintf(jp, sizeof jp, "%s.json.sensitivity.json", p[2]);
    assert_int_equal(cache_count(jp, "entries_spilled"), q);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void test_bad_input(void **state) {
    (void)state;
    if (!require_llama()) return;
    char extra[1200], p[600];
    /* a unit pattern that matches nothing: exit 2, nothing at OUT */
    snprintf(extra, sizeof extra, "-t Q2_K --units 'nothing' --budget 0.01 -o '%s/none.gguf'", g_tmp);
    json_decref(sens(2, extra));
    snprintf(p, sizeof p, "%s/none.gguf", g_tmp);
    assert_false(tmt_exists(p));
    snprintf(p, sizeof p, "%s/none.gguf.recipe.json", g_tmp);
    assert_false(tmt_exists(p));
    /* a budget no plan meets: exit 1, met false, the best plan reached written */
    snprintf(extra, sizeof extra, "-t Q2_K --ladder Q2_K,Q3_K_M --units 'blk\\.0$' --budget 1e-12 -o '%s/unmet.gguf'", g_tmp);
    json_t *d = sens(1, extra);
    assert_non_null(d);
    json_t *plan = json_object_get(d, "plan");
    assert_true(json_is_false(json_object_get(plan, "met")));
    assert_true(tmt_num(plan, "kld_mean") > 1e-12);
    snprintf(p, sizeof p, "%s/unmet.gguf", g_tmp);
    assert_true(tmt_exists(p));
    snprintf(p, sizeof p, "%s/unmet.gguf.recipe.json", g_tmp);
    assert_true(tmt_exists(p));
    json_decref(d);
    /* OUT already there: exit 2 */
    snprintf(extra, sizeof extra, "-t Q2_K --budget 0.01 -o '%s/unmet.gguf'", g_tmp);
    json_decref(sens(2, extra));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_matches_quantizer),
        cmocka_unit_test(test_plan_synth256_reference),
        cmocka_unit_test(test_serve_field),
        cmocka_unit_test(test_ranking_and_budget),
        cmocka_unit_test(test_ct_int4_budget),
        cmocka_unit_test(test_ct_ladder),
        cmocka_unit_test(test_probe_merge),
        cmocka_unit_test(test_tensor_cache),
        cmocka_unit_test(test_ct_direct),
        cmocka_unit_test(test_bad_input),
    };
    const char *filt = getenv("TM_TEST_FILTER"); /* e.g. "test_serve*": run only those, by hand */
    if (filt && *filt) cmocka_set_test_filter(filt);
    return cmocka_run_group_tests(tests, setup, teardown);
}
