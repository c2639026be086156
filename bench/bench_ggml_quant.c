/* bench_ggml_quant.c: throughput of the ggml block quantizers (tm_gq_quantize_row and
** tm_gq_quantize_row_imatrix), one thread, in GB/s of float32 input (GB = 1e9 bytes), on
** deterministic Gaussian-like rows of 4096 values, side by side with ggml's own quantizer when a
** build of it is present.
**
**   bench_ggml_quant [MIB] [REPS] [T1,T2,...]  (defaults: 64 MiB of input, best of 3, every type)
**
** The reference: ggml's public ggml_quantize_chunk (ggml.h: the call llama-quantize makes per
** tensor chunk), loaded at run time with dlopen from $TM_GGML_LIB_DIR/libggml-base.so (default:
** node-llama-cpp's prebuilt llama.cpp in runner/node_modules, when present). Nothing of it is
** linked into the library or the CLI. Without it the bench says so and prints our figures only.
** Per type, without and (where the type reads one) with an importance matrix (deterministic
** positive column weights, one per column as llama-quantize passes them): the same rows through
** ours and the reference, interleaved (ours, reference, ours, ...), best of REPS for each, one
** thread; then the two outputs compared byte for byte. Slow types run on fewer rows (at least
** 16, about 0.5 s of our time per pass). Figures: per wall-clock second and per second of the
** thread's CPU time (the second is the one to read on a machine shared with other work).
**
** A benchmark, never a test: exit status 0 unless something could not run. Output: JSON Lines
** on stdout, a table on stderr (with the reference's ggml version/commit and the load average
** before and after). */
#include <tensormorph.h>

#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef TM_DEFAULT_GGML_LIB_DIR
#define TM_DEFAULT_GGML_LIB_DIR "runner/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
#endif

static double now_s(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The few functions of ggml's public API (ggml.h) this bench calls; enum ggml_type is passed
** as int (a C enum), its values are the GGUF type ids (TM_GGML_*), checked by name below. */
typedef struct {
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                             int64_t n_per_row, const float *imatrix);
    void (*quantize_init)(int type);
    bool (*requires_imatrix)(int type);
    size_t (*row_size)(int type, int64_t ne);
    const char *(*type_name)(int type);
    const char *(*version)(void);
    const char *(*commit)(void);
} ggml_ref;

static int load_ref(ggml_ref *r, char *where, size_t wn) {
    const char *dir = getenv("TM_GGML_LIB_DIR");
    if (!dir || !*dir) dir = TM_DEFAULT_GGML_LIB_DIR;
    snprintf(where, wn, "%s/libggml-base.so", dir);
    void *h = dlopen(where, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_ggml_quant: no reference (%s); our figures only\n", dlerror());
        return -1;
    }
    memset(r, 0, sizeof *r);
    *(void **)&r->quantize_chunk = dlsym(h, "ggml_quantize_chunk");
    *(void **)&r->quantize_init = dlsym(h, "ggml_quantize_init");
    *(void **)&r->requires_imatrix = dlsym(h, "ggml_quantize_requires_imatrix");
    *(void **)&r->row_size = dlsym(h, "ggml_row_size");
    *(void **)&r->type_name = dlsym(h, "ggml_type_name");
    *(void **)&r->version = dlsym(h, "ggml_version"); /* newer ggml only: may be NULL */
    *(void **)&r->commit = dlsym(h, "ggml_commit");
    if (!r->quantize_chunk || !r->quantize_init || !r->requires_imatrix || !r->row_size || !r->type_name) {
        fprintf(stderr, "bench_ggml_quant: %s lacks ggml_quantize_chunk/_init/_requires_imatrix, "
                        "ggml_row_size or ggml_type_name; our figures only\n", where);
        return -1;
    }
    return 0;
}

static int same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* 1 when comma-separated list has name (case-insensitive) */
static int in_list(const char *list, const char *name) {
    char buf[64];
    while (*list) {
        size_t k = strcspn(list, ",");
        if (k < sizeof buf) {
            memcpy(buf, list, k);
            buf[k] = 0;
            if (same_name(buf, name)) return 1;
        }
        list += k;
        if (*list == ',') list++;
    }
    return 0;
}

static uint64_t g_s = 0x9e3779b97f4a7c15ull;
static double uni(void) {
    g_s ^= g_s << 13; g_s ^= g_s >> 7; g_s ^= g_s << 17;
    return (double)(g_s >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 64;
    long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 3;
    if (mib < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_ggml_quant [MIB] [REPS] [T1,T2,...]\n");
        return 2;
    }
    const int64_t ne0 = 4096;
    const int64_t rows_all = (int64_t)mib * (1 << 20) / 4 / ne0;
    if (rows_all < 16) {
        fprintf(stderr, "bench_ggml_quant: MIB must give at least 16 rows of 4096\n");
        return 2;
    }
    const int64_t n = rows_all * ne0;
    float *x = malloc((size_t)n * sizeof *x);
    float *imx = malloc((size_t)ne0 * sizeof *imx);
    uint8_t *out = malloc((size_t)n * 2), *out_ref = malloc((size_t)n * 2);
    if (!x || !imx || !out || !out_ref) return 1;
    for (int64_t i = 0; i < n; i++) { /* sum of 4 uniforms, scaled: roughly Gaussian weights */
        double u = uni() + uni() + uni() + uni();
        x[i] = (float)((u - 2.0) * 0.03);
    }
    for (int64_t j = 0; j < ne0; j++) /* positive importances spread over two decades */
        imx[j] = (float)(1e-4 * exp(4.6 * uni()));

    ggml_ref ref = {0};
    char where[4096];
    int have_ref = load_ref(&ref, where, sizeof where) == 0;
    double la0[3] = {0, 0, 0}, la1[3] = {0, 0, 0};
    if (getloadavg(la0, 3) < 0) la0[0] = -1;
    if (have_ref)
        fprintf(stderr, "reference: %s (ggml %s, commit %s), ggml_quantize_chunk, one thread\n", where,
                ref.version ? ref.version() : "?", ref.commit ? ref.commit() : "?");
    fprintf(stderr, "%ld MiB (%lld rows of %lld), best of %ld, interleaved; load average %.2f %.2f %.2f\n",
            mib, (long long)rows_all, (long long)ne0, reps, la0[0], la0[1], la0[2]);
    fprintf(stderr, "%-8s %-4s %6s %9s %9s %9s %9s %7s %7s  %s\n", "type", "imx", "rows", "ours", "ours/cpu",
            "ref", "ref/cpu", "ratio", "r/cpu", "bytes");

    static const int types[] = {TM_GGML_Q4_0, TM_GGML_Q4_1, TM_GGML_Q5_0, TM_GGML_Q5_1, TM_GGML_Q8_0,
                                TM_GGML_Q2_K, TM_GGML_Q3_K, TM_GGML_Q4_K, TM_GGML_Q5_K, TM_GGML_Q6_K,
                                TM_GGML_IQ1_S, TM_GGML_IQ1_M, TM_GGML_IQ2_XXS, TM_GGML_IQ2_XS, TM_GGML_IQ2_S,
                                TM_GGML_IQ3_XXS, TM_GGML_IQ3_S, TM_GGML_IQ4_NL, TM_GGML_IQ4_XS,
                                TM_GGML_TQ1_0, TM_GGML_TQ2_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int ty = types[t];
        const char *name = tm_ggml_type_info_get(ty)->name;
        uint64_t rb = 0;
        if (!tm_gq_writable(ty) || tm_ggml_row_bytes(ty, ne0, &rb, NULL)) continue;
        if (argc > 3 && !in_list(argv[3], name)) continue;
        int ref_ok = have_ref && same_name(ref.type_name(ty), name) && ref.row_size(ty, ne0) == rb;
        if (have_ref && !ref_ok)
            fprintf(stderr, "%-8s reference type %d is '%s' (%zu bytes/row): not compared\n", name, ty,
                    ref.type_name(ty), ref.row_size(ty, ne0));
        if (ref_ok) ref.quantize_init(ty); /* the grids of the IQ types: once, untimed */
        for (int with = 0; with < 2; with++) {
            const float *qw = with ? imx : NULL;
            if (with && !tm_gq_uses_imatrix(ty)) continue;
            /* our writer refuses IQ2_XXS/IQ2_XS/IQ1_S without an imatrix, as ggml does */
            if (!with && ref_ok && ref.requires_imatrix(ty)) continue;
            tm_err e = {0};
            /* one untimed row first (it builds our grid tables of the IQ types: one-time setup, as the
            ** reference's quantize_init above), then calibrate: 16 rows of ours, about 0.5 s per pass */
            int ok = tm_gq_quantize_row_imatrix(ty, x, ne0, qw, out, NULL, &e) == TM_OK;
            double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
            for (int64_t row = 0; row < 16 && ok; row++)
                ok = tm_gq_quantize_row_imatrix(ty, x + row * ne0, ne0, qw, out + (size_t)row * rb, NULL, &e) == TM_OK;
            if (!ok) {
                if (!with) continue; /* not writable without an imatrix */
                fprintf(stderr, "%-8s %s: %s\n", name, with ? "imatrix" : "plain", e.msg);
                return 1;
            }
            double per_row = (now_s(CLOCK_THREAD_CPUTIME_ID) - c0) / 16;
            int64_t rows = per_row > 0 ? (int64_t)(0.5 / per_row) : rows_all;
            if (rows > rows_all) rows = rows_all;
            if (rows < 16) rows = 16;
            double best[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
            for (long r = 0; r < reps; r++) {
                for (int side = 0; side < 1 + ref_ok; side++) {
                    double t0 = now_s(CLOCK_MONOTONIC), u0 = now_s(CLOCK_THREAD_CPUTIME_ID);
                    if (side == 0) {
                        for (int64_t row = 0; row < rows; row++)
                            if (tm_gq_quantize_row_imatrix(ty, x + row * ne0, ne0, qw, out + (size_t)row * rb, NULL, &e))
                                return 1;
                    } else if (ref.quantize_chunk(ty, x, out_ref, 0, rows, ne0, qw) != (size_t)rows * rb) {
                        fprintf(stderr, "%-8s reference wrote an unexpected size\n", name);
                        return 1;
                    }
                    double dt = now_s(CLOCK_MONOTONIC) - t0, dc = now_s(CLOCK_THREAD_CPUTIME_ID) - u0;
                    if (dt < best[side]) best[side] = dt;
                    if (dc < best_cpu[side]) best_cpu[side] = dc;
                }
            }
            const double gb = (double)rows * ne0 * 4 / 1e9;
            char same[64] = "-";
            int64_t diff_blocks = 0, first = -1;
            if (ref_ok) {
                const uint64_t bs = tm_ggml_type_info_get(ty)->type_size;
                for (uint64_t b = 0; b < (uint64_t)rows * rb / bs; b++)
                    if (memcmp(out + b * bs, out_ref + b * bs, bs)) {
                        if (first < 0) first = (int64_t)b;
                        diff_blocks++;
                    }
                if (!diff_blocks) snprintf(same, sizeof same, "identical");
                else snprintf(same, sizeof same, "DIFFER (%lld blocks, first %lld)", (long long)diff_blocks, (long long)first);
            }
            printf("{\"type\": \"%s\", \"imatrix\": %s, \"rows\": %lld, \"n_per_row\": %lld, \"reps\": %ld, "
                   "\"gb_per_s\": %.4f, \"gb_per_cpu_s\": %.4f",
                   name, with ? "true" : "false", (long long)rows, (long long)ne0, reps, gb / best[0], gb / best_cpu[0]);
            if (ref_ok)
                printf(", \"ref_gb_per_s\": %.4f, \"ref_gb_per_cpu_s\": %.4f, \"ratio\": %.3f, \"ratio_cpu\": %.3f, "
                       "\"identical\": %s, \"differing_blocks\": %lld",
                       gb / best[1], gb / best_cpu[1], best[1] / best[0], best_cpu[1] / best_cpu[0],
                       diff_blocks ? "false" : "true", (long long)diff_blocks);
            printf("}\n");
            fflush(stdout);
            if (ref_ok)
                fprintf(stderr, "%-8s %-4s %6lld %9.4f %9.4f %9.4f %9.4f %6.2fx %6.2fx  %s\n", name, with ? "yes" : "no",
                        (long long)rows, gb / best[0], gb / best_cpu[0], gb / best[1], gb / best_cpu[1],
                        best[1] / best[0], best_cpu[1] / best_cpu[0], same);
            else
                fprintf(stderr, "%-8s %-4s %6lld %9.4f %9.4f %9s %9s %7s %7s  %s\n", name, with ? "yes" : "no",
                        (long long)rows, gb / best[0], gb / best_cpu[0], "-", "-", "-", "-", same);
        }
    }
    if (getloadavg(la1, 3) < 0) la1[0] = -1;
    fprintf(stderr, "load average after: %.2f %.2f %.2f\n", la1[0], la1[1], la1[2]);
    free(x);
    free(imx);
    free(out);
    free(out_ref);
    return 0;
}
