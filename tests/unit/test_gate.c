/* test_gate.c: the release gate (`tensormorph gate`, tensormorph/gate.h) on a real manifest
** (`tensormorph quantize` of the demo checkpoint) with evidence and policy built here with
** jansson: the PASS case, then one change at a time (missing candidate, unmeasured device,
** protocol mismatch, slice drift over budget, a p95 field that lies about its own samples,
** rollback missing / of another checkpoint / not loadable, an artifact modified after the
** manifest, canary below the minimum, truncated JSON, a wrong type at a JSON path, a policy
** without the target, a disallowed fallback; integers written as reals (4.0, 1e12), empty
** thresholds, a manifest that quantized nothing, an output file named through "..", latency
** samples of 0 ms), each FAIL listing every reason at once. */
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
#include "helpers/vectors.h"

static char g_tmp[256];
static char g_src_sha[65], g_out_sha[65];

/* ---- fixtures -------------------------------------------------------------------------- */

static json_t *samples(double first, double step, int n) {
    json_t *a = json_array();
    /* a fixed permutation so that the gate has to sort: i * 7 mod n visits every index once */
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(first + step * ((i * 7) % n)));
    return a;
}

static json_t *model(const char *path, const char *sha, double first, double step, json_int_t rss) {
    /* p50/p95/p99: the nearest-rank values of those samples, as an honest writer would put them */
    json_t *m = json_pack("{s:s, s:s, s:o, s:f, s:f, s:f, s:I, s:{s:i}}", "path", path, "sha256", sha,
                          "latency_ms", samples(first, step, 20), "p50_ms", first + step * 9,
                          "p95_ms", first + step * 18, "p99_ms", first + step * 19, "peak_rss_bytes", rss,
                          "operators", "MatMul", 24);
    assert_non_null(m);
    return m;
}

static json_t *drift_entry(double max_abs, double rel_l2, double top1, int n_inputs) {
    json_t *d = json_object();
    json_object_set_new(d, "max_abs", json_real(max_abs));
    json_object_set_new(d, "rel_l2", json_real(rel_l2));
    json_object_set_new(d, "top1_agreement", json_real(top1));
    if (n_inputs) json_object_set_new(d, "n_inputs", json_integer(n_inputs));
    return d;
}

/* evidence that passes the policy below: 10 runs x 2 inputs = 20 samples per model */
static json_t *evidence_ok(void) {
    json_t *e = json_pack(
        "{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:{s:s, s:s, s:i, s:b}, s:{s:s, s:i, s:s, s:s},"
        " s:{s:{s:s, s:n, s:i, s:s, s:i}, s:{s:[i, i]}, s:i, s:i, s:i, s:s}, s:{s:o, s:o},"
        " s:{s:{s:o}, s:{s:{s:o}}}, s:{s:i}}",
        "schema", "tensormorph.evidence/1",
        "tool", "name", "tensormorph", "version", "0.1.0", "commit", "test",
        "runtime", "name", "onnxruntime-node", "version", "1.30.0", "node", "v20.0.0", "execution_provider", "cpu",
        "device", "kind", "cpu", "name", "test cpu", "cores", 2, "measured", 1,
        "host", "cpu_model", "test cpu", "cores", 2, "os", "Linux", "hostname", "h",
        "protocol",
        "inputs", "mode", "random", "path", "count", 2,
        "sha256", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "seed", 7,
        "input_shapes", "x", 1, 64, "warmup", 3, "runs", 10, "threads", 2, "graph_optimization_level", "all",
        "models", "baseline", model("demo", g_src_sha, 2.0, 0.5, 100000000),
        "candidate", model("q8", g_out_sha, 1.0, 0.25, 60000000),
        "drift", "overall", "logits", drift_entry(0.02, 0.004, 1.0, 0),
        "slices", "long_prompts", "logits", drift_entry(0.03, 0.006, 1.0, 1),
        "candidate_operators", "MatMul", 24);
    assert_non_null(e);
    return e;
}

static json_t *bound(double max, double max_ratio) {
    json_t *b = json_object();
    if (max >= 0) json_object_set_new(b, "max", json_real(max));
    if (max_ratio > 0) json_object_set_new(b, "max_ratio", json_real(max_ratio));
    return b;
}

static json_t *policy_ok(void) {
    json_t *p = json_pack(
        "{s:s, s:{s:{s:{s:o, s:o, s:o}, s:o, s:{s:{s:f, s:f, s:f}, s:{s:{s:f}}}, s:{s:i, s:i}, s:{s:f}}}}",
        "schema", "tensormorph.policy/1",
        "targets", "ort-cpu",
        "latency_ms", "p50", bound(4.0, -1), "p95", bound(6.0, 1.0), "p99", bound(-1, 1.1),
        "peak_rss_bytes", bound(80000000, 1.0),
        "drift", "overall", "max_abs", 0.05, "max_rel_l2", 0.01, "min_top1_agreement", 0.99,
        "slices", "long_prompts", "max_abs", 0.05,
        "protocol", "threads", 2, "min_runs", 10,
        "canary", "min_fraction", 0.05);
    assert_non_null(p);
    return p;
}

/* ev.json and pol.json: the evidence and the policy that pass together. */
static void write_ok_inputs(void) {
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    tmt_write_json(g_tmp, "pol.json", policy_ok());
}

/* run the gate; returns the verdict document and checks the exit status */
static json_t *gate_m(int want_rc, const char *manifest, const char *evidence, const char *policy, const char *extra) {
    return tmt_run_json(want_rc, "%s gate --manifest %s/%s --evidence %s/%s --policy %s/%s %s --json 2>/dev/null",
                        tmt_bin(), g_tmp, manifest, g_tmp, evidence, g_tmp, policy, extra ? extra : "");
}

/* the same with the manifest of q8, the int8 channel quantization of the demo */
static json_t *gate(int want_rc, const char *evidence, const char *policy, const char *extra) {
    return gate_m(want_rc, "q8/tensormorph-manifest.json", evidence, policy, extra);
}

/* the value `key` of the evidence object of check `name` */
static json_t *evidence_of(json_t *doc, const char *name, const char *key) {
    return json_object_get(json_object_get(tmt_gate_check(doc, name), "evidence"), key);
}

/* the failed checks of a verdict are exactly `names` (NULL-terminated), and each has a reason line */
static void assert_failed_exactly(json_t *doc, const char *const *names) {
    int n = 0;
    for (; names[n]; n++) {
        if (strcmp(tmt_gate_status(doc, names[n]), "fail")) print_message("%s: %s\n", names[n], tmt_gate_status(doc, names[n]));
        assert_string_equal(tmt_gate_status(doc, names[n]), "fail");
    }
    assert_string_equal(json_string_value(json_object_get(doc, "verdict")), "FAIL");
    assert_int_equal(json_integer_value(json_object_get(doc, "n_failed")), n);
    json_t *reasons = json_object_get(doc, "reasons");
    assert_int_equal((int)json_array_size(reasons), n);
    for (int i = 0; i < n; i++) {
        int found = 0;
        size_t k;
        json_t *r;
        json_array_foreach(reasons, k, r) found |= !strncmp(json_string_value(r), names[i], strlen(names[i]));
        assert_true(found);
    }
}

/* ---- cases ----------------------------------------------------------------------------- */

static void test_pass(void **state) {
    (void)state;
    write_ok_inputs();
    json_t *d = gate(0, "ev.json", "pol.json", "--canary 0.1");
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.gate/1");
    assert_string_equal(json_string_value(json_object_get(d, "verdict")), "PASS");
    assert_int_equal(json_integer_value(json_object_get(d, "exit_code")), 0);
    assert_string_equal(json_string_value(json_object_get(d, "target")), "ort-cpu");
    assert_int_equal(json_array_size(json_object_get(d, "reasons")), 0);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(d, "checks"), i, c) {
        const char *st = json_string_value(json_object_get(c, "status"));
        if (strcmp(st, "pass")) assert_string_equal(json_string_value(json_object_get(c, "name")), "compat"); /* skipped */
    }
    /* p95 of 20 samples = the 19th smallest: 1.0 + 0.25*18 = 5.5 ms, baseline 2.0 + 0.5*18 = 11 */
    json_t *ev = json_object_get(tmt_gate_check(d, "latency.p95"), "evidence");
    assert_true(fabs(tmt_num(ev, "candidate") - 5.5) < 1e-12);
    assert_true(fabs(tmt_num(ev, "baseline") - 11.0) < 1e-12);
    assert_true(fabs(tmt_num(ev, "ratio") - 0.5) < 1e-12);
    ev = json_object_get(tmt_gate_check(d, "latency.p50"), "evidence");
    assert_true(fabs(tmt_num(ev, "candidate") - 3.25) < 1e-12); /* rank ceil(10) = 10th: 1 + 0.25*9 */
    assert_string_equal(tmt_gate_status(d, "compat"), "skipped");
    assert_non_null(strstr(tmt_gate_reason(d, "rollback"), "loads and its 1 file matches the manifest"));
    json_decref(d);
    /* the text form says so too */
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s gate --manifest %s/q8/tensormorph-manifest.json --evidence %s/ev.json --policy %s/pol.json --canary 0.1",
                             tmt_bin(), g_tmp, g_tmp, g_tmp), 0);
    assert_non_null(strstr(out, "verdict: PASS (0 of 18 checks failed)"));
    free(out);
}

static void test_missing_candidate(void **state) {
    (void)state;
    json_t *e = evidence_ok();
    json_object_del(json_object_get(e, "models"), "candidate");
    tmt_write_json(g_tmp, "ev_nocand.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_ok());
    json_t *d = gate(1, "ev_nocand.json", "pol.json", "--canary 0.1");
    const char *const f[] = {"inputs.evidence", NULL};
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.evidence"), "$.models: missing required property \"candidate\""));
    /* everything that needs the evidence is listed as not run, never as passed */
    assert_string_equal(tmt_gate_status(d, "latency.p95"), "not_run");
    assert_string_equal(tmt_gate_status(d, "evidence.protocol"), "not_run");
    json_decref(d);
}

static void test_unmeasured_device_protocol_slices_canary_together(void **state) {
    (void)state;
    json_t *e = evidence_ok();
    json_object_set_new(json_object_get(e, "device"), "measured", json_false());
    json_object_set_new(json_object_get(e, "protocol"), "threads", json_integer(4));
    json_t *sl = json_object_get(json_object_get(json_object_get(e, "drift"), "slices"), "long_prompts");
    json_object_set_new(sl, "logits", drift_entry(0.5, 0.004, 1.0, 1));
    tmt_write_json(g_tmp, "ev_many.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_ok());
    json_t *d = gate(1, "ev_many.json", "pol.json", "--canary 0.01");
    const char *const f[] = {"evidence.device", "evidence.protocol", "drift.slices", "canary", NULL};
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.device"), "device.measured is false"));
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "threads 4, the policy requires 2"));
    assert_non_null(strstr(tmt_gate_reason(d, "drift.slices"), "slice 'long_prompts' output 'logits': max_abs 0.5 > max_abs 0.05"));
    assert_non_null(strstr(tmt_gate_reason(d, "canary"), "planned canary share 0.01 < the policy's min_fraction 0.05"));
    json_decref(d);
    /* no --canary at all while the policy asks for one */
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    d = gate(1, "ev.json", "pol.json", NULL);
    const char *const f2[] = {"canary", NULL};
    assert_failed_exactly(d, f2);
    json_decref(d);
}

static void test_p95_from_raw_samples(void **state) {
    (void)state;
    json_t *e = evidence_ok();
    json_t *cand = json_object_get(json_object_get(e, "models"), "candidate");
    /* slow samples 4..8.75 ms, but a p95_ms field claiming 1.0 */
    json_object_set_new(cand, "latency_ms", samples(4.0, 0.25, 20));
    json_object_set_new(cand, "p95_ms", json_real(1.0));
    tmt_write_json(g_tmp, "ev_lie.json", e);
    tmt_write_json(g_tmp, "pol.json", policy_ok());
    json_t *d = gate(1, "ev_lie.json", "pol.json", "--canary 0.1");
    /* p95 = 4 + 0.25*18 = 8.5 > max 6; also p50 = 6.25 > 4 and p99 = 8.75 > 1.1 * 11.5 ... no: 8.75 < 12.65 */
    const char *const f[] = {"latency.p50", "latency.p95", NULL};
    assert_failed_exactly(d, f);
    json_t *ev = json_object_get(tmt_gate_check(d, "latency.p95"), "evidence");
    assert_true(fabs(tmt_num(ev, "candidate") - 8.5) < 1e-12);
    assert_true(fabs(tmt_num(ev, "file_candidate") - 1.0) < 1e-12);
    assert_non_null(json_object_get(ev, "note"));
    assert_non_null(strstr(tmt_gate_reason(d, "latency.p95"), "candidate p95 8.5 ms > max 6 ms"));
    json_decref(d);
    /* a sample count that does not match runs x inputs is a protocol failure */
    e = evidence_ok();
    json_array_remove(json_object_get(json_object_get(json_object_get(e, "models"), "baseline"), "latency_ms"), 0);
    tmt_write_json(g_tmp, "ev_short.json", e);
    d = gate(1, "ev_short.json", "pol.json", "--canary 0.1");
    assert_string_equal(tmt_gate_status(d, "evidence.protocol"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "baseline has 19 latency samples, the protocol's runs x inputs = 10 x 2 = 20"));
    json_decref(d);
}

static void test_rollback_and_manifest(void **state) {
    (void)state;
    write_ok_inputs();
    /* missing */
    json_t *d = gate(1, "ev.json", "pol.json", "--canary 0.1 --rollback /nonexistent/model");
    const char *const f1[] = {"rollback", NULL};
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "rollback"), "/nonexistent/model"));
    json_decref(d);
    /* another checkpoint: loads, checksum differs */
    char extra[800];
    snprintf(extra, sizeof extra, "--canary 0.1 --rollback %s/q4", g_tmp);
    d = gate(1, "ev.json", "pol.json", extra);
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "rollback"), "not one of the manifest's rollback checksums"));
    json_decref(d);
    /* not loadable */
    snprintf(extra, sizeof extra, "%s/garbage.safetensors", g_tmp);
    FILE *fp = fopen(extra, "wb");
    assert_non_null(fp);
    fputs("this is not a checkpoint", fp);
    fclose(fp);
    snprintf(extra, sizeof extra, "--canary 0.1 --rollback %s/garbage.safetensors", g_tmp);
    d = gate(1, "ev.json", "pol.json", extra);
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "rollback"), "does not load"));
    json_decref(d);
    /* artifact modified after the manifest was written, plus unmeasured device and low canary:
    ** all three listed */
    assert_int_equal(tmt_run(NULL, "cp -r %s/q8 %s/q8mod && printf 'X' | dd of=%s/q8mod/model.safetensors bs=1 seek=100 conv=notrunc 2>/dev/null",
                             g_tmp, g_tmp, g_tmp), 0);
    json_t *e = evidence_ok();
    json_object_set_new(json_object_get(e, "device"), "measured", json_false());
    tmt_write_json(g_tmp, "ev_unmeasured.json", e);
    d = gate_m(1, "q8mod/tensormorph-manifest.json", "ev_unmeasured.json", "pol.json", "--canary 0.001");
    const char *const f2[] = {"manifest.checksums", "evidence.device", "canary", NULL};
    assert_failed_exactly(d, f2);
    assert_non_null(strstr(tmt_gate_reason(d, "manifest.checksums"), "q8mod/model.safetensors: sha256"));
    json_t *files = evidence_of(d, "manifest.checksums", "files");
    assert_false(json_is_true(json_object_get(json_array_get(files, 0), "ok")));
    json_decref(d);
}

static void test_unparseable_inputs(void **state) {
    (void)state;
    write_ok_inputs();
    /* truncated evidence: exit 3 and the FAIL verdict still printed (text and JSON) */
    assert_int_equal(tmt_run(NULL, "head -c 400 %s/ev.json > %s/ev_trunc.json", g_tmp, g_tmp), 0);
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s gate --manifest %s/q8/tensormorph-manifest.json --evidence %s/ev_trunc.json --policy %s/pol.json --canary 0.1 2>/dev/null",
                             tmt_bin(), g_tmp, g_tmp, g_tmp), 3);
    assert_non_null(strstr(out, "verdict: FAIL"));
    assert_non_null(strstr(out, "ev_trunc.json: not valid JSON: line"));
    free(out);
    json_t *d = gate(3, "ev_trunc.json", "pol.json", "--canary 0.1");
    assert_int_equal(json_integer_value(json_object_get(d, "exit_code")), 3);
    const char *const f1[] = {"inputs.evidence", NULL};
    assert_failed_exactly(d, f1);
    json_decref(d);
    /* a wrong type deep inside: the message names the JSON path */
    json_t *e = evidence_ok();
    json_array_set_new(json_object_get(json_object_get(json_object_get(e, "models"), "candidate"), "latency_ms"), 3, json_string("fast"));
    tmt_write_json(g_tmp, "ev_type.json", e);
    d = gate(3, "ev_type.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.evidence"), "$.models.candidate.latency_ms[3]: expected number, got string"));
    json_decref(d);
    /* a policy whose bound has the wrong type, and a truncated manifest: both listed, exit 3 */
    json_t *p = policy_ok();
    json_object_set_new(json_object_get(json_object_get(json_object_get(p, "targets"), "ort-cpu"), "latency_ms"), "p95", json_string("6ms"));
    tmt_write_json(g_tmp, "pol_type.json", p);
    assert_int_equal(tmt_run(NULL, "head -c 200 %s/q8/tensormorph-manifest.json > %s/man_trunc.json", g_tmp, g_tmp), 0);
    d = gate_m(3, "man_trunc.json", "ev.json", "pol_type.json", "--canary 0.1");
    const char *const f2[] = {"inputs.manifest", "inputs.policy", NULL};
    assert_failed_exactly(d, f2);
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.policy"), "latency_ms.p95: expected object, got string"));
    assert_string_equal(tmt_gate_status(d, "rollback"), "not_run");
    json_decref(d);
    /* a missing evidence file is incomplete, not unparseable: exit 1 */
    d = gate(1, "no-such-evidence.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.evidence"), "missing evidence"));
    json_decref(d);
}

static void test_policy_target_and_compat(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    /* a policy for a GPU target only: the CPU evidence did not measure it */
    json_t *p = policy_ok();
    json_t *t = json_deep_copy(json_object_get(json_object_get(p, "targets"), "ort-cpu"));
    json_object_set_new(json_object_get(p, "targets"), "vllm:sm90", t);
    tmt_write_json(g_tmp, "pol2.json", p);
    json_t *d = gate(1, "ev.json", "pol2.json", "--canary 0.1");
    const char *const f1[] = {"policy.target", NULL};
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "policy.target"), "the policy has 2 targets: choose one with --target"));
    json_decref(d);
    d = gate(1, "ev.json", "pol2.json", "--canary 0.1 --target vllm:sm90");
    const char *const f2[] = {"evidence.device", NULL};
    assert_failed_exactly(d, f2);
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.device"), "no evidence runner measures target 'vllm:sm90'"));
    json_decref(d);
    d = gate(1, "ev.json", "pol2.json", "--canary 0.1 --target tensorrt:sm89");
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "policy.target"), "no thresholds for target 'tensorrt:sm89'"));
    json_decref(d);
    /* allowed_fallbacks: the compressed-tensors artifact is not an ONNX Runtime artifact at all */
    p = policy_ok();
    json_t *af = json_array();
    json_array_append_new(af, json_string("higher_precision"));
    json_object_set_new(json_object_get(json_object_get(p, "targets"), "ort-cpu"), "allowed_fallbacks", af);
    tmt_write_json(g_tmp, "pol3.json", p);
    d = gate(1, "ev.json", "pol3.json", "--canary 0.1");
    const char *const f3[] = {"compat", NULL};
    assert_failed_exactly(d, f3);
    json_t *ev = json_object_get(tmt_gate_check(d, "compat"), "evidence");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "counts"), "unsupported")), 28);
    assert_int_equal(json_array_size(json_object_get(ev, "not_allowed")), 28);
    assert_non_null(strstr(tmt_gate_reason(d, "compat"), "28 of 28 quantized items"));
    json_decref(d);
    /* with unsupported allowed too, the same artifact passes the compat check */
    p = policy_ok();
    af = json_array();
    json_array_append_new(af, json_string("higher_precision"));
    json_array_append_new(af, json_string("unsupported"));
    json_object_set_new(json_object_get(json_object_get(p, "targets"), "ort-cpu"), "allowed_fallbacks", af);
    tmt_write_json(g_tmp, "pol4.json", p);
    d = gate(0, "ev.json", "pol4.json", "--canary 0.1");
    assert_string_equal(tmt_gate_status(d, "compat"), "pass");
    json_decref(d);
    /* usage: a canary outside (0, 1] */
    assert_int_equal(tmt_run(NULL, "%s gate --manifest %s/q8/tensormorph-manifest.json --evidence %s/ev.json --policy %s/pol.json --canary 1.5 2>/dev/null",
                             tmt_bin(), g_tmp, g_tmp, g_tmp), 2);
}

static json_t *target_of(json_t *pol) { return json_object_get(json_object_get(pol, "targets"), "ort-cpu"); }

/* integers written with a decimal point or an exponent (4.0, 1e12) are integers to JSON Schema
** 2020-12 and to the schemas; the gate reads them as the numbers they are, never as 0 */
static void test_integral_reals(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "pol.json", policy_ok());
    /* a candidate peak RSS of 1e12 bytes written as a real: over max 80000000 */
    json_t *e = evidence_ok();
    json_object_set_new(json_object_get(json_object_get(e, "models"), "candidate"), "peak_rss_bytes", json_real(1000000000000.0));
    tmt_write_json(g_tmp, "ev_rss.json", e);
    json_t *d = gate(1, "ev_rss.json", "pol.json", "--canary 0.1");
    const char *const f1[] = {"memory.peak_rss", NULL};
    assert_failed_exactly(d, f1);
    assert_non_null(strstr(tmt_gate_reason(d, "memory.peak_rss"), "candidate peak RSS 1000000000000 bytes > max 80000000 bytes"));
    json_decref(d);
    /* policy min_runs 2000.0: the requirement holds (10 runs fail it) */
    json_t *p = policy_ok();
    json_object_set_new(json_object_get(target_of(p), "protocol"), "min_runs", json_real(2000.0));
    tmt_write_json(g_tmp, "pol_runs.json", p);
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    d = gate(1, "ev.json", "pol_runs.json", "--canary 0.1");
    const char *const f2[] = {"evidence.protocol", NULL};
    assert_failed_exactly(d, f2);
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "runs 10 < the policy's min_runs 2000"));
    json_decref(d);
    /* threads 4.0 in the evidence is 4 (the policy wants 2); threads 2.0 in both passes */
    e = evidence_ok();
    json_object_set_new(json_object_get(e, "protocol"), "threads", json_real(4.0));
    tmt_write_json(g_tmp, "ev_thr.json", e);
    d = gate(1, "ev_thr.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f2);
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "threads 4, the policy requires 2"));
    json_decref(d);
    e = evidence_ok();
    json_object_set_new(json_object_get(e, "protocol"), "threads", json_real(2.0));
    json_object_set_new(json_object_get(e, "protocol"), "runs", json_real(10.0));
    tmt_write_json(g_tmp, "ev_thr2.json", e);
    p = policy_ok();
    json_object_set_new(json_object_get(target_of(p), "protocol"), "threads", json_real(2.0));
    tmt_write_json(g_tmp, "pol_thr2.json", p);
    d = gate(0, "ev_thr2.json", "pol_thr2.json", "--canary 0.1");
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "10 runs x 2 inputs, 2 threads"));
    json_decref(d);
    /* an integral value beyond int64 is unreadable: file and JSON path, exit 3 */
    e = evidence_ok();
    json_object_set_new(json_object_get(e, "protocol"), "runs", json_real(1e300));
    tmt_write_json(g_tmp, "ev_huge.json", e);
    d = gate(3, "ev_huge.json", "pol.json", "--canary 0.1");
    assert_string_equal(tmt_gate_status(d, "inputs.integers"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.integers"), "ev_huge.json: $.protocol.runs: 1.0000000000000001e+300 is outside the 64-bit integer range"));
    assert_string_equal(tmt_gate_status(d, "evidence.protocol"), "fail");
    json_decref(d);
}

/* a policy must state its thresholds: an empty latency_ms, drift or drift bound checks nothing */
static void test_empty_thresholds(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    static const struct { const char *what, *msg; } C[] = {
        {"latency_ms", "latency_ms: object has 0 properties, fewer than minProperties 1"},
        {"drift", ".drift: object has 0 properties, fewer than minProperties 1"},
        {"drift.overall", ".drift.overall: object has 0 properties, fewer than minProperties 1"},
        {"drift.slices", ".drift.slices: object has 0 properties, fewer than minProperties 1"},
    };
    const char *const f[] = {"inputs.policy", NULL};
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        json_t *p = policy_ok(), *t = target_of(p);
        if (!strcmp(C[k].what, "latency_ms")) json_object_set_new(t, "latency_ms", json_object());
        else if (!strcmp(C[k].what, "drift")) json_object_set_new(t, "drift", json_object());
        else if (!strcmp(C[k].what, "drift.overall")) json_object_set_new(json_object_get(t, "drift"), "overall", json_object());
        else json_object_set_new(json_object_get(t, "drift"), "slices", json_object());
        tmt_write_json(g_tmp, "pol_empty.json", p);
        json_t *d = gate(3, "ev.json", "pol_empty.json", "--canary 0.1");
        assert_failed_exactly(d, f);
        if (!strstr(tmt_gate_reason(d, "inputs.policy"), C[k].msg)) print_message("%s: %s\n", C[k].what, tmt_gate_reason(d, "inputs.policy"));
        assert_non_null(strstr(tmt_gate_reason(d, "inputs.policy"), C[k].msg));
        json_decref(d);
    }
}

/* a copy of the q8 output with its manifest changed by `edit` (a python-free jansson edit) */
static void manifest_copy(const char *dir, void (*edit)(json_t *)) {
    assert_int_equal(tmt_run(NULL, "rm -rf %s/%s && cp -r %s/q8 %s/%s", g_tmp, dir, g_tmp, g_tmp, dir), 0);
    char p[600];
    snprintf(p, sizeof p, "%s/%s/tensormorph-manifest.json", g_tmp, dir);
    json_t *m = json_load_file(p, 0, NULL);
    assert_non_null(m);
    edit(m);
    assert_int_equal(json_dump_file(m, p, JSON_INDENT(1)), 0);
    json_decref(m);
}

static void edit_n_quantized_0(json_t *m) { json_object_set_new(json_object_get(m, "results"), "n_quantized", json_integer(0)); }
static void edit_no_results(json_t *m) { json_object_del(m, "results"); }
static void edit_dotdot(json_t *m) {
    json_object_set_new(json_array_get(json_object_get(json_object_get(m, "output"), "files"), 0), "file", json_string("../q8/model.safetensors"));
}

static void test_manifest_no_op_and_dotdot(void **state) {
    (void)state;
    write_ok_inputs();
    /* the real manifest says what it quantized */
    json_t *d = gate(0, "ev.json", "pol.json", "--canary 0.1");
    assert_string_equal(tmt_gate_status(d, "manifest.quantized"), "pass");
    assert_true(json_integer_value(evidence_of(d, "manifest.quantized", "n_quantized")) >= 20);
    json_decref(d);
    const char *const f[] = {"manifest.quantized", NULL};
    manifest_copy("q8noop", edit_n_quantized_0);
    d = gate_m(1, "q8noop/tensormorph-manifest.json", "ev.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "manifest.quantized"), "results.n_quantized is 0"));
    json_decref(d);
    manifest_copy("q8nores", edit_no_results);
    d = gate_m(1, "q8nores/tensormorph-manifest.json", "ev.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "manifest.quantized"), "no results.n_quantized"));
    json_decref(d);
    /* an output file named "../q8/model.safetensors" exists and matches, but lies outside the
    ** manifest's folder: refused (the evidence's candidate is then no verified output either) */
    manifest_copy("q8dd", edit_dotdot);
    d = gate_m(1, "q8dd/tensormorph-manifest.json", "ev.json", "pol.json", "--canary 0.1");
    assert_string_equal(tmt_gate_status(d, "manifest.checksums"), "fail");
    assert_non_null(strstr(tmt_gate_reason(d, "manifest.checksums"), "\"../q8/model.safetensors\" is refused: a \"..\" path component"));
    json_t *files = evidence_of(d, "manifest.checksums", "files");
    assert_true(json_is_null(json_object_get(json_array_get(files, 0), "path")));
    json_decref(d);
}

/* latency samples of 0 ms are no measurement: every latency check fails with the sample named */
static void test_zero_latency(void **state) {
    (void)state;
    tmt_write_json(g_tmp, "pol.json", policy_ok());
    json_t *e = evidence_ok();
    json_object_set_new(json_object_get(json_object_get(e, "models"), "candidate"), "latency_ms", samples(0.0, 0.0, 20));
    json_object_set_new(json_object_get(json_object_get(e, "models"), "candidate"), "p50_ms", json_real(0.0));
    tmt_write_json(g_tmp, "ev_zero.json", e);
    json_t *d = gate(1, "ev_zero.json", "pol.json", "--canary 0.1");
    const char *const f[] = {"latency.p50", "latency.p95", "latency.p99", NULL};
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "latency.p95"), "implausible latency: "));
    assert_non_null(strstr(tmt_gate_reason(d, "latency.p95"), "ev_zero.json $.models.candidate.latency_ms[0] is 0 ms"));
    json_decref(d);
    /* one 0 ms baseline sample among good ones (a negative one already breaks the schema) */
    e = evidence_ok();
    json_array_set_new(json_object_get(json_object_get(json_object_get(e, "models"), "baseline"), "latency_ms"), 5, json_real(0.0));
    tmt_write_json(g_tmp, "ev_one0.json", e);
    d = gate(1, "ev_one0.json", "pol.json", "--canary 0.1");
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "latency.p50"), "$.models.baseline.latency_ms[5] is 0 ms"));
    json_decref(d);
    e = evidence_ok();
    json_array_set_new(json_object_get(json_object_get(json_object_get(e, "models"), "baseline"), "latency_ms"), 5, json_real(-1.5));
    tmt_write_json(g_tmp, "ev_neg.json", e);
    d = gate(3, "ev_neg.json", "pol.json", "--canary 0.1");
    assert_non_null(strstr(tmt_gate_reason(d, "inputs.evidence"), "$.models.baseline.latency_ms[5]"));
    json_decref(d);
}

static void test_example_policy_is_valid(void **state) {
    (void)state;
    const char *src = getenv("TM_SRC");
    if (!src) { print_message("SKIP: TM_SRC not set (run through ctest)\n"); skip(); return; }
    tmt_write_json(g_tmp, "ev.json", evidence_ok());
    char extra[1200];
    snprintf(extra, sizeof extra, "--canary 0.1");
    json_t *d = tmt_run_json(1, "%s gate --manifest %s/q8/tensormorph-manifest.json --evidence %s/ev.json --policy %s/docs/examples/policy.json %s --json 2>/dev/null",
                             tmt_bin(), g_tmp, g_tmp, src, extra);
    /* the example parses and names ort-cpu; this evidence (2 threads, 10 runs x 2 inputs, a
    ** safetensors artifact) does not meet its protocol, and ORT does not load safetensors */
    assert_string_equal(tmt_gate_status(d, "inputs.policy"), "pass");
    assert_string_equal(tmt_gate_status(d, "policy.target"), "pass");
    const char *const f[] = {"evidence.protocol", "compat", NULL};
    assert_failed_exactly(d, f);
    assert_non_null(strstr(tmt_gate_reason(d, "evidence.protocol"), "threads 2, the policy requires 4; runs 10 < the policy's min_runs 20"));
    json_decref(d);
}

/* The whole chain on a real model: quantize an ONNX model (weight-only int8 DequantizeLinear),
** measure both with `tensormorph evidence` on onnxruntime-node, gate. Needs ../shared and the
** Node.js runner; says SKIP with the reason when the runner is not installed. */
static void test_end_to_end_onnx(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *bin = tmt_bin();
    char model[1024];
    snprintf(model, sizeof model, "%s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", tmv_shared_dir());
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s/cls-int8.onnx -t int8 -q", bin, model, g_tmp), 0);
    char *out = NULL;
    int rc = tmt_run(&out, "%s evidence %s %s/cls-int8.onnx --random-inputs 2 --input-shape x=1,3,48,192 --runs 5 --warmup 1 -o %s/ev_real.json 2>&1",
                     bin, model, g_tmp, g_tmp);
    if (rc == 4) {
        print_message("SKIP: tensormorph evidence cannot run here (Node.js or onnxruntime-node missing): %.300s\n", out ? out : "");
        free(out);
        skip();
        return;
    }
    free(out);
    assert_int_equal(rc, 0);
    json_t *p = json_object(), *targets = json_object(), *t = json_object(), *lat = json_object(), *drift = json_object(), *db = json_object();
    json_object_set_new(p, "schema", json_string("tensormorph.policy/1"));
    json_object_set_new(lat, "p95", bound(1000.0, -1));
    json_object_set_new(t, "latency_ms", lat);
    json_object_set_new(t, "peak_rss_bytes", bound(-1, 2.0));
    json_object_set_new(db, "max_rel_l2", json_real(0.05));
    json_object_set_new(db, "min_top1_agreement", json_real(0.99));
    json_object_set_new(drift, "overall", db);
    json_object_set_new(t, "drift", drift);
    json_t *af = json_array();
    json_array_append_new(af, json_string("higher_precision"));
    json_object_set_new(t, "allowed_fallbacks", af);
    json_object_set_new(targets, "ort-cpu", t);
    json_object_set_new(p, "targets", targets);
    tmt_write_json(g_tmp, "pol_real.json", json_deep_copy(p));
    json_t *d = gate_m(0, "cls-int8.onnx.manifest.json", "ev_real.json", "pol_real.json", NULL);
    assert_string_equal(json_string_value(json_object_get(d, "verdict")), "PASS");
    /* weight-only int8 DequantizeLinear into float Conv: every node is higher_precision on ORT CPU */
    json_t *counts = evidence_of(d, "compat", "counts");
    json_int_t hp = json_integer_value(json_object_get(counts, "higher_precision"));
    assert_true(hp > 0);
    assert_int_equal(json_integer_value(json_object_get(counts, "native")), 0);
    /* the gate's percentiles are the runner's (both nearest rank over the same samples) */
    json_t *ev = json_load_file("ev_real.json", 0, NULL);
    assert_non_null(ev);
    double file_p95 = json_number_value(json_object_get(json_object_get(json_object_get(ev, "models"), "candidate"), "p95_ms"));
    json_decref(ev);
    assert_true(tmt_num(json_object_get(tmt_gate_check(d, "latency.p95"), "evidence"), "candidate") == file_p95);
    json_decref(d);
    /* the same run with no fallback allowed: FAIL, every higher_precision node listed */
    json_object_set_new(json_object_get(json_object_get(p, "targets"), "ort-cpu"), "allowed_fallbacks", json_array());
    tmt_write_json(g_tmp, "pol_real2.json", p);
    d = gate_m(1, "cls-int8.onnx.manifest.json", "ev_real.json", "pol_real2.json", NULL);
    const char *const f[] = {"compat", NULL};
    assert_failed_exactly(d, f);
    assert_int_equal((json_int_t)json_array_size(evidence_of(d, "compat", "not_allowed")), hp);
    json_decref(d);
}

/* ---- setup ----------------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    if (tmt_demo(g_tmp, sizeof g_tmp, "test_gate")) return -1;
    const char *bin = tmt_bin();
    /* relative paths, run from g_tmp, as a user would: the manifest's source path is "demo" */
    if (tmt_run(NULL, "cd %s && %s quantize demo -o q8 -t int8 -g channel -q && %s quantize demo -o q4 -t int4 -g group:128 -q",
                g_tmp, bin, bin)) return -1;
    char p[600];
    snprintf(p, sizeof p, "%s/q8/tensormorph-manifest.json", g_tmp);
    json_t *m = json_load_file(p, 0, NULL);
    if (!m) return -1;
    snprintf(g_src_sha, sizeof g_src_sha, "%s", json_string_value(json_object_get(json_array_get(json_object_get(m, "sources"), 0), "sha256")));
    snprintf(g_out_sha, sizeof g_out_sha, "%s",
             json_string_value(json_object_get(json_array_get(json_object_get(json_object_get(m, "output"), "files"), 0), "sha256")));
    json_decref(m);
    /* the gate resolves the manifest's relative source path from the current directory */
    if (chdir(g_tmp)) return -1;
    return strlen(g_src_sha) == 64 && strlen(g_out_sha) == 64 ? 0 : -1;
}

static int teardown(void **state) { (void)state; return chdir("/") ? -1 : tmt_tmpdir_remove(g_tmp); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass),
        cmocka_unit_test(test_missing_candidate),
        cmocka_unit_test(test_unmeasured_device_protocol_slices_canary_together),
        cmocka_unit_test(test_p95_from_raw_samples),
        cmocka_unit_test(test_rollback_and_manifest),
        cmocka_unit_test(test_unparseable_inputs),
        cmocka_unit_test(test_policy_target_and_compat),
        cmocka_unit_test(test_integral_reals),
        cmocka_unit_test(test_empty_thresholds),
        cmocka_unit_test(test_manifest_no_op_and_dotdot),
        cmocka_unit_test(test_zero_latency),
        cmocka_unit_test(test_example_policy_is_valid),
        cmocka_unit_test(test_end_to_end_onnx),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
