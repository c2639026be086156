/*
** test_qjob_fast.c: the fast paths of `tensormorph quantize` (src/job/qjob.c run_slices) against
** their references, bit for bit:
**   - the fused quantize+dequantize pass (tm__quantize_dequantize_f32, AVX2 kernel) against
**     tm_quantize_f32 + tm_dequantize with the reference kernels;
**   - the error-statistics lanes (errstats.c: unmasked AVX2 pass with its fall-backs) against
**     the reference lanes, and the values against an element-order computation;
**   - the min/max observer of every kernel set against a scalar scan;
**   - 4-bit packing (SSE2 path) against a bit-by-bit packer;
**   - the whole job under every kernel set (tm_ct_quantize_params.kernels: auto, ref, avx2, avx512)
**     against auto, and
**     slices read with pread against slices read from the map: same output bytes and the same
**     error summaries.
** Data: Gaussian-like rows, zeros, constant rows, -0, ties, clipped outliers, NaN/Inf where
** allowed, lengths that are not a multiple of the vector width.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "quant/kernels.h"
#include "tensormorph.h"
#include "tensormorph/job.h"


static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return g_rng;
}
static double rng_u(void) { return (double)(rng_u64() >> 11) / 9007199254740992.0; }
static float rng_normal(void) { /* Irwin-Hall of 4, centred, unit variance */
    return (float)((rng_u() + rng_u() + rng_u() + rng_u() - 2.0) * 1.7320508075688772);
}

/* Row r of a [R, C] matrix: kind r % 8 picks plain, zero, constant, ties, outliers, -0 mix,
** tiny values, or (allow_nf) NaN/Inf. */
static void fill_rows(float *x, int64_t R, int64_t C, int allow_nf) {
    for (int64_t r = 0; r < R; r++) {
        float sd = (float)(0.01 + 0.1 * rng_u());
        int kind = (int)(r % 8);
        for (int64_t c = 0; c < C; c++) {
            float v = rng_normal() * sd;
            switch (kind) {
            case 1: v = 0.0f; break;
            case 2: v = -0.25f; break;
            case 3: v = ((float)((int64_t)(rng_u64() % 255) - 127) + 0.5f) * (sd / 64.0f); break;
            case 4: if (c % 37 == 5) v = 40.0f * sd; break;
            case 5: if (c % 3 == 0) v = (c & 1) ? -0.0f : 0.0f; break;
            case 6: v *= 1e-30f; break;
            case 7:
                if (allow_nf && c % 29 == 3) v = (c % 3 == 0) ? NAN : (c & 1) ? INFINITY : -INFINITY;
                break;
            default: break;
            }
            x[r * C + c] = v;
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Fused quantize + dequantize                                                               */
/* ---------------------------------------------------------------------------------------- */

static void fused_case(tm_dtype dt, int torch, int allow_nf, int64_t R, int64_t C, tm_granularity gk,
                       int64_t gs) {
    const tm_dtype_traits *t = tm_dtype_get(dt);
    int64_t n = R * C, shape[2] = {R, C};
    tm_qgran g;
    memset(&g, 0, sizeof g);
    g.kind = gk;
    g.axis = gk == TM_GRAN_GROUP ? 1 : 0;
    g.group_size = gs;
    int64_t np = gk == TM_GRAN_TENSOR ? 1 : gk == TM_GRAN_CHANNEL ? R : R * ((C + gs - 1) / gs);
    float *x = malloc((size_t)n * sizeof(float)), *s = malloc((size_t)np * sizeof(float));
    int32_t *zp = malloc((size_t)np * sizeof(int32_t));
    fill_rows(x, R, C, allow_nf);
    for (int64_t p = 0; p < np; p++) {
        s[p] = (float)(0.0005 + 0.01 * rng_u());
        zp[p] = t->is_signed ? 0 : (int32_t)((t->qmin + t->qmax + 1) / 2) + (int32_t)(rng_u64() % 5) - 2;
    }
    /* rows 3 mod 8: within a few ulp of a half-integer of their own scale, or on it (x / s
    ** rounds either way: the kernels must divide as the reference does, not multiply) */
    for (int64_t r = 3; r < R; r += 8)
        for (int64_t c = 0; c < C; c++) {
            int64_t p = gk == TM_GRAN_TENSOR ? 0 : gk == TM_GRAN_CHANNEL ? r : r * ((C + gs - 1) / gs) + c / gs;
            double h = (double)((int64_t)(rng_u64() % 21) - 10) + 0.5;
            double d = (c % 4 == 0) ? 0.0 : (rng_u() * 2 - 1) * 3e-7 * fabs(h);
            x[r * C + c] = (float)((h + d) * (double)s[p]);
        }
    tm_qparams qp = {.code_dtype = dt, .qmin = t->qmin, .qmax = t->qmax, .gran = g, .n_params = np,
                     .scale = s, .zero_point = zp, .convention = torch ? TM_CONV_TORCH : TM_CONV_ONNX,
                     .allow_nonfinite = allow_nf};
    uint8_t *cref = malloc((size_t)n + 1), *cgot = malloc((size_t)n + 1);
    float *dref = malloc((size_t)n * sizeof(float) + 4), *dgot = malloc((size_t)n * sizeof(float) + 4);
    assert_int_equal(tm_kernels_get("ref", &qp.kernels), TM_OK);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, n, cref, NULL, NULL), TM_OK);
    assert_int_equal(tm_dequantize(&qp, 2, shape, cref, 0, n, dref, NULL), TM_OK);
    const char *variants[] = {"ref", "avx2", "avx512", "auto"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (tm_kernels_get(variants[v], &qp.kernels) != TM_OK) continue;
        memset(cgot, 0xa5, (size_t)n);
        memset(dgot, 0xa5, (size_t)n * sizeof(float));
        /* whole range, then the same range in row slices starting mid-tensor */
        assert_int_equal(tm__quantize_dequantize_f32(&qp, 2, shape, x, 0, n, cgot, dgot, NULL), TM_OK);
        assert_memory_equal(cgot, cref, (size_t)n);
        assert_memory_equal(dgot, dref, (size_t)n * sizeof(float));
        memset(cgot, 0xa5, (size_t)n);
        memset(dgot, 0xa5, (size_t)n * sizeof(float));
        for (int64_t r = 0; r < R; r += 3) {
            int64_t r1 = r + 3 < R ? r + 3 : R;
            assert_int_equal(tm__quantize_dequantize_f32(&qp, 2, shape, x + r * C, r * C, (r1 - r) * C,
                                                         cgot + r * C, dgot + r * C, NULL), TM_OK);
        }
        assert_memory_equal(cgot, cref, (size_t)n);
        assert_memory_equal(dgot, dref, (size_t)n * sizeof(float));
    }
    qp.kernels = NULL;
    if (!allow_nf) { /* a non-finite value is refused as tm_quantize_f32 refuses it */
        float keep = x[n / 2];
        x[n / 2] = NAN;
        qp.allow_nonfinite = 0;
        assert_int_equal(tm__quantize_dequantize_f32(&qp, 2, shape, x, 0, n, cgot, dgot, NULL), TM_E_NONFINITE);
        x[n / 2] = keep;
    }
    free(x); free(s); free(zp); free(cref); free(cgot); free(dref); free(dgot);
}

static void test_fused_quant_dequant_matches_ref(void **state) {
    (void)state;
    const tm_dtype dts[4] = {TM_I8, TM_U8, TM_I4, TM_U4};
    const int64_t cols[] = {1, 7, 8, 31, 32, 33, 100, 257, 1000};
    for (int d = 0; d < 4; d++)
        for (int torch = 0; torch < 2; torch++)
            for (int nf = 0; nf < 2; nf++)
                for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
                    fused_case(dts[d], torch, nf, 17, cols[c], TM_GRAN_CHANNEL, 0);
                    fused_case(dts[d], torch, nf, 9, cols[c], TM_GRAN_GROUP, 32);
                    fused_case(dts[d], torch, nf, 5, cols[c], TM_GRAN_TENSOR, 0);
                }
    fused_case(TM_I4, 0, 0, 4, 4099, TM_GRAN_GROUP, 128);
    fused_case(TM_I8, 0, 0, 3, 4096, TM_GRAN_CHANNEL, 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Error statistics                                                                          */
/* ---------------------------------------------------------------------------------------- */

static void acc_equal(const tm_erracc *a, const tm_erracc *b) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->n_clipped, b->n_clipped);
    assert_int_equal(a->n_beyond, b->n_beyond);
    assert_int_equal(a->n_nonfinite, b->n_nonfinite);
    assert_memory_equal(&a->sum_x2, &b->sum_x2, sizeof(double));
    assert_memory_equal(&a->sum_e2, &b->sum_e2, sizeof(double));
    assert_memory_equal(&a->sum_l2, &b->sum_l2, sizeof(double));
    assert_memory_equal(&a->sum_q2, &b->sum_q2, sizeof(double));
    assert_memory_equal(&a->sum_xq, &b->sum_xq, sizeof(double));
    assert_memory_equal(&a->max_abs, &b->max_abs, sizeof(double));
    assert_memory_equal(&a->max_lsb, &b->max_lsb, sizeof(double));
    assert_memory_equal(&a->max_lsb_unclipped, &b->max_lsb_unclipped, sizeof(double));
    assert_int_equal(a->n_params, b->n_params);
    if (a->n_params > 0) {
        assert_memory_equal(a->param_sum_l2, b->param_sum_l2, (size_t)a->n_params * sizeof(double));
        assert_memory_equal(a->param_n, b->param_n, (size_t)a->n_params * sizeof(int64_t));
    }
}

/* One run of length n with scale s, zero point zp (int8 codes), the dequantized values from the
** reference quantizer, then a perturbation: 0 none, 1 one NaN x, 2 one x clipped above, 3 one xq
** beyond half an LSB, 4 one NaN xq, 5 an infinite x, 6 all zero, 7 one x clipped below with xq = x. */
static void run_case(int64_t n, float s, int32_t zp, int perturb) {
    float *x = malloc((size_t)(n + 1) * sizeof(float)), *xq = malloc((size_t)(n + 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        x[i] = perturb == 6 ? 0.0f : (float)((rng_u() * 2 - 1) * 120.0 * s);
        if (i % 11 == 4 && perturb != 6) x[i] = ((float)((int64_t)(rng_u64() % 200) - 100) + 0.5f) * s;
        if (i % 13 == 6) x[i] = -0.0f;
        double q = nearbyint((double)x[i] / s) + zp;
        q = q < -128 ? -128 : q > 127 ? 127 : q;
        xq[i] = (float)(q - zp) * s;
    }
    if (n > 0) {
        int64_t k = (int64_t)(rng_u64() % (uint64_t)n);
        if (perturb == 1) x[k] = NAN;
        if (perturb == 2) x[k] = 300.0f * s;
        if (perturb == 3) xq[k] = x[k] + 0.75f * s;
        if (perturb == 4) xq[k] = NAN;
        if (perturb == 5) x[k] = -INFINITY;
        if (perturb == 7) xq[k] = x[k] = -300.0f * s; /* clipped, yet no error */
    }
    float scale[3] = {0.5f, s, 2.0f};
    int32_t zps[3] = {0, zp, 0};
    tm_erracc a, b;
    assert_int_equal(tm_erracc_init(&a, 3, NULL), TM_OK);
    assert_int_equal(tm_erracc_init(&b, 3, NULL), TM_OK);
    b.kernels = &tm__kernels_ref;
    tm_erracc_add_run(&a, TM_I8, x, xq, 1, scale, zps, -128, 127, n);
    tm_erracc_add_run(&b, TM_I8, x, xq, 1, scale, zps, -128, 127, n);
    acc_equal(&a, &b);
    /* the values, element by element (sums to 1e-12 relative; counts and maxima exact) */
    double inv = 1.0 / (double)s, lo = (-128.0 - zp) * s - TM_QDIFF_MAX_LSB_TOL * s;
    double hi = (127.0 - zp) * s + TM_QDIFF_MAX_LSB_TOL * s;
    double se2 = 0, sl2 = 0, mabs = 0, mlsb = 0, mlsbu = 0;
    int64_t cnt = 0, nonfin = 0, clip = 0, beyond = 0;
    for (int64_t i = 0; i < n; i++) {
        double xv = x[i];
        if (!isfinite(xv)) { nonfin++; continue; }
        double e = (double)xq[i] - xv, ae = fabs(e), el = ae * inv;
        cnt++;
        se2 += e * e;
        sl2 += (e / s) * (e / s);
        if (ae > mabs) mabs = ae;
        if (el > mlsb) mlsb = el;
        if (xv < lo || xv > hi) clip++;
        else {
            if (el > mlsbu) mlsbu = el;
            if (el > TM_QDIFF_MAX_LSB_TOL) beyond++;
        }
    }
    assert_int_equal(a.n, cnt);
    assert_int_equal(a.n_nonfinite, nonfin);
    assert_int_equal(a.n_clipped, clip);
    assert_int_equal(a.n_beyond, beyond);
    assert_int_equal(a.param_n[1], cnt);
    if (perturb != 4) {
        assert_true(fabs(a.sum_e2 - se2) <= 1e-12 * se2);
        assert_true(fabs(a.sum_l2 - sl2) <= 1e-12 * sl2);
        assert_true(a.param_sum_l2[1] == a.sum_l2);
        assert_true(a.max_abs == mabs);
        assert_true(a.max_lsb == mlsb);
        assert_true(a.max_lsb_unclipped == mlsbu);
    }
    tm_erracc_free(&a);
    tm_erracc_free(&b);
    free(x);
    free(xq);
}

static void test_erracc_fast_lanes_match_ref(void **state) {
    (void)state;
    for (int perturb = 0; perturb <= 7; perturb++) {
        for (int64_t n = 0; n <= 70; n++) run_case(n, (float)(0.001 + 0.01 * rng_u()), 0, perturb);
        const int64_t lens[] = {127, 128, 129, 1000, 4096, 4099};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            run_case(lens[k], (float)(0.001 + 0.01 * rng_u()), 0, perturb);
            run_case(lens[k], (float)(0.001 + 0.01 * rng_u()), 7, perturb);
            run_case(lens[k], 1e-38f, -3, perturb); /* tiny scale: 1/s near the float range's end */
        }
    }
    /* bad scales still go through the per-element LSB lanes, the same in both */
    float x[40], xq[40], scale[4] = {0.0f, -0.01f, INFINITY, NAN};
    for (int i = 0; i < 40; i++) { x[i] = (float)(rng_u() - 0.5); xq[i] = x[i] + (i % 3 ? 0.001f : 0.0f); }
    for (int p = 0; p < 4; p++) {
        tm_erracc a, b;
        assert_int_equal(tm_erracc_init(&a, 4, NULL), TM_OK);
        assert_int_equal(tm_erracc_init(&b, 4, NULL), TM_OK);
        b.kernels = &tm__kernels_ref;
        tm_erracc_add_run(&a, TM_I8, x, xq, p, scale, NULL, -128, 127, 40);
        tm_erracc_add_run(&b, TM_I8, x, xq, p, scale, NULL, -128, 127, 40);
        acc_equal(&a, &b);
        tm_erracc_free(&a);
        tm_erracc_free(&b);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Min/max observer                                                                          */
/* ---------------------------------------------------------------------------------------- */

static void test_minmax_observer_paths(void **state) {
    (void)state;
    static const char *const kern[] = {"ref", "avx2", "avx512", "auto"};
    for (size_t kv = 0; kv < sizeof kern / sizeof kern[0]; kv++) {
    tm_qspec sp = tm_qspec_default();
    if (tm_kernels_get(kern[kv], &sp.kernels) != TM_OK) continue; /* the CPU lacks it */
    for (int64_t n = 1; n <= 300; n += (n < 80 ? 1 : 37)) {
        float *v = malloc((size_t)n * sizeof(float));
        for (int trial = 0; trial < 6; trial++) {
            for (int64_t i = 0; i < n; i++) v[i] = rng_normal() * 0.05f;
            if (trial == 1) for (int64_t i = 0; i < n; i++) v[i] = 0.125f;
            if (trial == 2) for (int64_t i = 0; i < n; i++) v[i] = (i & 1) ? -0.0f : 0.0f;
            if (trial == 3) v[rng_u64() % (uint64_t)n] = 7.5f;
            int64_t bad = trial >= 4 ? (int64_t)(rng_u64() % (uint64_t)n) : -1;
            if (bad >= 0) v[bad] = trial == 4 ? NAN : -INFINITY;
            float mn = INFINITY, mx = -INFINITY;
            for (int64_t i = 0; i < n; i++)
                if (isfinite(v[i])) { if (v[i] < mn) mn = v[i]; if (v[i] > mx) mx = v[i]; }
            double lo, hi;
            sp.allow_nonfinite = 0;
            tm_status st = tm_observe_range(&sp, v, n, &lo, &hi, NULL);
            if (bad >= 0) {
                assert_int_equal(st, TM_E_NONFINITE);
                sp.allow_nonfinite = 1;
                st = tm_observe_range(&sp, v, n, &lo, &hi, NULL);
                if (n == 1) { assert_int_equal(st, TM_OK); assert_true(lo == 0 && hi == 0); continue; }
            }
            assert_int_equal(st, TM_OK);
            assert_true(lo == (double)mn); /* == : -0 and +0 are the same range */
            assert_true(hi == (double)mx);
        }
        free(v);
    }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* 4-bit packing                                                                             */
/* ---------------------------------------------------------------------------------------- */

static void test_pack4_matches_bitwise(void **state) {
    (void)state;
    const tm_dtype dts[2] = {TM_I4, TM_U4};
    for (int d = 0; d < 2; d++)
        for (int64_t cols = 1; cols <= 140; cols++) {
            const int64_t rows = 3;
            uint8_t codes[3 * 140], back[3 * 140];
            for (int64_t i = 0; i < rows * cols; i++) {
                int v = (int)(rng_u64() % 16);
                codes[i] = dts[d] == TM_I4 ? (uint8_t)(int8_t)(v - 8) : (uint8_t)v;
            }
            tm_packing pk;
            memset(&pk, 0, sizeof pk);
            pk.container = TM_I32;
            pk.bits = 4;
            pk.codes_per_container = 8;
            pk.packed_axis = 1;
            pk.offset = dts[d] == TM_I4 ? 8 : 0;
            pk.lsb_first = 1;
            uint64_t rb = tm_packed_row_bytes(&pk, cols);
            assert_int_equal(rb, ((uint64_t)cols * 4 + 31) / 32 * 4);
            uint8_t got[3 * 72], want[3 * 72];
            memset(got, 0xee, sizeof got);
            memset(want, 0, sizeof want);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++) { /* field j: stream bits [4j, 4j+4) */
                    int64_t c = dts[d] == TM_I4 ? (int64_t)(int8_t)codes[r * cols + j] : codes[r * cols + j];
                    uint32_t f = (uint32_t)((c + pk.offset) & 15);
                    want[(uint64_t)r * rb + (uint64_t)(j / 2)] |= (uint8_t)(f << (4 * (j & 1)));
                }
            assert_int_equal(tm_pack_codes(&pk, dts[d], codes, rows, cols, got, NULL), TM_OK);
            assert_memory_equal(got, want, (size_t)(rows * rb));
            assert_int_equal(tm_unpack_codes(&pk, dts[d], got, rows, cols, back, NULL), TM_OK);
            assert_memory_equal(back, codes, (size_t)(rows * cols));
        }
}

/* ---------------------------------------------------------------------------------------- */
/* The whole job: every kernel set gives the bytes of auto                                   */
/* ---------------------------------------------------------------------------------------- */

static char g_dir[64];

typedef struct shape_t { const char *name; int64_t r, c; } shape_t;

/* The checkpoint's tensors: odd widths and heights, one wider than a slice, a 1-D norm. */
static const shape_t g_mixed[] = {
    {"a.weight", 37, 1000}, {"b.weight", 5, 4099}, {"c.weight", 64, 256}, {"d.weight", 3, 7},
    {"e.weight", 300, 130}, {"f.weight", 2, 40000}, {"g.weight", 1100, 33}, {"norm.weight", 1, 100}};
/* Rows whose packed I32 words are longer than the row's values (int8: 257 columns -> 260 bytes;
** int4: 1 column -> 4 bytes), in checkpoints where they are the largest chunk: the packed
** buffer must be sized by packed bytes, not by values. */
static const shape_t g_padded[] = {{"p.weight", 4096, 257}, {"q.weight", 3000, 1}, {"r.weight", 64, 9}};
static const shape_t *g_shapes = g_mixed;
static int g_n_shapes = (int)(sizeof g_mixed / sizeof g_mixed[0]);

/* A safetensors file of F32 or BF16 2-D weights (plus 1-D norms) with the rows of fill_rows:
** the tensors of g_shapes. */
static void write_ckpt(const char *path, int bf16, int allow_nf) {
    const shape_t *ts = g_shapes;
    const int NT = g_n_shapes;
    char hdr[4096];
    size_t hl = 0;
    uint64_t off = 0;
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{");
    for (int k = 0; k < NT; k++) {
        uint64_t nb = (uint64_t)(ts[k].r * ts[k].c) * (bf16 ? 2u : 4u);
        if (ts[k].r == 1)
            hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}",
                                   k ? "," : "", ts[k].name, bf16 ? "BF16" : "F32", (long long)ts[k].c,
                                   (unsigned long long)off, (unsigned long long)(off + nb));
        else
            hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                                   k ? "," : "", ts[k].name, bf16 ? "BF16" : "F32", (long long)ts[k].r,
                                   (long long)ts[k].c, (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, hl, f), hl);
    for (int k = 0; k < NT; k++) {
        int64_t n = ts[k].r * ts[k].c;
        float *x = malloc((size_t)n * sizeof(float));
        fill_rows(x, ts[k].r, ts[k].c, allow_nf && k == 0);
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            if (bf16) {
                uint8_t b[2] = {(uint8_t)(u >> 16), (uint8_t)(u >> 24)}; /* truncation: any bf16 will do */
                assert_int_equal(fwrite(b, 1, 2, f), 2);
            } else {
                assert_int_equal(fwrite(&x[i], 4, 1, f), 1); /* little-endian host (x86, arm64) */
            }
        }
        free(x);
    }
    fclose(f);
}


typedef struct job_spec {
    tm_dtype code; tm_granularity gk; int64_t gs; int symmetric, allow_nf, threads;
    tm_observer_kind obs; /* 0: minmax */
} job_spec;

static void job_case(int bf16, const job_spec *js) {
    const tm_dtype code = js->code;
    const tm_granularity gk = js->gk;
    const int64_t gs = js->gs;
    const int symmetric = js->symmetric, allow_nf = js->allow_nf, threads = js->threads;
    /* the runs: 0: auto kernels, the file (slices read with pread); 1: the reference set (every
    ** kernel: observers, quantize, error lanes); 2: auto kernels, the file's bytes opened as a
    ** buffer (slices read from the map); 3, 4: the avx2 and avx512 sets where the CPU has them */
    enum { NV = 5 };
    static const char *const kern[NV] = {"auto", "ref", "auto", "avx2", "avx512"};
    char src[128], out[NV][128];
    snprintf(src, sizeof src, "%s/src.safetensors", g_dir);
    write_ckpt(src, bf16, allow_nf);
    tm_ct_quantize_result *res[NV] = {NULL};
    size_t nsrc = 0;
    char *srcbuf = tmt_read_bytes(src, &nsrc);
    assert_non_null(srcbuf);
    for (int v = 0; v < NV; v++) {
        const tm_kernels *k;
        if (tm_kernels_get(kern[v], &k) != TM_OK) continue; /* the CPU lacks it */
        snprintf(out[v], sizeof out[v], "%s/out%d", g_dir, v);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", out[v]);
        assert_int_equal(system(cmd), 0);
        tm_file *in = NULL;
        if (v == 2) assert_int_equal(tm_open_buffer(srcbuf, nsrc, "src", NULL, &in, NULL), TM_OK);
        else assert_int_equal(tm_open(src, NULL, &in, NULL), TM_OK);
        tm_ct_quantize_params p = tm_ct_quantize_params_default();
        p.kernels = k;
        p.spec.code_dtype = code;
        p.spec.gran.kind = gk;
        p.spec.gran.axis = gk == TM_GRAN_GROUP ? 1 : 0;
        p.spec.gran.group_size = gs;
        p.spec.symmetric = symmetric;
        p.spec.allow_nonfinite = allow_nf;
        p.spec.observer = tm_observer_default(js->obs);
        p.no_checksums = 1;
        p.n_threads = threads;
        tm_err e;
        memset(&e, 0, sizeof e);
        tm_status st = tm_ct_quantize(in, out[v], &p, &res[v], &e);
        if (st) fail_msg("quantize: %s", e.msg);
        tm_close(in);
    }
    for (int v = 1; v < NV; v++) {
        if (!res[v]) continue;
        char pa[200], pb[200];
        snprintf(pa, sizeof pa, "%s/model.safetensors", out[0]);
        snprintf(pb, sizeof pb, "%s/model.safetensors", out[v]);
        size_t na, nb;
        char *a = tmt_read_bytes(pa, &na), *b = tmt_read_bytes(pb, &nb);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(a);
        free(b);
        assert_int_equal(res[0]->n, res[v]->n);
        for (int64_t k = 0; k < res[0]->n; k++) {
            const tm_errsum *x = &res[0]->tensors[k].e, *y = &res[v]->tensors[k].e;
            assert_int_equal(res[0]->tensors[k].quantized, res[v]->tensors[k].quantized);
            assert_memory_equal(x, y, sizeof *x); /* every figure, bit for bit (all 8-byte fields) */
            assert_int_equal(res[0]->tensors[k].n_degenerate, res[v]->tensors[k].n_degenerate);
        }
    }
    for (int v = 0; v < NV; v++) tm_ct_quantize_result_free(res[v]);
    free(srcbuf);
}

/* Every spec on the checkpoint of `shapes`, from F32 and from BF16, in a fresh directory. */
static void run_jobs(const shape_t *shapes, int n_shapes, const job_spec *js, int n_js) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tm_qjob_fast_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    g_shapes = shapes;
    g_n_shapes = n_shapes;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < n_js; k++)
            job_case(bf16, &js[k]);
    g_shapes = g_mixed;
    g_n_shapes = (int)(sizeof g_mixed / sizeof g_mixed[0]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
}

static void test_job_auto_equals_reference(void **state) {
    (void)state;
    static const job_spec js[] = {
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, 0, 2, TM_OBS_MINMAX},
        {TM_I4, TM_GRAN_GROUP, 128, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I4, TM_GRAN_GROUP, 32, 0, 0, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_CHANNEL, 0, 0, 0, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_TENSOR, 0, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, 1, 1, TM_OBS_MINMAX},
        {TM_I4, TM_GRAN_GROUP, 128, 0, 1, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_CHANNEL, 0, 0, 0, 2, TM_OBS_MSE},
        {TM_I4, TM_GRAN_GROUP, 32, 1, 0, 1, TM_OBS_PERCENTILE}};
    run_jobs(g_mixed, (int)(sizeof g_mixed / sizeof g_mixed[0]), js, (int)(sizeof js / sizeof js[0]));
}

/* Chunks whose packed rows are longer than their values (found by a tester as a heap overflow
** in tm_pack_codes under int8 with 257 columns); under ASan any overflow fails the test. */
static void test_job_padded_rows(void **state) {
    (void)state;
    static const job_spec js[] = {
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_CHANNEL, 0, 0, 0, 2, TM_OBS_MINMAX},
        {TM_I8, TM_GRAN_TENSOR, 0, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I4, TM_GRAN_CHANNEL, 0, 1, 0, 1, TM_OBS_MINMAX},
        {TM_I4, TM_GRAN_TENSOR, 0, 0, 0, 2, TM_OBS_MINMAX}};
    run_jobs(g_padded, (int)(sizeof g_padded / sizeof g_padded[0]), js, (int)(sizeof js / sizeof js[0]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_quant_dequant_matches_ref),
        cmocka_unit_test(test_erracc_fast_lanes_match_ref),
        cmocka_unit_test(test_minmax_observer_paths),
        cmocka_unit_test(test_pack4_matches_bitwise),
        cmocka_unit_test(test_job_auto_equals_reference),
        cmocka_unit_test(test_job_padded_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
