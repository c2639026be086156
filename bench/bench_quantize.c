/* bench_quantize.c: throughput and memory of `tensormorph quantize` on LLaMA-sized checkpoints.
**
**   bench_quantize [options] TENSORMORPH_BIN SCRATCH_DIR
**
** 1. writes two synthetic LLaMA-7B-shaped safetensors checkpoints (same values, F32 and BF16)
**    into SCRATCH_DIR/f32 and SCRATCH_DIR/bf16, streamed piece by piece through the library's
**    tm_st_writer_* API (bounded memory); deterministic (seeded), Gaussian-ish rows;
** 2. measures a memory ceiling: memcpy of 1 GiB, best of 3, at the start and again at the end
**    (the machine may be shared: the ceiling is the better of the two);
** 3. measures `sha256sum` over each source file (spawned, wall time);
** 4. spawns TENSORMORPH_BIN quantize for int8 per-channel (with and without checksums) and
**    int4 group:128, from F32 and BF16, with --threads 1, 2 and without --threads (the default:
**    tm_usable_cpus(), reported as that count with "threads_default":true). Each configuration runs once
**    to warm the page cache (not timed), then N timed runs; the best wall time is reported.
**    Peak resident set comes from wait4()'s ru_maxrss, which counts the mapped file pages the
**    child touched.
**
** Before each timed run the share of the source file in the page cache (mincore) and the
** 1-minute load average are recorded; user/system CPU seconds come from the same rusage.
**
** Output: JSON Lines on stdout (one object per measurement and per target, emitted once all
** runs are done), progress and a human table on stderr. This is a benchmark, never a test: the exit status is 0 whether targets pass or miss,
** nonzero only when something could not be run.
**
** Throughput is always in bytes of SOURCE (the checkpoint file being quantized) per second,
** GB = 1e9 bytes. memcpy's figure is bytes copied per second (each byte read once, written once). */
#include <tensormorph.h>
#include <tensormorph/safetensors.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_floor.h"

/* ---------------------------------------------------------------------------------------- */
/* options                                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct opts {
    const char *bin, *dir;
    int reps;        /* timed runs per configuration (best of)        */
    int layers;      /* LLaMA-7B decoder layers in the checkpoint     */
    int keep;        /* keep the generated checkpoints                */
    int no_gen;      /* reuse checkpoints already in SCRATCH_DIR      */
    int gen_only;    /* write the checkpoints and stop (for profiling) */
    int tiny;        /* hidden 256, ffn 688: checks the benchmark itself, measures nothing useful */
    uint64_t seed;
    const char *only;   /* comma-separated variant names to run (NULL: all) */
    const char *dtypes; /* comma-separated source dtypes to run, F32 and/or BF16 (NULL: both) */
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_quantize [--reps N] [--layers L] [--seed S] [--keep] [--no-gen] [--gen-only] [--tiny]\n"
            "                      [--only V1,V2] [--dtypes F32,BF16] TENSORMORPH_BIN SCRATCH_DIR\n"
            "  --reps N    timed runs per configuration, best reported (default 2; after 1 warm-up)\n"
            "  --layers L  LLaMA-7B decoder layers written (default 3: 2.43 GB F32, 1.21 GB BF16)\n"
            "  --seed S    generator seed (default 1)\n"
            "  --keep      leave the generated checkpoints in SCRATCH_DIR\n"
            "  --no-gen    reuse SCRATCH_DIR/f32 and SCRATCH_DIR/bf16 from an earlier --keep run\n"
            "  --gen-only  write SCRATCH_DIR/f32 and SCRATCH_DIR/bf16, measure nothing (profiling input)\n"
            "  --tiny      hidden 256 / ffn 688 instead of 4096 / 11008: a smoke test of this program only\n"
            "  --only V    run only these variants (int8-channel, int8-channel+checksums, int4-group128)\n"
            "  --dtypes D  run only these sources (F32, BF16)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_quantize: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* ---------------------------------------------------------------------------------------- */
/* 1. the synthetic checkpoints                                                              */
/* ---------------------------------------------------------------------------------------- */

enum { VOCAB = 32000, HEADS = 32 };
static int64_t HID = 4096, FFN = 11008; /* LLaMA-7B; --tiny: 256, 688 (smoke test of the benchmark) */

typedef struct tspec {
    char    name[96];
    int64_t rows, cols;   /* cols 0: 1-D norm */
    double  outlier_gain; /* a few input columns this many times larger */
    int64_t zero_row;     /* a row of zeros (degenerate channel), or -1 */
} tspec;

static int build_specs(int layers, tspec **out) {
    tspec *s = calloc((size_t)layers * 9 + 1, sizeof *s);
    if (!s) die("out of memory");
    int n = 0;
    for (int l = 0; l < layers; l++) {
        struct { const char *n; int64_t r, c; double og; } parts[] = {
            {"input_layernorm.weight", HID, 0, 0},
            {"self_attn.q_proj.weight", HID, HID, 12},
            {"self_attn.k_proj.weight", HID, HID, 12},
            {"self_attn.v_proj.weight", HID, HID, 4},
            {"self_attn.o_proj.weight", HID, HID, 1},
            {"post_attention_layernorm.weight", HID, 0, 0},
            {"mlp.gate_proj.weight", FFN, HID, 10},
            {"mlp.up_proj.weight", FFN, HID, 10},
            {"mlp.down_proj.weight", HID, FFN, l == 1 ? 40 : 1},
        };
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            snprintf(s[n].name, sizeof s[n].name, "model.layers.%d.%s", l, parts[p].n);
            s[n].rows = parts[p].r;
            s[n].cols = parts[p].c;
            s[n].outlier_gain = parts[p].og;
            s[n].zero_row = (l == 0 && p == 4) ? 3 : -1;
            n++;
        }
    }
    snprintf(s[n].name, sizeof s[n].name, "model.norm.weight");
    s[n].rows = HID; s[n].cols = 0; s[n].zero_row = -1;
    n++;
    *out = s;
    return n;
}

static uint64_t splitmix64(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *st) { return (double)(splitmix64(st) >> 11) * (1.0 / 9007199254740992.0); }
/* Gaussian-ish: Irwin-Hall sum of four 16-bit uniforms, scaled to mean 0, variance 1
** (tails end at +-3.46 sigma). One 64-bit draw per value: cheap enough to write GBs. */
static inline float gaussish(uint64_t *st) {
    uint64_t r = splitmix64(st);
    double u = (double)(r & 0xFFFF) + (double)((r >> 16) & 0xFFFF) + (double)((r >> 32) & 0xFFFF) +
               (double)(r >> 48);
    /* sum of 4 U{0..65535}: mean 2*65535, variance 4*(65536^2-1)/12 */
    return (float)((u - 131070.0) * (1.0 / 37837.23));
}

static const int64_t outlier_cols[] = {7, 61, 190, 2049};

/* rows [r0, r1) of tensor sp, as float32, into out */
static void gen_rows(const tspec *sp, uint64_t seed, int64_t r0, int64_t r1, float *out) {
    if (sp->cols == 0) { /* norm: 1 + 0.05 N(0,1) */
        uint64_t st = seed;
        for (int64_t i = 0; i < sp->rows; i++) {
            float v = 1.0f + 0.05f * gaussish(&st);
            if (i >= r0 && i < r1) out[i - r0] = v;
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        uint64_t st = seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull); /* per-row stream: any piece size */
        splitmix64(&st);
        float sd = (float)(0.01 * pow(10.0, uniform01(&st))); /* 0.01 .. 0.1 */
        float *row = out + (r - r0) * sp->cols;
        for (int64_t c = 0; c < sp->cols; c++) row[c] = sd * gaussish(&st);
        if (sp->outlier_gain > 1)
            for (size_t k = 0; k < sizeof outlier_cols / sizeof outlier_cols[0]; k++)
                if (outlier_cols[k] < sp->cols) row[outlier_cols[k]] *= (float)sp->outlier_gain;
        if (r == sp->zero_row) memset(row, 0, (size_t)sp->cols * sizeof(float));
    }
}

static void mkdir_p(const char *d) {
    if (mkdir(d, 0755) != 0 && errno != EEXIST) die("%s: cannot create directory: %s", d, strerror(errno));
}

static void write_config(const char *dir, int layers, const char *torch_dtype) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) die("%s: %s", path, strerror(errno));
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n"
            "  \"rms_norm_eps\": 1e-05,\n  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"%s\",\n"
            "  \"_comment\": \"synthetic checkpoint written by tensormorph bench/bench_quantize (no embeddings, no lm_head)\"\n}\n",
            (int)HID, (int)FFN, layers, HEADS, HEADS, VOCAB, torch_dtype);
    if (fclose(f) != 0) die("%s: write failed", path);
}

/* Write SCRATCH/f32/model.safetensors and SCRATCH/bf16/model.safetensors in one pass: each
** piece of rows is generated once in float32, written, converted to BF16, written. */
static void generate(const opts *o, const tspec *sp, int n) {
    char d32[4096], d16[4096], p32[4200], p16[4200];
    snprintf(d32, sizeof d32, "%s/f32", o->dir);
    snprintf(d16, sizeof d16, "%s/bf16", o->dir);
    mkdir_p(d32);
    mkdir_p(d16);
    snprintf(p32, sizeof p32, "%s/model.safetensors", d32);
    snprintf(p16, sizeof p16, "%s/model.safetensors", d16);
    tm_st_entry *e32 = calloc((size_t)n, sizeof *e32), *e16 = calloc((size_t)n, sizeof *e16);
    if (!e32 || !e16) die("out of memory");
    for (int i = 0; i < n; i++) {
        e32[i].name = sp[i].name;
        e32[i].dtype = TM_F32;
        e32[i].ndim = sp[i].cols ? 2 : 1;
        e32[i].shape[0] = sp[i].rows;
        e32[i].shape[1] = sp[i].cols;
        e16[i] = e32[i];
        e16[i].dtype = TM_BF16;
    }
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    tm_st_write_params wp;
    memset(&wp, 0, sizeof wp);
    wp.meta_keys = mk;
    wp.meta_values = mv;
    wp.n_meta = 1;
    tm_err err;
    tm_st_writer *w32 = NULL, *w16 = NULL;
    if (tm_st_writer_open(p32, e32, n, &wp, &w32, &err)) die("%s", err.msg);
    if (tm_st_writer_open(p16, e16, n, &wp, &w16, &err)) die("%s", err.msg);
    const size_t piece_bytes = 4u << 20; /* 4 MiB of float32 per piece */
    float *fb = malloc(piece_bytes);
    uint16_t *hb = malloc(piece_bytes / 2);
    if (!fb || !hb) die("out of memory");
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        uint64_t seed = o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xA24BAED4963EE407ull;
        int64_t cols = sp[i].cols ? sp[i].cols : sp[i].rows;
        int64_t rows = sp[i].cols ? sp[i].rows : 1;
        int64_t rpp = (int64_t)(piece_bytes / sizeof(float)) / cols;
        if (rpp < 1) die("tensor %s: a row exceeds the piece buffer", sp[i].name);
        for (int64_t r0 = 0; r0 < rows; r0 += rpp) {
            int64_t r1 = r0 + rpp < rows ? r0 + rpp : rows, ne = (r1 - r0) * cols;
            if (sp[i].cols) gen_rows(&sp[i], seed, r0, r1, fb);
            else gen_rows(&sp[i], seed, 0, sp[i].rows, fb);
            if (tm_st_writer_write(w32, i, (uint64_t)(r0 * cols) * 4, fb, (size_t)ne * 4, &err)) die("%s", err.msg);
            if (tm_convert_from_f32(TM_BF16, fb, ne, hb)) die("tm_convert_from_f32 failed");
            if (tm_st_writer_write(w16, i, (uint64_t)(r0 * cols) * 2, hb, (size_t)ne * 2, &err)) die("%s", err.msg);
        }
    }
    if (tm_st_writer_finish(w32, &err)) die("%s", err.msg);
    if (tm_st_writer_finish(w16, &err)) die("%s", err.msg);
    tm_st_writer_free(w32);
    tm_st_writer_free(w16);
    free(fb);
    free(hb);
    free(e32);
    free(e16);
    write_config(d32, o->layers, "float32");
    write_config(d16, o->layers, "bfloat16");
    fprintf(stderr, "generated %s and %s in %.1f s\n", p32, p16, now_s() - t0);
}

/* ---------------------------------------------------------------------------------------- */
/* helpers: spawning, page-cache residency                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct run_res {
    int    status;      /* exit status, or 128+signal */
    double wall, user, sys;
    double maxrss_mib;  /* ru_maxrss (KiB) / 1024 */
} run_res;

/* Run argv[0] (PATH lookup) with stdout -> /dev/null and stderr -> errlog (or /dev/null). */
static run_res spawn(char *const argv[], const char *errlog) {
    run_res r;
    memset(&r, 0, sizeof r);
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        int el = errlog ? open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644) : dn;
        if (dn >= 0) dup2(dn, 1);
        if (el >= 0) dup2(el, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0) {
        if (errno != EINTR) die("wait4: %s", strerror(errno));
    }
    r.wall = now_s() - t0;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    r.sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    r.maxrss_mib = (double)ru.ru_maxrss / 1024.0;
    return r;
}

static void rm_rf(const char *path) {
    char *argv[] = {"rm", "-rf", "--", (char *)path, NULL};
    run_res r = spawn(argv, NULL);
    if (r.status) die("rm -rf %s failed", path);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) die("%s: %s", path, strerror(errno));
    return (uint64_t)st.st_size;
}

/* 1 when `name` is one of the comma-separated items of `list` (a NULL list holds everything). */
static int in_list(const char *list, const char *name) {
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* 1-minute load average (other processes compete for the same cores: say so). */
static double loadavg1(void) {
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = NAN;
        fclose(f);
    }
    return l;
}

/* Percentage of the file's pages in the page cache (mincore). -1 when it cannot tell. */
static double cached_pct(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) { close(fd); return -1; }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = ((size_t)st.st_size + page - 1) / page;
    unsigned char *vec = malloc(np);
    double pct = -1;
    if (vec && mincore(m, (size_t)st.st_size, vec) == 0) {
        size_t in = 0;
        for (size_t i = 0; i < np; i++) in += vec[i] & 1;
        pct = 100.0 * (double)in / (double)np;
    }
    free(vec);
    munmap(m, (size_t)st.st_size);
    return pct;
}

/* ---------------------------------------------------------------------------------------- */
/* 2. memcpy ceiling                                                                          */
/* ---------------------------------------------------------------------------------------- */

static double memcpy_gbps(double *best_s) {
    const size_t n = (size_t)1 << 30;
    unsigned char *a = malloc(n), *b = malloc(n);
    if (!a || !b) die("memcpy: cannot allocate 2 x 1 GiB");
    for (size_t i = 0; i < n; i += 4096) a[i] = (unsigned char)i;
    memset(a, 1, n); /* fault every page in before timing */
    memset(b, 2, n);
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        a[(size_t)k * 4096] = (unsigned char)k;
        double t0 = now_s();
        memcpy(b, a, n);
        double t = now_s() - t0;
        if (t < best) best = t;
        if (b[(size_t)k * 4096] != (unsigned char)k) die("memcpy check failed");
    }
    volatile unsigned char sink = b[n - 1];
    (void)sink;
    free(a);
    free(b);
    *best_s = best;
    return (double)n / best / 1e9;
}

/* ---------------------------------------------------------------------------------------- */
/* 4. configurations                                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef struct variant {
    const char *name;
    const char *args[6];  /* extra quantize arguments, NULL-terminated */
    int checksums;
} variant;

static const variant variants[] = {
    {"int8-channel", {"--no-checksums", NULL}, 0},
    {"int8-channel+checksums", {NULL}, 1},
    {"int4-group128", {"-t", "int4", "-g", "group:128", "--no-checksums", NULL}, 0},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

typedef struct result {
    const char *op, *variant, *dtype;
    int threads;
    int threads_default; /* 1: run without --threads (the CLI's default, tm_usable_cpus()) */
    uint64_t src_bytes;
    double seconds, gbps, ratio, rss_mib, rss_target_mib;
    double user, sys, cache_pct_min;
    double load_max;  /* highest 1-min load average seen before a timed run */
    uint64_t out_bytes;  /* bytes the job wrote (all files of the output directory) */
    double floor_s;      /* write floor for out_bytes in the same directory (bench_floor.h) */
    double read_floor_s; /* reading the source once with read(2) in 64 KiB pieces (bench_floor.h) */
    int runs;
    char all_s[128];
} result;

/* Source bytes per second of a one-thread job that did nothing but read its source and write its
** output (bench_floor.h): the I/O floor. NaN when either floor is missing. */
static double io_floor_gbps(const result *r) {
    if (!(r->floor_s > 0) || !(r->read_floor_s > 0)) return NAN;
    return (double)r->src_bytes / (r->floor_s + r->read_floor_s) / 1e9;
}

static void json_num(FILE *f, const char *k, double v, int last) {
    if (isfinite(v)) fprintf(f, "\"%s\":%.6g%s", k, v, last ? "" : ",");
    else fprintf(f, "\"%s\":null%s", k, last ? "" : ",");
}

static void emit(const result *r) {
    printf("{\"op\":\"%s\",\"variant\":", r->op);
    if (r->variant) printf("\"%s\"", r->variant); else printf("null");
    printf(",\"dtype\":");
    if (r->dtype) printf("\"%s\"", r->dtype); else printf("null");
    printf(",\"threads\":%d,\"threads_default\":%s,\"src_bytes\":%" PRIu64 ",", r->threads,
           r->threads_default ? "true" : "false", r->src_bytes);
    json_num(stdout, "seconds", r->seconds, 0);
    json_num(stdout, "gb_per_s", r->gbps, 0);
    json_num(stdout, "ratio_to_memcpy", r->ratio, 0);
    json_num(stdout, "peak_rss_mib", r->rss_mib, 0);
    json_num(stdout, "rss_target_mib", r->rss_target_mib, 0);
    json_num(stdout, "user_s", r->user, 0);
    json_num(stdout, "sys_s", r->sys, 0);
    json_num(stdout, "src_cached_pct_min", r->cache_pct_min, 0);
    json_num(stdout, "gb_per_cpu_s", (double)r->src_bytes / (r->user + r->sys) / 1e9, 0);
    json_num(stdout, "loadavg1_max", r->load_max, 0);
    if (r->out_bytes) {
        printf("\"out_bytes\":%" PRIu64 ",", r->out_bytes);
        json_num(stdout, "write_floor_s", r->floor_s, 0);
        json_num(stdout, "write_floor_src_gb_per_s", r->floor_s > 0 ? (double)r->src_bytes / r->floor_s / 1e9 : NAN, 0);
        json_num(stdout, "read_floor_s", r->read_floor_s, 0);
        json_num(stdout, "io_floor_src_gb_per_s", io_floor_gbps(r), 0);
    }
    printf("\"runs\":%d,\"all_seconds\":[%s],\"cache\":\"warm\"}\n", r->runs, r->all_s);
    fflush(stdout);
}

int main(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    o.reps = 2;
    o.layers = 3;
    o.seed = 1;
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--reps") && i + 1 < argc) o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--layers") && i + 1 < argc) o.layers = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && i + 1 < argc) o.seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(a, "--keep")) o.keep = 1;
        else if (!strcmp(a, "--no-gen")) o.no_gen = 1;
        else if (!strcmp(a, "--gen-only")) o.gen_only = 1;
        else if (!strcmp(a, "--tiny")) { o.tiny = 1; HID = 256; FFN = 688; }
        else if (!strcmp(a, "--only") && i + 1 < argc) o.only = argv[++i];
        else if (!strcmp(a, "--dtypes") && i + 1 < argc) o.dtypes = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (a[0] == '-' && a[1]) { usage(stderr); return 2; }
        else if (pos == 0) { o.bin = a; pos++; }
        else if (pos == 1) { o.dir = a; pos++; }
        else { usage(stderr); return 2; }
    }
    if (pos != 2 || o.reps < 1 || o.layers < 1) { usage(stderr); return 2; }
    if (access(o.bin, X_OK) != 0) die("%s: not an executable", o.bin);
    mkdir_p(o.dir);

    /* machine */
    char cpu[256] = "unknown";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[512];
        while (fgets(line, sizeof line, ci))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) { snprintf(cpu, sizeof cpu, "%s", c + 2); cpu[strcspn(cpu, "\n\"\\")] = '\0'; }
                break;
            }
        fclose(ci);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("{\"op\":\"machine\",\"cpu\":\"%s\",\"online_cpus\":%ld,\"reps\":%d,\"layers\":%d,\"cache\":\"warm\"}\n",
           cpu, ncpu, o.reps, o.layers);

    /* 1. checkpoints */
    tspec *sp;
    int nt = build_specs(o.layers, &sp);
    if (!o.no_gen) generate(&o, sp, nt);
    if (o.gen_only) { free(sp); return 0; }
    int64_t largest_elems = 0;
    for (int i = 0; i < nt; i++) {
        int64_t e = sp[i].cols ? sp[i].rows * sp[i].cols : sp[i].rows;
        if (e > largest_elems) largest_elems = e;
    }
    const char *dnames[2] = {"F32", "BF16"}, *dsub[2] = {"f32", "bf16"};
    const int dsize[2] = {4, 2};
    char src_dir[2][4096], src_file[2][4200];
    uint64_t src_bytes[2];
    double rss_target[2];
    for (int d = 0; d < 2; d++) {
        snprintf(src_dir[d], sizeof src_dir[d], "%s/%s", o.dir, dsub[d]);
        snprintf(src_file[d], sizeof src_file[d], "%s/model.safetensors", src_dir[d]);
        src_bytes[d] = file_size(src_file[d]);
        rss_target[d] = 256.0 + (double)largest_elems * dsize[d] / 1048576.0;
    }

    /* 2. memcpy ceiling: best of 3 now and best of 3 after the quantize runs (other processes
    ** may share the cores; the ceiling is the better of the two). Emitted at the end. */
    result mcr[2];
    memset(mcr, 0, sizeof mcr);
    for (int k = 0; k < 2; k++) {
        mcr[k].op = "memcpy";
        mcr[k].variant = k ? "end" : "start";
        mcr[k].threads = 1;
        mcr[k].src_bytes = (uint64_t)1 << 30;
        mcr[k].rss_mib = mcr[k].rss_target_mib = mcr[k].user = mcr[k].sys = mcr[k].cache_pct_min = NAN;
        mcr[k].runs = 3;
    }
    mcr[0].load_max = loadavg1();
    mcr[0].gbps = memcpy_gbps(&mcr[0].seconds);
    double mc = mcr[0].gbps;

    /* 3. sha256sum */
    double sha_gbps[2];
    result sha_res[2];
    char errlog[4200];
    snprintf(errlog, sizeof errlog, "%s/child.stderr", o.dir);
    for (int d = 0; d < 2; d++) {
        char *argv_s[] = {"sha256sum", src_file[d], NULL};
        run_res w = spawn(argv_s, errlog); /* warm-up: page cache */
        if (w.status) die("sha256sum %s failed (status %d)", src_file[d], w.status);
        result *s = &sha_res[d];
        memset(s, 0, sizeof *s);
        s->op = "sha256sum";
        s->dtype = dnames[d];
        s->threads = 1;
        s->src_bytes = src_bytes[d];
        s->seconds = 1e30;
        s->cache_pct_min = 100;
        size_t al = 0;
        for (int k = 0; k < o.reps; k++) {
            double c = cached_pct(src_file[d]), l = loadavg1();
            if (c < s->cache_pct_min) s->cache_pct_min = c;
            if (l > s->load_max) s->load_max = l;
            run_res x = spawn(argv_s, errlog);
            if (x.status) die("sha256sum failed");
            if (x.wall < s->seconds) { s->seconds = x.wall; s->user = x.user; s->sys = x.sys; }
            if (x.maxrss_mib > s->rss_mib) s->rss_mib = x.maxrss_mib;
            al += (size_t)snprintf(s->all_s + al, sizeof s->all_s - al, "%s%.4f", k ? "," : "", x.wall);
            if (al >= sizeof s->all_s) al = sizeof s->all_s - 1;
        }
        s->runs = o.reps;
        s->gbps = (double)src_bytes[d] / s->seconds / 1e9;
        s->ratio = s->gbps / mc;
        s->rss_target_mib = NAN;
        sha_gbps[d] = s->gbps;
    }

    /* the input side of the I/O floor: reading each source once */
    double read_floor[2];
    for (int d = 0; d < 2; d++) {
        uint64_t got = 0;
        read_floor[d] = tmb_read_floor(src_file[d], 64 << 10, o.reps + 1, &got);
    }

    /* 4. quantize */
    enum { NRES = 2 * N_VARIANTS * 3 };
    result qr[NRES];
    int nq = 0;
    char outdir[4200];
    snprintf(outdir, sizeof outdir, "%s/out", o.dir);
    static const int thr[3] = {1, 2, 0}; /* 0: no --threads, the CLI's default */
    for (int d = 0; d < 2; d++)
        for (int v = 0; v < N_VARIANTS; v++)
            for (int ti = 0; ti < 3; ti++) {
                if (!in_list(o.only, variants[v].name) || !in_list(o.dtypes, dnames[d])) continue;
                char tb[16];
                snprintf(tb, sizeof tb, "%d", thr[ti]);
                char *av[24];
                int ac = 0;
                av[ac++] = (char *)o.bin;
                av[ac++] = "quantize";
                av[ac++] = src_dir[d];
                av[ac++] = "-o";
                av[ac++] = outdir;
                if (thr[ti] > 0) {
                    av[ac++] = "--threads";
                    av[ac++] = tb;
                }
                av[ac++] = "--no-progress";
                av[ac++] = "-q";
                for (int k = 0; variants[v].args[k]; k++) av[ac++] = (char *)variants[v].args[k];
                av[ac] = NULL;
                result *q = &qr[nq++];
                memset(q, 0, sizeof *q);
                q->op = "quantize";
                q->variant = variants[v].name;
                q->dtype = dnames[d];
                q->threads = thr[ti] > 0 ? thr[ti] : tm_usable_cpus();
                q->threads_default = thr[ti] == 0;
                q->src_bytes = src_bytes[d];
                q->rss_target_mib = rss_target[d];
                q->seconds = 1e30;
                q->cache_pct_min = 100;
                size_t al = 0;
                for (int k = 0; k <= o.reps; k++) { /* k == 0: warm-up, not timed */
                    rm_rf(outdir);
                    double c = cached_pct(src_file[d]), l = loadavg1();
                    run_res x = spawn(av, errlog);
                    if (x.status) {
                        fprintf(stderr, "bench_quantize: %s %s threads %d failed with status %d; its stderr:\n",
                                q->variant, q->dtype, q->threads, x.status);
                        FILE *el = fopen(errlog, "r");
                        char line[512];
                        while (el && fgets(line, sizeof line, el)) fputs(line, stderr);
                        if (el) fclose(el);
                        exit(1);
                    }
                    if (x.maxrss_mib > q->rss_mib) q->rss_mib = x.maxrss_mib;
                    if (k == 0) continue;
                    if (c < q->cache_pct_min) q->cache_pct_min = c;
                    if (l > q->load_max) q->load_max = l;
                    if (x.wall < q->seconds) { q->seconds = x.wall; q->user = x.user; q->sys = x.sys; }
                    al += (size_t)snprintf(q->all_s + al, sizeof q->all_s - al, "%s%.4f", k > 1 ? "," : "", x.wall);
                    if (al >= sizeof q->all_s) al = sizeof q->all_s - 1;
                }
                q->out_bytes = tmb_path_bytes(outdir);
                rm_rf(outdir);
                q->floor_s = tmb_write_floor(o.dir, q->out_bytes, o.reps + 1);
                q->read_floor_s = read_floor[d];
                q->runs = o.reps;
                q->gbps = (double)q->src_bytes / q->seconds / 1e9;
                fprintf(stderr, "  %-24s %-4s threads %d%s: best %.3f s, %.3f GB/s, peak RSS %.0f MiB; "
                                "writing its %.3f GB output alone: %.3f s\n",
                        q->variant, q->dtype, q->threads, q->threads_default ? " (default)" : "", q->seconds, q->gbps, q->rss_mib, q->out_bytes / 1e9,
                        q->floor_s);
            }

    mcr[1].load_max = loadavg1();
    mcr[1].gbps = memcpy_gbps(&mcr[1].seconds);
    if (mcr[1].gbps > mc) mc = mcr[1].gbps;
    for (int k = 0; k < 2; k++) {
        mcr[k].ratio = mcr[k].gbps / mc;
        snprintf(mcr[k].all_s, sizeof mcr[k].all_s, "%.6f", mcr[k].seconds);
        emit(&mcr[k]);
    }
    printf("{\"op\":\"memcpy_ceiling\",\"gb_per_s\":%.6g,\"note\":\"best of the start and end memcpy measurements\"}\n", mc);
    for (int d = 0; d < 2; d++) {
        sha_res[d].ratio = sha_res[d].gbps / mc;
        emit(&sha_res[d]);
    }
    for (int i = 0; i < nq; i++) {
        qr[i].ratio = qr[i].gbps / mc;
        emit(&qr[i]);
    }

    /* targets */
    fprintf(stderr, "\nmachine: %s, %ld online CPUs; warm page cache (each configuration ran once untimed first);\n"
                    "best of %d timed runs; GB = 1e9 bytes of SOURCE checkpoint per second\n\n",
            cpu, ncpu, o.reps);
    fprintf(stderr, "memcpy 1 GiB: best of 3 at start %.2f GB/s (load %.1f), at end %.2f GB/s (load %.1f); ceiling %.2f GB/s\n",
            mcr[0].gbps, mcr[0].load_max, mcr[1].gbps, mcr[1].load_max, mc);
    for (int d = 0; d < 2; d++)
        fprintf(stderr, "sha256sum %-4s %.2f GB: best %.3f s, %.3f GB/s (cpu %.2f s, load %.1f)\n", dnames[d],
                src_bytes[d] / 1e9, sha_res[d].seconds, sha_gbps[d], sha_res[d].user + sha_res[d].sys,
                sha_res[d].load_max);
    fprintf(stderr, "\n%-24s %-5s %3s %7s %7s %7s %7s %8s %10s %7s %7s %4s %5s %5s %8s\n", "variant", "dtype", "thr",
            "src GB", "best s", "GB/s", "%memcpy", "%sha256", "cpu s(u+s)", "peakRSS", "RSStgt", "RSS", "load", "cache",
            "ioflrGB/s");
    for (int i = 0; i < nq; i++) {
        const result *q = &qr[i];
        int d = !strcmp(q->dtype, "BF16");
        fprintf(stderr, "%-24s %-5s %2d%c %7.3f %7.3f %7.3f %6.2f%% %7.1f%% %10.2f %6.0fM %6.0fM %4s %5.1f %4.0f%% %8.2f\n",
                q->variant, q->dtype, q->threads, q->threads_default ? 'd' : ' ', q->src_bytes / 1e9, q->seconds, q->gbps, 100 * q->ratio,
                100 * q->gbps / sha_gbps[d], q->user + q->sys, q->rss_mib, q->rss_target_mib,
                q->rss_mib < q->rss_target_mib ? "PASS" : "MISS", q->load_max, q->cache_pct_min,
                io_floor_gbps(q));
    }
    fprintf(stderr, "(cpu s: user+sys of the best run; load: highest 1-min load average before a timed run;\n"
                    " cache: lowest share of the source file resident in the page cache before a timed run;\n"
                    " ioflrGB/s: source bytes / (time to read the source once + time to write and fsync the\n"
                    " job's output bytes alone in the same directory): the most a one-thread job that reads\n"
                    " its source and writes that output durably could reach (bench_floor.h);\n"
                    " thr Nd: run without --threads, the default, which used N threads)\n");
    fprintf(stderr, "\ntargets:\n");
    int n_miss = 0;
    for (int i = 0; i < nq; i++) {
        const result *q = &qr[i];
        int d = !strcmp(q->dtype, "BF16");
        const char *name = NULL;
        double measured = 0, threshold = 0;
        if (!strcmp(q->variant, "int8-channel") && q->threads == 1 && !q->threads_default) {
            name = "int8_channel_1thread_ge_50pct_memcpy";
            measured = q->gbps;
            threshold = 0.5 * mc;
        } else if (!strcmp(q->variant, "int8-channel+checksums")) {
            name = "int8_channel_checksums_ge_80pct_sha256sum";
            measured = q->gbps;
            threshold = 0.8 * sha_gbps[d];
        }
        if (name) {
            int pass = measured >= threshold;
            n_miss += !pass;
            double floor_gbps = q->floor_s > 0 ? (double)q->src_bytes / q->floor_s / 1e9 : NAN;
            double io_gbps = io_floor_gbps(q);
            printf("{\"op\":\"target\",\"target\":\"%s\",\"variant\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,"
                   "\"measured_gb_per_s\":%.6g,\"threshold_gb_per_s\":%.6g,\"fraction_of_threshold\":%.4g,"
                   "\"write_floor_src_gb_per_s\":%.6g,\"io_floor_src_gb_per_s\":%.6g,\"threshold_above_io_floor\":%s,"
                   "\"pass\":%s}\n",
                   name, q->variant, q->dtype, q->threads, measured, threshold, measured / threshold, floor_gbps,
                   io_gbps, threshold > io_gbps ? "true" : "false", pass ? "true" : "false");
            fprintf(stderr, "  %-4s %-42s thr %d: %.3f GB/s vs %.3f GB/s needed (%.0f%% of target): %s%s\n", q->dtype,
                    name, q->threads, measured, threshold, 100 * measured / threshold, pass ? "PASS" : "MISS",
                    threshold > io_gbps ? " (above the I/O floor: reading the source + writing the output alone)" : "");
        }
        int rpass = q->rss_mib < q->rss_target_mib;
        n_miss += !rpass;
        printf("{\"op\":\"target\",\"target\":\"peak_rss_lt_256MiB_plus_largest_tensor\",\"variant\":\"%s\","
               "\"dtype\":\"%s\",\"threads\":%d,\"measured_mib\":%.6g,\"threshold_mib\":%.6g,\"pass\":%s}\n",
               q->variant, q->dtype, q->threads, q->rss_mib, q->rss_target_mib, rpass ? "true" : "false");
    }
    int rss_miss = 0;
    for (int i = 0; i < nq; i++) rss_miss += !(qr[i].rss_mib < qr[i].rss_target_mib);
    fprintf(stderr, "  peak RSS < 256 MiB + largest tensor (F32 %.0f MiB, BF16 %.0f MiB): %d of %d runs MISS\n",
            rss_target[0], rss_target[1], rss_miss, nq);
    fprintf(stderr, "%d target check(s) missed\n", n_miss);
    fflush(stdout);

    unlink(errlog);
    if (!o.keep) {
        rm_rf(src_dir[0]);
        rm_rf(src_dir[1]);
    }
    free(sp);
    return 0;
}
