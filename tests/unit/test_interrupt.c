/* test_interrupt.c: real SIGINTs to the CLI at staggered delays, for every command that writes an
** output (quantize to a compressed-tensors directory, to GGUF and to ONNX; convert, plain and
** with --type; demo). Each signal is sent twice a few hundred microseconds apart, as timeout(1)
** does (to the child, then to its process group). Every run must end with exit 0 and a complete
** OUT, or exit 130 and nothing in its directory but what was there before: no OUT, no OUT.lock,
** no OUT.tmp.<pid>, no nested "*.tmp.<pid>.tmp.<pid>" (issue 12 items 5 and 7, tester's report).
** Before the fix the second signal made the CLI _Exit(130) while the job held OUT.lock and its
** staging files. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensormorph.h"
#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_tmp[256];

static int setup_all(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_intr_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown_all(void **state) {
    (void)state;
    tmt_run(NULL, "rm -rf %s", g_tmp);
    return 0;
}

/* The names in dir, sorted, joined by ' ' (malloc'd). */
static char *listing(const char *dir) {
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    size_t cap = 16, len = 0;
    char *s = calloc(cap, 1);
    for (int i = 0; i < n; i++) {
        const char *nm = ents[i]->d_name;
        if (strcmp(nm, ".") && strcmp(nm, "..")) {
            size_t l = strlen(nm);
            while (len + l + 2 > cap) s = realloc(s, cap *= 2);
            if (len) s[len++] = ' ';
            memcpy(s + len, nm, l + 1);
            len += l;
        }
        free(ents[i]);
    }
    free(ents);
    return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The n names sorted (as listing() sorts) and joined by ' ', into buf. */
static void sorted_join(char *buf, size_t cap, char **names, int n) {
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i) strncat(buf, " ", cap - strlen(buf) - 1);
        strncat(buf, names[i], cap - strlen(buf) - 1);
    }
}

/* fork/exec argv with stdout/stderr to /dev/null; SIGINT after delay_us, then again gap_us later;
** the exit status (128+N for a signal death). */
static int run_interrupted(const char *const *argv, int delay_us, int gap_us) {
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) { dup2(nul, 1); dup2(nul, 2); }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    assert_true(pid > 0);
    usleep((useconds_t)delay_us);
    kill(pid, SIGINT);
    usleep((useconds_t)gap_us);
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* n runs of argv (OUT inside the fresh directory `dir`), delays 5..60 ms; after exit 0 the
** directory must read `done`, after 130 `before` (both listings). Returns the count of 130s. */
static int sweep(const char *tag, const char *dir, const char *const *argv, const char *before, const char *done,
                 int n) {
    int n130 = 0, n0 = 0;
    for (int i = 0; i < n; i++) {
        tmt_run(NULL, "rm -rf %s && mkdir -p %s", dir, dir);
        if (before && *before) tmt_run(NULL, "cd %s && mkdir -p %s", dir, before); /* a pre-existing entry */
        int delay = 5000 + (i * 55000) / (n > 1 ? n - 1 : 1);
        int rc = run_interrupted(argv, delay, 100 + (i % 5) * 100);
        char *ls = listing(dir);
        if (!((rc == 0 && !strcmp(ls, done)) || (rc == 130 && !strcmp(ls, before ? before : ""))))
            fprintf(stderr, "%s run %d (SIGINT at %d us): exit %d, left [%s]\n", tag, i, delay, rc, ls);
        if (rc == 0) assert_string_equal(ls, done);
        else {
            assert_int_equal(rc, 130);
            assert_string_equal(ls, before ? before : "");
        }
        n130 += rc == 130;
        n0 += rc == 0;
        free(ls);
    }
    fprintf(stderr, "%s: %d runs, %d interrupted (130), %d finished (0)\n", tag, n, n130, n0);
    return n130;
}

#define RUNS 24

static void test_sigint_quantize_dir(void **state) {
    (void)state;
    char demo[320], dir[320], out[360];
    snprintf(demo, sizeof demo, "%s/demo", g_tmp);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q", tmt_bin(), demo), 0);
    snprintf(dir, sizeof dir, "%s/ct", g_tmp);
    snprintf(out, sizeof out, "%s/od", dir);
    const char *argv[] = {tmt_bin(), "quantize", demo, "-o", out, "-q", NULL};
    assert_true(sweep("quantize -> dir", dir, argv, "keep", "keep od", RUNS) > 0);
}

static void test_sigint_quantize_gguf(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[400], dir[320], out[360];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    snprintf(dir, sizeof dir, "%s/gg", g_tmp);
    snprintf(out, sizeof out, "%s/o.gguf", dir);
    const char *argv[] = {tmt_bin(), "quantize", in, "-o", out, "-t", "Q4_K_M", "-q", NULL};
    assert_true(sweep("quantize -> gguf", dir, argv, "", "o.gguf o.gguf.manifest.json", RUNS) > 0);
}

static void test_sigint_quantize_onnx(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[400], dir[320], out[360];
    snprintf(in, sizeof in, "%s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", tmv_shared_dir());
    snprintf(dir, sizeof dir, "%s/ox", g_tmp);
    snprintf(out, sizeof out, "%s/o.onnx", dir);
    const char *argv[] = {tmt_bin(), "quantize", in, "-o", out, "-q", NULL};
    assert_true(sweep("quantize -> onnx", dir, argv, "", "o.onnx o.onnx.manifest.json", RUNS) > 0);
}

static void test_sigint_convert(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[400], vocab[400], dir[320], out[360];
    snprintf(in, sizeof in, "%s/models/safetensors/stories260K-f32", tmv_shared_dir());
    snprintf(vocab, sizeof vocab, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    snprintf(dir, sizeof dir, "%s/cv", g_tmp);
    snprintf(out, sizeof out, "%s/c.gguf", dir);
    const char *plain[] = {tmt_bin(), "convert", in, "-o", out, "--vocab-from", vocab, "-q", NULL};
    assert_true(sweep("convert", dir, plain, "", "c.gguf c.gguf.manifest.json", RUNS / 2) > 0);
    const char *quant[] = {tmt_bin(), "convert", in, "-o", out, "--vocab-from", vocab, "-t", "Q8_0", "-q", NULL};
    assert_true(sweep("convert -t Q8_0", dir, quant, "", "c.gguf c.gguf.manifest.json", RUNS / 2) > 0);
}

/* demo -o DIR: Ctrl-C honoured (exit 130, nothing at DIR) at every delay; before, demo ignored the
** signal and wrote DIR with exit 0. */
static void test_sigint_demo(void **state) {
    (void)state;
    char dir[320], out[360];
    snprintf(dir, sizeof dir, "%s/dm", g_tmp);
    snprintf(out, sizeof out, "%s/d", dir);
    const char *argv[] = {tmt_bin(), "demo", "-o", out, "-q", NULL};
    /* 10 ms is well inside the ~100 ms the demo takes to write: it must be interrupted */
    tmt_run(NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    assert_int_equal(run_interrupted(argv, 10000, 300), 130);
    char *ls = listing(dir);
    assert_string_equal(ls, "");
    free(ls);
    assert_true(sweep("demo", dir, argv, "", "d", RUNS) > 0);
}

/* demo -o follows quantize's output rules (pipeline.c): a foreign non-empty directory is refused
** (exit 2, untouched), a previous demo only with --force, a missing parent is exit 4 and created
** nowhere, and concurrent runs at one DIR: one exits 0, the others 2 naming the lock. */
static void test_demo_output_rules(void **state) {
    (void)state;
    char dx[320], p[400], np[400];
    char *o = NULL;
    snprintf(dx, sizeof dx, "%s/dx", g_tmp);
    assert_int_equal(tmt_run(NULL, "mkdir -p %s && echo keep > %s/notes.txt", dx, dx), 0);
    assert_int_equal(tmt_run(&o, "%s demo -o %s 2>&1", tmt_bin(), dx), 2);
    assert_non_null(strstr(o, "never replaces a directory it did not write"));
    free(o);
    char *ls = listing(dx);
    assert_string_equal(ls, "notes.txt");
    free(ls);
    /* a previous demo: refused without --force, replaced with it */
    snprintf(p, sizeof p, "%s/dp", g_tmp);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q", tmt_bin(), p), 0);
    assert_int_equal(tmt_run(&o, "%s demo -o %s -q 2>&1", tmt_bin(), p), 2);
    assert_non_null(strstr(o, "holds a previous tensormorph output; add --force"));
    free(o);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q --force --seed 2", tmt_bin(), p), 0);
    ls = listing(p);
    assert_string_equal(ls, "config.json model.safetensors tensormorph-manifest.json");
    free(ls);
    /* a missing parent: exit 4, nothing created */
    snprintf(np, sizeof np, "%s/np/a/b", g_tmp);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q 2>/dev/null", tmt_bin(), np), 4);
    snprintf(np, sizeof np, "%s/np", g_tmp);
    assert_false(tmt_exists(np));
    /* three concurrent runs at one DIR */
    char dc[320];
    snprintf(dc, sizeof dc, "%s/dcc", g_tmp);
    for (int trial = 0; trial < 4; trial++) {
        tmt_run(NULL, "rm -rf %s && mkdir -p %s", dc, dc);
        assert_int_equal(tmt_run(&o, "cd %s && for i in 1 2 3; do (%s demo -o d -q 2>>err; echo $? >>rc) & done; wait; "
                                     "sort rc | tr '\\n' ' '; grep -c 'being written by another tensormorph run\\|holds a previous' err",
                                 dc, tmt_bin()), 0);
        assert_string_equal(o, "0 2 2 2\n");
        free(o);
    }
}

/* A run killed with SIGKILL leaves OUT.lock (taken over, as documented) and its staging paths:
** the next run removes exactly those of the dead pid (OUT.tmp.<pid>, nested .tmp.<pid>.tmp.<pid>,
** OUT.manifest.json.tmp.<pid>) and nothing else: not a live pid's, not a name that only starts so. */
static void test_sigkill_leftovers_removed(void **state) {
    (void)state;
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0); /* a pid that no longer exists */
    long live = (long)getpid();
    char dir[320];
    snprintf(dir, sizeof dir, "%s/k9", g_tmp);
    char demo[320];
    snprintf(demo, sizeof demo, "%s/k9demo", g_tmp);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q", tmt_bin(), demo), 0);
    /* directory form */
    assert_int_equal(tmt_run(NULL, "rm -rf %s && mkdir -p %s/od.tmp.%ld/sub && cd %s && echo %ld > od.lock && "
                                   "touch od.tmp.%ld/model.safetensors.tmp.%ld od.tmp.%ldx od.tmp.%ld.bak && mkdir od.tmp.%ld",
                             dir, dir, (long)dead, dir, (long)dead, (long)dead, (long)dead, (long)dead, (long)dead, live), 0);
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s/od -q", tmt_bin(), demo, dir), 0);
    char *ls = listing(dir), want[400], a[3][64];
    snprintf(a[0], sizeof a[0], "od.tmp.%ld", live);
    snprintf(a[1], sizeof a[1], "od.tmp.%ld.bak", (long)dead);
    snprintf(a[2], sizeof a[2], "od.tmp.%ldx", (long)dead);
    char *keep[4] = {"od", a[0], a[1], a[2]};
    sorted_join(want, sizeof want, keep, 4);
    assert_string_equal(ls, want);
    free(ls);
    /* single-file form */
    if (!tmv_require_shared()) return;
    assert_int_equal(tmt_run(NULL, "rm -rf %s && mkdir -p %s && cd %s && echo %ld > o.gguf.lock && touch o.gguf.tmp.%ld "
                                   "o.gguf.tmp.%ld.tmp.%ld o.gguf.manifest.json.tmp.%ld o.gguf.manifest.json.tmp.%ld.tmp.%ld "
                                   "o.gguf.tmp.%ld o.gguf.tmp.%ld.part",
                             dir, dir, dir, (long)dead, (long)dead, (long)dead, (long)dead, (long)dead, (long)dead,
                             (long)dead, live, (long)dead), 0);
    assert_int_equal(tmt_run(NULL, "%s quantize %s/models/gguf/stories260K-F32.gguf -o %s/o.gguf -t Q8_0 -q", tmt_bin(),
                             tmv_shared_dir(), dir), 0);
    ls = listing(dir);
    snprintf(a[0], sizeof a[0], "o.gguf.tmp.%ld", live);
    snprintf(a[1], sizeof a[1], "o.gguf.tmp.%ld.part", (long)dead);
    char *keep2[4] = {"o.gguf", "o.gguf.manifest.json", a[0], a[1]};
    sorted_join(want, sizeof want, keep2, 4);
    assert_string_equal(ls, want);
    free(ls);
}

/* Error messages name OUT (and the file inside it), never a staging name: a 64-byte tensor name
** refused by the GGUF writer, and a full disk (RLIMIT_FSIZE) under the compressed-tensors output.
** Before: "o2.gguf.tmp.<pid>: tensor ..." and "d1.tmp.<pid>/model.safetensors.tmp.<pid>: write". */
static void test_errors_name_out(void **state) {
    (void)state;
    char dir[320], in[400];
    snprintf(dir, sizeof dir, "%s/en", g_tmp);
    tmt_run(NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    snprintf(in, sizeof in, "%s/n64.safetensors", dir);
    char name[65];
    memset(name, 'x', 64);
    memcpy(name, "model.layers.0.mlp.down_proj.weight.", 36);
    name[64] = '\0';
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[32,64],\"data_offsets\":[0,8192]}}", name);
    FILE *fp = fopen(in, "wb");
    assert_non_null(fp);
    uint64_t n = (uint64_t)hl;
    fwrite(&n, 8, 1, fp);
    fwrite(hdr, 1, (size_t)hl, fp);
    for (int i = 0; i < 8192; i++) fputc(0, fp);
    assert_int_equal(fclose(fp), 0);
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "cd %s && %s quantize n64.safetensors -o o2.gguf -t Q8_0 2>&1", dir, tmt_bin()), 3);
    assert_non_null(strstr(o, "tensormorph: o2.gguf: tensor 'model.layers.0.mlp.down_proj.weight.x"));
    assert_null(strstr(o, ".tmp."));
    free(o);
    /* a full disk inside the compressed-tensors directory */
    char demo[400], errp[400];
    snprintf(demo, sizeof demo, "%s/demo", dir);
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q", tmt_bin(), demo), 0);
    snprintf(errp, sizeof errp, "%s/err.txt", dir);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64 << 10, 64 << 10};
        setrlimit(RLIMIT_FSIZE, &rl);
        signal(SIGXFSZ, SIG_IGN);
        if (chdir(dir) != 0) _exit(126);
        int fd = open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 2); dup2(fd, 1); }
        execl(tmt_bin(), tmt_bin(), "quantize", "demo", "-o", "d1", "-q", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 4);
    o = tmt_read_file(errp);
    assert_non_null(o);
    fprintf(stderr, "full disk: %s", o);
    assert_non_null(strstr(o, "tensormorph: d1/model.safetensors: "));
    assert_null(strstr(o, ".tmp."));
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigint_quantize_dir),
        cmocka_unit_test(test_sigint_quantize_gguf),
        cmocka_unit_test(test_sigint_quantize_onnx),
        cmocka_unit_test(test_sigint_convert),
        cmocka_unit_test(test_sigint_demo),
        cmocka_unit_test(test_demo_output_rules),
        cmocka_unit_test(test_sigkill_leftovers_removed),
        cmocka_unit_test(test_errors_name_out),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
