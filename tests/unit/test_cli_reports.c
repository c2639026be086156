/* test_cli_reports.c: what the commands print (issue 12 items 11-13): one vocabulary of flags
** across commands (aliases accepted, listed in help and docs/cli.md), help texts that say what
** each command does, --top honoured everywhere, what quantize left dense by the user's choice
** listed first, ONNX progress in weights, compat grouping identical rows, and inspect counting
** tied .pt storage once. Real models from ../shared (skipped with the reason when absent; fails
** with TM_REQUIRE_SHARED=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_tmp[64];

static const char *model(const char *rel) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/models/%s", tmv_shared_dir(), rel);
    return buf[k];
}

/* number of lines of s that start with prefix */
static int count_lines(const char *s, const char *prefix) {
    int n = 0;
    size_t lp = strlen(prefix);
    for (const char *p = s; p && *p;) {
        if (!strncmp(p, prefix, lp)) n++;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return n;
}

/* ---- item 12: what quantize left dense by the options given ----------------------------------- */

static void test_kept_dense_by_choice(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char *o = NULL;
    int rc = tmt_run(&o, "%s quantize %s -o %s/g32 -g group:32 --no-checksums", tmt_bin(),
                     model("safetensors/stories260K-f32"), g_tmp);
    assert_int_equal(rc, 0);
    /* counted apart from what the defaults keep dense */
    assert_non_null(strstr(o, "kept dense: 5 by the options given, 12 by default"));
    /* all five down_proj listed, before any norm */
    const char *first_norm = strstr(o, "1-D tensor (norm or bias)");
    assert_non_null(first_norm);
    for (int l = 0; l < 5; l++) {
        char nm[80];
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        const char *p = strstr(o, nm);
        assert_non_null(p);
        assert_true(p < first_norm);
        assert_non_null(strstr(p, "group_size 32 does not divide its 172 columns"));
    }
    assert_null(strstr(o, "and 5 more"));
    assert_int_equal(count_lines(o, "  kept dense: "), 17);
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_dense_by_choice),
    };
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_reports_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char *o = NULL;
    tmt_run(&o, "rm -rf %s", g_tmp);
    free(o);
    return rc;
}
