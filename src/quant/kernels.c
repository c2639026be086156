/*
** kernels.c: the kernel table (kernels.h): one row per kernel set, and the choice of a set by
** name and CPU features. The choice is made once per job by the caller (tm_kernels_get) and
** travels in the parameters; "auto" is a pure function of the CPU, computed once.
*/
#include "kernels.h"

#include <string.h>

const tm_kernels tm__kernels_ref = {
    .name = "ref",
    .quant_int = tm__quant_int_ref,
    .dequant_int = tm__dequant_int_ref,
    .quant_dequant_int = NULL,
    .minmax = tm__minmax_ref,
    .err_run = tm__err_run_ref,
    .gq_err_lanes = tm__gq_err_lanes_ref,
    .ggml_simd = 0,
};

#ifdef TM_HAVE_X86_KERNELS
#ifdef TM__GQ_HAVE_AVX2
#define GQ_LANES tm__gq_err_lanes_avx2
#define GQ_SIMD 1
#else
#define GQ_LANES tm__gq_err_lanes_ref
#define GQ_SIMD 0
#endif

/* The entries both x86 sets share: AVX2 observers, error lanes and ggml kernels. */
#define AVX2_REST .minmax = tm__minmax_avx2, .err_run = tm__err_run_avx2, .gq_err_lanes = GQ_LANES, .ggml_simd = GQ_SIMD

const tm_kernels tm__kernels_avx2 = {.name = "avx2", .quant_int = tm__quant_int_avx2,
                                     .dequant_int = tm__dequant_int_avx2,
                                     .quant_dequant_int = tm__quant_dequant_int_avx2, AVX2_REST};

/* AVX-512F for the affine runs (16 lanes; no fused quantize+dequantize), AVX2 for the rest. */
const tm_kernels tm__kernels_avx512 = {.name = "avx512", .quant_int = tm__quant_int_avx512,
                                       .dequant_int = tm__dequant_int_avx512,
                                       .quant_dequant_int = NULL, AVX2_REST};

/* What the "avx2" set runs: AVX2 (with OS support for YMM), FMA (the error lanes) and F16C (the
** ggml Q8_0/Q4_0 kernels). */
static int cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && tm__cpu_has_f16c();
}
static int cpu_avx512(void) { return cpu_avx2() && __builtin_cpu_supports("avx512f"); }
#endif

static const tm_kernels *pick_auto(void) {
#ifdef TM_HAVE_X86_KERNELS
    if (cpu_avx512()) return &tm__kernels_avx512;
    if (cpu_avx2()) return &tm__kernels_avx2;
#endif
    return &tm__kernels_ref;
}

const tm_kernels *tm__kernels_or_auto(const tm_kernels *k) {
    static const tm_kernels *g_auto; /* a cache of a pure function of the CPU, not a choice */
    if (k) return k;
    const tm_kernels *a = __atomic_load_n(&g_auto, __ATOMIC_ACQUIRE);
    if (!a) {
        a = pick_auto();
        __atomic_store_n(&g_auto, a, __ATOMIC_RELEASE);
    }
    return a;
}

tm_status tm_kernels_get(const char *name, const tm_kernels **out) {
    if (!name || !out) return TM_E_INVALID_ARG;
    if (strcmp(name, "auto") == 0) {
        *out = tm__kernels_or_auto(NULL);
        return TM_OK;
    }
    if (strcmp(name, "ref") == 0) {
        *out = &tm__kernels_ref;
        return TM_OK;
    }
    if (strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0) {
#ifdef TM_HAVE_X86_KERNELS
        const int avx512 = name[3] == '5';
        if (!(avx512 ? cpu_avx512() : cpu_avx2())) return TM_E_UNSUPPORTED;
        *out = avx512 ? &tm__kernels_avx512 : &tm__kernels_avx2;
        return TM_OK;
#else
        return TM_E_UNSUPPORTED;
#endif
    }
    return TM_E_INVALID_ARG;
}

const char *tm_kernels_name(const tm_kernels *k) { return tm__kernels_or_auto(k)->name; }
