/* fixture.c: see fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"

int tmt_tmpdir_make(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/tm_%s_XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

int tmt_tmpdir_remove(const char *dir) { return tmt_run(NULL, "rm -rf '%s'", dir) == 0 ? 0 : -1; }

int tmt_demo(char *dir, size_t n, const char *tag) {
    if (tmt_tmpdir_make(dir, n, tag)) return -1;
    return tmt_run(NULL, "%s demo -o %s/demo -q", tmt_bin(), dir);
}

int tmt_demo_q4(char *dir, size_t n, const char *tag) {
    int rc = tmt_demo(dir, n, tag);
    if (rc) return rc;
    return tmt_run(NULL, "%s quantize %s/demo -o %s/q4 -t int4 -g group:32 -q", tmt_bin(), dir, dir);
}

int tmt_manifest_shas(const char *manifest_path, char src[65], char out[65]) {
    json_t *m = json_load_file(manifest_path, 0, NULL);
    const char *s = json_string_value(json_object_get(json_array_get(json_object_get(m, "sources"), 0), "sha256"));
    const char *o = json_string_value(json_object_get(json_array_get(json_object_get(json_object_get(m, "output"), "files"), 0), "sha256"));
    int ok = s && o && strlen(s) == 64 && strlen(o) == 64;
    if (ok) { memcpy(src, s, 65); memcpy(out, o, 65); }
    json_decref(m);
    return ok ? 0 : -1;
}

tm_file *tmt_open_ok(const char *path) {
    tm_file *f = NULL;
    tm_err e;
    tm_status s = tm_open(path, NULL, &f, &e);
    if (s) print_message("open %s: %s\n", path, e.msg);
    assert_int_equal(s, TM_OK);
    return f;
}

void tmt_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) print_message("cannot write %s\n", path);
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tmt_write_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tmt_write_file(path, text, strlen(text));
}

uint8_t *tmt_slurp(const char *path, size_t *n) {
    uint8_t *b = (uint8_t *)tmt_read_bytes(path, n);
    if (!b) print_message("cannot read %s\n", path);
    assert_non_null(b);
    return b;
}
