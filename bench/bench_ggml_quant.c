/* bench_ggml_quant.c: throughput of the ggml block quantizers (tm_gq_quantize_row), one thread,
** in GB/s of float32 input (GB = 1e9 bytes), on deterministic Gaussian-like rows of 4096 values:
** per wall-clock second and per second of the thread's CPU time (the second is the figure to
** read on a machine shared with other work).
**
**   bench_ggml_quant [MIB] [REPS]     (defaults: 64 MiB of input, best of 3)
**
** A benchmark, never a test: exit status 0 unless something could not run. Output: JSON Lines
** on stdout ({"type", "gb_per_s", "mib", "reps"}), a table on stderr with the reference figures
** of issue 3 (llama.cpp's default x86-64 build, one thread, 2-core AVX-512 machine). */
#include <tensormorph.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 64;
    long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 3;
    if (mib < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_ggml_quant [MIB] [REPS]\n");
        return 2;
    }
    const int64_t ne0 = 4096;
    const int64_t n = (int64_t)mib * (1 << 20) / 4 / ne0 * ne0;
    float *x = malloc((size_t)n * sizeof *x);
    uint8_t *out = malloc((size_t)n * 2);
    if (!x || !out) return 1;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) { /* sum of 4 uniforms, scaled: roughly Gaussian weights */
        double u = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            u += (double)(s >> 11) / 9007199254740992.0;
        }
        x[i] = (float)((u - 2.0) * 0.03);
    }
    static const struct { int type; double ref; } types[] = {
        {TM_GGML_Q8_0, 0.73}, {TM_GGML_Q4_0, 1.6}, {TM_GGML_Q4_1, 0}, {TM_GGML_Q5_0, 0}, {TM_GGML_Q5_1, 0},
        {TM_GGML_IQ4_NL, 0}, {TM_GGML_Q2_K, 0}, {TM_GGML_Q3_K, 0}, {TM_GGML_Q4_K, 0}, {TM_GGML_Q5_K, 0},
        {TM_GGML_Q6_K, 0.13}, {TM_GGML_IQ4_XS, 0}, {TM_GGML_IQ3_XXS, 0}, {TM_GGML_IQ3_S, 0}, {TM_GGML_TQ1_0, 0},
        {TM_GGML_TQ2_0, 0}};
    fprintf(stderr, "%-8s %10s %12s %14s\n", "type", "GB/s wall", "GB/s of CPU", "reference GB/s");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        double best = 1e30, best_cpu = 1e30;
        const char *name = tm_ggml_type_info_get(types[t].type)->name;
        uint64_t rb = 0;
        tm_ggml_row_bytes(types[t].type, ne0, &rb, NULL);
        for (long r = 0; r < reps; r++) {
            double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
            for (int64_t row = 0; row < n / ne0; row++)
                if (tm_gq_quantize_row(types[t].type, x + row * ne0, ne0, out + (size_t)(row * (int64_t)rb), NULL, NULL))
                    return 1;
            double dt = now_s(CLOCK_MONOTONIC) - t0, dc = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        double gbs = (double)n * 4 / best / 1e9, gbs_cpu = (double)n * 4 / best_cpu / 1e9;
        printf("{\"type\": \"%s\", \"gb_per_s\": %.4f, \"gb_per_cpu_s\": %.4f, \"mib\": %ld, \"reps\": %ld}\n",
               name, gbs, gbs_cpu, mib, reps);
        if (types[t].ref > 0)
            fprintf(stderr, "%-8s %10.3f %12.3f %14.2f\n", name, gbs, gbs_cpu, types[t].ref);
        else
            fprintf(stderr, "%-8s %10.3f %12.3f %14s\n", name, gbs, gbs_cpu, "-");
    }
    free(x);
    free(out);
    return 0;
}
