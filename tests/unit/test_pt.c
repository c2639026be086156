/* test_pt.c: the PyTorch reader: the real checkpoints of ../shared/models/torch (PROVENANCE.md
** [D4] says how each was made; the expected values below are derived from that), pickles
** built here (layouts, byte order, malicious globals, malformed streams), and the CLI
** (inspect, scalar, qdiff) through the binary (env TM_BIN). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

#include "formats/file.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

static char g_dir[256];
static const char *g_bin;

/* ---- helpers ------------------------------------------------------------------------------ */

static tm_file *open_torch(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/models/torch/%s", tmv_shared_dir(), name);
    return tmt_open_ok(p);
}

static float *read_all(const tm_file *f, int64_t i) {
    const tm_tensor *t = tm_file_tensor(f, i);
    assert_non_null(t);
    float *v = malloc((size_t)(t->n_elems ? t->n_elems : 1) * sizeof(float));
    tm_err e;
    tm_status s = tm_tensor_read_f32(f, i, 0, t->n_elems, v, &e);
    if (s) fprintf(stderr, "read %s: %s\n", t->name, e.msg);
    assert_int_equal(s, TM_OK);
    return v;
}

static int64_t find(const tm_file *f, const char *name) {
    int64_t i = tm_file_find(f, name);
    if (i < 0) fprintf(stderr, "tensor '%s' not found\n", name);
    assert_true(i >= 0);
    return i;
}

static const char *meta(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (!strcmp(tm_file_meta_key(f, i), key)) return tm_file_meta_value(f, i);
    return NULL;
}

/* Raw stored byte/word/double of a tensor. */
static const uint8_t *raw(const tm_file *f, int64_t i) {
    const void *p;
    const tm_tensor *t = tm_file_tensor(f, i);
    assert_int_equal(tm_tensor_data(f, i, 0, t->n_bytes, &p, NULL), TM_OK);
    return p;
}

static double ld_f64(const uint8_t *p) { double d; memcpy(&d, p, 8); return d; }
static float ld_f32(const uint8_t *p) { float d; memcpy(&d, p, 4); return d; }
static int64_t ld_i64(const uint8_t *p) { int64_t d; memcpy(&d, p, 8); return d; }

/* ---- real checkpoints: float ------------------------------------------------------------- */

/* The flat state_dict: same names, shapes and bits as the F32 safetensors conversion of the same
** weights (PROVENANCE [D1] and [D4] both start from llama2c/stories260K.bin); the legacy stream
** holds the same; bf16 holds the round-to-nearest-even of each. */
static void test_state_dicts(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char p[1024];
    snprintf(p, sizeof p, "%s/models/safetensors/stories260K-f32/model.safetensors", tmv_shared_dir());
    tm_file *st = tmt_open_ok(p);
    tm_file *zp = open_torch("stories260K_state_dict.pt");
    tm_file *lg = open_torch("stories260K_state_dict_legacy.pt");
    tm_file *bf = open_torch("stories260K_bf16_state_dict.pt");
    assert_int_equal(tm_file_format(zp), TM_FMT_PT);
    assert_int_equal(tm_file_format(lg), TM_FMT_PT);
    assert_int_equal(tm_file_n_tensors(zp), 47);
    assert_int_equal(tm_file_n_tensors(lg), 47);
    assert_int_equal(tm_file_n_tensors(bf), 47);
    assert_int_equal(tm_file_n_paths(zp), 1);
    /* the model's dimensions: dim 64, hidden 172, 5 layers, 4 kv heads of 8, vocab 512 */
    const tm_tensor *t = tm_file_tensor(zp, find(zp, "model.embed_tokens.weight"));
    assert_int_equal(t->shape[0], 512);
    assert_int_equal(t->shape[1], 64);
    t = tm_file_tensor(zp, find(zp, "model.layers.4.mlp.down_proj.weight"));
    assert_int_equal(t->shape[0], 64);
    assert_int_equal(t->shape[1], 172);
    t = tm_file_tensor(zp, find(zp, "model.layers.0.self_attn.k_proj.weight"));
    assert_int_equal(t->shape[0], 32);
    assert_true(tm_file_find(zp, "model.layers.5.mlp.down_proj.weight") < 0);
    for (int64_t i = 0; i < 47; i++) {
        const tm_tensor *a = tm_file_tensor(zp, i);
        int64_t j = find(st, a->name), k = find(lg, a->name), b = find(bf, a->name);
        const tm_tensor *s = tm_file_tensor(st, j);
        assert_int_equal(a->dtype, TM_F32);
        assert_int_equal(tm_file_tensor(bf, b)->dtype, TM_BF16);
        assert_int_equal(a->ndim, s->ndim);
        assert_memory_equal(a->shape, s->shape, sizeof a->shape);
        assert_int_equal(a->fortran_order, 0);
        assert_int_equal(a->offset % 64, 0); /* torch aligns storages; used in place */
        float *x = read_all(zp, i), *y = read_all(st, j), *z = read_all(lg, k), *w = read_all(bf, b);
        assert_memory_equal(x, y, (size_t)a->n_elems * sizeof(float));
        assert_memory_equal(x, z, (size_t)a->n_elems * sizeof(float));
        for (int64_t e = 0; e < a->n_elems; e++) assert_true(w[e] == tm_bf16_to_f32(tm_f32_to_bf16(x[e])));
        free(x); free(y); free(z); free(w);
    }
    tm_close(st); tm_close(zp); tm_close(lg); tm_close(bf);
}

/* The llama2.c-style checkpoint: nested dict flattened, scalars as metadata, tied storage. */
static void test_llama2c_ckpt(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_torch("stories260K_llama2c_ckpt.pt");
    assert_int_equal(tm_file_n_tensors(f), 48);
    assert_string_equal(meta(f, "model_args.dim"), "64");
    assert_string_equal(meta(f, "model_args.hidden_dim"), "172");
    assert_string_equal(meta(f, "model_args.n_layers"), "5");
    assert_string_equal(meta(f, "model_args.vocab_size"), "512");
    assert_string_equal(meta(f, "model_args.norm_eps"), "1e-05");
    int64_t e = find(f, "model.tok_embeddings.weight"), o = find(f, "model.output.weight");
    const tm_tensor *te = tm_file_tensor(f, e), *to = tm_file_tensor(f, o);
    assert_int_equal(te->offset, to->offset); /* one storage, two names */
    assert_int_equal(te->shape[0], 512);
    const tm_tensor *w1 = tm_file_tensor(f, find(f, "model.layers.4.feed_forward.w1.weight"));
    assert_int_equal(w1->shape[0], 172);
    assert_int_equal(w1->shape[1], 64);
    /* same values as the HF-named state dict: wq = q_proj of layer 0 (llama2.c has no permute
    ** of the stored weights in this corpus: both come from the same .bin) */
    tm_file *sd = open_torch("stories260K_state_dict.pt");
    float *a = read_all(f, e), *b = read_all(sd, find(sd, "model.embed_tokens.weight"));
    assert_memory_equal(a, b, 512 * 64 * sizeof(float));
    free(a); free(b);
    a = read_all(f, find(f, "model.layers.2.feed_forward.w2.weight"));
    b = read_all(sd, find(sd, "model.layers.2.mlp.down_proj.weight"));
    assert_memory_equal(a, b, 64 * 172 * sizeof(float));
    free(a); free(b);
    tm_close(sd);
    tm_close(f);
}

/* ---- real checkpoints: quantized --------------------------------------------------------- */

/* Checks of one quantized weight against its float source w (same shape):
**  - every dequantized value lies within half a step of w (plain rounding, nothing clipped);
**  - the view's value is torch's dequantization of the stored code, computed here from the raw
**    bytes: per-tensor (float)(q - zp) * float(scale); per-channel (float)((double)(q - zp) * s);
**  - symmetric observers: scale = amax / 127.5 in float32 (per row for per-channel). */
static void check_qweight(const tm_file *f, int64_t qi, const float *w, int symmetric_obs) {
    const tm_tensor *t = tm_file_tensor(f, qi);
    const tm_qtensor *q = t->quant;
    assert_non_null(q);
    const uint8_t *codes = raw(f, qi);
    const uint8_t *sc = raw(f, q->scale_tensor), *zp = raw(f, q->zero_point_tensor);
    int per_channel = q->gran.kind == TM_GRAN_CHANNEL;
    if (per_channel) {
        assert_int_equal(q->gran.axis, 0);
        assert_int_equal(tm_file_tensor(f, q->scale_tensor)->dtype, TM_F64);
        assert_int_equal(tm_file_tensor(f, q->scale_tensor)->shape[0], t->shape[0]);
    } else {
        assert_int_equal(tm_file_tensor(f, q->scale_tensor)->dtype, TM_F32);
    }
    assert_int_equal(tm_file_tensor(f, q->scale_tensor)->owner, qi);
    assert_int_equal(tm_file_tensor(f, q->zero_point_tensor)->role, TM_ROLE_ZERO_POINT);
    float *v = read_all(f, qi);
    int64_t rows = t->shape[0], cols = t->n_elems / rows;
    for (int64_t r = 0; r < rows; r++) {
        int64_t g = per_channel ? r : 0;
        double s64 = per_channel ? ld_f64(sc + 8 * g) : (double)ld_f32(sc);
        int64_t z = ld_i64(zp + 8 * g);
        float amax = 0;
        for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(w[r * cols + c]));
        if (symmetric_obs && per_channel) assert_true(s64 == (double)(amax / 127.5f));
        if (symmetric_obs) assert_int_equal(z, 0);
        for (int64_t c = 0; c < cols; c++) {
            int64_t k = r * cols + c;
            int64_t code = t->dtype == TM_I8 ? (int8_t)codes[k] : codes[k];
            float want = per_channel ? (float)((double)(code - z) * s64) : (float)(code - z) * (float)s64;
            assert_true(v[k] == want);
            /* half a step, plus the float32 rounding of w * (1 / scale) before rounding to a
            ** code and of the dequantized product (a few ulp of the larger value) */
            double slack = 4 * FLT_EPSILON * fmax(fabs((double)w[k]), fabs((double)v[k]));
            if (!(fabs((double)v[k] - (double)w[k]) <= 0.5 * s64 + slack))
                fprintf(stderr, "%s[%lld]: w %.9g deq %.9g scale %.9g\n", t->name, (long long)k, w[k], v[k], s64);
            assert_true(fabs((double)v[k] - (double)w[k]) <= 0.5 * s64 + slack);
        }
    }
    /* the Scalar Inspector gives the same numbers */
    tm_qelement el;
    tm_err e;
    int64_t flat = t->n_elems - 1;
    assert_int_equal(tm_qelement_get(f, qi, flat, &el, &e), TM_OK);
    assert_true((float)el.value == v[flat]);
    assert_int_equal(el.group, per_channel ? rows - 1 : 0);
    free(v);
}

static void test_quantized_state_dicts(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *fl = open_torch("stories260K_state_dict.pt");
    tm_file *pc = open_torch("stories260K_qint8_per_channel.pt");
    tm_file *pt = open_torch("stories260K_quint8_per_tensor.pt");
    /* 36 quantized 2-D weights + their scales and zero points + 11 F32 norms */
    assert_int_equal(tm_file_n_tensors(pc), 36 * 3 + 11);
    assert_int_equal(tm_file_n_tensors(pt), 36 * 3 + 11);
    assert_int_equal(tm_file_n_paths(pt), 1); /* the in-memory parameters are not a file */
    int n_q = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(fl); i++) {
        const tm_tensor *ft = tm_file_tensor(fl, i);
        int64_t a = find(pc, ft->name), b = find(pt, ft->name);
        const tm_tensor *ta = tm_file_tensor(pc, a), *tb = tm_file_tensor(pt, b);
        assert_memory_equal(ta->shape, ft->shape, sizeof ft->shape);
        if (ft->ndim != 2) {
            assert_null(ta->quant);
            assert_int_equal(ta->dtype, TM_F32);
            continue;
        }
        n_q++;
        assert_int_equal(ta->dtype, TM_I8);
        assert_int_equal(tb->dtype, TM_U8);
        assert_string_equal(ta->quant->layout, "pytorch/per_channel_affine");
        assert_string_equal(tb->quant->layout, "pytorch/per_tensor_affine");
        float *w = read_all(fl, i);
        check_qweight(pc, a, w, 1);
        check_qweight(pt, b, w, 0);
        /* MinMaxObserver(per_tensor_affine, quint8): scale = (max(max,0) - min(min,0)) / 255 and
        ** zero_point = 0 - round(min_neg / scale), in float32 */
        float mn = 0, mx = 0;
        for (int64_t k = 0; k < ft->n_elems; k++) { mn = fminf(mn, w[k]); mx = fmaxf(mx, w[k]); }
        float scale = (mx - mn) / 255.0f;
        const tm_qtensor *q = tb->quant;
        assert_true(ld_f32(raw(pt, q->scale_tensor)) == scale);
        assert_int_equal(ld_i64(raw(pt, q->zero_point_tensor)), (int64_t)(0 - nearbyintf(mn / scale)));
        free(w);
    }
    assert_int_equal(n_q, 36);
    tm_close(fl); tm_close(pc); tm_close(pt);
}

/* Quantized Linear modules: packed params shown as <module>.weight, compared with the float
** layer-0 gate_proj / down_proj they were made from. */
static void test_quantized_mlps(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *fl = open_torch("stories260K_state_dict.pt");
    float *gate = read_all(fl, find(fl, "model.layers.0.mlp.gate_proj.weight"));
    float *down = read_all(fl, find(fl, "model.layers.0.mlp.down_proj.weight"));
    tm_file *dy = open_torch("mlp_dynamic_qint8.pt");
    assert_int_equal(tm_file_n_tensors(dy), 10);
    assert_true(tm_file_find(dy, "0.bias") < 0); /* (weight, None) */
    assert_string_equal(meta(dy, "0._packed_params.dtype"), "torch.qint8");
    int64_t w0 = find(dy, "0.weight"), w2 = find(dy, "2.weight");
    assert_int_equal(tm_file_tensor(dy, w0)->shape[0], 172);
    assert_int_equal(tm_file_tensor(dy, w2)->shape[1], 172);
    assert_int_equal(tm_file_tensor(dy, w0)->quant->gran.kind, TM_GRAN_TENSOR);
    check_qweight(dy, w0, gate, 1);
    check_qweight(dy, w2, down, 1);
    /* the dynamic default weight observer is symmetric: scale = amax / 127.5 over the tensor */
    float amax = 0;
    for (int k = 0; k < 172 * 64; k++) amax = fmaxf(amax, fabsf(gate[k]));
    assert_true(ld_f32(raw(dy, tm_file_tensor(dy, w0)->quant->scale_tensor)) == amax / 127.5f);
    tm_file *sq = open_torch("mlp_static_qint8.pt");
    int64_t s0 = find(sq, "inner.0.weight"), s2 = find(sq, "inner.2.weight");
    assert_int_equal(tm_file_tensor(sq, s0)->quant->gran.kind, TM_GRAN_CHANNEL);
    check_qweight(sq, s0, gate, 1);
    check_qweight(sq, s2, down, 1);
    /* activation qparams saved as plain tensors */
    const tm_tensor *qs = tm_file_tensor(sq, find(sq, "quant.scale"));
    assert_int_equal(qs->dtype, TM_F32);
    float *v = read_all(sq, find(sq, "quant.scale"));
    assert_true(v[0] > 0 && v[0] < 1);
    free(v);
    free(gate); free(down);
    tm_close(dy); tm_close(sq); tm_close(fl);
}

/* ---- pickles built here -------------------------------------------------------------------- */

typedef struct buf { uint8_t b[8192]; size_t n; } buf;

static void put(buf *p, const void *d, size_t n) { assert_true(p->n + n <= sizeof p->b); memcpy(p->b + p->n, d, n); p->n += n; }
static void op(buf *p, int c) { uint8_t x = (uint8_t)c; put(p, &x, 1); }
static void pstr(buf *p, const char *s) {
    uint32_t l = (uint32_t)strlen(s);
    op(p, 'X'); put(p, &l, 4); put(p, s, l);
}
static void pint(buf *p, int v) { op(p, 'J'); int32_t x = v; put(p, &x, 4); }
static void pglobal(buf *p, const char *m, const char *n) {
    op(p, 'c'); put(p, m, strlen(m)); op(p, '\n'); put(p, n, strlen(n)); op(p, '\n');
}
static void ptuple(buf *p, const int *v, int n) { op(p, '('); for (int i = 0; i < n; i++) pint(p, v[i]); op(p, 't'); }

/* name: _rebuild_tensor_v2(storage(key, type, numel), offset, size, stride, False, OrderedDict()) */
static void ptensor_value(buf *p, const char *stype, const char *key, int numel, int off,
                          const int *size, const int *stride, int nd) {
    pglobal(p, "torch._utils", "_rebuild_tensor_v2");
    op(p, '(');
    op(p, '('); pstr(p, "storage"); pglobal(p, "torch", stype); pstr(p, key); pstr(p, "cpu"); pint(p, numel); op(p, 't');
    op(p, 'Q');
    pint(p, off);
    ptuple(p, size, nd);
    ptuple(p, stride, nd);
    op(p, 0x89);
    pglobal(p, "collections", "OrderedDict"); op(p, ')'); op(p, 'R');
    op(p, 't');
    op(p, 'R');
}

static void ptensor(buf *p, const char *name, const char *stype, const char *key, int numel, int off,
                    const int *size, const int *stride, int nd) {
    pstr(p, name);
    ptensor_value(p, stype, key, numel, off, size, stride, nd);
}

/* Write a zip checkpoint "<dir>/<name>" holding ck/data.pkl and the given members. */
static void write_ckpt(const char *name, const buf *pkl, const char **mnames, const void **mdata,
                       const size_t *msize, int nm) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    unlink(p);
    int ze;
    zip_t *z = zip_open(p, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(z);
    zip_int64_t i = zip_file_add(z, "ck/data.pkl", zip_source_buffer(z, pkl->b, pkl->n, 0), 0);
    assert_true(i >= 0);
    zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    for (int k = 0; k < nm; k++) {
        i = zip_file_add(z, mnames[k], zip_source_buffer(z, mdata[k], msize[k], 0), 0);
        assert_true(i >= 0);
        zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    assert_int_equal(zip_close(z), 0);
}

static tm_status open_gen(const char *name, tm_file **f, tm_err *e) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    *f = NULL;
    return tm_open(p, NULL, f, e);
}

/* A generated file that must open. */
static tm_file *open_gen_ok(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return tmt_open_ok(p);
}

/* Layouts: a column-major (transposed) tensor, a slice at a storage offset, a 0-d tensor,
** a list of tensors, big-endian storages. */
static void test_generated_layouts(void **state) {
    (void)state;
    for (int big = 0; big < 2; big++) {
        buf p = {{0}, 0};
        op(&p, 0x80); op(&p, 2); op(&p, '}'); op(&p, '(');
        int sz[2] = {2, 3}, fst[2] = {1, 2}, csz[1] = {2}, cst[1] = {1};
        ptensor(&p, "t.weight", "FloatStorage", "0", 6, 0, sz, fst, 2);  /* column-major */
        ptensor(&p, "slice", "FloatStorage", "0", 6, 4, csz, cst, 1);    /* elements 4, 5 */
        ptensor(&p, "scalar", "ShortStorage", "1", 1, 0, NULL, NULL, 0);
        /* "list": [Parameter(storage 0 elements [0, 2)), Parameter(elements [2, 4))] */
        pstr(&p, "list"); op(&p, ']'); op(&p, '(');
        for (int k = 0; k < 2; k++) {
            pglobal(&p, "torch._utils", "_rebuild_parameter");
            op(&p, '(');
            ptensor_value(&p, "FloatStorage", "0", 6, 2 * k, csz, cst, 1);
            op(&p, 0x89);
            pglobal(&p, "collections", "OrderedDict"); op(&p, ')'); op(&p, 'R');
            op(&p, 't'); op(&p, 'R');
        }
        op(&p, 'e');
        op(&p, 'u'); op(&p, '.');
        /* storage 0: logical [[1,2,3],[4,5,6]] stored column-major: 1 4 2 5 3 6 */
        float s0[6] = {1, 4, 2, 5, 3, 6};
        uint8_t s0b[24], s1b[2];
        for (int k = 0; k < 6; k++)
            for (int b = 0; b < 4; b++) {
                uint32_t w;
                memcpy(&w, &s0[k], 4);
                s0b[4 * k + b] = (uint8_t)(w >> (8 * (big ? 3 - b : b)));
            }
        int16_t sv = -1234;
        s1b[0] = (uint8_t)((uint16_t)sv >> (big ? 8 : 0));
        s1b[1] = (uint8_t)((uint16_t)sv >> (big ? 0 : 8));
        const char *names[3] = {"ck/data/0", "ck/data/1", "ck/byteorder"};
        const void *data[3] = {s0b, s1b, big ? "big" : "little"};
        size_t sizes[3] = {24, 2, big ? 3u : 6u};
        write_ckpt("lay.pt", &p, names, data, sizes, 3);
        tm_file *f = open_gen_ok("lay.pt");
        const tm_tensor *t = tm_file_tensor(f, find(f, "t.weight"));
        assert_int_equal(t->fortran_order, 1);
        assert_int_equal(t->big_endian, big);
        float *v = read_all(f, find(f, "t.weight"));
        for (int k = 0; k < 6; k++) assert_true(v[k] == (float)(k + 1));
        free(v);
        v = read_all(f, find(f, "slice"));
        assert_true(v[0] == 3.0f && v[1] == 6.0f);
        free(v);
        v = read_all(f, find(f, "scalar"));
        assert_true(v[0] == -1234.0f);
        free(v);
        assert_int_equal(tm_file_tensor(f, find(f, "scalar"))->ndim, 0);
        /* storage 0 holds 1 4 2 5 3 6 (as stored, whatever the byte order) */
        v = read_all(f, find(f, "list.1"));
        assert_true(v[0] == 2.0f && v[1] == 5.0f);
        free(v);
        assert_int_equal(tm_file_n_tensors(f), 5);
        tm_close(f);
    }
}

/* Quantized tensors built here: qint32 per-tensor (whole-word codes), quint8 per-channel along
** axis 1 with nonzero zero points. */
static void pstorage(buf *p, const char *stype, const char *key, int numel) {
    op(p, '('); pstr(p, "storage"); pglobal(p, "torch", stype); pstr(p, key); pstr(p, "cpu"); pint(p, numel); op(p, 't');
    op(p, 'Q');
}

static void test_generated_quantized(void **state) {
    (void)state;
    buf p = {{0}, 0};
    int s3[1] = {3}, st1[1] = {1}, s22[2] = {2, 2}, st21[2] = {2, 1}, s2[1] = {2};
    op(&p, 0x80); op(&p, 2); op(&p, '}'); op(&p, '(');
    pstr(&p, "q32");
    pglobal(&p, "torch._utils", "_rebuild_qtensor");
    op(&p, '('); pstorage(&p, "QInt32Storage", "0", 3); pint(&p, 0); ptuple(&p, s3, 1); ptuple(&p, st1, 1);
    op(&p, '('); pglobal(&p, "torch", "per_tensor_affine");
    op(&p, 'G'); { uint8_t d[8] = {0x3f, 0xe0, 0, 0, 0, 0, 0, 0}; put(&p, d, 8); } /* 0.5 */
    pint(&p, -2); op(&p, 't');
    op(&p, 0x89); pglobal(&p, "collections", "OrderedDict"); op(&p, ')'); op(&p, 'R'); op(&p, 't'); op(&p, 'R');
    pstr(&p, "qc");
    pglobal(&p, "torch._utils", "_rebuild_qtensor");
    op(&p, '('); pstorage(&p, "QUInt8Storage", "1", 4); pint(&p, 0); ptuple(&p, s22, 2); ptuple(&p, st21, 2);
    op(&p, '('); pglobal(&p, "torch", "per_channel_affine");
    ptensor_value(&p, "DoubleStorage", "2", 2, 0, s2, st1, 1);
    ptensor_value(&p, "LongStorage", "3", 2, 0, s2, st1, 1);
    pint(&p, 1); op(&p, 't');
    op(&p, 0x89); pglobal(&p, "collections", "OrderedDict"); op(&p, ')'); op(&p, 'R'); op(&p, 't'); op(&p, 'R');
    op(&p, 'u'); op(&p, '.');
    int32_t c32[3] = {5, -7, 100000};
    uint8_t c8[4] = {1, 2, 3, 4};
    double sc[2] = {0.5, 0.25};
    int64_t zp[2] = {1, 2};
    const char *names[4] = {"ck/data/0", "ck/data/1", "ck/data/2", "ck/data/3"};
    const void *data[4] = {c32, c8, sc, zp};
    size_t sizes[4] = {12, 4, 16, 16};
    write_ckpt("q.pt", &p, names, data, sizes, 4);
    tm_file *f = open_gen_ok("q.pt");
    int64_t a = find(f, "q32"), b = find(f, "qc");
    assert_int_equal(tm_file_tensor(f, a)->dtype, TM_I32);
    assert_int_equal(tm_file_tensor(f, a)->quant->gran.kind, TM_GRAN_TENSOR);
    assert_int_equal(tm_file_tensor(f, b)->quant->gran.axis, 1);
    assert_int_equal(tm_file_tensor(f, find(f, "q32.q_zero_point"))->owner, a);
    float *v = read_all(f, a);
    assert_true(v[0] == 3.5f && v[1] == -2.5f && v[2] == 50001.0f);
    free(v);
    v = read_all(f, b);
    assert_true(v[0] == 0.0f && v[1] == 0.0f && v[2] == 1.0f && v[3] == 0.5f);
    free(v);
    tm_qelement el;
    tm_err e;
    assert_int_equal(tm_qelement_get(f, a, 1, &el, &e), TM_OK);
    assert_int_equal(el.code, -7);
    assert_int_equal(el.zero_point, -2);
    assert_true(el.scale == 0.5);
    assert_int_equal(tm_qelement_get(f, b, 3, &el, &e), TM_OK);
    assert_int_equal(el.group, 1);
    assert_int_equal(el.zero_point, 2);
    assert_true(el.scale == 0.25);
    tm_close(f);
}

/* Pickles that ask for code: refused, naming the global; nothing runs (the command would have
** created a file). Zip and legacy streams, GLOBAL and STACK_GLOBAL. */
static void test_malicious_pickles(void **state) {
    (void)state;
    char marker[400];
    snprintf(marker, sizeof marker, "%s/pwned", g_dir);
    char cmdline[512];
    snprintf(cmdline, sizeof cmdline, "touch %s", marker);
    static const struct { const char *mod, *name, *named; int stack; } cases[] = {
        {"os", "system", "os.system", 0},       {"posix", "system", "posix.system", 0},
        {"builtins", "eval", "builtins.eval", 0}, {"builtins", "eval", "builtins.eval", 1},
        {"subprocess", "call", "subprocess.call", 1}, {"torch", "load", "torch.load", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        buf p = {{0}, 0};
        op(&p, 0x80); op(&p, 4); op(&p, '}'); op(&p, '(');
        pstr(&p, "model.weight");
        if (cases[c].stack) {
            op(&p, 0x8c); op(&p, (int)strlen(cases[c].mod)); put(&p, cases[c].mod, strlen(cases[c].mod));
            op(&p, 0x8c); op(&p, (int)strlen(cases[c].name)); put(&p, cases[c].name, strlen(cases[c].name));
            op(&p, 0x93);
        } else {
            pglobal(&p, cases[c].mod, cases[c].name);
        }
        op(&p, '('); pstr(&p, cmdline); op(&p, 't'); op(&p, 'R');
        op(&p, 'u'); op(&p, '.');
        write_ckpt("evil.pt", &p, NULL, NULL, NULL, 0);
        tm_file *f;
        tm_err e;
        assert_int_equal(open_gen("evil.pt", &f, &e), TM_E_UNSUPPORTED);
        assert_null(f);
        char want[128];
        snprintf(want, sizeof want, "global '%s' is not in the allow-list", cases[c].named);
        if (!strstr(e.msg, want)) fprintf(stderr, "%s\n", e.msg);
        assert_non_null(strstr(e.msg, want));
        assert_non_null(strstr(e.msg, "evil.pt:ck/data.pkl"));
        /* the same object as a legacy stream */
        buf l = {{0}, 0};
        static const uint8_t magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                        0x20, 0x6a, 0xa8, 0x50, 0x19, '.'};
        put(&l, magic, sizeof magic);
        op(&l, 0x80); op(&l, 2); op(&l, 'M'); op(&l, 0xe9); op(&l, 0x03); op(&l, '.');
        op(&l, 0x80); op(&l, 2); op(&l, '}'); op(&l, '.');
        put(&l, p.b, p.n);
        char lp[512];
        snprintf(lp, sizeof lp, "%s/evil_legacy.pt", g_dir);
        FILE *fp = fopen(lp, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(l.b, 1, l.n, fp), l.n);
        fclose(fp);
        assert_int_equal(open_gen("evil_legacy.pt", &f, &e), TM_E_UNSUPPORTED);
        assert_non_null(strstr(e.msg, want));
        assert_int_equal(access(marker, F_OK), -1);
    }
    /* through the CLI: exit 3, the global named on stderr */
    char cmd[1024], out[1024] = {0};
    snprintf(cmd, sizeof cmd, "%s inspect %s/evil.pt 2>&1 >/dev/null", g_bin, g_dir);
    FILE *pp = popen(cmd, "r");
    assert_non_null(pp);
    size_t n = fread(out, 1, sizeof out - 1, pp);
    int st = pclose(pp);
    out[n] = 0;
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_non_null(strstr(out, "torch.load"));
    assert_int_equal(access(marker, F_OK), -1);
}

/* Malformed streams and archives: each a clear error. */
static void test_bad_pickles(void **state) {
    (void)state;
    int sz4[1] = {4}, st1[1] = {1}, sz23[2] = {2, 3}, stx[2] = {1, 1};
    float data[2] = {1, 2};
    const char *mn[1] = {"ck/data/0"};
    const void *md[1] = {data};
    size_t ms[1] = {8};
    struct { const char *what; tm_status code; const char *needle; } cases[] = {
        {"beyond", TM_E_CORRUPT, "outside its storage"},
        {"missing", TM_E_CORRUPT, "missing from the archive"},
        {"short", TM_E_CORRUPT, "holds 8 bytes"},
        {"strides", TM_E_UNSUPPORTED, "neither row- nor column-major"},
        {"opcode", TM_E_UNSUPPORTED, "opcode 0x69"},
        {"memo", TM_E_CORRUPT, "memo slot 7 read before it was written"},
        {"nostop", TM_E_CORRUPT, "without STOP"},
        {"underflow", TM_E_CORRUPT, "underflow"},
        {"qplain", TM_E_CORRUPT, "quantized storage rebuilt as a plain tensor"},
        /* APPENDS and SETITEMS: the container below the MARK, its kind, SETITEMS' pairs */
        {"appends_nolist", TM_E_CORRUPT, "APPENDS without a list below its MARK"},
        {"appends_dict", TM_E_UNSUPPORTED, "APPENDS to something that is not a list"},
        {"setitems_nodict", TM_E_CORRUPT, "SETITEMS without a dict below its MARK"},
        {"setitems_list", TM_E_UNSUPPORTED, "SETITEMS on something that is not a dict"},
        {"setitems_odd", TM_E_CORRUPT, "SETITEMS of an odd number of items"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        buf p = {{0}, 0};
        op(&p, 0x80); op(&p, 2); op(&p, '}'); op(&p, '(');
        const char *w = cases[c].what;
        if (!strcmp(w, "beyond")) ptensor(&p, "a", "FloatStorage", "0", 2, 0, sz4, st1, 1);
        else if (!strcmp(w, "missing")) ptensor(&p, "a", "FloatStorage", "9", 2, 0, st1, st1, 1);
        else if (!strcmp(w, "short")) ptensor(&p, "a", "FloatStorage", "0", 4, 0, st1, st1, 1);
        else if (!strcmp(w, "strides")) ptensor(&p, "a", "FloatStorage", "0", 2, 0, sz23, stx, 2);
        else if (!strcmp(w, "opcode")) { pstr(&p, "a"); op(&p, 'i'); }
        else if (!strcmp(w, "memo")) { pstr(&p, "a"); op(&p, 'h'); op(&p, 7); }
        else if (!strcmp(w, "underflow")) { op(&p, 's'); }
        else if (!strcmp(w, "qplain")) ptensor(&p, "a", "QInt8Storage", "0", 2, 0, st1, st1, 1);
        else if (!strcmp(w, "appends_nolist")) { op(&p, '('); op(&p, 'e'); }
        else if (!strcmp(w, "appends_dict")) { op(&p, 'e'); }
        else if (!strcmp(w, "setitems_nodict")) { op(&p, '('); }
        else if (!strcmp(w, "setitems_list")) { op(&p, ']'); op(&p, '('); }
        else if (!strcmp(w, "setitems_odd")) { pstr(&p, "a"); }
        if (strcmp(w, "nostop") != 0) { op(&p, 'u'); op(&p, '.'); }
        write_ckpt("bad.pt", &p, mn, md, ms, 1);
        tm_file *f;
        tm_err e;
        tm_status s = open_gen("bad.pt", &f, &e);
        if (s != cases[c].code || !strstr(e.msg, cases[c].needle)) fprintf(stderr, "%s: %d %s\n", w, s, e.msg);
        assert_int_equal(s, cases[c].code);
        assert_non_null(strstr(e.msg, cases[c].needle));
        assert_non_null(strstr(e.msg, "bad.pt"));
        assert_true(e.file_offset >= 0 || cases[c].code == TM_E_NOMEM);
        /* the buffer entry point gives the same */
        char path[512];
        snprintf(path, sizeof path, "%s/bad.pt", g_dir);
        FILE *fp = fopen(path, "rb");
        uint8_t img[16384];
        size_t n = fread(img, 1, sizeof img, fp);
        fclose(fp);
        tm_open_params bp = tm_open_params_default();
        bp.format = TM_FMT_PT; /* the PyTorch reader asked for, zip or legacy */
        assert_int_equal(tm_open_buffer(img, n, "bad.pt", &bp, &f, &e), cases[c].code);
    }
}

/* The CRC-32 of stored members: a flipped byte in a tensor's storage member opens (opening
** reads no tensor data) but fails with TM_E_CORRUPT naming the file, the member and both CRCs
** when that tensor's data is read, exit 3 from the CLI; the other storage still reads; a
** flipped byte in data.pkl fails the open. */
static void flip_byte(const char *name, const void *pat, size_t pn, size_t at) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *fp = fopen(p, "r+b");
    assert_non_null(fp);
    static uint8_t img[1 << 16];
    size_t n = fread(img, 1, sizeof img, fp);
    size_t k = 0;
    while (k + pn <= n && memcmp(img + k, pat, pn)) k++;
    assert_true(k + pn <= n);                      /* the pattern is in the file */
    img[k + at] ^= 0x10;
    assert_int_equal(fseek(fp, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(img, 1, n, fp), n);
    fclose(fp);
}

static void write_crc_ckpt(const char *name) {
    buf p = {{0}, 0};
    op(&p, 0x80); op(&p, 2); op(&p, '}'); op(&p, '(');
    int sz[1] = {4}, st[1] = {1};
    ptensor(&p, "w", "FloatStorage", "0", 4, 0, sz, st, 1);
    ptensor(&p, "b", "FloatStorage", "1", 4, 0, sz, st, 1);
    op(&p, 'u'); op(&p, '.');
    static const float w[4] = {1.5f, -2.25f, 3.125f, 4.0625f}, b[4] = {10.5f, 20.25f, 30.125f, 40.0625f};
    const char *names[3] = {"ck/data/0", "ck/data/1", "ck/byteorder"};
    const void *data[3] = {w, b, "little"};
    size_t sizes[3] = {16, 16, 6};
    write_ckpt(name, &p, names, data, sizes, 3);
}

static void test_member_crc(void **state) {
    (void)state;
    write_crc_ckpt("crc.pt");
    tm_file *f = open_gen_ok("crc.pt");
    float *v = read_all(f, find(f, "w"));
    assert_true(v[1] == -2.25f);
    free(v);
    tm_close(f);
    static const float w0[2] = {1.5f, -2.25f};
    flip_byte("crc.pt", w0, sizeof w0, 5);
    tm_err e;
    assert_int_equal(open_gen("crc.pt", &f, &e), TM_OK); /* no tensor data read yet */
    v = read_all(f, find(f, "b"));                          /* storage 1 is intact */
    assert_true(v[3] == 40.0625f);
    free(v);
    float out[4];
    int64_t wi = find(f, "w");
    for (int k = 0; k < 2; k++) { /* checked once, the failure remembered */
        assert_int_equal(tm_tensor_read_f32(f, wi, 0, 4, out, &e), TM_E_CORRUPT);
        assert_non_null(strstr(e.msg, "crc.pt"));
        assert_non_null(strstr(e.msg, "member 'ck/data/0'"));
        assert_non_null(strstr(e.msg, "CRC-32"));
        assert_non_null(strstr(e.msg, "0x"));
    }
    const void *raw_p;
    assert_int_equal(tm_tensor_data(f, wi, 0, 4, &raw_p, &e), TM_E_CORRUPT);
    tm_close(f);
    /* the CLI: inspect lists it (exit 0), reading the tensor is exit 3 naming the member */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s inspect %s/crc.pt -q >/dev/null 2>&1", g_bin, g_dir), 0);
    free(o);
    o = NULL;
    assert_int_equal(tmt_run(&o, "%s scalar %s/crc.pt w 1 2>&1", g_bin, g_dir), 3);
    assert_non_null(o);
    assert_non_null(strstr(o, "ck/data/0"));
    free(o);
    o = NULL;
    assert_int_equal(tmt_run(&o, "%s scalar %s/crc.pt b 1 2>&1", g_bin, g_dir), 0);
    free(o);
    /* quantize reads source tensors with pread, not through tm_tensor_data: checked the same */
    buf q = {{0}, 0};
    op(&q, 0x80); op(&q, 2); op(&q, '}'); op(&q, '(');
    int qsz[2] = {4, 8}, qst[2] = {8, 1};
    ptensor(&q, "lin.weight", "FloatStorage", "0", 32, 0, qsz, qst, 2);
    op(&q, 'u'); op(&q, '.');
    float lw[32];
    for (int k = 0; k < 32; k++) lw[k] = 0.125f * (float)(k % 7) - 0.3f + (float)k;
    const char *qn[2] = {"ck/data/0", "ck/byteorder"};
    const void *qd[2] = {lw, "little"};
    size_t qs[2] = {sizeof lw, 6};
    write_ckpt("crcq.pt", &q, qn, qd, qs, 2);
    assert_int_equal(tmt_run(NULL, "%s quantize %s/crcq.pt -o %s/crcq-ok -q --no-checksums 2>&1", g_bin, g_dir, g_dir), 0);
    flip_byte("crcq.pt", lw + 8, 8, 2);
    o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s/crcq.pt -o %s/crcq-bad -q --no-checksums --threads 2 2>&1", g_bin, g_dir, g_dir), 3);
    assert_non_null(o);
    assert_non_null(strstr(o, "member 'ck/data/0'"));
    free(o);
    /* data.pkl damaged: the open fails */
    write_crc_ckpt("crc2.pt");
    flip_byte("crc2.pt", "FloatStorage", 12, 3);
    assert_int_equal(open_gen("crc2.pt", &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "data.pkl"));
    assert_non_null(strstr(e.msg, "CRC-32"));
}

/* ---- the CLI -------------------------------------------------------------------------------- */

/* Run, expect exit 0, parse stdout as a JSON object (the test fails otherwise; a failed popen
** is exit -1). */
static json_t *cli_object(json_t *d) {
    assert_true(json_is_object(d));
    return d;
}
#define run_json(...) cli_object(tmt_run_json(0, __VA_ARGS__))

static void test_cli(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *sh = tmv_shared_dir();
    /* inspect: every tensor with its dtype and shape */
    json_t *d = run_json("%s inspect %s/models/torch/stories260K_qint8_per_channel.pt --json", g_bin, sh);
    assert_string_equal(json_string_value(json_object_get(d, "format")), "pytorch");
    assert_int_equal(json_integer_value(json_object_get(d, "n_tensors")), 119);
    assert_int_equal(json_integer_value(json_object_get(d, "n_quantized")), 36);
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")), 260032);
    size_t i;
    json_t *t;
    int seen = 0;
    json_array_foreach(json_object_get(d, "tensors"), i, t) {
        const char *nm = json_string_value(json_object_get(t, "name"));
        if (!strcmp(nm, "model.layers.3.mlp.gate_proj.weight")) {
            assert_string_equal(json_string_value(json_object_get(t, "dtype")), "I8");
            json_t *shp = json_object_get(t, "shape");
            assert_int_equal(json_integer_value(json_array_get(shp, 0)), 172);
            assert_int_equal(json_integer_value(json_array_get(shp, 1)), 64);
            seen++;
        }
        if (!strcmp(nm, "model.layers.3.mlp.gate_proj.weight.q_per_channel_scales")) {
            assert_string_equal(json_string_value(json_object_get(t, "role")), "scale");
            assert_string_equal(json_string_value(json_object_get(t, "dtype")), "F64");
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    json_decref(d);
    /* qdiff float .pt vs qint8 .pt: 36 tensors, plain rounding */
    d = run_json("%s qdiff %s/models/torch/stories260K_state_dict.pt %s/models/torch/stories260K_qint8_per_channel.pt --json",
                 g_bin, sh, sh);
    json_t *ts = json_object_get(d, "tensors");
    assert_int_equal(json_array_size(ts), 36);
    assert_int_equal(json_integer_value(json_object_get(d, "n_flagged")), 0);
    json_array_foreach(ts, i, t) {
        double mx = json_number_value(json_object_get(t, "max_err_lsb"));
        double rl = json_number_value(json_object_get(t, "rmse_lsb"));
        assert_true(mx <= 0.5 + 1e-4);
        assert_true(rl > 0.25 && rl < 0.33);
        assert_true(json_number_value(json_object_get(t, "clipped_fraction")) == 0);
    }
    json_decref(d);
    /* scalar on a per-tensor quint8 weight, against the float reference */
    d = run_json("%s scalar %s/models/torch/stories260K_quint8_per_tensor.pt model.layers.1.mlp.up_proj.weight 5,7 "
                 "--ref %s/models/torch/stories260K_state_dict.pt --json", g_bin, sh, sh);
    double scale = json_number_value(json_object_get(d, "scale"));
    double code = (double)json_integer_value(json_object_get(d, "code"));
    double zp = (double)json_integer_value(json_object_get(d, "zero_point"));
    double value = json_number_value(json_object_get(d, "value"));
    double ref = json_number_value(json_object_get(d, "ref_value"));
    assert_true(code >= 0 && code <= 255);
    assert_true((float)value == (float)(code - zp) * (float)scale);
    assert_true(fabs(value - ref) <= 0.5 * scale * (1 + 1e-5));
    json_decref(d);
    /* quantizing an already-quantized .pt: unsupported input, exit 3 (the same code GGUF, ONNX
    ** and safetensors inputs get), with an {"error"} document on stdout under --json */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s quantize %s/models/torch/stories260K_qint8_per_channel.pt -o %s/rq --json 2>/dev/null",
             g_bin, sh, g_dir);
    FILE *pp = popen(cmd, "r");
    assert_non_null(pp);
    json_error_t je;
    d = json_loadf(pp, 0, &je);
    int st = pclose(pp);
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_non_null(d);
    json_t *e = json_object_get(d, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), 3);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "already quantized"));
    json_decref(d);
}

static int setup(void **state) {
    (void)state;
    g_bin = getenv("TM_BIN");
    if (!g_bin) g_bin = "./tensormorph";
    return tmt_tmpdir_make(g_dir, sizeof g_dir, "pt");
}

static int teardown(void **state) { (void)state; return tmt_tmpdir_remove(g_dir); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_dicts),        cmocka_unit_test(test_llama2c_ckpt),
        cmocka_unit_test(test_quantized_state_dicts), cmocka_unit_test(test_quantized_mlps),
        cmocka_unit_test(test_generated_layouts),  cmocka_unit_test(test_generated_quantized),
        cmocka_unit_test(test_malicious_pickles),
        cmocka_unit_test(test_bad_pickles),        cmocka_unit_test(test_member_crc),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
