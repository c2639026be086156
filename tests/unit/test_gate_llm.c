/* test_gate_llm.c: the release gate (`tensormorph gate`, tensormorph/gate.h) on LLM evidence
** (the node-llama-cpp variant of docs/schemas/evidence.schema.json, built here with jansson) and
** policies with `llm` bounds, on a real manifest (`tensormorph quantize` of the demo checkpoint):
** target llamacpp-cpu with only llm bounds PASSes; KLD, top-1, PPL ratio over budget, a named
** slice missing, null statistics (NaN positions), ONNX evidence under llm bounds (fails closed
** naming the missing llm section), decode samples that do not match gen x chunks, latency that
** is not representative offered to another target, an empty llm bound (exit 3); the ONNX
** target's required keys still required; serve's /api/v1/release carries the llm section. */
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

#include "tensormorph.h"
#include "tensormorph/gate.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"

static char g_tmp[256];
static char g_src_sha[65], g_out_sha[65];

/* ---- fixtures -------------------------------------------------------------------------- */

static json_t *stats(double kld_mean, double kld_p99, double top1, double ratio, int nan) {
    json_t *s = json_object(), *k = json_object();
    json_object_set_new(k, "mean", nan ? json_null() : json_real(kld_mean));
    json_object_set_new(k, "stderr", nan ? json_null() : json_real(kld_mean / 30));
    json_object_set_new(k, "median", nan ? json_null() : json_real(kld_mean / 2));
    json_object_set_new(k, "p90", nan ? json_null() : json_real(kld_p99 / 2));
    json_object_set_new(k, "p99", nan ? json_null() : json_real(kld_p99));
    json_object_set_new(k, "p999", nan ? json_null() : json_real(kld_p99 * 2));
    json_object_set_new(k, "max", nan ? json_null() : json_real(kld_p99 * 3));
    json_object_set_new(s, "kld", k);
    json_object_set_new(s, "same_top1", nan ? json_null() : json_real(top1));
    json_object_set_new(s, "ppl_base", nan ? json_null() : json_real(3.1155));
    json_object_set_new(s, "ppl_cand", nan ? json_null() : json_real(3.1155 * ratio));
    json_object_set_new(s, "ppl_ratio", nan ? json_null() : json_real(ratio));
    json_object_set_new(s, "rms_dp", nan ? json_null() : json_real(0.04));
    json_object_set_new(s, "scored_tokens", json_integer(126));
    json_object_set_new(s, "nan_positions", json_integer(nan));
    return s;
}

static json_t *llm_model(const char *path, const char *sha, double ms, int n, int representative) {
    json_t *m = json_object(), *d = json_array();
    json_object_set_new(m, "path", json_string(path));
    json_object_set_new(m, "sha256", json_string(sha));
    json_object_set_new(m, "file_bytes", json_integer(281504));
    json_object_set_new(m, "peak_rss_bytes", json_integer(130000000));
    json_object_set_new(m, "prompt_tokens_per_s", json_real(5000));
    for (int i = 0; i < n; i++) json_array_append_new(d, json_real(ms + 0.01 * ((i * 7) % n)));
    json_object_set_new(m, "decode_ms", d);
    json_object_set_new(m, "decode_p50_ms", json_real(ms));
    json_object_set_new(m, "decode_p95_ms", json_real(ms));
    json_object_set_new(m, "decode_p99_ms", json_real(ms));
    json_object_set_new(m, "latency_representative", representative ? json_true() : json_false());
    return m;
}

/* LLM evidence: 2 chunks of ctx 128, gen 4: 8 decode samples per model; slices "eval", "code" */
static json_t *evidence_llm(double kld_mean, int representative) {
    const char *sha = "4956e5f6161636a7dca377db09f3959ac50af101dbfa03c8f6fa75b0760b3c87";
    json_t *e = json_pack(
        "{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:i, s:b}, s:{s:s, s:i, s:s, s:s},"
        " s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:n}}",
        "schema", "tensormorph.evidence/1",
        "tool", "name", "tensormorph", "version", "0.1.0", "commit", "test",
        "runtime", "name", "node-llama-cpp", "version", "3.21.1", "node", "v20.0.0", "execution_provider", "cpu",
        "backend", "llama.cpp",
        "device", "kind", "cpu", "name", "test cpu", "cores", 2, "measured", 1,
        "host", "cpu_model", "test cpu", "cores", 2, "os", "Linux", "hostname", "h",
        "protocol", "ctx", 128, "chunks", 2, "warmup", 1, "gen", 4, "threads", 1, "scored_tokens", 126,
        "vocab_size", 512, "text_sha256", sha, "flash_attention", 0, "base_cache");
    assert_non_null(e);
    json_t *models = json_object();
    json_object_set_new(models, "baseline", llm_model("demo", g_src_sha, 0.5, 8, 1));
    json_object_set_new(models, "candidate", llm_model("q8", g_out_sha, 0.4, 8, representative));
    json_object_set_new(e, "models", models);
    json_t *l = json_object(), *lp = json_object(), *sl = json_object();
    json_object_set_new(lp, "ctx", json_integer(128));
    json_object_set_new(lp, "chunks", json_integer(2));
    json_object_set_new(lp, "scored_tokens", json_integer(126));
    json_object_set_new(lp, "vocab_size", json_integer(512));
    json_object_set_new(lp, "text_sha256", json_string(sha));
    json_object_set_new(l, "protocol", lp);
    json_object_set_new(l, "overall", stats(kld_mean, 0.09, 0.94, 1.01, 0));
    json_object_set_new(sl, "eval", stats(kld_mean, 0.09, 0.94, 1.01, 0));
    json_object_set_new(sl, "code", stats(kld_mean * 1.5, 0.12, 0.92, 1.02, 0));
    json_object_set_new(l, "slices", sl);
    json_object_set_new(l, "worst", json_array());
    json_object_set_new(e, "llm", l);
    return e;
}

static json_t *llm_bound(double kld_mean, double kld_p99, double top1, double ratio) {
    json_t *b = json_object();
    if (kld_mean >= 0) json_object_set_new(b, "max_kld_mean", json_real(kld_mean));
    if (kld_p99 >= 0) json_object_set_new(b, "max_kld_p99", json_real(kld_p99));
    if (top1 >= 0) json_object_set_new(b, "min_same_top1", json_real(top1));
    if (ratio >= 0) json_object_set_new(b, "max_ppl_ratio", json_real(ratio));
    return b;
}

/* policy {targets: {target: {llm: {overall, slices: {"*": ...}}}}} (+ extra keys of `more`) */
static json_t *policy_llm(const char *target, json_t *more) {
    json_t *p = json_object(), *targets = json_object(), *t = json_object(), *l = json_object(), *sl = json_object();
    json_object_set_new(p, "schema", json_string("tensormorph.policy/1"));
    json_object_set_new(l, "overall", llm_bound(0.02, 0.1, 0.9, 1.05));
    json_object_set_new(sl, "*", llm_bound(0.03, 0.2, -1, 1.05));
    json_object_set_new(l, "slices", sl);
    json_object_set_new(t, "llm", l);
    if (more) { json_object_update(t, more); json_decref(more); }
    json_object_set_new(targets, target, t);
    json_object_set_new(p, "targets", targets);
    return p;
}

static json_t *gate(int want_rc, const char *evidence, const char *policy) {
    return tmt_run_json(want_rc, "%s gate --manifest %s/q8/tensormorph-manifest.json --evidence %s/%s --policy %s/%s --json 2>/dev/null",
                        tmt_bin(), g_tmp, g_tmp, evidence, g_tmp, policy);
}

static int n_failed(json_t *doc) { return (int)json_integer_value(json_object_get(doc, "n_failed")); }

/* ---- cases ----------------------------------------------------------------------------- */

static void test_llm_pass(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_llm(0.015, 1));
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", NULL));
    json_t *d = gate(0, "ev.json", "pol.json");
    assert_string_equal(json_string_value(json_object_get(d, "verdict")), "PASS");
    assert_string_equal(tmt_gate_status(d, "policy.target"), "pass");
    assert_string_equal(tmt_gate_status(d, "evidence.device"), "pass");
    assert_string_equal(tmt_gate_status(d, "evidence.protocol"), "pass");
    assert_string_equal(tmt_gate_status(d, "llm.overall"), "pass");
    assert_string_equal(tmt_gate_status(d, "llm.slices"), "pass");
    assert_non_null(strstr(tmt_gate_reason(d, "llm.slices"), "2 llm slice checks"));
    json_decref(d);
}

/* a model the evidence converted first (a checkpoint, not a GGUF): its sha256 is the scratch
** GGUF's; the gate matches models.X.source.files[].sha256 to the manifest instead */
static json_t *with_source(json_t *model, const char *path, const char *file_sha) {
    json_t *src = json_object(), *files = json_array(), *f = json_object();
    json_object_set_new(f, "path", json_string(path));
    json_object_set_new(f, "sha256", json_string(file_sha));
    json_array_append_new(files, f);
    json_object_set_new(src, "path", json_string(path));
    json_object_set_new(src, "files", files);
    json_object_set_new(model, "source", src);
    json_object_set_new(model, "sha256", json_string("00000000000000000000000000000000000000000000000000000000deadbeef"));
    return model;
}

static void test_converted_models(void **state) {
    (void)state;
    json_t *e = evidence_llm(0.015, 1), *models = json_object_get(e, "models");
    with_source(json_object_get(models, "baseline"), "demo/model.safetensors", g_src_sha);
    with_source(json_object_get(models, "candidate"), "q8/model.safetensors", g_out_sha);
    tmt_write_json(g_tmp, "evc.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", NULL));
    json_t *d = gate(0, "evc.json", "pol.json");
    assert_string_equal(json_string_value(json_object_get(d, "verdict")), "PASS");
    assert_string_equal(tmt_gate_status(d, "evidence.models"), "pass");
    json_decref(d);
    /* a converted candidate whose source file is not an output of the manifest (the source itself) */
    e = evidence_llm(0.015, 1);
    models = json_object_get(e, "models");
    with_source(json_object_get(models, "baseline"), "demo/model.safetensors", g_src_sha);
    with_source(json_object_get(models, "candidate"), "demo/model.safetensors", g_src_sha);
    tmt_write_json(g_tmp, "evc.json", e);
    d = gate(1, "evc.json", "pol.json");
    assert_string_equal(tmt_gate_status(d, "evidence.models"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.models"), "a source file of the candidate"));
    assert_null(strstr(tmt_gate_reason(d, "evidence.models"), "baseline"));
    json_decref(d);
    /* and a converted baseline that is not the manifest's source */
    e = evidence_llm(0.015, 1);
    models = json_object_get(e, "models");
    with_source(json_object_get(models, "baseline"), "q8/model.safetensors", g_out_sha);
    tmt_write_json(g_tmp, "evc.json", e);
    d = gate(1, "evc.json", "pol.json");
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.models"), "a source file of the baseline"));
    json_decref(d);
}

static void test_llm_over_budget(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_llm(0.025, 1)); /* overall 0.025 > 0.02; slice code 0.0375 > 0.03 */
    json_t *p = policy_llm("llamacpp-cpu", NULL);
    json_t *sl = json_object_get(json_object_get(json_object_get(json_object_get(p, "targets"), "llamacpp-cpu"), "llm"), "slices");
    json_object_set_new(sl, "chat", llm_bound(-1, -1, 0.95, -1)); /* not in the evidence */
    json_object_set_new(sl, "eval", llm_bound(-1, -1, 0.95, -1)); /* 0.94 < 0.95 */
    tmt_write_json(g_tmp, "pol.json", p);
    json_t *d = gate(1, "ev.json", "pol.json");
    assert_int_equal(n_failed(d), 2);
    const char *ro = tmt_gate_reason(d, "llm.overall");
    assert_non_null(strstr(ro, "kld.mean 0.025 > max_kld_mean 0.02"));
    const char *rs = tmt_gate_reason(d, "llm.slices");
    assert_non_null(strstr(rs, "missing evidence: no llm slice 'chat'"));
    assert_non_null(strstr(rs, "slice 'eval': same_top1 0.94 < min_same_top1 0.95"));
    assert_non_null(strstr(rs, "slice 'code': kld.mean 0.0375 > max_kld_mean 0.03"));
    assert_null(strstr(rs, "slice 'eval': kld.mean"));
    json_decref(d);
}

static void test_llm_nan_and_protocol(void **state) {
    (void)state;
    json_t *e = evidence_llm(0.015, 1);
    json_object_set_new(json_object_get(e, "llm"), "overall", stats(0, 0, 0, 0, 5));
    json_array_remove(json_object_get(json_object_get(json_object_get(e, "models"), "candidate"), "decode_ms"), 0);
    tmt_write_json(g_tmp, "ev.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", NULL));
    json_t *d = gate(1, "ev.json", "pol.json");
    assert_int_equal(n_failed(d), 2);
    assert_non_null(strstr(tmt_gate_reason(d, "llm.overall"), "kld.mean is null (NaN probabilities or nothing scored: 5 NaN positions)"));
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "candidate has 7 decode samples, the protocol's gen x chunks = 8"));
    json_decref(d);
}

/* ONNX evidence (no llm section) under llm bounds: FAIL naming what is missing */
static void test_onnx_evidence_under_llm_bounds(void **state) {
    (void)state;
    json_t *e = evidence_llm(0.015, 1);
    json_object_del(e, "llm");
    json_object_set_new(json_object_get(e, "runtime"), "name", json_string("onnxruntime-node"));
    tmt_write_json(g_tmp, "ev_bad.json", e); /* not even valid ONNX evidence: the schema says what is missing */
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", NULL));
    json_t *d = gate(1, "ev_bad.json", "pol.json");
    assert_string_equal(tmt_gate_status(d, "inputs.evidence"), "fail");
    assert_string_equal(tmt_gate_status(d, "llm.overall"), "not_run");
    json_decref(d);
    /* a valid ONNX evidence document */
    e = evidence_llm(0.015, 1);
    json_object_del(e, "llm");
    json_t *rt = json_object_get(e, "runtime");
    json_object_set_new(rt, "name", json_string("onnxruntime-node"));
    json_object_del(rt, "backend");
    json_t *proto = json_object(), *inputs = json_object();
    json_object_set_new(inputs, "mode", json_string("random"));
    json_object_set_new(inputs, "path", json_null());
    json_object_set_new(inputs, "count", json_integer(1));
    json_object_set_new(inputs, "sha256", json_string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    json_object_set_new(inputs, "seed", json_integer(0));
    json_object_set_new(proto, "inputs", inputs);
    json_object_set_new(proto, "input_shapes", json_object());
    json_object_set_new(proto, "warmup", json_integer(1));
    json_object_set_new(proto, "runs", json_integer(2));
    json_object_set_new(proto, "threads", json_integer(1));
    json_object_set_new(proto, "graph_optimization_level", json_string("all"));
    json_object_set_new(e, "protocol", proto);
    const char *who[2] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_object(), *lat = json_array();
        json_object_set_new(m, "path", json_string(who[i]));
        json_object_set_new(m, "sha256", json_string(i ? g_out_sha : g_src_sha));
        json_array_append_new(lat, json_real(1.0));
        json_array_append_new(lat, json_real(1.5));
        json_object_set_new(m, "latency_ms", lat);
        json_object_set_new(m, "p50_ms", json_real(1.0));
        json_object_set_new(m, "p95_ms", json_real(1.5));
        json_object_set_new(m, "p99_ms", json_real(1.5));
        json_object_set_new(m, "peak_rss_bytes", json_integer(1000));
        json_object_set_new(m, "operators", json_object());
        json_object_set_new(json_object_get(e, "models"), who[i], m);
    }
    json_t *drift = json_object();
    json_object_set_new(drift, "overall", json_object());
    json_object_set_new(drift, "slices", json_object());
    json_object_set_new(e, "drift", drift);
    json_object_set_new(e, "candidate_operators", json_object());
    tmt_write_json(g_tmp, "ev_onnx.json", e);
    d = gate(1, "ev_onnx.json", "pol.json");
    assert_string_equal(tmt_gate_status(d, "inputs.evidence"), "pass");
    assert_string_equal(tmt_gate_status(d, "llm.overall"), "fail");
    assert_string_equal(tmt_gate_status(d, "llm.slices"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "llm.overall"), "the policy bounds llm.overall and llm.slices but the evidence has no llm section (runtime onnxruntime-node"));
    /* measured by ONNX Runtime, not llama.cpp */
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.device"), "runtime.name is 'onnxruntime-node', target llamacpp-cpu is measured by node-llama-cpp"));
    json_decref(d);
}

/* latency_representative false: accepted on llamacpp-cpu, refused for any other target */
static void test_latency_representative(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_llm(0.015, 0));
    json_t *lat = json_object(), *b = json_object(), *more = json_object();
    json_object_set_new(b, "max_ratio", json_real(1.0));
    json_object_set_new(lat, "p50", b);
    json_object_set_new(more, "latency_ms", lat);
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", more));
    json_t *d = gate(0, "ev.json", "pol.json");
    assert_string_equal(tmt_gate_status(d, "latency.p50"), "pass"); /* from decode_ms: 0.43 vs 0.53 */
    assert_true(fabs(json_number_value(json_object_get(json_object_get(tmt_gate_check(d, "latency.p50"), "evidence"), "candidate")) - 0.43) < 1e-9);
    assert_null(tmt_find_named(json_object_get(d, "checks"), "latency.representative"));
    json_decref(d);
    lat = json_object(); b = json_object(); more = json_object();
    json_object_set_new(b, "max_ratio", json_real(1.0));
    json_object_set_new(lat, "p50", b);
    json_object_set_new(more, "latency_ms", lat);
    tmt_write_json(g_tmp, "pol_ort.json", policy_llm("ort-cpu", more));
    d = gate(1, "ev.json", "pol_ort.json");
    assert_string_equal(tmt_gate_status(d, "latency.representative"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "latency.representative"),
                           "the candidate's latency_representative is false: its latency was measured on llama.cpp CPU with dequantized weights and is accepted only for target llamacpp-cpu"));
    assert_string_equal(tmt_gate_status(d, "evidence.device"), "fail");
    json_decref(d);
}

static void test_policy_schema(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_llm(0.015, 1));
    json_t *p = policy_llm("llamacpp-cpu", NULL);
    json_object_set_new(json_object_get(json_object_get(json_object_get(p, "targets"), "llamacpp-cpu"), "llm"), "overall", json_object());
    tmt_write_json(g_tmp, "pol_empty.json", p);
    json_t *d = gate(3, "ev.json", "pol_empty.json");
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.policy"), "overall"));
    json_decref(d);
    /* a target without llm still needs latency_ms, peak_rss_bytes and drift */
    p = json_object();
    json_t *targets = json_object(), *t = json_object(), *lat = json_object(), *b = json_object();
    json_object_set_new(p, "schema", json_string("tensormorph.policy/1"));
    json_object_set_new(b, "max", json_real(5));
    json_object_set_new(lat, "p50", b);
    json_object_set_new(t, "latency_ms", lat);
    json_object_set_new(targets, "llamacpp-cpu", t);
    json_object_set_new(p, "targets", targets);
    tmt_write_json(g_tmp, "pol_nollm.json", p);
    d = gate(1, "ev.json", "pol_nollm.json");
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.policy"), "missing required property \"peak_rss_bytes\""));
    json_decref(d);
}

/* serve's Release API carries the evidence's llm section (histogram per slice, worst) */
static void test_release_api(void **state) {
    (void)state;
    json_t *e = evidence_llm(0.015, 1);
    json_t *h = json_object(), *he = json_object(), *edges = json_array(), *counts = json_array();
    for (int i = 0; i < 3; i++) {
        json_array_append_new(edges, json_real(i ? pow(10, i - 4) : 0));
        json_array_append_new(counts, json_integer(10 * i + 1));
    }
    json_object_set_new(he, "edges", edges);
    json_object_set_new(he, "counts", counts);
    json_object_set_new(h, "eval", he);
    json_object_set_new(json_object_get(e, "llm"), "histogram", h);
    tmt_write_json(g_tmp, "ev.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_llm("llamacpp-cpu", NULL));
    char m[400], ev[400], pol[400];
    snprintf(m, sizeof m, "%s/q8/tensormorph-manifest.json", g_tmp);
    snprintf(ev, sizeof ev, "%s/ev.json", g_tmp);
    snprintf(pol, sizeof pol, "%s/pol.json", g_tmp);
    char q[400];
    snprintf(q, sizeof q, "%s/q8", g_tmp);
    const char *args[] = {q, "--manifest", m, "--evidence", ev, "--policy", pol, NULL};
    int port = 0;
    FILE *out = NULL;
    int pid = tmt_serve_start(args, &port, &out);
    int status = 0;
    json_t *d = tmt_http_json(port, "/api/v1/release", &status);
    tmt_serve_stop(pid, out);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(d, "verdict")), "PASS");
    json_t *llm = json_object_get(d, "llm");
    assert_non_null(llm);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(json_object_get(json_object_get(llm, "histogram"), "eval"), "counts"), 2)), 21);
    assert_true(json_is_array(json_object_get(llm, "worst")));
    assert_non_null(json_object_get(json_object_get(llm, "slices"), "code"));
    json_decref(d);
}

static int setup(void **state) {
    (void)state;
    if (tmt_demo(g_tmp, sizeof g_tmp, "test_gate_llm")) return -1;
    if (tmt_run(NULL, "cd %s && %s quantize demo -o q8 -t int8 -g channel -q", g_tmp, tmt_bin())) return -1;
    char p[600];
    snprintf(p, sizeof p, "%s/q8/tensormorph-manifest.json", g_tmp);
    if (tmt_manifest_shas(p, g_src_sha, g_out_sha)) return -1;
    return chdir(g_tmp) ? -1 : 0; /* the gate resolves the manifest's relative source path from here */
}

static int teardown(void **state) { (void)state; return chdir("/") ? -1 : tmt_tmpdir_remove(g_tmp); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llm_pass),
        cmocka_unit_test(test_converted_models),
        cmocka_unit_test(test_llm_over_budget),
        cmocka_unit_test(test_llm_nan_and_protocol),
        cmocka_unit_test(test_onnx_evidence_under_llm_bounds),
        cmocka_unit_test(test_latency_representative),
        cmocka_unit_test(test_policy_schema),
        cmocka_unit_test(test_release_api),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
