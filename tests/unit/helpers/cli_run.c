/* cli_run.c: see cli_run.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

const char *tmt_bin(void) {
    const char *b = getenv("TM_BIN");
    return b && *b ? b : "./tensormorph";
}

static int vrun(char **out, const char *fmt, va_list ap) {
    char cmd[8192];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    FILE *p = popen(cmd, "r");
    if (!p) {
        if (out) *out = NULL;
        return -1;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 1024) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = '\0';
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tmt_run(char **out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vrun(out, fmt, ap);
    va_end(ap);
    return rc;
}

json_t *tmt_run_json(int expect_rc, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int rc = tmt_run(&out, "%s", cmd);
    if (rc != expect_rc)
        fprintf(stderr, "command: %s\nexit %d (expected %d)\nstdout: %.2000s\n", cmd, rc, expect_rc, out ? out : "");
    assert_int_equal(rc, expect_rc);
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    if (!j) fprintf(stderr, "command: %s\nnot JSON: %.2000s\n", cmd, out ? out : "");
    free(out);
    assert_non_null(j);
    return j;
}

double tmt_num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "inf")) return INFINITY;
        if (!strcmp(s, "-inf")) return -INFINITY;
        return NAN;
    }
    fail_msg("key '%s' missing or not a number", k);
    return NAN;
}

json_t *tmt_find_named(json_t *arr, const char *name) {
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && !strcmp(n, name)) return e;
    }
    return NULL;
}

int tmt_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

char *tmt_read_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = '\0';
    fclose(fp);
    return b;
}
