/* test_evidence_llm.c: `tensormorph evidence BASE.gguf CAND.gguf --text FILE` end to end on real
** models from ../shared, run on llama.cpp (CPU) through runner/llm_evidence.js and node-llama-cpp.
** Anchor: stories260K-F32 vs stories260K-Q4_K_M on ../shared/models/text/stories260K-eval.txt with
** ctx 128 agrees with llama.cpp's own llama-perplexity figures (models/text/README.md): mean KLD
** within 3% relative (or 3e-5 absolute), same top-1 within 0.5 points, base PPL within 1%. A
** model against itself: exactly 0 KLD, 100% top-1, PPL ratio 1, for every format ../shared holds
** (GGUF types as they are, safetensors/.pt/compressed-tensors/aidreams260K converted first). The other GGUF types order
** plausibly (F16 < Q8_0 <= Q6_K < Q5_K_M < Q4_K_M < Q2_K, gguf-py Q4_0 > Q4_K_M in mean KLD), through one base cache
** (hit, same numbers; another text refused; a truncated cache refused). Slices: each equals a
** separate run on its text; overall is token-weighted. Bad input: a text shorter than two
** chunks, vocabularies that differ, a file that is no checkpoint; a converted safetensors
** checkpoint (KLD 0 against the GGUF made from it, latency not representative); a model llama.cpp cannot load, NaN
** weights (counted, statistics null, exit 3), the runner crashing (stderr kept, named), a
** missing node-llama-cpp (install command), Ctrl-C (exit 130, nothing written).
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
#include "tensormorph/gguf_write.h"
#include "core/jschema.h"
#include "helpers/cli_run.h"
#include "helpers/llama_rt.h"
#include "helpers/vectors.h"

static char g_tmp[256];
static char g_gguf[1024], g_text[1024];

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

static void node_modules(char *buf, size_t n) {
    const char *e = getenv("TM_NODE_MODULES"), *src = getenv("TM_SRC");
    if (e && *e) snprintf(buf, n, "%s", e);
    else snprintf(buf, n, "%s/runner/node_modules", src ? src : ".");
}

/* 1 when the test may go on: ../shared, node and node-llama-cpp are there. */
static int require_llama(void) {
    if (!tmv_require_shared()) return 0;
    char p[1200];
    snprintf(p, sizeof p, "%s/stories260K-F32.gguf", g_gguf);
    if (access(p, R_OK) != 0 || access(g_text, R_OK) != 0) { skip_or_fail("stories260K GGUF or eval text not in ../shared", "TM_REQUIRE_SHARED"); return 0; }
    if (!tmt_llama_modules()) { skip(); return 0; }
    return 1;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_test_evllm_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    const char *sh = tmv_shared_dir();
    snprintf(g_gguf, sizeof g_gguf, "%s/models/gguf", sh ? sh : "/nonexistent");
    snprintf(g_text, sizeof g_text, "%s/models/text/stories260K-eval.txt", sh ? sh : "/nonexistent");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static void check_schema(json_t *d) {
    tm_err err;
    tm_status s = tm__jschema_validate_named("evidence", d, "evidence", &err);
    if (s) print_message("%s\n", err.msg);
    assert_int_equal(s, TM_OK);
}

/* evidence of stories260K-<base> vs stories260K-<cand> (file names under models/gguf) with extra
** options; expect exit rc; the document (stdout, --json) or NULL when rc != 0. */
static json_t *evid(int rc, const char *base, const char *cand, const char *extra) {
    char *out = NULL;
    int got = tmt_run(&out, "'%s' evidence '%s/%s' '%s/%s' --ctx 128 --gen 4 %s --json 2>'%s/stderr.txt'", tmt_bin(),
                      g_gguf, base, g_gguf, cand, extra, g_tmp);
    if (got != rc) {
        char p[400];
        snprintf(p, sizeof p, "%s/stderr.txt", g_tmp);
        char *e = tmt_read_file(p);
        print_message("exit %d (want %d): %s\n", got, rc, e ? e : "");
        free(e);
    }
    assert_int_equal(got, rc);
    json_t *d = NULL;
    if (rc == 0 || (out && out[0] == '{')) {
        json_error_t je;
        d = json_loads(out ? out : "", 0, &je);
        if (!d) print_message("not JSON: %s\n", je.text);
        assert_non_null(d);
    }
    free(out);
    return d;
}

static char *stderr_text(void) {
    char p[400];
    snprintf(p, sizeof p, "%s/stderr.txt", g_tmp);
    char *e = tmt_read_file(p);
    assert_non_null(e);
    return e;
}

static double stat_of(json_t *d, const char *slice, const char *key) {
    json_t *l = json_object_get(d, "llm");
    json_t *s = slice ? json_object_get(json_object_get(l, "slices"), slice) : json_object_get(l, "overall");
    json_t *v = strncmp(key, "kld.", 4) ? json_object_get(s, key) : json_object_get(json_object_get(s, "kld"), key + 4);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}


/* append n_extra entries to a raw GGUF array value (u32 type, u64 count, elements) */
static uint8_t *grow_array(const uint8_t *v, size_t n, int n_extra, size_t *out_n) {
    uint32_t et;
    uint64_t c;
    memcpy(&et, v, 4);
    memcpy(&c, v + 4, 8);
    uint8_t *b = malloc(n + (size_t)n_extra * 32);
    assert_non_null(b);
    memcpy(b, v, n);
    size_t o = n;
    for (int i = 0; i < n_extra; i++) {
        if (et == 8) { /* string */
            char t[24];
            int l = snprintf(t, sizeof t, "[EXTRA%d]", i);
            uint64_t ll = (uint64_t)l;
            memcpy(b + o, &ll, 8);
            memcpy(b + o + 8, t, (size_t)l);
            o += 8 + (size_t)l;
        } else if (et == 6) { /* f32 score */
            float f = -1000.0f;
            memcpy(b + o, &f, 4);
            o += 4;
        } else { /* i32 token type: USER_DEFINED */
            int32_t t = 4;
            memcpy(b + o, &t, 4);
            o += 4;
        }
    }
    c += (uint64_t)n_extra;
    memcpy(b + 4, &c, 8);
    *out_n = o;
    return b;
}

/* stories260K-F32.gguf with 8 more tokens (a vocabulary of 520, token_embd padded with zero rows;
** llama.cpp loads it), written with the library's GGUF writer. */
static void write_vocab520(const char *out) {
    char src[1200];
    snprintf(src, sizeof src, "%s/stories260K-F32.gguf", g_gguf);
    tm_gguf_kvlist *kv = NULL;
    assert_int_equal(tm_gguf_kvlist_read(src, &kv, NULL), TM_OK);
    static const char *const arr[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"};
    for (int a = 0; a < 3; a++) {
        int64_t i = tm_gguf_kvlist_find(kv, arr[a]);
        assert_true(i >= 0);
        size_t n, m;
        const uint8_t *v = tm_gguf_kvlist_raw(kv, i, &n);
        uint8_t *g = grow_array(v, n, 8, &m);
        assert_int_equal(tm_gguf_kvlist_set_raw(kv, arr[a], TM_GGUF_ARRAY, g, m, NULL), TM_OK);
        free(g);
    }
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "llama.vocab_size", 520, NULL), TM_OK);
    tm_file *f = NULL;
    assert_int_equal(tm_open(src, NULL, &f, NULL), TM_OK);
    int64_t n = tm_file_n_tensors(f);
    tm_gguf_wtensor *wt = calloc((size_t)n, sizeof *wt);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        wt[i].name = t->name;
        wt[i].type = 0; /* F32 */
        wt[i].n_dims = t->ndim;
        wt[i].ne[0] = t->shape[t->ndim - 1];
        wt[i].ne[1] = t->ndim == 2 ? t->shape[0] : 1;
        wt[i].ne[2] = wt[i].ne[3] = 1;
        if (!strcmp(t->name, "token_embd.weight")) {
            assert_int_equal(wt[i].ne[1], 512);
            wt[i].ne[1] = 520;
        }
    }
    tm_gguf_writer *w = NULL;
    assert_int_equal(tm_gguf_writer_open(out, kv, wt, n, &w, NULL), TM_OK);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        assert_int_equal(t->dtype, TM_F32);
        const void *d;
        assert_int_equal(tm_tensor_data(f, i, 0, t->n_bytes, &d, NULL), TM_OK);
        assert_int_equal(tm_gguf_writer_write(w, i, 0, d, (size_t)t->n_bytes, NULL), TM_OK);
        if (wt[i].ne[1] == 520) {
            static const float zero[64 * 8];
            assert_int_equal(tm_gguf_writer_write(w, i, t->n_bytes, zero, sizeof zero, NULL), TM_OK);
        }
    }
    assert_int_equal(tm_gguf_writer_finish(w, NULL), TM_OK);
    tm_gguf_writer_free(w);
    free(wt);
    tm_close(f);
    tm_gguf_kvlist_free(kv);
}

/* ---- tests ------------------------------------------------------------------------------ */

/* The anchor: llama-perplexity's figures in models/text/README.md. */
static void test_anchor_q4_k_m(void **state) {
    (void)state;
    if (!require_llama()) return;
    char extra[1200];
    snprintf(extra, sizeof extra, "--text '%s'", g_text);
    json_t *d = evid(0, "stories260K-F32.gguf", "stories260K-Q4_K_M.gguf", extra);
    check_schema(d);
    json_t *l = json_object_get(d, "llm"), *pr = json_object_get(l, "protocol");
    assert_int_equal(json_integer_value(json_object_get(pr, "ctx")), 128);
    assert_int_equal(json_integer_value(json_object_get(pr, "chunks")), 28);
    assert_int_equal(json_integer_value(json_object_get(pr, "scored_tokens")), 28 * 63);
    assert_int_equal(json_integer_value(json_object_get(pr, "vocab_size")), 512);
    assert_string_equal(json_string_value(json_object_get(pr, "text_sha256")),
                        "4956e5f6161636a7dca377db09f3959ac50af101dbfa03c8f6fa75b0760b3c87");
    assert_non_null(json_object_get(json_object_get(l, "slices"), "stories260K-eval"));
    double kld = stat_of(d, NULL, "kld.mean"), ref = 0.014623;
    double tol = fmax(0.03 * ref, 3e-5);
    print_message("mean KLD %.6f (llama-perplexity %.6f), same top-1 %.4f%%, PPL %.4f\n", kld, ref,
                  100 * stat_of(d, NULL, "same_top1"), stat_of(d, NULL, "ppl_base"));
    assert_true(fabs(kld - ref) <= tol);
    assert_true(fabs(100 * stat_of(d, NULL, "same_top1") - 93.878) <= 0.5);
    assert_true(fabs(stat_of(d, NULL, "ppl_base") / 3.1155 - 1) <= 0.01);
    assert_true(fabs(stat_of(d, NULL, "ppl_cand") / 3.1471 - 1) <= 0.01);
    assert_true(stat_of(d, NULL, "kld.median") <= stat_of(d, NULL, "kld.p90"));
    assert_true(stat_of(d, NULL, "kld.p99") <= stat_of(d, NULL, "kld.p999"));
    assert_true(stat_of(d, NULL, "kld.p999") <= stat_of(d, NULL, "kld.max"));
    /* the worst positions: 20, descending, the first is the max, each decodable */
    json_t *w = json_object_get(l, "worst");
    assert_int_equal(json_array_size(w), 20);
    assert_true(fabs(json_number_value(json_object_get(json_array_get(w, 0), "kld")) - stat_of(d, NULL, "kld.max")) == 0);
    for (size_t i = 1; i < 20; i++)
        assert_true(json_number_value(json_object_get(json_array_get(w, i), "kld")) <=
                    json_number_value(json_object_get(json_array_get(w, i - 1), "kld")));
    json_t *w0 = json_array_get(w, 0);
    int64_t pos = json_integer_value(json_object_get(w0, "position"));
    assert_true(pos % 128 >= 64 && pos % 128 <= 126);
    assert_true(strlen(json_string_value(json_object_get(w0, "context"))) > 10);
    assert_int_equal(json_array_size(json_object_get(w0, "base_top")), 3);
    /* histogram counts add up to the scored tokens */
    json_t *h = json_object_get(json_object_get(json_object_get(l, "histogram"), "stories260K-eval"), "counts");
    json_int_t sum = 0;
    for (size_t i = 0; i < json_array_size(h); i++) sum += json_integer_value(json_array_get(h, i));
    assert_int_equal(sum, 28 * 63);
    /* latency: --gen 4 per chunk, nearest-rank p50 recomputed */
    json_t *m = json_object_get(json_object_get(d, "models"), "candidate");
    json_t *dm = json_object_get(m, "decode_ms");
    assert_int_equal(json_array_size(dm), 28 * 4);
    size_t n = json_array_size(dm), below = 0;
    double p50 = json_number_value(json_object_get(m, "decode_p50_ms"));
    for (size_t i = 0; i < n; i++) below += json_number_value(json_array_get(dm, i)) <= p50;
    assert_true(below * 2 >= n);
    assert_true(json_number_value(json_object_get(m, "prompt_tokens_per_s")) > 0);
    assert_true(json_integer_value(json_object_get(m, "peak_rss_bytes")) > 1 << 20);
    assert_true(json_is_true(json_object_get(m, "latency_representative")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(d, "runtime"), "version")), "3.21.1");
    json_decref(d);
}

static void test_self_is_zero(void **state) {
    (void)state;
    if (!require_llama()) return;
    char extra[1200];
    snprintf(extra, sizeof extra, "--text '%s' --chunks 4", g_text);
    json_t *d = evid(0, "stories260K-F32.gguf", "stories260K-F32.gguf", extra);
    check_schema(d);
    assert_true(stat_of(d, NULL, "kld.mean") == 0);
    assert_true(stat_of(d, NULL, "kld.max") == 0);
    assert_true(stat_of(d, NULL, "same_top1") == 1);
    assert_true(stat_of(d, NULL, "ppl_ratio") == 1);
    assert_true(stat_of(d, NULL, "rms_dp") == 0);
    assert_int_equal((int)stat_of(d, NULL, "scored_tokens"), 4 * 63);
    json_decref(d);
}

/* The runner's direct path (node-llama-cpp 3.21.1's addon calls, what evidence uses) writes the
** same probs.bin bytes as controlledEvaluate ("direct": false), for a quantized model. */
static void test_runner_direct_same_rows(void **state) {
    (void)state;
    if (!require_llama()) return;
    char nm[1024], model[1200];
    node_modules(nm, sizeof nm);
    snprintf(model, sizeof model, "%s/stories260K-Q4_K_M.gguf", g_gguf);
    const char *src = getenv("TM_SRC");
    for (int d = 0; d < 2; d++) {
        char dir[400], job[500], txt[4096];
        snprintf(dir, sizeof dir, "%s/direct%d", g_tmp, d);
        snprintf(job, sizeof job, "%s/job.json", dir);
        assert_int_equal(mkdir(dir, 0700), 0);
        int n = snprintf(txt, sizeof txt, "{\"node_modules\":\"%s\",\"model\":\"%s\",\"threads\":1,\"ctx\":128,"
                         "\"chunks\":3,\"gen\":0,\"warmup\":1,\"probs\":true,\"direct\":%s,\"out_dir\":\"%s\","
                         "\"texts\":[{\"name\":\"t\",\"file\":\"%s\"}]}", nm, model, d ? "true" : "false", dir, g_text);
        assert_true(n > 0 && (size_t)n < sizeof txt);
        write_file(job, txt, (size_t)n);
        assert_int_equal(tmt_run(NULL, "node '%s/runner/llm_evidence.js' '%s' >/dev/null", src ? src : ".", job), 0);
    }
    struct stat st;
    char p0[400];
    snprintf(p0, sizeof p0, "%s/direct0/probs.bin", g_tmp);
    assert_int_equal(stat(p0, &st), 0);
    assert_int_equal((long long)st.st_size, 3LL * 63 * 512 * 4); /* 3 chunks x 63 rows x 512 float32 */
    assert_int_equal(tmt_run(NULL, "cmp '%s' '%s/direct1/probs.bin'", p0, g_tmp), 0);
}

/* Every other GGUF type of stories260K against F32, through one base cache. */
static void test_types_order_and_cache(void **state) {
    (void)state;
    if (!require_llama()) return;
    const char *types[] = {"F16", "Q8_0-ggufpy", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0-ggufpy", "Q2_K"};
    double k[7];
    char extra[1600], cache[400], fn[64];
    snprintf(cache, sizeof cache, "%s/base.cache", g_tmp);
    snprintf(extra, sizeof extra, "--text '%s' --chunks 8 --base-cache '%s'", g_text, cache);
    for (int i = 0; i < 7; i++) {
        snprintf(fn, sizeof fn, "stories260K-%s.gguf", types[i]);
        json_t *d = evid(0, "stories260K-F32.gguf", fn, extra);
        check_schema(d);
        json_t *bc = json_object_get(json_object_get(d, "protocol"), "base_cache");
        assert_int_equal(json_is_true(json_object_get(bc, "hit")), i > 0);
        /* the size bound: 16 + header + 4 * V * rows */
        struct stat st;
        assert_int_equal(stat(cache, &st), 0);
        assert_true(st.st_size > 4 * 512 * 8 * 63 && st.st_size < 4 * 512 * 8 * 63 + (1 << 20));
        k[i] = stat_of(d, NULL, "kld.mean");
        print_message("%-12s mean KLD %.6g  same top-1 %.4f\n", types[i], k[i], stat_of(d, NULL, "same_top1"));
        if (i == 4) { /* a cache hit gives what a fresh run gives */
            char fresh[1400];
            snprintf(fresh, sizeof fresh, "--text '%s' --chunks 8", g_text);
            json_t *f = evid(0, "stories260K-F32.gguf", fn, fresh);
            assert_true(stat_of(f, NULL, "kld.mean") == k[i]);
            assert_true(stat_of(f, NULL, "ppl_base") == stat_of(d, NULL, "ppl_base"));
            json_decref(f);
        }
        json_decref(d);
    }
    /* F16 < Q8_0 <= Q6_K < Q5_K_M < Q4_K_M < Q2_K: with rows of 64 (not a multiple of 256)
    ** llama.cpp's quantizer falls back from Q6_K to Q8_0, so those two are equal here; the
    ** gguf-py Q4_0 quantizes every tensor (embeddings too): worse than Q4_K_M */
    assert_true(k[0] > 0 && k[0] < k[1]);
    assert_true(k[1] <= k[2] && k[2] < k[3] && k[3] < k[4] && k[4] < k[6]);
    assert_true(k[5] > k[4]);
    /* a cache made for another text is refused, naming it */
    char other[400];
    snprintf(other, sizeof other, "%s/other.txt", g_tmp);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && echo more >> '%s'", g_text, other, other);
    assert_int_equal(tmt_run(NULL, "%s", cmd), 0);
    snprintf(extra, sizeof extra, "--text 'stories260K-eval=%s' --chunks 8 --base-cache '%s'", other, cache);
    json_decref(evid(3, "stories260K-F32.gguf", "stories260K-Q8_0-ggufpy.gguf", extra));
    char *e = stderr_text();
    assert_non_null(strstr(e, "base cache belongs to another text set"));
    free(e);
    /* one flipped byte among the rows is refused (CRC-32C trailer), naming the cache and its
    ** checksum; the same cache restored is a hit again */
    struct stat cs;
    assert_int_equal(stat(cache, &cs), 0);
    char saved[420];
    snprintf(saved, sizeof saved, "%s.saved", cache);
    assert_int_equal(tmt_run(NULL, "cp '%s' '%s'", cache, saved), 0);
    FILE *cf = fopen(cache, "r+b");
    assert_non_null(cf);
    assert_int_equal(fseek(cf, (long)(cs.st_size / 2), SEEK_SET), 0);
    int c0 = fgetc(cf);
    assert_int_equal(fseek(cf, (long)(cs.st_size / 2), SEEK_SET), 0);
    fputc(c0 ^ 0x10, cf);
    fclose(cf);
    snprintf(extra, sizeof extra, "--text '%s' --chunks 8 --base-cache '%s'", g_text, cache);
    json_decref(evid(3, "stories260K-F32.gguf", "stories260K-Q8_0-ggufpy.gguf", extra));
    e = stderr_text();
    assert_non_null(strstr(e, cache));
    assert_non_null(strstr(e, "damaged"));
    free(e);
    assert_int_equal(rename(saved, cache), 0);
    json_t *again = evid(0, "stories260K-F32.gguf", "stories260K-Q4_K_M.gguf", extra);
    assert_true(json_is_true(json_object_get(json_object_get(json_object_get(again, "protocol"), "base_cache"), "hit")));
    assert_true(stat_of(again, NULL, "kld.mean") == k[4]);
    json_decref(again);
    /* a truncated cache is refused */
    assert_int_equal(truncate(cache, 5000), 0);
    snprintf(extra, sizeof extra, "--text '%s' --chunks 8 --base-cache '%s'", g_text, cache);
    json_decref(evid(3, "stories260K-F32.gguf", "stories260K-Q8_0-ggufpy.gguf", extra));
    e = stderr_text();
    assert_non_null(strstr(e, cache));
    free(e);
}

/* A non-GGUF checkpoint is converted first (tensormorph/convert.h): the F32 safetensors the
** F32 GGUF was made from gives exactly its distributions; its latency is not representative. */
static void test_converted_checkpoint(void **state) {
    (void)state;
    if (!require_llama()) return;
    char st[1200], extra[2600];
    snprintf(st, sizeof st, "%s/../safetensors/stories260K-f32", g_gguf);
    if (access(st, R_OK) != 0) { skip_or_fail("safetensors/stories260K-f32 not in ../shared", "TM_REQUIRE_SHARED"); return; }
    snprintf(extra, sizeof extra, "--text '%s' --chunks 4 --vocab-from '%s/stories260K-F32.gguf'", g_text, g_gguf);
    char *out = NULL;
    int rc = tmt_run(&out, "'%s' evidence '%s/stories260K-F32.gguf' '%s' --ctx 128 --gen 2 %s --json 2>'%s/stderr.txt'", tmt_bin(),
                     g_gguf, st, extra, g_tmp);
    assert_int_equal(rc, 0);
    json_t *d = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(d);
    check_schema(d);
    assert_true(stat_of(d, NULL, "kld.max") == 0);
    assert_true(stat_of(d, NULL, "same_top1") == 1);
    json_t *c = json_object_get(json_object_get(d, "models"), "candidate");
    assert_true(json_is_false(json_object_get(c, "latency_representative")));
    assert_true(json_is_true(json_object_get(json_object_get(json_object_get(d, "models"), "baseline"), "latency_representative")));
    json_t *src = json_object_get(c, "source");
    assert_string_equal(json_string_value(json_object_get(src, "architecture")), "LlamaForCausalLM");
    assert_int_equal(strlen(json_string_value(json_object_get(json_array_get(json_object_get(src, "files"), 0), "sha256"))), 64);
    json_decref(d);
    /* without a tokenizer: exit 3 naming --vocab-from */
    rc = tmt_run(NULL, "'%s' evidence '%s/stories260K-F32.gguf' '%s' --ctx 128 --text '%s' 2>'%s/stderr.txt'", tmt_bin(), g_gguf, st,
                 g_text, g_tmp);
    assert_int_equal(rc, 3);
    char *e = stderr_text();
    assert_non_null(strstr(e, "conversion to GGUF"));
    assert_non_null(strstr(e, "--vocab-from"));
    free(e);
}


/* Every format ../shared holds stories260K (and aidreams260K) in runs in evidence against itself
** with exactly 0 KLD, 100% top-1 and PPL ratio 1: the GGUF types as they are, the other formats
** converted first (safetensors F16/BF16/2 shards, the .pt state dict with its config.json,
** compressed-tensors int8 made by `quantize`, aidreams260K BF16 safetensors). Lean: ctx 128, 2
** chunks, no decode timing. */
static void test_every_format_self(void **state) {
    (void)state;
    if (!require_llama()) return;
    char models[1200];
    snprintf(models, sizeof models, "%s/..", g_gguf);
    char ptd[400], pt[500], ct[400];
    snprintf(ptd, sizeof ptd, "%s/pt", g_tmp);
    snprintf(pt, sizeof pt, "%s/stories260K_state_dict.pt", ptd);
    snprintf(ct, sizeof ct, "%s/ct", g_tmp);
    assert_int_equal(tmt_run(NULL, "mkdir -p '%s' && cp '%s/torch/stories260K_state_dict.pt' '%s/safetensors/stories260K-f32/config.json' '%s/'",
                             ptd, models, models, ptd), 0);
    assert_int_equal(tmt_run(NULL, "'%s' quantize '%s/safetensors/stories260K-f32' -o '%s' -t int8 --no-checksums -q", tmt_bin(), models, ct), 0);
    struct { const char *path; const char *vocab; } m[] = {
        {"gguf/stories260K-F16.gguf", NULL},        {"gguf/stories260K-Q8_0-ggufpy.gguf", NULL},
        {"gguf/stories260K-Q4_0-ggufpy.gguf", NULL}, {"gguf/stories260K-Q4_K_M.gguf", NULL},
        {"gguf/stories260K-Q5_K_M.gguf", NULL},     {"gguf/stories260K-Q6_K.gguf", NULL},
        {"gguf/stories260K-Q2_K.gguf", NULL},       {"gguf/aidreams260K-F16.gguf", NULL},
        {"gguf/aidreams260K-Q4_K_M.gguf", NULL},
        {"safetensors/stories260K-f16", "stories260K-F32.gguf"},
        {"safetensors/stories260K-bf16", "stories260K-F32.gguf"},
        {"safetensors/stories260K-f32-2shards", "stories260K-F32.gguf"},
        {"safetensors/aidreams260K-bf16", "aidreams260K-F16.gguf"},
        {pt, "stories260K-F32.gguf"},
        {ct, "stories260K-F32.gguf"},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char path[1400], vf[1400] = "", *out = NULL;
        if (m[i].path[0] == '/') snprintf(path, sizeof path, "%s", m[i].path);
        else snprintf(path, sizeof path, "%s/%s", models, m[i].path);
        if (m[i].vocab) snprintf(vf, sizeof vf, "--vocab-from '%s/%s'", g_gguf, m[i].vocab);
        int rc = tmt_run(&out, "'%s' evidence '%s' '%s' --text '%s' --ctx 128 --chunks 2 --gen 0 --warmup 0 %s --json 2>'%s/stderr.txt'",
                         tmt_bin(), path, path, g_text, vf, g_tmp);
        if (rc) {
            char *e = stderr_text();
            fail_msg("%s: exit %d: %s", m[i].path, rc, e);
        }
        json_t *d = json_loads(out, 0, NULL);
        free(out);
        assert_non_null(d);
        check_schema(d);
        print_message("%-40s mean KLD %g  max %g  same top-1 %g\n", m[i].path, stat_of(d, NULL, "kld.mean"),
                      stat_of(d, NULL, "kld.max"), stat_of(d, NULL, "same_top1"));
        assert_true(stat_of(d, NULL, "kld.mean") == 0);
        assert_true(stat_of(d, NULL, "kld.max") == 0);
        assert_true(stat_of(d, NULL, "same_top1") == 1);
        assert_true(stat_of(d, NULL, "ppl_ratio") == 1);
        assert_int_equal((int)stat_of(d, NULL, "scored_tokens"), 2 * 63);
        json_t *c = json_object_get(json_object_get(d, "models"), "candidate");
        assert_int_equal(json_is_true(json_object_get(c, "latency_representative")), m[i].vocab == NULL);
        json_decref(d);
    }
}

/* Two slices: each equals a separate run on its own text; overall is token-weighted. */
static void test_slices(void **state) {
    (void)state;
    if (!require_llama()) return;
    char *t = tmt_read_file(g_text);
    assert_non_null(t);
    size_t n = strlen(t), half = n / 2;
    while (half < n && t[half] != '\n') half++;
    char a[400], b[400], extra[1200];
    snprintf(a, sizeof a, "%s/a.txt", g_tmp);
    snprintf(b, sizeof b, "%s/b.txt", g_tmp);
    write_file(a, t, half + 1);
    write_file(b, t + half + 1, n - half - 1);
    free(t);
    snprintf(extra, sizeof extra, "--text 'first=%s' --text 'second=%s'", a, b);
    json_t *d = evid(0, "stories260K-F32.gguf", "stories260K-Q4_K_M.gguf", extra);
    check_schema(d);
    snprintf(extra, sizeof extra, "--text '%s'", b);
    json_t *s2 = evid(0, "stories260K-F32.gguf", "stories260K-Q4_K_M.gguf", extra);
    assert_true(stat_of(d, "second", "kld.mean") == stat_of(s2, "b", "kld.mean"));
    assert_true(stat_of(d, "second", "same_top1") == stat_of(s2, "b", "same_top1"));
    double n1 = stat_of(d, "first", "scored_tokens"), n2 = stat_of(d, "second", "scored_tokens");
    assert_true(stat_of(d, NULL, "scored_tokens") == n1 + n2);
    double w = (n1 * stat_of(d, "first", "kld.mean") + n2 * stat_of(d, "second", "kld.mean")) / (n1 + n2);
    assert_true(fabs(stat_of(d, NULL, "kld.mean") - w) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(json_object_get(d, "llm"), "slices"), "first"), "chunks")),
                     json_integer_value(json_object_get(json_object_get(d, "protocol"), "chunks")) -
                         json_integer_value(json_object_get(json_object_get(json_object_get(json_object_get(d, "llm"), "slices"), "second"), "chunks")));
    json_decref(s2);
    json_decref(d);
}

static void test_bad_inputs(void **state) {
    (void)state;
    if (!require_llama()) return;
    char shortp[400], extra[2000];
    snprintf(shortp, sizeof shortp, "%s/short.txt", g_tmp);
    const char *story = "Once upon a time, there was a little girl named Lily. She liked to play outside.\n";
    write_file(shortp, story, strlen(story));
    snprintf(extra, sizeof extra, "--text '%s'", shortp);
    json_decref(evid(3, "stories260K-F32.gguf", "stories260K-Q4_K_M.gguf", extra));
    char *e = stderr_text();
    assert_non_null(strstr(e, "text too short"));
    assert_non_null(strstr(e, "need 256"));
    free(e);
    /* equal vocabulary sizes, different tokens: exit 3, nothing at -o */
    char outp[400];
    snprintf(outp, sizeof outp, "%s/vocab_ev.json", g_tmp);
    snprintf(extra, sizeof extra, "--text '%s' --chunks 2 -o '%s'", g_text, outp);
    json_decref(evid(3, "stories260K-F32.gguf", "aidreams260K-F16.gguf", extra));
    e = stderr_text();
    assert_non_null(strstr(e, "vocabularies differ"));
    assert_non_null(strstr(e, "both have 512 tokens"));
    free(e);
    assert_false(tmt_exists(outp));
    /* sizes that differ (a loadable stories260K with 8 more tokens): both sizes named, nothing at -o */
    char v520[400];
    snprintf(v520, sizeof v520, "%s/vocab520.gguf", g_tmp);
    write_vocab520(v520);
    char *out = NULL, nm[1024];
    node_modules(nm, sizeof nm);
    int rc = tmt_run(&out, "'%s' evidence '%s/stories260K-F32.gguf' '%s' --ctx 128 --chunks 2 --text '%s' -o '%s' --json 2>'%s/stderr.txt'",
                     tmt_bin(), g_gguf, v520, g_text, outp, g_tmp);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "\"code\": 3"));
    free(out);
    e = stderr_text();
    assert_non_null(strstr(e, "vocabularies differ"));
    assert_non_null(strstr(e, "has 512 tokens"));
    assert_non_null(strstr(e, "has 520"));
    free(e);
    assert_false(tmt_exists(outp));
    /* the runner's own check, behind the header check: llama.cpp loads it with 520 tokens */
    rc = tmt_run(NULL, "node -e \"import('file://%s/node-llama-cpp/dist/index.js').then(async m => {const l = await "
                 "m.getLlama({gpu: false, build: 'never', logLevel: 'error'}); const md = await l.loadModel({modelPath: '%s'}); "
                 "process.exit(md.tokens.bos === 1 && md.fileInfo.metadata.tokenizer.ggml.tokens.length === 520 && md.tokens.eos === 2 ? 0 : 1);})\" 2>/dev/null", nm, v520);
    assert_int_equal(rc, 0);
    /* a vocabulary-only GGUF: llama.cpp refuses it */
    json_decref(evid(3, "stories260K-F32.gguf", "ggml-vocab-llama-spm.gguf", extra));
    e = stderr_text();
    assert_non_null(strstr(e, "ggml-vocab-llama-spm.gguf"));
    free(e);
    /* not a checkpoint at all: the conversion says so */
    out = NULL;
    rc = tmt_run(&out, "'%s' evidence '%s/stories260K-F32.gguf' '%s' --text '%s' 2>'%s/stderr.txt'", tmt_bin(),
                     g_gguf, g_text, g_text, g_tmp);
    free(out);
    assert_int_equal(rc, 3);
    e = stderr_text();
    assert_non_null(strstr(e, "conversion to GGUF (tensormorph convert"));
    free(e);
    /* an unsupported architecture: the conversion refuses it by name, exit 3 */
    char gpt2[400];
    snprintf(gpt2, sizeof gpt2, "%s/gpt2", g_tmp);
    rc = tmt_run(NULL, "mkdir -p '%s' && cp '%s/../safetensors/stories260K-f32/model.safetensors' '%s/' && "
                 "sed 's/LlamaForCausalLM/GPT2LMHeadModel/' '%s/../safetensors/stories260K-f32/config.json' > '%s/config.json'",
                 gpt2, g_gguf, gpt2, g_gguf, gpt2);
    assert_int_equal(rc, 0);
    rc = tmt_run(NULL, "'%s' evidence '%s/stories260K-F32.gguf' '%s' --text '%s' --vocab-from '%s/stories260K-F32.gguf' 2>'%s/stderr.txt'",
                 tmt_bin(), g_gguf, gpt2, g_text, g_gguf, g_tmp);
    assert_int_equal(rc, 3);
    e = stderr_text();
    assert_non_null(strstr(e, "architecture 'GPT2LMHeadModel' is not supported"));
    free(e);
    /* GGUF without --text: usage */
    rc = tmt_run(&out, "'%s' evidence '%s/stories260K-F32.gguf' '%s/stories260K-F32.gguf' 2>/dev/null", tmt_bin(), g_gguf, g_gguf);
    free(out);
    assert_int_equal(rc, 2);
    /* node-llama-cpp missing: exit 4 with the install command */
    char empty[400];
    snprintf(empty, sizeof empty, "%s/empty_nm", g_tmp);
    mkdir(empty, 0700);
    rc = tmt_run(&out, "TM_NODE_MODULES='%s' '%s' evidence '%s/stories260K-F32.gguf' '%s/stories260K-F32.gguf' --text '%s' 2>'%s/stderr.txt'",
                 empty, tmt_bin(), g_gguf, g_gguf, g_text, g_tmp);
    free(out);
    assert_int_equal(rc, 4);
    e = stderr_text();
    assert_non_null(strstr(e, "npm i -E node-llama-cpp@3.21.1"));
    free(e);
}

/* NaN weights: the rows are counted, the statistics null, exit 3, the evidence still written. */
static void test_nan_logits(void **state) {
    (void)state;
    if (!require_llama()) return;
    char src[1200], nanp[400];
    snprintf(src, sizeof src, "%s/stories260K-F32.gguf", g_gguf);
    snprintf(nanp, sizeof nanp, "%s/nan.gguf", g_tmp);
    assert_int_equal(tmt_run(NULL, "cp '%s' '%s'", src, nanp), 0);
    tm_file *f = NULL;
    tm_err err;
    assert_int_equal(tm_open(nanp, NULL, &f, &err), TM_OK);
    uint64_t off = 0, nb = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (!strcmp(t->name, "output_norm.weight")) { off = t->offset; nb = t->n_bytes; }
    }
    tm_close(f);
    assert_true(off > 0 && nb >= 4);
    FILE *fp = fopen(nanp, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (long)off, SEEK_SET), 0);
    float nan = NAN;
    for (uint64_t i = 0; i < nb / 4; i++) fwrite(&nan, 4, 1, fp);
    assert_int_equal(fclose(fp), 0);
    char out_json[400];
    snprintf(out_json, sizeof out_json, "%s/nan_ev.json", g_tmp);
    char *out = NULL;
    int rc = tmt_run(&out, "'%s' evidence '%s' '%s' --text '%s' --ctx 128 --chunks 2 --gen 0 -o '%s' 2>'%s/stderr.txt'",
                     tmt_bin(), src, nanp, g_text, out_json, g_tmp);
    free(out);
    assert_int_equal(rc, 3);
    char *e = stderr_text();
    assert_non_null(strstr(e, "126 scored positions hold NaN"));
    free(e);
    json_error_t je;
    json_t *d = json_load_file(out_json, 0, &je);
    assert_non_null(d);
    check_schema(d);
    json_t *ov = json_object_get(json_object_get(d, "llm"), "overall");
    assert_int_equal(json_integer_value(json_object_get(ov, "nan_positions")), 126);
    assert_true(json_is_null(json_object_get(json_object_get(ov, "kld"), "mean")));
    assert_true(json_is_null(json_object_get(ov, "same_top1")));
    json_decref(d);
}

/* The runner killed by a signal: exit 3, its stderr kept in the file the message names. */
static void test_runner_crash(void **state) {
    (void)state;
    if (!require_llama()) return;
    char fake[400];
    snprintf(fake, sizeof fake, "%s/fake_node.sh", g_tmp);
    const char *sh = "#!/bin/sh\necho 'llama.cpp: GGML_ASSERT failed (simulated)' >&2\nkill -SEGV $$\n";
    write_file(fake, sh, strlen(sh));
    chmod(fake, 0700);
    char *out = NULL;
    int rc = tmt_run(&out, "TM_NODE='%s' '%s' evidence '%s/stories260K-F32.gguf' '%s/stories260K-F32.gguf' --text '%s' --ctx 128 "
                     "2>'%s/stderr.txt'", fake, tmt_bin(), g_gguf, g_gguf, g_text, g_tmp);
    free(out);
    assert_int_equal(rc, 3);
    char *e = stderr_text();
    assert_non_null(strstr(e, "killed by signal 11"));
    char *k = strstr(e, "(whole stderr: ");
    assert_non_null(k);
    k += strlen("(whole stderr: ");
    char *end = strchr(k, ')');
    assert_non_null(end);
    *end = '\0';
    char *kept = tmt_read_file(k);
    assert_non_null(kept);
    assert_non_null(strstr(kept, "GGML_ASSERT failed (simulated)"));
    free(kept);
    unlink(k);
    free(e);
}

/* Ctrl-C: exit 130, -o untouched. */
static void test_interrupt(void **state) {
    (void)state;
    if (!require_llama()) return;
    char outp[400];
    snprintf(outp, sizeof outp, "%s/int.json", g_tmp);
    char *out = NULL;
    int rc = tmt_run(&out, "'%s' evidence '%s/stories260K-F32.gguf' '%s/stories260K-Q4_K_M.gguf' --text '%s' --ctx 128 -o '%s' "
                     "2>/dev/null & pid=$!; sleep 1.2; kill -INT $pid; wait $pid", tmt_bin(), g_gguf, g_gguf, g_text, outp);
    free(out);
    assert_int_equal(rc, 130);
    assert_false(tmt_exists(outp));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anchor_q4_k_m),
        cmocka_unit_test(test_runner_direct_same_rows),
        cmocka_unit_test(test_self_is_zero),
        cmocka_unit_test(test_types_order_and_cache),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_every_format_self),
        cmocka_unit_test(test_converted_checkpoint),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_nan_logits),
        cmocka_unit_test(test_runner_crash),
        cmocka_unit_test(test_interrupt),
    };
    if (getenv("TM_TEST_FILTER")) cmocka_set_test_filter(getenv("TM_TEST_FILTER")); /* e.g. test_every_format_self */
    return cmocka_run_group_tests(tests, setup, teardown);
}
