/* fixture.c: see fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli_run.h"

int tmt_tmpdir_make(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/tm_%s_XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

int tmt_tmpdir_remove(const char *dir) { return tmt_run(NULL, "rm -rf '%s'", dir) == 0 ? 0 : -1; }

int tmt_demo_q4(char *dir, size_t n, const char *tag) {
    if (tmt_tmpdir_make(dir, n, tag)) return -1;
    const char *bin = tmt_bin();
    return tmt_run(NULL, "%s demo -o %s/demo -q && %s quantize %s/demo -o %s/q4 -t int4 -g group:32 -q", bin, dir,
                   bin, dir, dir);
}

tm_file *tmt_open_ok(const char *path) {
    tm_file *f = NULL;
    tm_err e;
    tm_status s = tm_open(path, NULL, &f, &e);
    if (s) print_message("open %s: %s\n", path, e.msg);
    assert_int_equal(s, TM_OK);
    return f;
}
