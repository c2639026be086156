/* vectors.c: see vectors.h. */
#include "vectors.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *tmv_shared_dir(void) {
    static char buf[4096];
    const char *env = getenv("TM_SHARED");
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s", env);
    } else {
        const char *src = getenv("TM_SRC");
        if (src && *src) snprintf(buf, sizeof buf, "%s/../shared", src);
        else snprintf(buf, sizeof buf, "../shared");
    }
    char vec[4200];
    snprintf(vec, sizeof vec, "%s/vectors", buf);
    return is_dir(vec) ? buf : NULL;
}

int tmv_require_shared(void) {
    if (tmv_shared_dir()) return 1;
    const char *req = getenv("TM_REQUIRE_SHARED");
    if (req && strcmp(req, "1") == 0) {
        fail_msg("../shared not found (set TM_SHARED) and TM_REQUIRE_SHARED=1");
        return 0;
    }
    printf("SKIP: ../shared not found (set TM_SHARED)\n");
    fflush(stdout);
    skip();
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int tmv_list_cases(const char *family, char ***names) {
    char path[4400];
    const char *sh = tmv_shared_dir();
    *names = NULL;
    if (!sh) return -1;
    snprintf(path, sizeof path, "%s/vectors/%s", sh, family);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub[4800];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (!is_dir(sub)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    return n;
}

void tmv_free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

void tmv_case_path(char *buf, size_t n, const char *family, const char *name, const char *file) {
    const char *sh = tmv_shared_dir();
    snprintf(buf, n, "%s/vectors/%s/%s/%s", sh ? sh : "../shared", family, name, file);
}

json_t *tmv_case_json(const char *family, const char *name) {
    char path[4096];
    tmv_case_path(path, sizeof path, family, name, "case.json");
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "vectors: %s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

/* Parse the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
static int parse_header(const char *h, tmv_npy *out) {
    const char *d = strstr(h, "'descr'");
    const char *f = strstr(h, "'fortran_order'");
    const char *s = strstr(h, "'shape'");
    if (!d || !f || !s) return -1;
    d = strchr(d + 7, '\'');
    if (!d) return -1;
    d++;
    char endian = d[0], kind = d[1];
    int size = atoi(d + 2);
    if (!(endian == '<' || endian == '|' || (endian == '=' ))) return -1;
    if (!(kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b')) return -1;
    if (strstr(f, "True") && strstr(f, "True") < s && strstr(f, "True") - f < 24) return -1;
    s = strchr(s, '(');
    if (!s) return -1;
    s++;
    out->ndim = 0;
    out->n = 1;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || out->ndim >= 8) return -1;
        out->shape[out->ndim++] = v;
        out->n *= v;
        s = end;
    }
    out->kind = kind;
    out->itemsize = size;
    return 0;
}

int tmv_npy_load(const char *path, tmv_npy *out) {
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "vectors: cannot open %s\n", path);
        return -1;
    }
    unsigned char pre[10];
    int rc = -1;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) goto out;
    size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    char *h = calloc(1, hlen + 1);
    if (!h || fread(h, 1, hlen, fp) != hlen || parse_header(h, out) != 0) {
        free(h);
        goto out;
    }
    free(h);
    size_t bytes = (size_t)out->n * (size_t)out->itemsize;
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data || fread(out->data, 1, bytes, fp) != bytes) goto out;
    rc = 0;
out:
    fclose(fp);
    if (rc != 0) {
        fprintf(stderr, "vectors: %s is not a supported .npy v1.0 file\n", path);
        free(out->data);
        out->data = NULL;
    }
    return rc;
}

int tmv_npy_load_case(const char *family, const char *name, const char *file, tmv_npy *out) {
    char path[4096];
    tmv_case_path(path, sizeof path, family, name, file);
    return tmv_npy_load(path, out);
}

void tmv_case_npy(const char *family, const char *name, const char *file, tmv_npy *out) {
    if (tmv_npy_load_case(family, name, file, out) != 0)
        fail_msg("%s/%s: cannot load %s", family, name, file);
}

int tmv_case_has_file(const char *family, const char *name, const char *file) {
    char p[4096];
    tmv_case_path(p, sizeof p, family, name, file);
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

void tmv_npy_free(tmv_npy *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
}

double tmv_npy_get_f64(const tmv_npy *a, int64_t i) {
    const unsigned char *p = (const unsigned char *)a->data + (size_t)i * (size_t)a->itemsize;
    if (a->kind == 'f') {
        if (a->itemsize == 4) {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        if (a->itemsize == 8) {
            double d;
            memcpy(&d, p, 8);
            return d;
        }
        return 0.0;
    }
    return (double)tmv_npy_get_i64(a, i);
}

int64_t tmv_npy_get_i64(const tmv_npy *a, int64_t i) {
    const unsigned char *p = (const unsigned char *)a->data + (size_t)i * (size_t)a->itemsize;
    if (a->kind == 'f') return (int64_t)tmv_npy_get_f64(a, i);
    uint64_t u = 0;
    memcpy(&u, p, (size_t)a->itemsize); /* little-endian host */
    if (a->kind == 'i' && a->itemsize < 8) {
        int sh = 64 - 8 * a->itemsize;
        return (int64_t)(u << sh) >> sh;
    }
    return (int64_t)u;
}

uint32_t tmv_npy_f32_bits(const tmv_npy *a, int64_t i) {
    uint32_t u;
    memcpy(&u, (const unsigned char *)a->data + 4 * (size_t)i, 4);
    return u;
}

float *tmv_npy_as_f32(const tmv_npy *a) {
    float *v = malloc((size_t)(a->n ? a->n : 1) * sizeof(float));
    if (!v) return NULL;
    for (int64_t i = 0; i < a->n; i++) {
        if (a->kind == 'f' && a->itemsize == 4) memcpy(&v[i], (const char *)a->data + 4 * i, 4);
        else v[i] = (float)tmv_npy_get_f64(a, i);
    }
    return v;
}

int64_t *tmv_npy_as_i64(const tmv_npy *a) {
    int64_t *v = malloc((size_t)(a->n ? a->n : 1) * sizeof(int64_t));
    if (!v) return NULL;
    for (int64_t i = 0; i < a->n; i++) v[i] = tmv_npy_get_i64(a, i);
    return v;
}

json_t *tmv_output(json_t *cj, const char *name) {
    json_t *outs = json_object_get(cj, "outputs");
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *n = json_string_value(json_object_get(o, "name"));
        if (n && strcmp(n, name) == 0) return o;
    }
    return NULL;
}

const char *tmv_output_match(json_t *cj, const char *name) {
    json_t *o = tmv_output(cj, name);
    const char *m = o ? json_string_value(json_object_get(o, "match")) : NULL;
    return m ? m : "";
}

uint32_t tmv_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

int tmv_run_cases(const char *family, const char *const *prefixes, void (*fn)(const char *name, json_t *cj)) {
    char **names;
    int n = tmv_list_cases(family, &names);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        if (prefixes) {
            int known = 0;
            for (int k = 0; prefixes[k] && !known; k++) known = !strncmp(names[i], prefixes[k], strlen(prefixes[k]));
            if (!known) fail_msg("%s/%s: new case without a handler", family, names[i]);
        }
        json_t *cj = tmv_case_json(family, names[i]);
        assert_non_null(cj);
        fn(names[i], cj);
        json_decref(cj);
    }
    tmv_free_names(names, n);
    return n;
}
