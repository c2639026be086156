/*
** core.h: private helpers shared by every layer of libtensormorph: error setting, checked
** arithmetic, small allocation helpers. Not installed.
*/
#ifndef TM_CORE_H
#define TM_CORE_H

#include "tensormorph.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TM_PRINTF(a, b)
#endif

/* tm__err_set: fill err (may be NULL) and return `code`. file_offset -1 when not applicable.
** Usage: return tm__err_set(err, TM_E_CORRUPT, off, "safetensors: %s: ...", path); */
tm_status tm__err_set(tm_err *err, tm_status code, int64_t file_offset, const char *fmt, ...)
    TM_PRINTF(4, 5);
/* tm__err_sys: as tm__err_set with TM_E_IO and errno appended (": No such file ..."). */
tm_status tm__err_sys(tm_err *err, int sys_errno, const char *fmt, ...) TM_PRINTF(3, 4);
/* tm__err_prefix: prepend "prefix: " to an existing message (keeps code and offset). */
void tm__err_prefix(tm_err *err, const char *fmt, ...) TM_PRINTF(2, 3);

/* Checked arithmetic: return 1 and store the result when it fits, else 0. */
static inline int tm__mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
static inline int tm__add_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}
static inline int tm__mul_i64_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Allocation: NULL on failure or overflow; n*size checked. */
/* tm__cpu_has_f16c: 1 when the CPU has F16C (CPUID.1:ECX bit 29), else 0 (src/core/cpu.c). The
** 256-bit forms also need __builtin_cpu_supports("avx2") (OS support for YMM state). */
int tm__cpu_has_f16c(void);

/* Small text and arithmetic helpers, once for every layer (src/core/err.c). */
/* tm__ends_with: 1 when s ends with suffix (both NUL-terminated), else 0. */
static inline int tm__ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}
/* tm__ceil_div: ceil(a / b) for a >= 0, b > 0 (group and block counts). */
static inline int64_t tm__ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }
/* tm__module_of: the module prefix of a tensor name that ends in "." suffix, malloc'd
** ("a.b.weight_packed", "weight_packed" -> "a.b"; "weight_packed" alone -> ""), or NULL when
** the name does not end so (or on allocation failure). */
char *tm__module_of(const char *name, const char *suffix);
/* tm__cmp_double: qsort comparator of doubles, ascending (NaN compares equal to anything). */
int tm__cmp_double(const void *a, const void *b);
void *tm__calloc(size_t n, size_t size);
void *tm__malloc_n(size_t n, size_t size);
char *tm__strdup(const char *s);
char *tm__strndup(const char *s, size_t n);
/* tm__sprintf_alloc: malloc'd formatted string, NULL on failure. */
char *tm__aprintf(const char *fmt, ...) TM_PRINTF(1, 2);
/* One sequential read of the file at path (through 8 MiB maps of the page cache, else read
** into a 4 MiB buffer), in 128 KiB blocks: each block is handed to visit (may be NULL; off its
** byte offset; a status other than TM_OK stops the read and is returned, its
** message set by visit) and, when hex_out is not NULL, hashed into its sha256 (FIPS 180-4,
** OpenSSL EVP). *n_bytes: the bytes read (may be NULL). Returns TM_OK | TM_E_IO | TM_E_NOMEM
** | visit's status. */
tm_status tm__sha256_file_visit(const char *path, char hex_out[65], uint64_t *n_bytes,
                                tm_status (*visit)(void *ud, const uint8_t *buf, size_t n, uint64_t off, tm_err *err),
                                void *ud, tm_err *err);
/* tm_sha256_file that asks stop(stop_ud) before each 1 MiB block and returns TM_E_CANCELLED
** ("interrupted") when it says 1: a cancelled hash ends within one block (a few ms). stop may
** be NULL. Used by the quantize jobs' source and output checksums (src/job/pipeline.c). */
/* The CPU limit that the cgroup quota sets, from the text of /proc/self/cgroup and the cgroup
** mount root ("/sys/fs/cgroup"): ceil(quota / period), the smallest of the v2 cpu.max files
** along the process's path and the v1 cpu controller's cfs files; 0 when none is set.
** tm_usable_cpus uses it; tests pass a fake root. */
int tm__cgroup_cpu_limit(const char *proc_cgroup, const char *root);
tm_status tm__sha256_file_stop(const char *path, char hex_out[65], uint64_t *n_bytes,
                               int (*stop)(void *ud), void *stop_ud, tm_err *err);

/* Little-endian loads/stores that tolerate any alignment. */
static inline uint16_t tm__ld16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t tm__ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t tm__ld64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void tm__st16(void *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void tm__st32(void *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void tm__st64(void *p, uint64_t v) { memcpy(p, &v, 8); }

/* Defensive checks (SQLite ALWAYS/NEVER): assert in debug builds, stay as checks in release. */
#include <assert.h>
#ifdef NDEBUG
#define TM_ALWAYS(x) (x)
#define TM_NEVER(x) (x)
#else
#define TM_ALWAYS(x) ((x) ? 1 : (assert(0 && #x), 0))
#define TM_NEVER(x) ((x) ? (assert(0 && #x), 1) : 0)
#endif

#endif /* TM_CORE_H */
