/* test_pipeline.c: the finishing phases that the three quantize jobs share (src/job/pipeline.c):
**   - Ctrl-C after the last tensor: the cancel flag raised when the last tensor is done (from the
**     public progress callback) and at each later phase (hash, fsync, checksum, manifest,
**     publish; the pipeline's test hook) gives TM_E_CANCELLED and leaves nothing at OUT, no temp
**     file, no lock; a previous output replaced with --force stays as it was;
**   - the source-hashing thread stops within 100 ms of the flag (a 1 GiB sparse input), and a
**     real SIGINT to the CLI while it hashes its input ends the run with exit 130;
**   - concurrent runs at one OUT (fork/exec of the CLI, every output form): exactly one exits 0,
**     the others 2, and the published file, its manifest sha256 and its recipe agree;
**   - `demo -o DIR` failing on a full disk (RLIMIT_FSIZE) leaves nothing at DIR;
**   - the default thread count: tm_usable_cpus, the cgroup quota parser on fake trees, and
**     host.threads_used in every manifest. */
#define _GNU_SOURCE 1
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
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
#include "tensormorph/gguf_job.h"
#include "tensormorph/onnx_quant.h"
#include "core/core.h"
#include "job/pipeline.h"
#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_tmp[256];
static char g_demo[320];
static char g_bare[320]; /* the demo's model.safetensors alone: no config.json, so `quantize -o X.gguf`
                            takes the raw GGUF path (an LLM checkpoint without a tokenizer is refused) */
static char g_onnx[512];

static int setup_all(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_pipe_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    snprintf(g_demo, sizeof g_demo, "%s/demo", g_tmp);
    tm_err err;
    if (tm_write_demo_checkpoint(g_demo, TM_F32, 1, &err)) return -1;
    snprintf(g_bare, sizeof g_bare, "%s/bare/model.safetensors", g_tmp);
    if (tmt_run(NULL, "mkdir -p %s/bare && cp %s/model.safetensors %s", g_tmp, g_demo, g_bare)) return -1;
    const char *sh = tmv_shared_dir();
    if (sh) snprintf(g_onnx, sizeof g_onnx, "%s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", sh);
    return 0;
}

static int teardown_all(void **state) {
    (void)state;
    tmt_run(NULL, "rm -rf %s", g_tmp);
    return 0;
}

/* Entries of g_tmp whose name starts with prefix (OUT, OUT.tmp.*, OUT.lock, OUT.manifest.json*). */
static int count_prefix(const char *prefix) {
    DIR *d = opendir(g_tmp);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (!strncmp(de->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

#define slurp tmt_read_file

/* ---------------------------------------------------------------------------------------- */
/* the three jobs, run through the library                                                   */
/* ---------------------------------------------------------------------------------------- */

enum { F_CT, F_GGUF, F_ONNX };
static const char *const form_name[] = {"ct", "gguf", "onnx"};

static volatile int g_cancel;
static int g_cancel_after_last; /* raise the flag when progress reports done == total */
static const char *g_cancel_phase;
static int g_seen[8];
static const char *const phases[] = {"hash", "fsync", "checksum", "manifest", "publish"};

static void on_progress(void *ud, const char *phase, uint64_t done, uint64_t total) {
    (void)ud; (void)phase;
    if (g_cancel_after_last && total > 0 && done >= total) g_cancel = 1;
}

static void on_phase(const char *phase, void *ud) {
    (void)ud;
    for (int k = 0; k < 5; k++)
        if (!strcmp(phase, phases[k])) g_seen[k] = 1;
    if (g_cancel_phase && !strcmp(phase, g_cancel_phase)) g_cancel = 1;
}

/* The fields the three jobs' parameters share. */
#define COMMON_PARAMS(p) ((p).force = force, (p).progress = on_progress, (p).cancel = &g_cancel)

/* Run one job at g_tmp/name; returns its status. */
static tm_status run_form(int form, const char *name, int force) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s", g_tmp, name);
    tm_file *in = NULL;
    tm_err err;
    tm_status s = tm_open(form == F_ONNX ? g_onnx : g_demo, NULL, &in, &err);
    assert_int_equal(s, TM_OK);
    if (form == F_CT) {
        tm_ct_quantize_params p = tm_ct_quantize_params_default();
        p.n_threads = 1; /* the progress callback sees every chunk */
        COMMON_PARAMS(p);
        tm_ct_quantize_result *r = NULL;
        s = tm_ct_quantize(in, out, &p, &r, &err);
        tm_ct_quantize_result_free(r);
    } else if (form == F_GGUF) {
        tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
        p.n_threads = 1;
        COMMON_PARAMS(p);
        tm_gguf_quantize_result *r = NULL;
        s = tm_gguf_quantize(in, out, &p, &r, &err);
        tm_gguf_quantize_result_free(r);
    } else {
        tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
        COMMON_PARAMS(p);
        tm_onnx_quantize_result *r = NULL;
        s = tm_onnx_quantize(in, out, &p, &r, &err);
        tm_onnx_quantize_result_free(r);
    }
    if (s && s != TM_E_CANCELLED) fprintf(stderr, "%s: %s\n", name, err.msg);
    if (s == TM_E_CANCELLED) assert_non_null(strstr(err.msg, "interrupt") ? err.msg : strstr(err.msg, "cancel"));
    tm_close(in);
    return s;
}

static int form_ready(int form) {
    if (form != F_ONNX) return 1;
    if (!tmv_require_shared()) return 0;
    return 1;
}

/* Ctrl-C after the last tensor: before the pipeline this published the output and returned 0. */
static void test_cancel_after_last_tensor(void **state) {
    (void)state;
    for (int f = 0; f < 3; f++) {
        if (!form_ready(f)) return;
        char name[32];
        snprintf(name, sizeof name, "last_%s%s", form_name[f], f == F_CT ? "" : f == F_GGUF ? ".gguf" : ".onnx");
        g_cancel = 0;
        g_cancel_after_last = 1;
        assert_int_equal(run_form(f, name, 0), TM_E_CANCELLED);
        g_cancel_after_last = 0;
        assert_int_equal(count_prefix(name), 0); /* nothing at OUT, no temp, no lock, no manifest */
    }
}

/* The flag raised at each phase after the run, for each form; then with --force over a
** previous output, which must stay byte for byte as it was. */
static void test_cancel_at_each_phase(void **state) {
    (void)state;
    tm__pipe_phase_hook = on_phase;
    for (int f = 0; f < 3; f++) {
        if (!form_ready(f)) break;
        char name[32], mpath[400];
        snprintf(name, sizeof name, "ph_%s%s", form_name[f], f == F_CT ? "" : f == F_GGUF ? ".gguf" : ".onnx");
        for (int k = 0; k < 5; k++) {
            memset(g_seen, 0, sizeof g_seen);
            g_cancel = 0;
            g_cancel_phase = phases[k];
            assert_int_equal(run_form(f, name, 0), TM_E_CANCELLED);
            assert_true(g_seen[k]);
            assert_int_equal(count_prefix(name), 0);
        }
        /* no cancel: every phase is passed and only OUT (+ its manifest) is left */
        memset(g_seen, 0, sizeof g_seen);
        g_cancel = 0;
        g_cancel_phase = NULL;
        assert_int_equal(run_form(f, name, 0), TM_OK);
        for (int k = 0; k < 5; k++) assert_true(g_seen[k]);
        assert_int_equal(count_prefix(name), f == F_CT ? 1 : 2);
        if (f == F_CT) snprintf(mpath, sizeof mpath, "%s/%s/tensormorph-manifest.json", g_tmp, name);
        else snprintf(mpath, sizeof mpath, "%s/%s.manifest.json", g_tmp, name);
        char *before = slurp(mpath);
        assert_non_null(before);
        for (int k = 0; k < 5; k++) {
            g_cancel = 0;
            g_cancel_phase = phases[k];
            assert_int_equal(run_form(f, name, 1), TM_E_CANCELLED);
            char *after = slurp(mpath);
            assert_non_null(after);
            assert_string_equal(before, after); /* the previous output is untouched */
            free(after);
            assert_int_equal(count_prefix(name), f == F_CT ? 1 : 2);
        }
        free(before);
        g_cancel_phase = NULL;
    }
    tm__pipe_phase_hook = NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A safetensors file of one F32 tensor of n elements, sparse (zeros, no disk blocks). */
static void write_sparse_st(const char *path, int64_t n) {
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{\"big\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[0,%lld]}}",
                      (long long)n, (long long)(n * 4));
    while (hl % 8) hdr[hl++] = ' ';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    assert_int_equal(write(fd, len8, 8), 8);
    assert_int_equal(write(fd, hdr, (size_t)hl), hl);
    assert_int_equal(ftruncate(fd, 8 + hl + n * 4), 0);
    close(fd);
}

/* The source-hashing thread ends within 100 ms of the cancel flag: 1 GiB of input takes
** seconds to hash, the flag is raised 30 ms in. */
static void test_hash_thread_stops_fast(void **state) {
    (void)state;
    char in_path[400], out[400];
    snprintf(in_path, sizeof in_path, "%s/big.safetensors", g_tmp);
    snprintf(out, sizeof out, "%s/lat.gguf", g_tmp);
    write_sparse_st(in_path, (int64_t)256 << 20);
    tm_file *in = NULL;
    tm_err err;
    assert_int_equal(tm_open(in_path, NULL, &in, &err), TM_OK);
    volatile int cancel = 0;
    tm__pipe pp;
    assert_int_equal(tm__pipe_begin(&pp, in, out, TM__PIPE_FILE, "a GGUF output", 0, 1, &cancel, &err), TM_OK);
    assert_int_equal(count_prefix("lat.gguf.lock"), 1); /* held while the job runs */
    double t_start = now_s();
    assert_int_equal(tm__pipe_hash_start(&pp, 0, &err), TM_OK);
    usleep(30000);
    cancel = 1;
    double t_sig = now_s();
    assert_int_equal(tm__pipe_hash_wait(&pp, &err), TM_E_CANCELLED);
    tm__pipe_end(&pp); /* joins the thread */
    double t_end = now_s();
    assert_int_equal(pp.hstatus, TM_E_CANCELLED); /* it stopped part way, not at the end */
    fprintf(stderr, "hash thread: stopped %.1f ms after the flag (%.1f ms after start)\n",
            (t_end - t_sig) * 1e3, (t_end - t_start) * 1e3);
    assert_true(t_end - t_sig < 0.100);
    assert_int_equal(count_prefix("lat.gguf"), 0);
    tm_close(in);
    unlink(in_path);
}

/* spawn() below */
static pid_t spawn(const char *const *argv, const char *errpath);

/* A real SIGINT to the CLI while it hashes its input, after the last tensor: a 64x64 weight in a
** .npy followed by 1 GiB of ignored (sparse) bytes, which the source sha256 must read. Before the
** pipeline the run waited for the whole hash and then published with exit 0. */
static void test_sigint_while_hashing(void **state) {
    (void)state;
    char in_path[400], out[400], errp[400];
    snprintf(in_path, sizeof in_path, "%s/sig.weight.npy", g_tmp);
    snprintf(out, sizeof out, "%s/sigout", g_tmp);
    snprintf(errp, sizeof errp, "%s/sig_err.txt", g_tmp);
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "\x93NUMPY\x01%c%c%c{'descr': '<f4', 'fortran_order': False, 'shape': (64, 64), }", 0, 0, 0);
    while ((hl + 1) % 64) hdr[hl++] = ' ';
    hdr[hl++] = '\n';
    hdr[8] = (char)(hl - 10); /* HEADER_LEN, little-endian u16 (< 256 here) */
    float w[64 * 64];
    for (int i = 0; i < 64 * 64; i++) w[i] = (float)((i % 97) - 48) * 0.01f;
    int fd = open(in_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, hdr, (size_t)hl), hl);
    assert_int_equal(write(fd, w, sizeof w), (ssize_t)sizeof w);
    assert_int_equal(ftruncate(fd, (off_t)(hl + (int)sizeof w) + ((off_t)1 << 30)), 0);
    close(fd);
    const char *argv[] = {tmt_bin(), "quantize", in_path, "-o", out, "-q", "--threads", "1", NULL};
    double t0 = now_s();
    pid_t pid = spawn(argv, errp);
    assert_true(pid > 0);
    usleep(150000); /* the 64x64 weight is long done; the 1 GiB hash is not */
    double t_sig = now_s();
    assert_int_equal(kill(pid, SIGINT), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    double t_end = now_s();
    char *e = slurp(errp);
    fprintf(stderr, "SIGINT at %.0f ms: exit %d after %.1f ms more\n", (t_sig - t0) * 1e3,
            WIFEXITED(st) ? WEXITSTATUS(st) : -1, (t_end - t_sig) * 1e3);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) != 130) fprintf(stderr, "%s\n", e ? e : "");
    assert_int_equal(WEXITSTATUS(st), 130);
    free(e);
    assert_true(t_end - t_sig < 0.5);
    assert_int_equal(count_prefix("sigout"), 0);
    unlink(in_path);
}

/* ---------------------------------------------------------------------------------------- */
/* concurrent runs through the CLI                                                           */
/* ---------------------------------------------------------------------------------------- */

static pid_t spawn(const char *const *argv, const char *errpath) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        if (nul >= 0) dup2(nul, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static char *file_sha(const char *path) {
    char hex[65];
    tm_err err;
    if (tm_sha256_file(path, hex, NULL, &err)) return NULL;
    return strdup(hex);
}

/* N runs of `quantize` at one OUT, each with its own type: exactly one exits 0, the others 2
** (another run holds OUT, or the previous output is there); the published file is the one
** that the manifest's sha256 and recipe describe (each type's file is known from a run alone). */
static void race(int form) {
    enum { N = 4 };
    static const char *const ct_types[N] = {"int8", "int4", "int8", "int4"};
    static const char *const ct_gran[N] = {"channel", "group:32", "tensor", "channel"};
    static const char *const gg_types[N] = {"Q8_0", "Q4_0", "Q5_0", "Q4_1"};
    static const char *const ox_types[N] = {"int8", "uint8", "int8", "uint8"};
    static const char *const ox_gran[N] = {"channel", "channel", "tensor", "tensor"};
    const char *bin = tmt_bin();
    const char *src = form == F_ONNX ? g_onnx : form == F_GGUF ? g_bare : g_demo;
    const char *ext = form == F_CT ? "" : form == F_GGUF ? ".gguf" : ".onnx";
    char *ref_sha[N];
    for (int i = 0; i < N; i++) { /* each run's output, alone */
        char ref[400];
        snprintf(ref, sizeof ref, "%s/ref_%s_%d%s", g_tmp, form_name[form], i, ext);
        if (form == F_CT)
            assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t %s -g %s -q --no-checksums", bin, src, ref, ct_types[i], ct_gran[i]), 0);
        else if (form == F_GGUF)
            assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t %s -q --no-checksums", bin, src, ref, gg_types[i]), 0);
        else
            assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t %s -g %s -q --no-checksums", bin, src, ref, ox_types[i], ox_gran[i]), 0);
        char fp[480];
        snprintf(fp, sizeof fp, form == F_CT ? "%s/model.safetensors" : "%s", ref);
        ref_sha[i] = file_sha(fp);
        assert_non_null(ref_sha[i]);
    }
    for (int trial = 0; trial < 3; trial++) {
        char name[64], out[400];
        snprintf(name, sizeof name, "race_%s_%d%s", form_name[form], trial, ext);
        snprintf(out, sizeof out, "%s/%s", g_tmp, name);
        pid_t pids[N];
        char errs[N][400];
        for (int i = 0; i < N; i++) {
            snprintf(errs[i], sizeof errs[i], "%s/err_%d.txt", g_tmp, i);
            const char *t = form == F_CT ? ct_types[i] : form == F_GGUF ? gg_types[i] : ox_types[i];
            const char *g = form == F_CT ? ct_gran[i] : form == F_ONNX ? ox_gran[i] : NULL;
            const char *argv[14] = {bin, "quantize", src, "-o", out, "-t", t, "-q", "--threads", "1", NULL, NULL, NULL, NULL};
            if (g) { argv[10] = "-g"; argv[11] = g; }
            pids[i] = spawn(argv, errs[i]);
            assert_true(pids[i] > 0);
        }
        int n_ok = 0, n_two = 0, n_held = 0;
        for (int i = 0; i < N; i++) {
            int st = 0;
            assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
            assert_true(WIFEXITED(st));
            int rc = WEXITSTATUS(st);
            char *e = slurp(errs[i]);
            if (rc == 0) n_ok++;
            else if (rc == 2) {
                n_two++;
                assert_non_null(e);
                int held = strstr(e, "is being written by another tensormorph run (pid ") != NULL;
                n_held += held;
                if (!held) assert_non_null(strstr(e, "holds a previous tensormorph output"));
            } else {
                fprintf(stderr, "run %d: exit %d: %s\n", i, rc, e ? e : "");
            }
            free(e);
        }
        assert_int_equal(n_ok, 1);
        assert_int_equal(n_two, N - 1);
        /* only OUT and its manifest: no lock, no temp file */
        char prefix[80];
        snprintf(prefix, sizeof prefix, "%s", name);
        assert_int_equal(count_prefix(prefix), form == F_CT ? 1 : 2);
        char mp[480], fp[480];
        if (form == F_CT) {
            snprintf(mp, sizeof mp, "%s/tensormorph-manifest.json", out);
            snprintf(fp, sizeof fp, "%s/model.safetensors", out);
        } else {
            snprintf(mp, sizeof mp, "%s.manifest.json", out);
            snprintf(fp, sizeof fp, "%s", out);
        }
        json_error_t je;
        json_t *man = json_load_file(mp, 0, &je);
        assert_non_null(man);
        char *sha = file_sha(fp);
        json_t *f0 = json_array_get(json_object_get(json_object_get(man, "output"), "files"), 0);
        assert_string_equal(json_string_value(json_object_get(f0, "sha256")), sha);
        /* the recipe of the manifest names the run whose bytes the file holds */
        const char *cl = json_string_value(json_object_get(man, "command_line"));
        assert_non_null(cl);
        int which = -1;
        for (int i = 0; i < N; i++)
            if (!strcmp(ref_sha[i], sha)) which = i;
        assert_true(which >= 0);
        json_t *rec = json_object_get(man, "recipe");
        if (form == F_GGUF) {
            assert_string_equal(json_string_value(json_object_get(rec, "file_type")), gg_types[which]);
        } else {
            const char *g = form == F_CT ? ct_gran[which] : ox_gran[which];
            char want_arg[96], gk[16];
            snprintf(want_arg, sizeof want_arg, "-t %s -q --threads 1 -g %s", form == F_CT ? ct_types[which] : ox_types[which], g);
            assert_non_null(strstr(cl, want_arg));
            snprintf(gk, sizeof gk, "%.*s", (int)strcspn(g, ":"), g);
            assert_string_equal(json_string_value(json_object_get(json_object_get(rec, "default"), "granularity")), gk);
        }
        if (form == F_GGUF) {
            char want_arg[64];
            snprintf(want_arg, sizeof want_arg, "-t %s -q", gg_types[which]);
            assert_non_null(strstr(cl, want_arg));
        }
        fprintf(stderr, "%s trial %d: run %d won; %d refused while it ran, %d after\n", form_name[form], trial,
                which, n_held, N - 1 - n_held);
        free(sha);
        json_decref(man);
    }
    for (int i = 0; i < N; i++) free(ref_sha[i]);
}

static void test_concurrent_ct(void **state) { (void)state; race(F_CT); }
static void test_concurrent_gguf(void **state) { (void)state; race(F_GGUF); }
static void test_concurrent_onnx(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    race(F_ONNX);
}

/* A run that holds OUT.lock: a second run is refused naming its pid; the lock is not stolen. */
static void test_lock_names_holder(void **state) {
    (void)state;
    char out[400];
    snprintf(out, sizeof out, "%s/held", g_tmp);
    tm_file *in = NULL;
    tm_err err;
    assert_int_equal(tm_open(g_demo, NULL, &in, &err), TM_OK);
    tm__pipe pp;
    assert_int_equal(tm__pipe_begin(&pp, in, out, TM__PIPE_DIR, NULL, 0, 1, NULL, &err), TM_OK);
    char *e = NULL;
    int rc = tmt_run(&e, "%s quantize %s -o %s -q 2>&1", tmt_bin(), g_demo, out);
    assert_int_equal(rc, 2);
    char want[64];
    snprintf(want, sizeof want, "(pid %ld, lock file", (long)getpid());
    assert_non_null(strstr(e, want));
    free(e);
    tm__pipe_end(&pp);
    assert_int_equal(count_prefix("held"), 0);
    /* a foreign file named OUT.lock is never truncated */
    char lk[420];
    snprintf(lk, sizeof lk, "%s.lock", out);
    FILE *fp = fopen(lk, "w");
    fputs("my notes\n", fp);
    fclose(fp);
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -q 2>/dev/null", tmt_bin(), g_demo, out), 2);
    char *txt = slurp(lk);
    assert_string_equal(txt, "my notes\n");
    free(txt);
    unlink(lk);
    tm_close(in);
    /* "OUT/" names OUT: lock and staging directory beside it, not inside */
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s/slash/ -q", tmt_bin(), g_demo, g_tmp), 0);
    assert_int_equal(count_prefix("slash"), 1);
    char mp[480];
    snprintf(mp, sizeof mp, "%s/slash/tensormorph-manifest.json", g_tmp);
    assert_true(tmt_exists(mp));
}

/* ---------------------------------------------------------------------------------------- */
/* demo on a full disk                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* RLIMIT_FSIZE makes every write past 64 KiB fail (EFBIG) as a full disk would (ENOSPC). */
static int run_limited(const char *const *argv) {
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64 << 10, 64 << 10};
        setrlimit(RLIMIT_FSIZE, &rl);
        signal(SIGXFSZ, SIG_IGN);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) { dup2(nul, 1); dup2(nul, 2); }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_demo_full_disk(void **state) {
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/fulldemo", g_tmp);
    const char *argv[] = {tmt_bin(), "demo", "-o", dir, "-q", NULL};
    assert_int_equal(run_limited(argv), 4);
    assert_int_equal(count_prefix("fulldemo"), 0); /* no DIR, no DIR.tmp.* */
    /* an existing empty DIR stays empty and is not removed */
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(run_limited(argv), 4);
    assert_int_equal(count_prefix("fulldemo"), 1);
    assert_int_equal(tmt_run(NULL, "rmdir %s", dir), 0);
    /* and without the limit it is written, nothing beside it */
    assert_int_equal(tmt_run(NULL, "%s demo -o %s -q", tmt_bin(), dir), 0);
    assert_int_equal(count_prefix("fulldemo"), 1);
    char p[480];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_true(tmt_exists(p));
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_true(tmt_exists(p));
    /* same bytes as the demo written by the library */
    char a[480], b[480];
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", g_demo);
    char *sa = file_sha(a), *sb = file_sha(b);
    assert_string_equal(sa, sb);
    free(sa);
    free(sb);
}

/* ---------------------------------------------------------------------------------------- */
/* threads                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void put(const char *root, const char *rel, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    tmt_run(NULL, "mkdir -p '%s'", p);
    *slash = '/';
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_cgroup_quota(void **state) {
    (void)state;
    char root[400];
    snprintf(root, sizeof root, "%s/cg", g_tmp);
    /* v2: 1.5 CPUs at the leaf, none above: ceil = 2 */
    put(root, "a/b/cpu.max", "150000 100000\n");
    put(root, "a/cpu.max", "max 100000\n");
    assert_int_equal(tm__cgroup_cpu_limit("0::/a/b\n", root), 2);
    /* a parent's smaller quota wins */
    put(root, "cpu.max", "100000 100000\n");
    assert_int_equal(tm__cgroup_cpu_limit("0::/a/b\n", root), 1);
    /* no limit anywhere */
    put(root, "cpu.max", "max 100000\n");
    put(root, "a/b/cpu.max", "max 100000\n");
    assert_int_equal(tm__cgroup_cpu_limit("0::/a/b\n", root), 0);
    /* v1: cpu,cpuacct controller, 2.5 CPUs -> 3; -1 is no limit */
    put(root, "cpu,cpuacct/x/cpu.cfs_quota_us", "250000\n");
    put(root, "cpu,cpuacct/x/cpu.cfs_period_us", "100000\n");
    assert_int_equal(tm__cgroup_cpu_limit("5:memory:/x\n4:cpu,cpuacct:/x\n", root), 3);
    assert_int_equal(tm__cgroup_cpu_limit("5:memory:/x\n", root), 0); /* no cpu controller */
    put(root, "cpu,cpuacct/x/cpu.cfs_quota_us", "-1\n");
    assert_int_equal(tm__cgroup_cpu_limit("4:cpu,cpuacct:/x\n", root), 0);
    /* this process: its affinity mask, lowered by a quota */
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int n = tm_usable_cpus();
    assert_true(n >= 1 && n <= CPU_COUNT(&set));
}

/* host.threads_used in every manifest: the usable CPUs by default; --threads and
** TM_NUM_THREADS win; ONNX runs weight by weight on one thread. */
static void test_threads_used(void **state) {
    (void)state;
    const char *bin = tmt_bin();
    int n = tm_usable_cpus();
    struct { const char *src, *ext, *man, *type; int onnx; } forms[] = {
        {g_demo, "", "/tensormorph-manifest.json", "int8", 0},
        {g_bare, ".gguf", ".manifest.json", "Q8_0", 0},
        {g_onnx, ".onnx", ".manifest.json", "int8", 1},
    };
    for (int f = 0; f < 3; f++) {
        if (forms[f].onnx && !tmv_require_shared()) return;
        for (int v = 0; v < 3; v++) {
            char out[400], mp[480];
            snprintf(out, sizeof out, "%s/thr_%d_%d%s", g_tmp, f, v, forms[f].ext);
            const char *pre = v == 2 ? "TM_NUM_THREADS=2 " : "";
            const char *arg = v == 1 ? "--threads 1" : "";
            assert_int_equal(tmt_run(NULL, "%s%s quantize %s -o %s -t %s %s -q --no-checksums", pre, bin, forms[f].src, out,
                                     forms[f].type, arg), 0);
            snprintf(mp, sizeof mp, "%s%s", out, forms[f].man);
            json_error_t je;
            json_t *man = json_load_file(mp, 0, &je);
            assert_non_null(man);
            json_t *tu = json_object_get(json_object_get(man, "host"), "threads_used");
            assert_true(json_is_integer(tu));
            int want = forms[f].onnx ? 1 : v == 0 ? n : v == 1 ? 1 : 2;
            assert_int_equal(json_integer_value(tu), want);
            json_decref(man);
        }
    }
    char *h = NULL;
    assert_int_equal(tmt_run(&h, "%s quantize --help", bin), 0);
    assert_non_null(strstr(h, "the CPUs this process may use"));
    free(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_after_last_tensor),
        cmocka_unit_test(test_cancel_at_each_phase),
        cmocka_unit_test(test_hash_thread_stops_fast),
        cmocka_unit_test(test_sigint_while_hashing),
        cmocka_unit_test(test_lock_names_holder),
        cmocka_unit_test(test_concurrent_ct),
        cmocka_unit_test(test_concurrent_gguf),
        cmocka_unit_test(test_concurrent_onnx),
        cmocka_unit_test(test_demo_full_disk),
        cmocka_unit_test(test_cgroup_quota),
        cmocka_unit_test(test_threads_used),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
