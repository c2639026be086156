/* test_gptq_awq.c: the GPTQ and AWQ safetensors layouts (src/formats/gptq.c, the transposed
** view in src/view/view.c; docs/formats.md "GPTQ and AWQ"). No real checkpoints of these are in
** ../shared, so each test builds its own from the layouts' public descriptions: a float source
** with three Linear weights, quantized here by round-to-nearest with its own small code, packed
** as GPTQ v1 (z-1 stored, act-order g_idx), GPTQ v2 (config.json or quantize_config.json),
** GPTQ 8-bit per channel (no config.json), GPTQ 2-bit and AWQ GEMM (interleaved nibbles; config,
** quant_config.json or none). Then: every dequantized value equals scale*(q - z)
** computed here, the Scalar Inspector gives the raw code, the zero point and the container word,
** qdiff against the float source is plain rounding (RMSE about 0.29 LSB), and broken files
** give errors that name tensor and reason. Also: 16-bit ONNX QDQ codes from ../shared. */
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
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"

static char g_tmp[256];

static uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

/* ---- the float source: three Linear weights [N, K] ------------------------------------- */

enum { N_LIN = 3 };
static const char *const k_names[N_LIN] = {"model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj",
                                           "model.layers.1.self_attn.q_proj"};
static const int64_t k_N[N_LIN] = {48, 32, 64};
static const int64_t k_K[N_LIN] = {128, 192, 64};

static uint32_t g_lcg;
static float urand(void) { /* [-0.5, 0.5) */
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return (float)(g_lcg >> 8) / 16777216.0f - 0.5f;
}

/* w[l] row-major [N, K]; rows of different magnitudes */
static float *g_w[N_LIN];

static void make_source(void) {
    g_lcg = 20240607u;
    for (int l = 0; l < N_LIN; l++) {
        int64_t N = k_N[l], K = k_K[l];
        g_w[l] = malloc((size_t)(N * K) * sizeof(float));
        assert_non_null(g_w[l]);
        for (int64_t n = 0; n < N; n++) {
            float mag = 0.02f * (float)(1 + n % 7), shift = 0.004f * (float)(n % 3);
            for (int64_t k = 0; k < K; k++) g_w[l][n * K + k] = mag * urand() + shift;
        }
    }
}

/* ---- a small safetensors writer over the library's writer ------------------------------- */

typedef struct ent { const char *name; tm_dtype dt; int ndim; int64_t d0, d1; const void *data; size_t nb; } ent;

static void write_st(const char *dir, const ent *e, int n) {
    mkdir(dir, 0755);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tm_st_entry *se = calloc((size_t)n, sizeof *se);
    assert_non_null(se);
    for (int i = 0; i < n; i++) {
        se[i].name = e[i].name;
        se[i].dtype = e[i].dt;
        se[i].ndim = e[i].ndim;
        se[i].shape[0] = e[i].d0;
        se[i].shape[1] = e[i].d1;
    }
    tm_st_writer *w = NULL;
    tm_err err;
    assert_int_equal(tm_st_writer_open(path, se, n, NULL, &w, &err), TM_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(tm_st_writer_write(w, i, 0, e[i].data, e[i].nb, &err), TM_OK);
    assert_int_equal(tm_st_writer_finish(w, &err), TM_OK);
    tm_st_writer_free(w);
    free(se);
}


static char *sub(const char *name) {
    static char buf[8][600];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%.255s/%.300s", g_tmp, name);
    return b;
}

/* ---- quantization by the layouts' published formula (round to nearest) ----------------- */

typedef enum lay { GPTQ_V1, GPTQ_V2, AWQ } lay;

/* One quantized Linear: codes q[n*K + k], zero points z[g*N + n], fp16 scales s[g*N + n],
** g_idx[k], and the packed tensors as the layout stores them. */
typedef struct qlin {
    int64_t N, K, G, gs;
    int bits;
    uint8_t *q;
    int32_t *z;
    uint16_t *s;
    int32_t *g_idx;
    uint32_t *qweight, *qzeros;
    int64_t qw_r, qw_c, qz_c;
} qlin;

/* The next f16 at or above x > 0 (the scale must not shrink the range below max - min). */
static uint16_t f16_up(float x) {
    uint16_t h = tm_f32_to_f16(x);
    if (tm_f16_to_f32(h) < x) h++;
    return h;
}

/* gs -1: per channel. sym: GPTQ's symmetric scheme (z = 2^(bits-1)). perm: act-order. */
static void quantize_lin(qlin *ql, const float *w, int64_t N, int64_t K, int bits, int64_t gs,
                         int sym, int act_order, lay L) {
    memset(ql, 0, sizeof *ql);
    assert_true(N > 0 && N <= 4096 && K > 0 && K <= 4096);
    ql->N = N;
    ql->K = K;
    ql->bits = bits;
    ql->gs = gs;
    int64_t G = gs < 0 ? 1 : (K + gs - 1) / gs;
    ql->G = G;
    int maxq = (1 << bits) - 1;
    ql->q = calloc((size_t)(N * K), 1);
    ql->z = calloc((size_t)(G * N), sizeof(int32_t));
    ql->s = calloc((size_t)(G * N), sizeof(uint16_t));
    ql->g_idx = calloc((size_t)K, sizeof(int32_t));
    assert_true(ql->q && ql->z && ql->s && ql->g_idx);
    /* g_idx: column perm[i] is the i-th quantized; it belongs to group i / gs */
    int64_t *perm = malloc((size_t)K * sizeof(int64_t));
    for (int64_t k = 0; k < K; k++) perm[k] = k;
    if (act_order)
        for (int64_t k = K - 1; k > 0; k--) { /* Fisher-Yates with the test's LCG */
            g_lcg = g_lcg * 1664525u + 1013904223u;
            int64_t j = (int64_t)((g_lcg >> 8) % (uint32_t)(k + 1));
            int64_t t = perm[k]; perm[k] = perm[j]; perm[j] = t;
        }
    for (int64_t i = 0; i < K; i++) ql->g_idx[perm[i]] = gs < 0 ? 0 : (int32_t)(i / gs);
    free(perm);
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            float mn = INFINITY, mx = -INFINITY;
            for (int64_t k = 0; k < K; k++)
                if (ql->g_idx[k] == g) {
                    mn = fminf(mn, w[n * K + k]);
                    mx = fmaxf(mx, w[n * K + k]);
                }
            float scale;
            int32_t z;
            if (sym) {
                float amax = fmaxf(fabsf(mn), fabsf(mx));
                ql->s[g * N + n] = f16_up(2.0f * amax / (float)maxq);
                scale = tm_f16_to_f32(ql->s[g * N + n]);
                z = (maxq + 1) / 2;
            } else {
                mn = fminf(mn, 0.0f);
                mx = fmaxf(mx, 0.0f);
                ql->s[g * N + n] = f16_up((mx - mn) / (float)maxq);
                scale = tm_f16_to_f32(ql->s[g * N + n]);
                z = (int32_t)lrintf(-mn / scale);
                if (z < 0) z = 0;
                if (z > maxq) z = maxq;
            }
            if (L == GPTQ_V1) assert_true(z >= 1); /* v1 cannot store z = 0 */
            ql->z[g * N + n] = z;
            for (int64_t k = 0; k < K; k++)
                if (ql->g_idx[k] == g) {
                    long c = lrintf(w[n * K + k] / scale) + z;
                    ql->q[n * K + k] = (uint8_t)(c < 0 ? 0 : c > maxq ? maxq : c);
                }
        }
    /* pack */
    int per = 32 / bits;
    uint32_t mask = (uint32_t)maxq;
    if (L == AWQ) {
        static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* nibble i holds column order[i] */
        assert_int_equal(bits, 4);
        ql->qw_r = K;
        ql->qw_c = N / 8;
        ql->qz_c = N / 8;
        ql->qweight = calloc((size_t)(K * N / 8), 4);
        ql->qzeros = calloc((size_t)(G * N / 8), 4);
        for (int64_t k = 0; k < K; k++)
            for (int64_t c = 0; c < N / 8; c++)
                for (int i = 0; i < 8; i++)
                    ql->qweight[k * (N / 8) + c] |= (uint32_t)ql->q[(c * 8 + order[i]) * K + k] << (4 * i);
        for (int64_t g = 0; g < G; g++)
            for (int64_t c = 0; c < N / 8; c++)
                for (int i = 0; i < 8; i++)
                    ql->qzeros[g * (N / 8) + c] |= ((uint32_t)ql->z[g * N + c * 8 + order[i]] & mask) << (4 * i);
    } else {
        ql->qw_r = K / per;
        ql->qw_c = N;
        ql->qz_c = N / per;
        ql->qweight = calloc((size_t)(K / per) * (size_t)N, 4);
        ql->qzeros = calloc((size_t)G * (size_t)(N / per), 4);
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++)
                ql->qweight[(k / per) * N + n] |= (uint32_t)ql->q[n * K + k] << ((k % per) * bits);
        for (int64_t g = 0; g < G; g++)
            for (int64_t n = 0; n < N; n++) {
                uint32_t stored = (uint32_t)(L == GPTQ_V1 ? ql->z[g * N + n] - 1 : ql->z[g * N + n]);
                ql->qzeros[g * (N / per) + n / per] |= (stored & mask) << ((n % per) * bits);
            }
    }
}

static void qlin_free(qlin *ql) {
    free(ql->q); free(ql->z); free(ql->s); free(ql->g_idx); free(ql->qweight); free(ql->qzeros);
    memset(ql, 0, sizeof *ql);
}

static char g_names[N_LIN][4][128];

/* Write a checkpoint of the three linears in layout L to dir (plus an lm_head kept dense). */
static void write_quantized(const char *dir, qlin *ql, lay L, int with_g_idx) {
    ent e[N_LIN * 4 + 1];
    int n = 0;
    for (int l = 0; l < N_LIN; l++) {
        snprintf(g_names[l][0], 128, "%s.qweight", k_names[l]);
        snprintf(g_names[l][1], 128, "%s.qzeros", k_names[l]);
        snprintf(g_names[l][2], 128, "%s.scales", k_names[l]);
        snprintf(g_names[l][3], 128, "%s.g_idx", k_names[l]);
        e[n++] = (ent){g_names[l][0], TM_I32, 2, ql[l].qw_r, ql[l].qw_c, ql[l].qweight,
                       (size_t)(ql[l].qw_r * ql[l].qw_c) * 4};
        e[n++] = (ent){g_names[l][1], TM_I32, 2, ql[l].G, ql[l].qz_c, ql[l].qzeros,
                       (size_t)(ql[l].G * ql[l].qz_c) * 4};
        e[n++] = (ent){g_names[l][2], TM_F16, 2, ql[l].G, ql[l].N, ql[l].s, (size_t)(ql[l].G * ql[l].N) * 2};
        if (with_g_idx && L != AWQ)
            e[n++] = (ent){g_names[l][3], TM_I32, 1, ql[l].K, 0, ql[l].g_idx, (size_t)ql[l].K * 4};
    }
    static const float head[4] = {1, 2, 3, 4};
    e[n++] = (ent){"lm_head.weight", TM_F32, 2, 2, 2, head, sizeof head};
    write_st(dir, e, n);
}

/* The N_LIN layers of g_w quantized alike (quantize_lin's bits, gs, sym, act_order, L). */
static void quantize_all(qlin *ql, int bits, int64_t gs, int sym, int act_order, lay L) {
    for (int l = 0; l < N_LIN; l++) quantize_lin(&ql[l], g_w[l], k_N[l], k_K[l], bits, gs, sym, act_order, L);
}

static void free_all(qlin *ql) {
    for (int l = 0; l < N_LIN; l++) qlin_free(&ql[l]);
}

/* sub(name) holding ql (write_quantized) and, unless config is NULL, that config.json. */
static const char *write_model(const char *name, qlin *ql, lay L, int with_g_idx, const char *config) {
    const char *dir = sub(name);
    write_quantized(dir, ql, L, with_g_idx);
    if (config) tmt_write_text(dir, "config.json", config);
    return dir;
}

static void write_source(const char *dir) {
    ent e[N_LIN];
    static char nm[N_LIN][128];
    for (int l = 0; l < N_LIN; l++) {
        snprintf(nm[l], 128, "%s.weight", k_names[l]);
        e[l] = (ent){nm[l], TM_F32, 2, k_N[l], k_K[l], g_w[l], (size_t)(k_N[l] * k_K[l]) * 4};
    }
    write_st(dir, e, N_LIN);
}

static int has_warning(const tm_file *f, const char *needle) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        if (strstr(tm_file_warning(f, i), needle)) return 1;
    return 0;
}

/* Every value, a sample of Scalar Inspector elements, roles, and qdiff vs the float source. */
static void check_model(const char *dir, const qlin *ql, lay L, const char *layout, int gidx_used) {
    tm_file *f = tmt_open_ok(dir);
    for (int l = 0; l < N_LIN; l++) {
        const qlin *x = &ql[l];
        int64_t ti = tm_file_find(f, g_names[l][0]);
        assert_true(ti >= 0);
        const tm_tensor *t = tm_file_tensor(f, ti);
        assert_non_null(t->quant);
        /* listed under the float source's name, stored as qweight */
        char wname[160];
        snprintf(wname, sizeof wname, "%s.weight", k_names[l]);
        assert_string_equal(t->name, wname);
        assert_string_equal(t->phys_name, g_names[l][0]);
        assert_int_equal(tm_file_find(f, wname), ti);
        const tm_qtensor *q = t->quant;
        assert_string_equal(q->layout, layout);
        assert_int_equal(t->dtype, x->bits == 8 ? TM_U8 : TM_U4);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], x->N);
        assert_int_equal(t->shape[1], x->K);
        assert_int_equal(q->qmin, 0);
        assert_int_equal(q->qmax, (1 << x->bits) - 1);
        if (x->gs < 0) {
            assert_int_equal(q->gran.kind, TM_GRAN_CHANNEL);
            assert_int_equal(q->gran.axis, 0);
        } else {
            assert_int_equal(q->gran.kind, TM_GRAN_GROUP);
            assert_int_equal(q->gran.axis, 1);
            assert_int_equal(q->gran.group_size, x->gs);
        }
        /* the one label: unsigned codes with stored zero points, f16 scales; the description
        ** names the transposed word grid, AWQ's field order and act-order g_idx */
        char lab[TM_QLABEL_MAX], want[64], desc[TM_QDESC_MAX];
        if (x->gs < 0) snprintf(want, sizeof want, "U%d channel:0 asym scale:F16", x->bits);
        else snprintf(want, sizeof want, "U%d group:%lld asym scale:F16", x->bits, (long long)x->gs);
        assert_string_equal(tm_qtensor_label(f, t, lab, sizeof lab), want);
        tm_qtensor_describe(f, t, desc, sizeof desc);
        assert_non_null(strstr(desc, "word grid stored transposed (GPTQ/AWQ)"));
        assert_true((strstr(desc, "interleaved field order") != NULL) == (L == AWQ));
        assert_true((strstr(desc, "act-order g_idx") != NULL) == (gidx_used != 0));
        const tm_tensor *sc = tm_file_tensor(f, q->scale_tensor);
        const tm_tensor *zt = tm_file_tensor(f, q->zero_point_tensor);
        assert_string_equal(sc->name, g_names[l][2]);
        assert_int_equal(sc->role, TM_ROLE_SCALE);
        assert_int_equal(sc->owner, ti);
        assert_string_equal(zt->name, g_names[l][1]);
        assert_int_equal(zt->role, TM_ROLE_ZERO_POINT);
        if (gidx_used) {
            const tm_tensor *gt = tm_file_tensor(f, q->g_idx_tensor);
            assert_non_null(gt);
            assert_string_equal(gt->name, g_names[l][3]);
            assert_int_equal(gt->role, TM_ROLE_AUX);
        } else {
            assert_int_equal(q->g_idx_tensor, -1);
        }
        /* every value: scale * (q - z) with the group from g_idx */
        int64_t NK = x->N * x->K;
        float *v = malloc((size_t)NK * sizeof(float));
        tm_err err;
        assert_int_equal(tm_tensor_read_f32(f, ti, 0, NK, v, &err), TM_OK);
        for (int64_t n = 0; n < x->N; n++)
            for (int64_t k = 0; k < x->K; k++) {
                int64_t g = x->g_idx[k];
                float want = (float)((int32_t)x->q[n * x->K + k] - x->z[g * x->N + n]) *
                             tm_f16_to_f32(x->s[g * x->N + n]);
                if (f32_bits(v[n * x->K + k]) != f32_bits(want)) {
                    print_message("%s [%lld, %lld]: view %.9g, formula %.9g\n", t->name,
                                  (long long)n, (long long)k, v[n * x->K + k], want);
                    fail();
                }
            }
        free(v);
        /* Scalar Inspector on a spread of elements */
        for (int64_t flat = 0; flat < NK; flat += 37) {
            int64_t n = flat / x->K, k = flat % x->K, g = x->g_idx[k];
            tm_qelement e;
            assert_int_equal(tm_qelement_get(f, ti, flat, &e, &err), TM_OK);
            assert_int_equal(e.code, x->q[flat]);
            assert_int_equal(e.zero_point, x->z[g * x->N + n]);
            assert_true(e.scale == (double)tm_f16_to_f32(x->s[g * x->N + n]));
            assert_int_equal(e.group, n * x->G + g);
            /* the inspector's formula: (q - zero_point) * scale, the group from g_idx[c] */
            tm_qformula fm;
            assert_int_equal(tm_qelement_formula(f, ti, flat, &e, &fm, &err), TM_OK);
            assert_string_equal(fm.terms[0].name, "q");
            assert_true(fm.terms[0].value == (double)x->q[flat]);
            assert_true(fm.terms[1].value == (double)x->z[g * x->N + n]);
            assert_true(fm.terms[2].value == e.scale);
            if (gidx_used) {
                assert_int_equal(fm.n_terms, 4);
                assert_string_equal(fm.terms[3].name, "g_idx[c]");
                assert_true(fm.terms[3].value == (double)g);
            }
            assert_true((fm.terms[0].value - fm.terms[1].value) * fm.terms[2].value == e.value);
            assert_int_equal(e.stored_bits, 32);
            int per = 32 / x->bits;
            uint32_t word = L == AWQ ? x->qweight[k * (x->N / 8) + n / 8]
                                     : x->qweight[(k / per) * x->N + n];
            assert_int_equal(e.stored, word);
        }
    }
    assert_true(tm_file_find(f, "lm_head.weight") >= 0);
    assert_null(tm_file_tensor(f, tm_file_find(f, "lm_head.weight"))->quant);
    /* qdiff against the float source: pairs P.qweight with P.weight; plain rounding */
    tm_file *ref = tmt_open_ok(sub("src"));
    tm_qdiff_params qp;
    memset(&qp, 0, sizeof qp);
    tm_qdiff_result *res = NULL;
    tm_err err;
    assert_int_equal(tm_qdiff(ref, f, &qp, &res, &err), TM_OK);
    assert_int_equal(res->n, N_LIN);
    assert_int_equal(res->n_unmatched, 0);
    for (int64_t i = 0; i < res->n; i++) {
        const tm_qdiff_entry *e = &res->entries[i];
        print_message("%s %s: rmse %.4f LSB, max %.4f LSB, sqnr %.1f dB\n", strrchr(dir, '/') + 1,
                      e->name, e->e.rmse_lsb, e->e.max_err_lsb, e->e.sqnr_db);
        if (e->e.rmse_lsb < 0.25 || e->e.rmse_lsb > 0.33 || e->flagged)
            print_message("%s %s: rmse %.4f LSB, max %.4f LSB, flagged %d (%s)\n", dir, e->name,
                          e->e.rmse_lsb, e->e.max_err_lsb, e->flagged, e->reason);
        assert_true(e->e.n >= 4096);
        assert_true(e->e.rmse_lsb > 0.25 && e->e.rmse_lsb < 0.33);
        assert_true(e->e.max_err_lsb <= 0.5 + 1e-3);
        assert_true(e->e.clipped_fraction == 0);
        assert_false(e->flagged);
    }
    tm_qdiff_free(res);
    tm_close(ref);
    tm_close(f);
}

static int setup(void **state) {
    (void)state;
    if (tmt_tmpdir_make(g_tmp, sizeof g_tmp, "gptq")) return -1;
    make_source();
    write_source(sub("src"));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (tmt_tmpdir_remove(g_tmp)) return -1;
    for (int l = 0; l < N_LIN; l++) free(g_w[l]);
    return 0;
}

static void expect_open(const char *dir, tm_status want, const char *n1, const char *n2);

/* ---- the layouts ------------------------------------------------------------------------- */

/* GPTQ v1 (AutoGPTQ): 4-bit, sym, group 32, desc_act with a permuted g_idx, z-1 stored. */
static void test_gptq_v1_act_order(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 4, 32, 1, 1, GPTQ_V1);
    /* act-order really permutes */
    int monotonic = 1;
    for (int64_t k = 1; k < ql[0].K; k++) monotonic &= ql[0].g_idx[k] >= ql[0].g_idx[k - 1];
    assert_false(monotonic);
    const char *dir = write_model("gptq_v1", ql, GPTQ_V1, 1,
                                  "{\"architectures\": [\"LlamaForCausalLM\"], \"quantization_config\": {\"quant_method\": "
                                  "\"gptq\", \"bits\": 4, \"group_size\": 32, \"desc_act\": true, \"sym\": true, "
                                  "\"checkpoint_format\": \"gptq\"}}");
    check_model(dir, ql, GPTQ_V1, "gptq", 1);
    /* the stored zero point really is z - 1: the word holds 7 for z = 8 */
    assert_int_equal(ql[0].qzeros[0] & 15u, 7u);
    /* the CLI: scalar shows raw code, zero point and value; inspect lists the scheme */
    int64_t n = 5, k = 77, K = ql[0].K, g = ql[0].g_idx[k];
    json_t *j = tmt_run_json(0, "%s scalar %s %s %lld,%lld --ref %s --json", tmt_bin(), dir,
                             g_names[0][0], (long long)n, (long long)k, sub("src"));
    assert_int_equal(json_integer_value(json_object_get(j, "code")), ql[0].q[n * K + k]);
    assert_int_equal(json_integer_value(json_object_get(j, "zero_point")), ql[0].z[g * ql[0].N + n]);
    float want = (float)((int)ql[0].q[n * K + k] - ql[0].z[g * ql[0].N + n]) *
                 tm_f16_to_f32(ql[0].s[g * ql[0].N + n]);
    assert_true(tmt_num(j, "value") == (double)want);
    assert_true(fabs(tmt_num(j, "ref_value") - (double)g_w[0][n * K + k]) < 1e-7);
    json_decref(j);
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), dir);
    char wname[160];
    snprintf(wname, sizeof wname, "%s.weight", k_names[0]);
    json_t *tl = tmt_find_named(json_object_get(j, "tensors"), wname);
    assert_non_null(tl);
    assert_string_equal(json_string_value(json_object_get(tl, "stored_as")), g_names[0][0]);
    json_t *qj = json_object_get(tl, "quantization");
    assert_string_equal(json_string_value(json_object_get(qj, "layout")), "gptq");
    assert_string_equal(json_string_value(json_object_get(qj, "granularity")), "group");
    assert_int_equal(json_integer_value(json_object_get(qj, "group_size")), 32);
    json_t *pk = json_object_get(qj, "packing");
    assert_true(json_is_true(json_object_get(pk, "transposed")));
    assert_int_equal(json_integer_value(json_object_get(pk, "zero_point_offset")), -1);
    assert_int_equal(json_integer_value(json_object_get(pk, "packed_axis")), 1);
    json_decref(j);
    free_all(ql);
}

/* GPTQModel gptq_v2: z stored as is, 4-bit asym, group 64, trivial g_idx. */
static void test_gptq_v2(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 4, 64, 0, 0, GPTQ_V2);
    const char *dir = write_model("gptq_v2", ql, GPTQ_V2, 1,
                                  "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
                                  "64, \"desc_act\": false, \"sym\": false, \"checkpoint_format\": \"gptq_v2\"}}");
    check_model(dir, ql, GPTQ_V2, "gptq_v2", 1);
    /* AutoGPTQ / GPTQModel's quantize_config.json where config.json has no quantization_config */
    const char *ds = write_model("gptq_v2_sidecar", ql, GPTQ_V2, 1, "{\"architectures\": [\"LlamaForCausalLM\"]}");
    tmt_write_text(ds, "quantize_config.json",
               "{\"bits\": 4, \"group_size\": 64, \"desc_act\": false, \"sym\": false, "
               "\"true_sequential\": true, \"checkpoint_format\": \"gptq_v2\"}");
    check_model(ds, ql, GPTQ_V2, "gptq_v2", 1);
    tm_file *fs = tmt_open_ok(ds);
    assert_int_equal(tm_file_n_warnings(fs), 0);
    tm_close(fs);
    /* the same tensors read as v1 would be off by one LSB in every zero point */
    const char *d1 = write_model("gptq_v2_as_v1", ql, GPTQ_V2, 1,
                                 "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
                                 "64, \"checkpoint_format\": \"gptq\"}}");
    tm_file *f = tmt_open_ok(d1);
    tm_qelement e;
    tm_err err;
    int64_t ti = tm_file_find(f, g_names[0][0]);
    assert_int_equal(tm_qelement_get(f, ti, 0, &e, &err), TM_OK);
    assert_int_equal(e.zero_point, ql[0].z[0] + 1);
    tm_close(f);
    free_all(ql);
}

/* GPTQ 8-bit per channel (group_size -1), no config.json: found from the shapes, read as v1. */
static void test_gptq_8bit_channel_no_config(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 8, -1, 0, 0, GPTQ_V1);
    const char *dir = write_model("gptq8", ql, GPTQ_V1, 0, NULL);
    check_model(dir, ql, GPTQ_V1, "gptq", 0);
    tm_file *f = tmt_open_ok(dir);
    assert_true(has_warning(f, "without a quantization_config"));
    tm_close(f);
    free_all(ql);
}

/* GPTQ 2-bit (four codes per byte, sixteen per word), group 32. */
static void test_gptq_2bit(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 2, 32, 0, 0, GPTQ_V2);
    const char *dir = write_model("gptq2", ql, GPTQ_V2, 1,
                                  "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 2, \"group_size\": "
                                  "32, \"checkpoint_format\": \"gptq_v2\"}}");
    check_model(dir, ql, GPTQ_V2, "gptq_v2", 1);
    free_all(ql);
}

#define V2_LIKE "sym 4-bit but stored zeros = 8; under v1 the effective zero is 9; the file may be gptq_v2"

/* Labelled gptq (v1, stores z - 1) but the symmetric 4-bit qzeros are all 8: gptq_v2's zero,
** mislabelled. Read as the label says (zero 9), with a warning in the file, on stderr and in
** inspect --json; inspect says which convention it applied. A real v1 file (stored 7) and a
** gptq_v2 file get no warning. (issue 12 item 2) */
static void test_gptq_v1_label_v2_zeros(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 4, 32, 1, 0, GPTQ_V2);
    assert_int_equal(ql[0].qzeros[0], 0x88888888u);
    const char *dir = write_model("gptq_mislabelled", ql, GPTQ_V2, 1,
                                  "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
                                  "32, \"sym\": true, \"checkpoint_format\": \"gptq\"}}");
    tm_file *f = tmt_open_ok(dir);
    assert_true(has_warning(f, V2_LIKE));
    assert_true(has_warning(f, "(3 of 3 GPTQ tensors read as checkpoint_format \"gptq\")"));
    int64_t ti = tm_file_find(f, g_names[0][0]);
    tm_qelement e;
    tm_err err;
    assert_int_equal(tm_qelement_get(f, ti, 0, &e, &err), TM_OK);
    assert_int_equal(e.zero_point, 9); /* the label's convention, applied */
    tm_close(f);
    char wname[160];
    snprintf(wname, sizeof wname, "%s.weight", k_names[0]);
    json_t *j = tmt_run_json(0, "%s inspect %s --json 2>/dev/null", tmt_bin(), dir);
    json_t *w = json_object_get(j, "warnings");
    int found = 0;
    for (size_t i = 0; i < json_array_size(w); i++)
        found |= strstr(json_string_value(json_array_get(w, i)), V2_LIKE) != NULL;
    assert_true(found);
    json_t *qj = json_object_get(tmt_find_named(json_object_get(j, "tensors"), wname), "quantization");
    assert_string_equal(json_string_value(json_object_get(qj, "zero_point_convention")), "v1");
    json_decref(j);
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s inspect %s", tmt_bin(), dir), 0);
    assert_non_null(strstr(out, "gptq:        zero points read as v1 (stored z - 1) in 3 tensors"));
    assert_non_null(strstr(out, V2_LIKE));
    free(out);
    /* stderr, from any command that opens it */
    assert_int_equal(tmt_run(&out, "%s scalar %s %s 0,0 2>&1 >/dev/null", tmt_bin(), dir, wname), 0);
    assert_non_null(strstr(out, "tensormorph: warning: "));
    assert_non_null(strstr(out, V2_LIKE));
    free(out);
    /* relabelled gptq_v2: no warning, convention v2, zero 8 */
    tmt_write_text(dir, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
               "32, \"sym\": true, \"checkpoint_format\": \"gptq_v2\"}}");
    f = tmt_open_ok(dir);
    assert_int_equal(tm_file_n_warnings(f), 0);
    tm_close(f);
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), dir);
    qj = json_object_get(tmt_find_named(json_object_get(j, "tensors"), wname), "quantization");
    assert_string_equal(json_string_value(json_object_get(qj, "zero_point_convention")), "v2");
    json_decref(j);
    assert_int_equal(tmt_run(&out, "%s inspect %s", tmt_bin(), dir), 0);
    assert_non_null(strstr(out, "gptq:        zero points read as v2 (stored z) in 3 tensors"));
    free(out);
    free_all(ql);
    /* a real v1 symmetric file stores 7: no warning */
    quantize_all(ql, 4, 32, 1, 0, GPTQ_V1);
    const char *d1 = write_model("gptq_v1_sym", ql, GPTQ_V1, 1,
                                 "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
                                 "32, \"sym\": true, \"checkpoint_format\": \"gptq\"}}");
    f = tmt_open_ok(d1);
    assert_int_equal(tm_file_n_warnings(f), 0);
    tm_close(f);
    free_all(ql);
}

/* AutoAWQ GEMM: qweight [K, N/8] with nibbles in the order 0,2,4,6,1,3,5,7; with and without
** config.json. */
static void test_awq_gemm(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 4, 32, 0, 0, AWQ);
    /* the interleave: nibble 1 of the first word holds column 2 */
    assert_int_equal((ql[0].qweight[0] >> 4) & 15u, ql[0].q[2 * ql[0].K + 0]);
    const char *dir = write_model("awq", ql, AWQ, 0,
                                  "{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": "
                                  "32, \"version\": \"gemm\", \"zero_point\": true}}");
    check_model(dir, ql, AWQ, "awq/gemm", 0);
    /* the CLI: inspect gives the nibble order, scalar the code of an odd column */
    json_t *j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), dir);
    char wname[160];
    snprintf(wname, sizeof wname, "%s.weight", k_names[1]);
    json_t *pk = json_object_get(json_object_get(tmt_find_named(json_object_get(j, "tensors"), wname),
                                                 "quantization"), "packing");
    json_t *fo = json_object_get(pk, "field_order");
    static const int inv[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    assert_int_equal(json_array_size(fo), 8);
    for (int i = 0; i < 8; i++) assert_int_equal(json_integer_value(json_array_get(fo, i)), inv[i]);
    assert_int_equal(json_integer_value(json_object_get(pk, "packed_axis")), 0);
    json_decref(j);
    int64_t n = 13, k = 101, K = ql[1].K, g = k / 32;
    j = tmt_run_json(0, "%s scalar %s %s %lld,%lld --json", tmt_bin(), dir, wname, (long long)n,
                     (long long)k);
    assert_int_equal(json_integer_value(json_object_get(j, "code")), ql[1].q[n * K + k]);
    assert_int_equal(json_integer_value(json_object_get(j, "zero_point")), ql[1].z[g * ql[1].N + n]);
    assert_int_equal(json_integer_value(json_object_get(j, "stored")), ql[1].qweight[k * (ql[1].N / 8) + n / 8]);
    json_decref(j);
    const char *d2 = write_model("awq_noconfig", ql, AWQ, 0, NULL);
    check_model(d2, ql, AWQ, "awq/gemm", 0);
    /* AutoAWQ's quant_config.json beside a config.json without quantization_config */
    const char *d3 = write_model("awq_sidecar", ql, AWQ, 0, "{\"architectures\": [\"MistralForCausalLM\"]}");
    tmt_write_text(d3, "quant_config.json",
               "{\"zero_point\": true, \"q_group_size\": 32, \"w_bit\": 4, \"version\": \"GEMM\"}");
    check_model(d3, ql, AWQ, "awq/gemm", 0);
    tmt_write_text(d3, "quant_config.json",
               "{\"zero_point\": true, \"q_group_size\": 32, \"w_bit\": 4, \"version\": \"GEMV\"}");
    expect_open(d3, TM_E_UNSUPPORTED, "quant_config.json.version \"GEMV\"", NULL);
    free_all(ql);
}

/* ---- broken files ---------------------------------------------------------------------- */

static void expect_open(const char *dir, tm_status want, const char *n1, const char *n2) {
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(dir, NULL, &f, &err);
    if (s != want || !strstr(err.msg, n1) || (n2 && !strstr(err.msg, n2)))
        print_message("%s: status %d (want %d): %s\n", dir, s, want, err.msg);
    assert_int_equal(s, want);
    assert_null(f);
    assert_non_null(strstr(err.msg, n1));
    if (n2) assert_non_null(strstr(err.msg, n2));
}

static const char *k_cfg4 =
    "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 32, "
    "\"checkpoint_format\": \"gptq\"}}";

static void test_corrupt(void **state) {
    (void)state;
    qlin ql[N_LIN];
    quantize_all(ql, 4, 32, 1, 1, GPTQ_V1);
    /* qweight with one column too many */
    qlin bad = ql[1];
    bad.qw_c = ql[1].N + 1;
    bad.qweight = calloc((size_t)(bad.qw_r * bad.qw_c), 4);
    qlin set[N_LIN] = {ql[0], bad, ql[2]};
    const char *d = sub("bad_qweight");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json", k_cfg4);
    expect_open(d, TM_E_CORRUPT, "model.layers.0.mlp.down_proj.qweight", "columns");
    free(bad.qweight);
    /* qzeros of the wrong width */
    bad = ql[2];
    bad.qz_c = ql[2].qz_c + 1;
    bad.qzeros = calloc((size_t)(bad.G * bad.qz_c), 4);
    set[1] = ql[1];
    set[2] = bad;
    d = sub("bad_qzeros");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json", k_cfg4);
    expect_open(d, TM_E_CORRUPT, "model.layers.1.self_attn.q_proj.qzeros", "must be I32");
    free(bad.qzeros);
    set[2] = ql[2];
    /* g_idx out of range: opening reads headers only; reading the tensor refuses it */
    int32_t keep = ql[0].g_idx[5];
    ql[0].g_idx[5] = (int32_t)ql[0].G + 3;
    set[0] = ql[0];
    d = sub("bad_gidx");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json", k_cfg4);
    ql[0].g_idx[5] = keep;
    tm_file *f = tmt_open_ok(d);
    int64_t ti = tm_file_find(f, "model.layers.0.mlp.up_proj.qweight");
    float v[4];
    tm_err err;
    assert_int_equal(tm_tensor_read_f32(f, ti, 0, 4, v, &err), TM_E_CORRUPT);
    assert_non_null(strstr(err.msg, "g_idx[5]"));
    assert_non_null(strstr(err.msg, "model.layers.0.mlp.up_proj.weight"));
    tm_qelement e;
    assert_int_equal(tm_qelement_get(f, ti, 0, &e, &err), TM_E_CORRUPT);
    tm_close(f);
    char *out = NULL;
    int rc = tmt_run(&out, "%s scalar %s model.layers.0.mlp.up_proj.qweight 0,0 2>&1", tmt_bin(), d);
    assert_int_not_equal(rc, 0);
    assert_non_null(out);
    assert_non_null(strstr(out, "g_idx[5]"));
    free(out);
    /* g_idx of the wrong length */
    bad = ql[0];
    bad.K = ql[0].K - 8;
    set[0] = bad;
    d = sub("bad_gidx_len");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json", k_cfg4);
    expect_open(d, TM_E_CORRUPT, "model.layers.0.mlp.up_proj.g_idx", "a g_idx is I32 [128]");
    set[0] = ql[0];
    /* group_size contradicting the scales */
    d = sub("bad_group");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": "
               "64}}");
    expect_open(d, TM_E_CORRUPT, "scales", "group_size 64");
    /* config says AWQ, tensors are GPTQ */
    d = sub("awq_says_config");
    write_quantized(d, set, GPTQ_V1, 0);
    tmt_write_text(d, "config.json", "{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}}");
    expect_open(d, TM_E_CORRUPT, "qweight", "AWQ packs 8 codes");
    /* bits = 3 by config, and 3-bit qzeros found from the shapes */
    d = sub("bits3");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 3, \"group_size\": 32}}");
    expect_open(d, TM_E_UNSUPPORTED, "3-bit", "qweight");
    bad = ql[0];
    bad.qz_c = (ql[0].N * 3 + 31) / 32; /* 48 columns: 5 words of 3-bit fields */
    bad.qzeros = calloc((size_t)(bad.G * bad.qz_c), 4);
    bad.qw_r = ql[0].K * 3 / 32;
    bad.qweight = calloc((size_t)(bad.qw_r * bad.qw_c), 4);
    set[0] = bad;
    d = sub("bits3_shapes");
    write_quantized(d, set, GPTQ_V1, 0);
    expect_open(d, TM_E_UNSUPPORTED, "3-bit", "model.layers.0.mlp.up_proj.qweight");
    free(bad.qzeros);
    free(bad.qweight);
    set[0] = ql[0];
    /* AWQ GEMV and GPTQ marlin checkpoints pack differently */
    d = sub("gemv");
    write_quantized(d, set, GPTQ_V1, 1);
    tmt_write_text(d, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4, \"version\": \"gemv\"}}");
    expect_open(d, TM_E_UNSUPPORTED, "gemv", "GEMM");
    tmt_write_text(d, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"gptq\", \"checkpoint_format\": \"marlin\"}}");
    expect_open(d, TM_E_UNSUPPORTED, "marlin", "checkpoint_format");
    free_all(ql);
}

/* ---- 16-bit ONNX QDQ codes (../shared) ---------------------------------------------------- */

/* DequantizeLinear with uint16 codes (opset 21 and com.microsoft): y = (x - zp) * scale from the
** initializers' raw bytes, through the view, the Scalar Inspector and qdiff. */
static void test_onnx_qdq16(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const models[] = {"constant_folding_dequantizelinear.qdq16.onnx",
                                         "constant_folding_dequantizelinear.qdq16_contrib.onnx"};
    for (int m = 0; m < 2; m++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/onnx/ort_testdata/transform/fusion/%s",
                 tmv_shared_dir(), models[m]);
        tm_file *f = tmt_open_ok(path);
        int64_t ti = tm_file_find(f, "conv_weight_quantized");
        assert_true(ti >= 0);
        const tm_tensor *t = tm_file_tensor(f, ti);
        assert_non_null(t->quant);
        assert_int_equal(t->dtype, TM_U16);
        assert_int_equal(t->quant->qmin, 0);
        assert_int_equal(t->quant->qmax, 65535);
        assert_int_equal(t->n_elems, 16 * 8 * 3 * 3);
        const tm_tensor *st = tm_file_tensor(f, t->quant->scale_tensor);
        const tm_tensor *zt = tm_file_tensor(f, t->quant->zero_point_tensor);
        assert_int_equal(st->dtype, TM_F32);
        assert_int_equal(zt->dtype, TM_U16);
        const uint8_t *codes, *sb, *zb;
        tm_err err;
        assert_int_equal(tm_tensor_data(f, ti, 0, t->n_bytes, (const void **)&codes, &err), TM_OK);
        assert_int_equal(tm_tensor_data(f, t->quant->scale_tensor, 0, 4, (const void **)&sb, &err), TM_OK);
        assert_int_equal(tm_tensor_data(f, t->quant->zero_point_tensor, 0, 2, (const void **)&zb, &err), TM_OK);
        float scale;
        memcpy(&scale, sb, 4);
        int32_t zp = zb[0] | zb[1] << 8;
        float *v = malloc((size_t)t->n_elems * sizeof(float));
        assert_int_equal(tm_tensor_read_f32(f, ti, 0, t->n_elems, v, &err), TM_OK);
        int distinct = 0;
        for (int64_t k = 0; k < t->n_elems; k++) {
            int32_t x = codes[2 * k] | codes[2 * k + 1] << 8;
            float want = (float)(x - zp) * scale;
            assert_int_equal(f32_bits(v[k]), f32_bits(want));
            distinct += k > 0 && x != (codes[2 * k - 2] | codes[2 * k - 1] << 8);
            if (k % 61 == 0) {
                tm_qelement e;
                assert_int_equal(tm_qelement_get(f, ti, k, &e, &err), TM_OK);
                assert_int_equal(e.code, x);
                assert_int_equal(e.stored, (uint64_t)x);
                assert_int_equal(e.stored_bits, 16);
                assert_int_equal(e.zero_point, zp);
                assert_true(e.value == (double)want);
            }
        }
        assert_true(distinct > 10);
        /* qdiff: a float source half an LSB-or-less away in a deterministic pattern */
        float *src = malloc((size_t)t->n_elems * sizeof(float));
        for (int64_t k = 0; k < t->n_elems; k++) src[k] = v[k] + scale * (((float)(k % 11) - 5.0f) / 11.0f);
        char dir[300];
        snprintf(dir, sizeof dir, "qdq16_src%d", m);
        ent e = {"conv_weight_quantized", TM_F32, 2, 16, 72, src, (size_t)t->n_elems * 4};
        write_st(sub(dir), &e, 1);
        tm_file *ref = tmt_open_ok(sub(dir));
        tm_qdiff_params qp;
        memset(&qp, 0, sizeof qp);
        tm_qdiff_result *res = NULL;
        assert_int_equal(tm_qdiff(ref, f, &qp, &res, &err), TM_OK);
        assert_int_equal(res->n, 1);
        /* errors (j-5)/11 LSB, j = k % 11: RMSE sqrt(110/1331) = 0.2875 LSB, max 5/11 */
        assert_true(fabs(res->entries[0].e.rmse_lsb - sqrt(110.0 / 1331.0)) < 0.005);
        assert_true(res->entries[0].e.max_err_lsb < 5.0 / 11.0 + 1e-3);
        assert_false(res->entries[0].flagged);
        tm_qdiff_free(res);
        tm_close(ref);
        free(src);
        free(v);
        tm_close(f);
    }
}

/* tm_ref_find (the one lookup qdiff, scalar --ref, heatmap --ref and the web UI share): the
** source of "P.qweight" is the float checkpoint's "P.weight"; an exact name wins. */
static void test_ref_find_qweight(void **state) {
    (void)state;
    tm_file *src = tmt_open_ok(sub("src"));
    char qn[160], wn[160];
    for (int l = 0; l < N_LIN; l++) {
        snprintf(qn, sizeof qn, "%s.qweight", k_names[l]);
        snprintf(wn, sizeof wn, "%s.weight", k_names[l]);
        int64_t wi = tm_file_find(src, wn);
        assert_true(wi >= 0);
        assert_int_equal(tm_ref_find(src, qn), wi);
        assert_int_equal(tm_ref_find(src, wn), wi);
        assert_int_equal(tm_file_tensor(src, wi)->n_elems, k_N[l] * k_K[l]);
    }
    /* not a ".qweight" suffix, or a Linear the source lacks */
    snprintf(qn, sizeof qn, "%sqweight", k_names[0]);
    assert_int_equal(tm_ref_find(src, qn), -1);
    assert_int_equal(tm_ref_find(src, "model.layers.9.mlp.up_proj.qweight"), -1);
    assert_int_equal(tm_ref_find(src, "qweight"), -1);
    assert_int_equal(tm_ref_find(src, "model.layers.0.mlp.up_proj.qzeros"), -1);
    tm_close(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_find_qweight),
        cmocka_unit_test(test_gptq_v1_act_order),
        cmocka_unit_test(test_gptq_v2),
        cmocka_unit_test(test_gptq_8bit_channel_no_config),
        cmocka_unit_test(test_gptq_2bit),
        cmocka_unit_test(test_gptq_v1_label_v2_zeros),
        cmocka_unit_test(test_awq_gemm),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_onnx_qdq16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
