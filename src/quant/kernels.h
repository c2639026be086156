/*
** kernels.h: private: the one kernel table. A kernel set (struct tm_kernels) names every
** function whose speed depends on the CPU: the affine quantize/dequantize runs (quantize.c,
** quant_avx2.c, quant_avx512.c), the observers' min/max (observer.c), the error-statistics
** lanes (errlanes.c, for src/analysis/errstats.c) and the ggml side (the ggml error lanes, and
** whether the SIMD columns of the ggml type table, ggml_traits.h, are used). Every set computes
** the same bits as "ref", the scalar reference functions that define behaviour.
**
** A job chooses its set once (tm_kernels_get from --kernel, or NULL for "auto") and passes it in
** its parameters (tm_ct_quantize_params / tm_gguf_quantize_params / tm_onnx_quantize_params .kernels), from where it
** reaches tm_qspec.kernels, tm_qparams.kernels and tm_erracc.kernels; nothing deep inside
** consults a global or the CPU. A NULL set anywhere means "auto" (tm__kernels_or_auto).
*/
#ifndef TM_QUANT_KERNELS_H
#define TM_QUANT_KERNELS_H

#include "core/core.h"
#include "ggml_quant_impl.h"
#include "quant_impl.h"

/* The sums of one run of elements sharing one scale (errstats.c's tm_erracc_add_run): counts,
** sums and maxima in the fixed lane order documented in errlanes.c. */
typedef struct tm__err_run {
    double  sx2, sq2, sxq, se2, sl2, mabs, mlsb, mlsbu;
    int64_t cnt, clip, beyond, nonfin;
} tm__err_run;

typedef void (*tm__err_run_fn)(const float *x, const float *xq, int64_t n, double s, double inv,
                               double lo, double hi, tm__err_run *o);

/* min and max of the finite values among v[0..n) into *mn, *mx (+inf / -inf when none);
** returns 1 when some value is NaN or +-inf. */
typedef int (*tm__minmax_fn)(const float *v, int64_t n, float *mn, float *mx);

/* tm__gq_err_add's lanes (n a multiple of TM__GQ_ERR_LANES). */
typedef void (*tm__gq_lanes_fn)(tm__gq_err *a, const float *x, const float *dq, int64_t n);

struct tm_kernels {
    const char *name;                          /* "ref", "avx2", "avx512"                  */
    /* affine quantize/dequantize of a run (quant_impl.h) */
    tm__quant_int_fn         quant_int;
    tm__dequant_int_fn       dequant_int;
    tm__quant_dequant_int_fn quant_dequant_int; /* NULL: quant_int then dequant_int         */
    /* observers */
    tm__minmax_fn            minmax;
    /* error statistics (tm_erracc) */
    tm__err_run_fn           err_run;
    /* ggml: the error lanes, and 1 to use the SIMD columns of the ggml type table */
    tm__gq_lanes_fn          gq_err_lanes;
    int                      ggml_simd;
};

/* The sets. ref always; the x86 ones exist in every x86 build, usable only where
** tm_kernels_get accepts them (avx2: AVX2 + FMA + F16C; avx512: AVX-512F besides). */
extern const tm_kernels tm__kernels_ref;
#ifdef TM_HAVE_X86_KERNELS
extern const tm_kernels tm__kernels_avx2;
extern const tm_kernels tm__kernels_avx512;
#endif

/* k, or the "auto" set when k is NULL. Never NULL. */
const tm_kernels *tm__kernels_or_auto(const tm_kernels *k);

/* The functions of the sets. */
int  tm__minmax_ref(const float *v, int64_t n, float *mn, float *mx);
void tm__err_run_ref(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                     double hi, tm__err_run *o);
void tm__gq_err_lanes_ref(tm__gq_err *a, const float *x, const float *dq, int64_t n);
#ifdef TM_HAVE_X86_KERNELS
void tm__quant_int_avx2(const float *x, int64_t n, const struct tm__qseg *seg, uint8_t *codes);
void tm__dequant_int_avx2(const uint8_t *codes, int64_t n, const struct tm__qseg *seg, float *out);
void tm__quant_dequant_int_avx2(const float *x, int64_t n, const struct tm__qseg *seg,
                                uint8_t *codes, float *out);
void tm__quant_int_avx512(const float *x, int64_t n, const struct tm__qseg *seg, uint8_t *codes);
void tm__dequant_int_avx512(const uint8_t *codes, int64_t n, const struct tm__qseg *seg, float *out);
int  tm__minmax_avx2(const float *v, int64_t n, float *mn, float *mx);
void tm__err_run_avx2(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                      double hi, tm__err_run *o);
#endif

#endif
