/* err.c: tm_err filling and status names. */
#include "core.h"

#include <errno.h>
#include <stdio.h>

const char *tm_status_str(tm_status s) {
    switch (s) {
    case TM_OK: return "ok";
    case TM_E_INVALID_ARG: return "invalid argument";
    case TM_E_NOMEM: return "out of memory";
    case TM_E_IO: return "i/o error";
    case TM_E_CORRUPT: return "corrupt input";
    case TM_E_UNSUPPORTED: return "unsupported";
    case TM_E_LIMIT: return "limit exceeded";
    case TM_E_CANCELLED: return "cancelled";
    case TM_E_NONFINITE: return "non-finite value";
    case TM_E_RANGE: return "out of range";
    case TM_E_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void tm_err_clear(tm_err *err) {
    if (!err) return;
    err->code = TM_OK;
    err->sys_errno = 0;
    err->file_offset = -1;
    err->msg[0] = '\0';
}

tm_status tm__err_set(tm_err *err, tm_status code, int64_t file_offset, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    err->sys_errno = 0;
    err->file_offset = file_offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

tm_status tm__err_sys(tm_err *err, int sys_errno, const char *fmt, ...) {
    if (!err) return TM_E_IO;
    err->code = TM_E_IO;
    err->sys_errno = sys_errno;
    err->file_offset = -1;
    va_list ap;
    va_start(ap, fmt);
    char head[TM_ERR_MSG_MAX];
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    const char *why = strerror(sys_errno);
    size_t a = strlen(head), b = strlen(why);
    if (a > sizeof err->msg - 1) a = sizeof err->msg - 1;
    memcpy(err->msg, head, a);
    if (a + 2 + b < sizeof err->msg) {
        memcpy(err->msg + a, ": ", 2);
        memcpy(err->msg + a + 2, why, b);
        a += 2 + b;
    }
    err->msg[a] = '\0';
    return TM_E_IO;
}

void tm__err_prefix(tm_err *err, const char *fmt, ...) {
    if (!err) return;
    char pre[TM_ERR_MSG_MAX], old[TM_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    size_t a = strlen(pre), b = strlen(old);
    if (a > sizeof err->msg - 3) a = sizeof err->msg - 3;
    if (a + 2 + b > sizeof err->msg - 1) b = sizeof err->msg - 1 - a - 2;
    memcpy(err->msg, pre, a);
    memcpy(err->msg + a, ": ", 2);
    memcpy(err->msg + a + 2, old, b);
    err->msg[a + 2 + b] = '\0';
}

void *tm__calloc(size_t n, size_t size) {
    if (n == 0 || size == 0) return calloc(1, 1);
    return calloc(n, size);
}

void *tm__malloc_n(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    size_t b = n * size;
    return malloc(b ? b : 1);
}

char *tm__strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *tm__strdup(const char *s) { return tm__strndup(s, strlen(s)); }

char *tm__module_of(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    if (n < s || strcmp(name + n - s, suffix) != 0) return NULL;
    if (n == s) return tm__strdup("");
    if (name[n - s - 1] != '.') return NULL;
    return tm__strndup(name, n - s - 1);
}

char *tm__aprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

int tm__cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
