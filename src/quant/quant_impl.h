/*
** quant_impl.h: private declarations shared by the files of src/quant/ (granularity geometry,
** the run kernels' types, histogram observer states). Not installed; nothing outside src/quant/
** includes it.
*/
#ifndef TM_QUANT_IMPL_H
#define TM_QUANT_IMPL_H

#include "core/core.h"

/* ---------------------------------------------------------------------------------------- */
/* Granularity geometry (qgran.c)                                                           */
/* ---------------------------------------------------------------------------------------- */

/* A validated granularity over one shape, with the products precomputed so that the param
** of an element and the run of following elements sharing it cost a few divisions. */
struct tm__ggeom {
    tm_granularity kind;
    int64_t n_elems;   /* product of the shape                                        */
    int64_t n_params;
    int64_t inner;     /* CHANNEL/GROUP: product of the dims after axis                */
    int64_t dim;       /* CHANNEL/GROUP: shape[axis]                                   */
    int64_t group;     /* GROUP: group_size                                            */
    int64_t n_groups;  /* GROUP: ceil(dim / group)                                     */
    int64_t rows, cols;/* BLOCK: the last two dims                                     */
    int64_t bh, bw;    /* BLOCK: block size                                            */
    int64_t nbh, nbw;  /* BLOCK: blocks per column / row                               */
};

tm_status tm__ggeom_init(struct tm__ggeom *g, const tm_qgran *q, int ndim, const int64_t *shape,
                         tm_err *err);
/* Param index of flat element f; *run (may be NULL) gets how many elements f, f+1, ... share it
** (at least 1, at most n_elems - f). */
int64_t tm__ggeom_param(const struct tm__ggeom *g, int64_t f, int64_t *run);

/* ---------------------------------------------------------------------------------------- */
/* Run kernels (quantize.c, quant_avx2.c; their table: kernels.h)                          */
/* ---------------------------------------------------------------------------------------- */

/* One run of elements sharing one scale and zero point, integer codes. */
struct tm__qseg {
    float   scale;     /* s                                                              */
    float   inv_scale; /* 1.0f / s (TORCH)                                               */
    int     use_mul;   /* 1: v = x * inv_scale (TORCH); 0: v = x / scale (ONNX)          */
    int32_t zp;
    float   lo, hi;    /* qmin - zp, qmax - zp: the clamp of round(v), exact in float32   */
    int     code_signed; /* dequantize: codes are int8_t bits (I8, I4)                   */
};

typedef void (*tm__quant_int_fn)(const float *x, int64_t n, const struct tm__qseg *seg,
                                 uint8_t *codes);
typedef void (*tm__dequant_int_fn)(const uint8_t *codes, int64_t n, const struct tm__qseg *seg,
                                   float *out);

/* quant_int then dequant_int of the same run in one pass: codes[n] and out[n] (may be NULL in a
** table: the caller then makes the two calls). */
typedef void (*tm__quant_dequant_int_fn)(const float *x, int64_t n, const struct tm__qseg *seg,
                                         uint8_t *codes, float *out);

/* The reference scalar kernels: they define behaviour (the "ref" kernel set, kernels.h). */
void tm__quant_int_ref(const float *x, int64_t n, const struct tm__qseg *seg, uint8_t *codes);
void tm__dequant_int_ref(const uint8_t *codes, int64_t n, const struct tm__qseg *seg, float *out);
#if defined(__x86_64__) || defined(__i386__)
#define TM_HAVE_X86_KERNELS 1
#endif

/* tm_quantize_f32 (no statistics) and tm_dequantize of the same elements in one pass per run:
** codes[n] and xq[n] are bit for bit what the two calls give. Integer codes in one pass; float8
** codes through the two run kernels. Used by the quantize job (src/job/qjob.c). */
tm_status tm__quantize_dequantize_f32(const tm_qparams *qp, int ndim, const int64_t *shape,
                                      const float *x, int64_t start, int64_t n, uint8_t *codes,
                                      float *xq, tm_err *err);

/* 1 when any of n values is NaN or +-Inf (exponent bits all ones): a branch-free scan the
** compiler vectorises. For the observers' and the ggml quantizers' input checks. */
static inline int tm__any_nonfinite(const float *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad != 0;
}

/* One element of the reference: the code as an integer (NaN -> zp). Shared by ref and the
** SIMD tails so that both are the same function. */
static inline int32_t tm__quant_one(float x, const struct tm__qseg *s) {
    float v = s->use_mul ? x * s->inv_scale : x / s->scale;
    if (v != v) return s->zp;
    float r = __builtin_rintf(v); /* default rounding mode: nearest even */
    if (r < s->lo) r = s->lo;
    if (r > s->hi) r = s->hi;
    return (int32_t)r + s->zp;
}

/* ---------------------------------------------------------------------------------------- */
/* Observers (observer.c, hist_torch.c, hist_ort.c)                                        */
/* ---------------------------------------------------------------------------------------- */

/* torch 1.13 HistogramObserver state of one unit. */
struct tm__torch_hist {
    int    bins;
    int    upsample_rate;
    float  min_val, max_val; /* +inf / -inf until the first batch */
    float *hist;             /* [bins]                            */
};
tm_status tm__torch_hist_init(struct tm__torch_hist *h, int bins);
void tm__torch_hist_free(struct tm__torch_hist *h);
/* forward(x): one batch of n finite values. */
tm_status tm__torch_hist_update(struct tm__torch_hist *h, const float *x, int64_t n);

/* ORT HistogramCollector state of one unit. */
struct tm__ort_hist {
    int      absolute;   /* collect_absolute_value (percentile, symmetric)            */
    int64_t  n_bins;
    int64_t *hist;       /* [n_bins]                                                   */
    float   *edges;      /* [n_bins + 1]                                               */
    float    min_val, max_val;
    double   threshold;  /* collect_value: the current histogram range [-t, t]         */
    int      threshold_is_f32; /* t is still the float32 of the first batch           */
    int      initialised;
};
void tm__ort_hist_init(struct tm__ort_hist *h, int absolute);
void tm__ort_hist_free(struct tm__ort_hist *h);
tm_status tm__ort_hist_update(struct tm__ort_hist *h, const float *x, int64_t n, int64_t n_bins);

/* MSE grid search over one unit's values (observer.c). */
tm_status tm__mse_range(const tm_qspec *spec, const float *v, int64_t n, double *lo, double *hi,
                        tm_err *err);

#endif /* TM_QUANT_IMPL_H */
