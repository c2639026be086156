/* test_gguf_iq_simd.c: the SIMD IQ quantizers (the quantize_simd column of the ggml type table,
** src/quant/ggml_quant_iq_avx2.c) against the scalar reference (quantize_ref, the specification,
** itself checked against llama-quantize's files by test_gguf_iq.c): for every type listed in
** kTypes, with every kernel set the CPU accepts besides "ref", on random and edge rows (zeros,
** zero sub-blocks, constants, near-zero and subnormal blocks, integer and half-integer values on
** the code grid's midpoints, outliers, equal magnitudes of both signs, wide dynamic range, values
** whose scale overflows float16, values at 0, 1/4, 1/2 and 1 of a maximum: IQ3 neighbours at
** tied distances, ratios to the block maximum at the ternary rounding ties), without and with an importance matrix (random, with zero
** columns, all zero, wide range, zero groups of 8 and zero positions that tie the best-neighbour searches' distances
** exactly): the same status, bad block, message and bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/ggml_traits.h"
#include "quant/kernels.h"
#include "tensormorph.h"

/* The types that have a SIMD quantizer (each must have one in an x86-64 build). */
static const int kTypes[] = {TM_GGML_IQ4_NL, TM_GGML_IQ4_XS, TM_GGML_IQ3_XXS, TM_GGML_IQ3_S,
                             TM_GGML_TQ1_0,  TM_GGML_TQ2_0,  TM_GGML_IQ2_XXS, TM_GGML_IQ2_XS,
                             TM_GGML_IQ2_S,  TM_GGML_IQ1_S,  TM_GGML_IQ1_M};

enum { N = 4096, NROW = 1024, NKINDS = 17, NIMX = 7 };

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }
static double gauss(void) { return unif() + unif() + unif() + unif() - 2.0; }

/* Row kind k (seeded by the caller's state). */
static void fill_row(int k, float *x) {
    static const float kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int i = 0; i < N; i++) {
        const int blk = i / 32;
        float v;
        switch (k) {
        case 0: v = (float)(gauss() * 0.03); break;
        case 1: v = (float)(gauss() * pow(10.0, -6.0 + 9.0 * ((blk * 2654435761u) % 1000) / 1000.0)); break;
        case 2: v = 0; break;
        case 3: v = (blk % 3 == 1) ? 0.0f : (float)gauss(); break;
        case 4: v = (blk % 2 ? -1.0f : 1.0f) * (float)(0.25 + blk); break;
        case 5: v = (i % 32 == (blk * 7) % 32) ? (float)(gauss() * 40.0) : (float)(gauss() * 1e-3); break;
        case 6: v = (float)(gauss() * pow(10.0, -13.0 - (blk % 5))); break;  /* around the 1e-15 floor */
        case 7: v = (float)(gauss() * 1e-39);  break;                         /* subnormal            */
        case 8: v = (float)((int)(rnd() % 241) - 127); break;                 /* integers of the grid */
        case 9: { int j = (int)(rnd() % 15); v = (kv[j] + kv[j + 1]) / 2; if (rnd() % 2) v = kv[j]; break; }
        case 10: v = (i % 2 ? -1.0f : 1.0f) * (float)(1 + (i / 2) % 3); break;  /* |x| ties of both signs */
        case 11: v = (float)(gauss() * pow(2.0, (double)(rnd() % 40) - 20.0)); break;
        case 12: v = (float)(gauss() * 2e4); if (blk % 9 == 4) v *= 1e3f; break; /* some scales overflow f16 */
        case 13: v = (rnd() % 4) ? 0.0f : (float)gauss(); break;                /* sparse                */
        case 14: { /* 0, 1/4, 1/2 or 1 of a sub-block's maximum, signs at random: IQ3 keys off the
                   ** grid whose neighbours tie (about one search in two has an equal distance) */
            static const float f[4] = {0, 0.25f, 0.5f, 1};
            v = (rnd() % 2 ? -1.0f : 1.0f) * f[rnd() % 4] * (float)(1 + blk % 7);
            break;
        }
        case 16: { /* five values a sub-block, many repeated: IQ1_S / IQ1_M's splits whose sums (and so
                   ** scores) are equal or nearly so, the split search's near ties */
            static const float f5[5] = {-1, -0.5f, 0, 0.5f, 1};
            v = f5[rnd() % 5] * (float)(1 + blk % 5);
            break;
        }
        default: { /* (15) x / max exactly at and around the rounding ties of TQ's trits (max a power of 2) */
            static const float h[] = {1, -1, 0.5f, -0.5f, 0.49999997f, -0.49999997f, 0.50000006f, -0.50000006f, 0, 0.25f};
            v = (i % 256 == 0 ? 1.0f : h[rnd() % 10]) * ldexpf(1.0f, (int)(i / 256) - 8);
            break;
        }
        }
        x[i] = v;
    }
}

/* Importance matrix kind m (NULL for 0). */
static const float *fill_imx(int m, float *w) {
    if (m == 0) return NULL;
    for (int i = 0; i < NROW; i++) {
        switch (m) {
        case 1: w[i] = (float)(unif() * 2 + 0.01); break;
        case 2: w[i] = (rnd() % 3) ? (float)unif() : 0.0f; break;
        case 3: w[i] = 0; break;
        /* exact ties in the best-neighbour searches: a group of 8 with zero weights gives every
        ** candidate the distance 0 (the first must be kept: IQ2_*, IQ1_*'s searches of that group
        ** while the other groups fit the scale); zero weights at 6 of 8 positions tie exactly the
        ** candidates that differ only there */
        case 5: w[i] = (i / 8) % 2 ? 0.0f : (float)(unif() * 2 + 0.01); break;
        case 6: w[i] = i % 8 < 6 ? 0.0f : (float)(unif() * 2 + 0.01); break;
        default: w[i] = (float)pow(10.0, -8.0 + 12.0 * unif()); break;
        }
    }
    return w;
}

static void test_simd_matches_ref(void **state) {
    (void)state;
    static float x[N], w[NROW], dq[N];
    static uint8_t a[N * 2], b[N * 2];
    const char *sets[] = {"avx2", "avx512"};
    int ran = 0, compared = 0, errors = 0;
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        const tm_kernels *ks = NULL;
        if (tm_kernels_get(sets[s], &ks) != TM_OK) {
            printf("kernel set %s: not on this CPU, skipped\n", sets[s]);
            continue;
        }
        ran++;
        for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++) {
            const int type = kTypes[t];
            const tm__ggml_traits *tr = tm__ggml_traits_of(type);
            assert_non_null(tr);
            assert_non_null(tr->quantize_simd); /* the kernel under test is wired */
            uint64_t rb = 0;
            assert_int_equal(tm_ggml_row_bytes(type, N, &rb, NULL), TM_OK);
            for (int k = 0; k < NKINDS; k++)
                for (int m = 0; m < NIMX; m++)
                    for (int rep = 0; rep < 3; rep++) {
                        fill_row(k, x);
                        const float *im = fill_imx(m, w);
                        memset(a, 0x5a, rb);
                        memset(b, 0x5a, rb);
                        int64_t b1 = -2, b2 = -2;
                        tm_err e1, e2;
                        memset(&e1, 0, sizeof e1);
                        memset(&e2, 0, sizeof e2);
                        tm_status s1 = tm__gq_quantize_row_err(type, x, N, im, NROW, a, dq, NULL, &b1, &tm__kernels_ref, &e1);
                        tm_status s2 = tm__gq_quantize_row_err(type, x, N, im, NROW, b, dq, NULL, &b2, ks, &e2);
                        assert_int_equal(s1, s2);
                        assert_int_equal(b1, b2);
                        if (s1) {
                            assert_string_equal(e1.msg, e2.msg);
                            if (b1 >= 0) /* the blocks before the failing one are written alike */
                                assert_memory_equal(a, b, (size_t)b1 * tm_ggml_type_info_get(type)->type_size);
                            errors++;
                        } else {
                            if (memcmp(a, b, rb)) {
                                size_t off = 0;
                                while (a[off] == b[off]) off++;
                                fail_msg("%s, set %s, row kind %d, imatrix kind %d, rep %d: byte %zu (block %zu) differs: "
                                         "ref %02x, simd %02x", tm_ggml_type_info_get(type)->name, sets[s], k, m, rep,
                                         off, off / (size_t)tm_ggml_type_info_get(type)->type_size, a[off], b[off]);
                            }
                        }
                        compared++;
                    }
        }
    }
#ifdef TM__GQ_HAVE_AVX2
    if (!ran) {
        printf("no SIMD kernel set on this CPU: the SIMD quantizers are not reachable, nothing to compare\n");
    }
#endif
    printf("SIMD vs reference: %d rows of %d values compared (%d with the same error)\n", compared, N, errors);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_matches_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
