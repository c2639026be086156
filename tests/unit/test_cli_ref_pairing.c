/* test_cli_ref_pairing.c: every --ref command pairs a GGUF tensor with its Hugging Face source
** the way diff and qdiff do (issue 12 item 10: commands agree): scalar, heatmap --mode error and
** the web UI's /api/v1/scalar find model.layers.0.self_attn.q_proj.weight for
** blk.0.attn_q.weight and read it with the q/k rows un-permuted. The expected values are
** computed here from the llama.cpp permutation (convert_hf_to_gguf.py's permute:
** reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2)). Real models from ../shared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensormorph.h"
#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static const char *model(const char *rel) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/models/%s", tmv_shared_dir(), rel);
    return buf[k];
}

/* The HF row stored in GGUF row g of a q projection with n_head heads of `rows` rows: GGUF row
** h*d + 2*i + j (d = rows/n_head, i < d/2, j < 2) holds HF row h*d + j*d/2 + i. */
static int64_t hf_row_of(int64_t g, int64_t rows, int n_head) {
    int64_t d = rows / n_head, h = g / d, r = g % d;
    return h * d + (r % 2) * (d / 2) + r / 2;
}

typedef struct {
    tm_file *q, *ref;
    int64_t qi, ri;
    float *hf;    /* the HF tensor as stored */
} pair_fx;

static void open_pair(pair_fx *p) {
    tm_err err;
    assert_int_equal(tm_open(model("gguf/stories260K-Q4_K_M.gguf"), NULL, &p->q, &err), TM_OK);
    assert_int_equal(tm_open(model("safetensors/stories260K-f32"), NULL, &p->ref, &err), TM_OK);
    p->qi = tm_file_find(p->q, "blk.0.attn_q.weight");
    p->ri = tm_file_find(p->ref, "model.layers.0.self_attn.q_proj.weight");
    assert_true(p->qi >= 0 && p->ri >= 0);
    p->hf = malloc(64 * 64 * sizeof *p->hf);
    assert_int_equal(tm_tensor_read_f32(p->ref, p->ri, 0, 64 * 64, p->hf, &err), TM_OK);
}

static void close_pair(pair_fx *p) {
    free(p->hf);
    tm_close(p->q);
    tm_close(p->ref);
}

/* the reference value at GGUF element (row, col): stories260K has 8 attention heads */
static double ref_at(const pair_fx *p, int64_t row, int64_t col) {
    return p->hf[hf_row_of(row, 64, 8) * 64 + col];
}

static void test_scalar_ref_pairs_hf_and_gguf(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    pair_fx p;
    open_pair(&p);
    static const int64_t at[][2] = {{1, 2}, {3, 0}, {9, 63}, {62, 7}};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        json_t *d = tmt_run_json(0, "%s scalar %s blk.0.attn_q.weight %lld,%lld --ref %s --json", tmt_bin(),
                                 model("gguf/stories260K-Q4_K_M.gguf"), (long long)at[k][0], (long long)at[k][1],
                                 model("safetensors/stories260K-f32"));
        json_t *rv = json_object_get(d, "ref_value");
        if (!json_is_number(rv)) fail_msg("scalar %lld,%lld: ref_value is not a number", (long long)at[k][0], (long long)at[k][1]);
        assert_true(fabs(json_number_value(rv) - ref_at(&p, at[k][0], at[k][1])) < 1e-7);
        json_decref(d);
    }
    /* the text form names the reference tensor */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s scalar %s blk.0.attn_q.weight 1,2 --ref %s", tmt_bin(),
                             model("gguf/stories260K-Q4_K_M.gguf"), model("safetensors/stories260K-f32")), 0);
    assert_non_null(strstr(o, "tensor 'model.layers.0.self_attn.q_proj.weight' of the reference"));
    free(o);
    close_pair(&p);
}

/* heatmap --mode error: the range with the HF reference is the range with the same reference
** converted to GGUF (tensormorph convert: same names, rows already permuted, read as stored) */
static double heatmap_error_max(const char *ref, const char *want_ref_tensor) {
    char png[64];
    snprintf(png, sizeof png, "/tmp/tm_refpair_%d.png", (int)getpid());
    json_t *d = tmt_run_json(0, "%s heatmap %s blk.0.attn_q.weight --mode error --ref %s -o %s --json", tmt_bin(),
                             model("gguf/stories260K-Q4_K_M.gguf"), ref, png);
    remove(png);
    assert_string_equal(json_string_value(json_object_get(d, "ref_tensor")), want_ref_tensor);
    double got = json_number_value(json_array_get(json_object_get(d, "range"), 1));
    json_decref(d);
    return got;
}

static void test_heatmap_ref_pairs_hf_and_gguf(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char dir[64], conv[96];
    snprintf(dir, sizeof dir, "/tmp/tm_refpair_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(conv, sizeof conv, "%s/c.gguf", dir);
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s convert %s -o %s --vocab-from %s 2>&1", tmt_bin(), model("safetensors/stories260K-f32"),
                             conv, model("gguf/stories260K-Q4_K_M.gguf")), 0);
    free(o);
    double same = heatmap_error_max(conv, "blk.0.attn_q.weight");
    double paired = heatmap_error_max(model("safetensors/stories260K-f32"), "model.layers.0.self_attn.q_proj.weight");
    tmt_run(&o, "rm -rf %s", dir);
    free(o);
    assert_true(same > 0.1 && same < 1.5); /* rounding error, not a row mix-up */
    if (fabs(paired - same) > 1e-9) fail_msg("heatmap error max %.9g with the HF ref, %.9g with it as GGUF", paired, same);
}

/* the web UI's scalar endpoint, with --ref */
static void test_serve_scalar_ref_pairs(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    pair_fx p;
    open_pair(&p);
    char q[700], r[700];
    snprintf(q, sizeof q, "%s", model("gguf/stories260K-Q4_K_M.gguf"));
    snprintf(r, sizeof r, "%s", model("safetensors/stories260K-f32"));
    const char *args[] = {q, "--ref", r, NULL};
    int port = 0;
    FILE *in;
    int pid = tmt_serve_start(args, &port, &in);
    int status = 0;
    json_t *d = tmt_http_json(port, "/api/v1/scalar?name=blk.0.attn_q.weight&index=9,63", &status);
    tmt_serve_stop(pid, in);
    assert_int_equal(status, 200);
    json_t *rv = json_object_get(d, "ref_value");
    if (!json_is_number(rv)) fail_msg("/api/v1/scalar: ref_value is not a number");
    assert_true(fabs(json_number_value(rv) - ref_at(&p, 9, 63)) < 1e-7);
    json_decref(d);
    close_pair(&p);
}

/* --json error documents carry the stderr text as their message, whichever way the command
** printed it (docs/exit-codes.md); `cmd` is run with stderr to a file. */
static void expect_error_doc(int rc, const char *cmd, const char *want) {
    char err[64];
    snprintf(err, sizeof err, "/tmp/tm_errdoc_%d.txt", (int)getpid());
    json_t *d = tmt_run_json(rc, "%s %s --json 2>%s", tmt_bin(), cmd, err);
    char *e = tmt_read_file(err);
    remove(err);
    json_t *x = json_object_get(d, "error");
    const char *msg = json_string_value(json_object_get(x, "message"));
    assert_int_equal(json_integer_value(json_object_get(x, "code")), rc);
    if (!msg || !strstr(msg, want) || !e || !strstr(e, msg))
        fail_msg("%s: message '%s' (want '%s', and the stderr text):\n%s", cmd, msg ? msg : "(none)", want, e ? e : "");
    free(e);
    json_decref(d);
}

static void test_json_error_message_is_stderr(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char c[1600];
    const char *g = model("gguf/stories260K-Q4_K_M.gguf");
    snprintf(c, sizeof c, "graph %s", g);
    expect_error_doc(3, c, "has no graph");
    snprintf(c, sizeof c, "heatmap %s nosuch -o /tmp/tm_errdoc_never.png", g);
    expect_error_doc(2, c, "no tensor named 'nosuch'");
    expect_error_doc(4, "calibrate /nonexist.npy", "/nonexist.npy: cannot open");
}

/* a long flag given a value is named, and --json=... still answers with the JSON document */
static void test_flag_with_value_named(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char c[1600];
    snprintf(c, sizeof c, "inspect %s --quiet=1", model("gguf/stories260K-Q4_K_M.gguf"));
    expect_error_doc(2, c, "option '--quiet' takes no value");
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s inspect --json=yes %s 2>/dev/null", tmt_bin(), model("gguf/stories260K-Q4_K_M.gguf")), 2);
    json_error_t je;
    json_t *d = json_loads(o ? o : "", 0, &je);
    if (!d) fail_msg("inspect --json=yes: stdout is no JSON document: %s", o ? o : "");
    assert_string_equal(json_string_value(json_object_get(json_object_get(d, "error"), "message")),
                        "option '--json' takes no value");
    json_decref(d);
    free(o);
}

/* serve --json: its first stdout line is one JSON document naming the URL and port, then it
** serves (the API answers on that port) */
static void test_serve_json_line(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl(tmt_bin(), tmt_bin(), "serve", model("gguf/stories260K-Q4_K_M.gguf"), "--port", "0", "--json", "-q",
              (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *p = fdopen(fd[0], "r");
    char line[512] = "";
    if (!fgets(line, sizeof line, p)) line[0] = '\0';
    json_error_t je;
    json_t *d = json_loads(line, 0, &je);
    int port = d ? (int)json_integer_value(json_object_get(d, "port")) : 0;
    int status = 0;
    json_t *t = port > 0 ? tmt_http_json(port, "/api/v1/tensor?name=blk.0.attn_q.weight", &status) : NULL;
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    fclose(p);
    if (!d) fail_msg("serve --json: first line is no JSON document: '%s'", line);
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.serve/1");
    char want[64];
    snprintf(want, sizeof want, "http://127.0.0.1:%d/", port);
    assert_string_equal(json_string_value(json_object_get(d, "url")), want);
    assert_int_equal(status, 200);
    json_decref(t);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_ref_pairs_hf_and_gguf),
        cmocka_unit_test(test_heatmap_ref_pairs_hf_and_gguf),
        cmocka_unit_test(test_serve_scalar_ref_pairs),
        cmocka_unit_test(test_json_error_message_is_stderr),
        cmocka_unit_test(test_flag_with_value_named),
        cmocka_unit_test(test_serve_json_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
