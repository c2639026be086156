/* cpu.c: run-time CPU feature checks that __builtin_cpu_supports cannot make with every
** supported compiler (clang 14 knows no "f16c").
**
** F16C (VCVTPH2PS / VCVTPS2PH) is CPUID leaf 1, ECX bit 29 (Intel 64 and IA-32 Architectures
** Software Developer's Manual, vol. 2A, CPUID). Its 256-bit forms need the OS to save YMM state,
** which __builtin_cpu_supports("avx2") already checks, so the SIMD paths test both. */
#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdatomic.h>

int tm__cpu_has_f16c(void) {
    static atomic_int cached = -1; /* -1: not asked yet */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0) return v;
    v = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) v = (int)((c >> 29) & 1u);
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}
