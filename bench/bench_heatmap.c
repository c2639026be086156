/* bench_heatmap.c: the Heatmap's two costs on one core, for an N x N F32 matrix (default 16384):
**   1. first view: tm_tiles_open + tm_tiles_build_pyramid (one streaming pass over the tensor);
**   2. one 512 x 512-pixel tile (min/max/mean/absmax) at every power-of-two zoom afterwards.
** Usage: bench_heatmap [--n N] [--budget-mb M] [--reps R] [DIR]
**   DIR holds the scratch checkpoint (N*N*4 bytes, default /tmp), removed at the end.
** Output: JSON Lines on stdout (one per measurement), a table on stderr. Single-threaded. */
#include "tensormorph.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Deterministic values: xorshift64*, a smooth row/column pattern plus noise, so tiles differ. */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float next_val(int64_t r, int64_t c) {
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    double u = (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
    return (float)(0.02 * sin((double)r * 0.001) + 0.01 * cos((double)c * 0.003) + 0.05 * (u - 0.5));
}

static int write_matrix(const char *path, int64_t n) {
    char hdr[256];
    uint64_t bytes = (uint64_t)n * (uint64_t)n * 4;
    int hl = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"F32\",\"shape\":[%" PRId64 ",%" PRId64 "],\"data_offsets\":[0,%" PRIu64 "]}}",
                      n, n, bytes);
    while (hl % 8) hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl64 = (uint64_t)hl;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(hl64 >> (8 * k));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, (size_t)hl, f) == (size_t)hl;
    float *row = malloc((size_t)n * sizeof(float));
    for (int64_t r = 0; ok && row && r < n; r++) {
        for (int64_t c = 0; c < n; c++) row[c] = next_val(r, c);
        ok = fwrite(row, sizeof(float), (size_t)n, f) == (size_t)n;
    }
    free(row);
    if (fclose(f) != 0) ok = 0;
    return ok && row ? 0 : -1;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t n = 16384, budget_mb = 64;
    int reps = 5;
    const char *dir = "/tmp";
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoll(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--budget-mb") && i + 1 < argc) budget_mb = strtoll(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (int)strtol(argv[++i], &end, 10);
        else if (argv[i][0] != '-') dir = argv[i];
        else { fprintf(stderr, "usage: bench_heatmap [--n N] [--budget-mb M] [--reps R] [DIR]\n"); return 2; }
    }
    if (n < 512 || budget_mb < 1 || reps < 1 || reps > 100) { fprintf(stderr, "bench_heatmap: bad arguments\n"); return 2; }
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_heatmap_%ld.safetensors", dir, (long)getpid());
    fprintf(stderr, "bench_heatmap: writing %" PRId64 " x %" PRId64 " F32 (%.2f GiB) to %s\n", n, n,
            (double)n * (double)n * 4 / (1 << 30), path);
    if (write_matrix(path, n)) { fprintf(stderr, "bench_heatmap: cannot write %s: %s\n", path, strerror(errno)); unlink(path); return 1; }
    tm_file *f;
    tm_err err;
    int rc = 0;
    if (tm_open(path, NULL, &f, &err)) { fprintf(stderr, "bench_heatmap: %s\n", err.msg); unlink(path); return 1; }
    tm_tiles *t;
    double t0 = now_s();
    tm_status s = tm_tiles_open(f, 0, NULL, -1, TM_TILE_VALUE, -1, &t, &err);
    if (!s) s = tm_tiles_build_pyramid(t, (uint64_t)budget_mb << 20, &err);
    double first = now_s() - t0;
    if (s) { fprintf(stderr, "bench_heatmap: %s\n", err.msg); tm_close(f); unlink(path); return 1; }
    printf("{\"op\":\"first_view\",\"n\":%" PRId64 ",\"seconds\":%.4f,\"pyramid_step\":%" PRId64 ",\"pyramid_bytes\":%" PRIu64
           ",\"gb_per_s\":%.3f}\n", n, first, tm_tiles_pyramid_step(t), tm_tiles_bytes(t), (double)n * (double)n * 4 / first / 1e9);
    fprintf(stderr, "first view (pyramid build): %.3f s, base step %" PRId64 ", %.1f MiB\n", first,
            tm_tiles_pyramid_step(t), (double)tm_tiles_bytes(t) / (1 << 20));
    fprintf(stderr, "%8s %10s %10s %10s  %s\n", "step", "median ms", "max ms", "px inside", "path");
    size_t npx = 512 * 512;
    float *a = malloc(npx * 4), *b = malloc(npx * 4), *c = malloc(npx * 4), *d = malloc(npx * 4);
    double worst = 0;
    for (int64_t step = 1; step <= n; step *= 2) {
        double ms[100];
        int64_t inside = 0;
        int64_t pw = (n + step - 1) / step;
        for (int k = 0; k < reps; k++) {
            /* positions spread over the matrix, deterministic */
            int64_t span = pw > 512 ? pw - 512 : 0;
            int64_t x0 = span ? (span * (2 * k + 1)) / (2 * reps) : 0, y0 = span ? (span * (reps - k)) / (reps + 1) : 0;
            tm_tile_req q = {step, x0, y0, 512, 512};
            double t1 = now_s();
            s = tm_tiles_read(t, &q, a, b, c, d, &err);
            ms[k] = (now_s() - t1) * 1e3;
            if (s) { fprintf(stderr, "bench_heatmap: %s\n", err.msg); rc = 1; break; }
            inside = 0;
            for (size_t p = 0; p < npx; p++) inside += !isnan(c[p]);
        }
        if (rc) break;
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_d);
        double med = ms[reps / 2], mx = ms[reps - 1];
        if (mx > worst) worst = mx;
        const char *via = step >= tm_tiles_pyramid_step(t) ? "pyramid" : "tensor";
        printf("{\"op\":\"tile_512\",\"n\":%" PRId64 ",\"step\":%" PRId64 ",\"median_ms\":%.3f,\"max_ms\":%.3f,\"pixels_inside\":%" PRId64
               ",\"path\":\"%s\"}\n", n, step, med, mx, inside, via);
        fprintf(stderr, "%8" PRId64 " %10.3f %10.3f %10" PRId64 "  %s\n", step, med, mx, inside, via);
    }
    fprintf(stderr, "slowest 512x512 tile: %.3f ms (budget 100 ms)\n", worst);
    free(a); free(b); free(c); free(d);
    tm_tiles_free(t);
    tm_close(f);
    unlink(path);
    return rc;
}
