/* bench_gguf_job.c: end-to-end throughput and peak memory of `tensormorph quantize IN.gguf -o
** OUT.gguf --type T` on a synthetic LLaMA-shaped F32 GGUF (and its F16 twin).
**
**   bench_gguf_job [--layers L] [--reps N] [--types T1,T2,...] TENSORMORPH_BIN SCRATCH_DIR
**
** 1. writes SCRATCH_DIR/model-f32.gguf and model-f16.gguf through the library's GGUF writer
**    (deterministic Gaussian-like values; llama names and hparams: token_embd 32000 x 2048, per
**    layer attn_q/k/v/output, ffn_gate/up/down with 2048 / 512 / 5632 rows, norms); with the
**    default 5 layers the F32 file is about 1.1 GB;
** 2. measures the page-cache read rate of each file (read(2) in 1 MiB pieces, best of 3);
** 3. spawns the binary for each type (default Q8_0,Q4_0,Q6_K,Q4_K_M) with --threads 1 and 2,
**    --no-checksums, best wall time of N runs (after one untimed run), and the child's peak
**    resident set from wait4's ru_maxrss (which counts the mapped source pages it touched).
** Output: JSON Lines on stdout, a table on stderr. A benchmark, never a test: exit status 0
** whether or not figures meet any target. GB = 1e9 bytes of the SOURCE file per second. */
#include <tensormorph.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float next_val(void) {
    double u = 0;
    for (int k = 0; k < 4; k++) {
        g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
        u += (double)(g_rng >> 11) / 9007199254740992.0;
    }
    return (float)((u - 2.0) * 0.03);
}

/* Write the model with element type `type` (F32 or F16). */
static int write_model(const char *path, int type, int layers) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    if (!kv) return -1;
    tm_gguf_kvlist_set_str(kv, "general.architecture", "llama", NULL);
    tm_gguf_kvlist_set_str(kv, "general.name", "bench", NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.block_count", (uint32_t)layers, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.embedding_length", 2048, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count", 16, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count_kv", 4, NULL);
    tm_gguf_kvlist_set_u32(kv, "general.file_type", type == TM_GGML_F32 ? 0 : 1, NULL);
    static const struct { const char *n; int64_t rows, cols; } per_layer[] = {
        {"attn_norm", 1, 2048}, {"attn_q", 2048, 2048}, {"attn_k", 512, 2048}, {"attn_v", 512, 2048},
        {"attn_output", 2048, 2048}, {"ffn_norm", 1, 2048}, {"ffn_gate", 5632, 2048},
        {"ffn_up", 5632, 2048}, {"ffn_down", 2048, 5632}};
    const int nper = (int)(sizeof per_layer / sizeof per_layer[0]);
    int n = 2 + layers * nper;
    tm_gguf_wtensor *t = calloc((size_t)n, sizeof *t);
    char (*names)[64] = calloc((size_t)n, sizeof *names);
    if (!t || !names) return -1;
    int k = 0;
    snprintf(names[k], 64, "token_embd.weight");
    t[k] = (tm_gguf_wtensor){names[k], type, 2, {2048, 32000, 1, 1}};
    k++;
    snprintf(names[k], 64, "output_norm.weight");
    t[k] = (tm_gguf_wtensor){names[k], TM_GGML_F32, 1, {2048, 1, 1, 1}};
    k++;
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < nper; j++) {
            snprintf(names[k], 64, "blk.%d.%s.weight", l, per_layer[j].n);
            int is1d = per_layer[j].rows == 1;
            t[k] = (tm_gguf_wtensor){names[k], is1d ? TM_GGML_F32 : type, is1d ? 1 : 2,
                                     {per_layer[j].cols, per_layer[j].rows, 1, 1}};
            k++;
        }
    tm_gguf_writer *w;
    tm_err e;
    if (tm_gguf_writer_open(path, kv, t, n, &w, &e)) {
        fprintf(stderr, "bench_gguf_job: %s\n", e.msg);
        return -1;
    }
    const int64_t piece = 1 << 20;
    float *f = malloc((size_t)piece * sizeof *f);
    uint16_t *h = malloc((size_t)piece * sizeof *h);
    for (int i = 0; i < n && f && h; i++) {
        int64_t ne = t[i].ne[0] * t[i].ne[1];
        int es = t[i].type == TM_GGML_F32 ? 4 : 2;
        for (int64_t o = 0; o < ne; o += piece) {
            int64_t m = ne - o < piece ? ne - o : piece;
            for (int64_t q = 0; q < m; q++) f[q] = t[i].n_dims == 1 ? 1.0f + next_val() : next_val();
            if (es == 2)
                for (int64_t q = 0; q < m; q++) h[q] = tm_f32_to_f16(f[q]);
            if (tm_gguf_writer_write(w, i, (uint64_t)(o * es), es == 4 ? (void *)f : (void *)h, (size_t)(m * es), &e)) {
                fprintf(stderr, "bench_gguf_job: %s\n", e.msg);
                return -1;
            }
        }
    }
    int rc = tm_gguf_writer_finish(w, &e) ? -1 : 0;
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
    free(f); free(h); free(t); free(names);
    return rc;
}

static double read_rate(const char *path, uint64_t *size) {
    double best = 1e30;
    char *buf = malloc(1 << 20);
    for (int r = 0; r < 3 && buf; r++) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) break;
        double t0 = now_s();
        uint64_t tot = 0;
        ssize_t k;
        while ((k = read(fd, buf, 1 << 20)) > 0) tot += (uint64_t)k;
        double dt = now_s() - t0;
        close(fd);
        *size = tot;
        if (dt < best) best = dt;
    }
    free(buf);
    return (double)*size / best / 1e9;
}

/* Run BIN quantize IN -o OUT --type T --threads N; wall seconds, peak RSS (KiB); -1 on failure. */
static double run_one(const char *bin, const char *in, const char *out, const char *type, int threads,
                      long *maxrss_kib) {
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); }
        execl(bin, bin, "quantize", in, "-o", out, "--type", type, "--threads", th, "--no-checksums", "-q",
              "--force", (char *)NULL); /* --force: the previous run's output is tensormorph's own */
        _exit(127);
    }
    if (pid < 0) return -1;
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return -1;
    double dt = now_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    *maxrss_kib = ru.ru_maxrss;
    return dt;
}

int main(int argc, char **argv) {
    int layers = 5, reps = 1, keep = 0;
    const char *types = "Q8_0,Q4_0,Q6_K,Q4_K_M";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--keep")) keep = 1; /* leave the sources (profiling input) */
        else break;
    }
    if (argc - i != 2 || layers < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_gguf_job [--layers L] [--reps N] [--types T,...] [--keep] TENSORMORPH_BIN SCRATCH_DIR\n");
        return 2;
    }
    const char *bin = argv[i], *dir = argv[i + 1];
    char src[2][4096], out[4096];
    snprintf(src[0], sizeof src[0], "%s/model-f32.gguf", dir);
    snprintf(src[1], sizeof src[1], "%s/model-f16.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    if (write_model(src[0], TM_GGML_F32, layers) || write_model(src[1], TM_GGML_F16, layers)) return 1;
    fprintf(stderr, "%-5s %-8s %7s %10s %10s %12s\n", "src", "type", "threads", "GB/s", "seconds", "peak RSS MB");
    for (int s = 0; s < 2; s++) {
        uint64_t size = 0;
        double rr = read_rate(src[s], &size);
        printf("{\"source\": \"%s\", \"bytes\": %llu, \"page_cache_read_gb_per_s\": %.3f}\n",
               s ? "F16" : "F32", (unsigned long long)size, rr);
        fprintf(stderr, "%-5s page-cache read %.2f GB/s, %.2f GB\n", s ? "F16" : "F32", rr, (double)size / 1e9);
        const char *p = types;
        while (*p) {
            char ty[32];
            size_t k = strcspn(p, ",");
            snprintf(ty, sizeof ty, "%.*s", (int)k, p);
            p += k + (p[k] == ',');
            for (int th = 1; th <= 2; th++) {
                long rss = 0;
                if (run_one(bin, src[s], out, ty, th, &rss) < 0) {
                    fprintf(stderr, "bench_gguf_job: %s quantize %s failed\n", bin, ty);
                    return 1;
                }
                double best = 1e30;
                for (int r = 0; r < reps; r++) {
                    long rs = 0;
                    double dt = run_one(bin, src[s], out, ty, th, &rs);
                    if (dt < 0) return 1;
                    if (dt < best) best = dt;
                    if (rs > rss) rss = rs;
                }
                printf("{\"source\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"seconds\": %.3f, \"gb_per_s\": %.3f, \"peak_rss_mb\": %.1f}\n",
                       s ? "F16" : "F32", ty, th, best, (double)size / best / 1e9, (double)rss / 1024.0);
                fprintf(stderr, "%-5s %-8s %7d %10.3f %10.2f %12.1f\n", s ? "F16" : "F32", ty, th,
                        (double)size / best / 1e9, best, (double)rss / 1024.0);
            }
        }
    }
    if (!keep) {
        unlink(src[0]);
        unlink(src[1]);
    }
    unlink(out);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    unlink(mp);
    return 0;
}
