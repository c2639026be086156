/* fuzz_gate.c: libFuzzer target for the release gate's inputs (tm_gate_run): the input is up to
** three JSON documents separated by a line "----": manifest, evidence, policy (a missing part is
** an empty file). They are written to files in a private temporary folder and gated. Whatever
** the bytes, the gate must return TM_OK with a verdict document that parses as JSON, and the
** verdict must be FAIL with at least one failed check: the manifest's outputs and the rollback
** never exist with matching checksums here, so a PASS would be a gate that failed open.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/gate.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[64];
static char g_paths[3][128];

static void cleanup(void) {
    for (int k = 0; k < 3; k++)
        if (g_paths[k][0]) unlink(g_paths[k]);
    if (g_dir[0]) rmdir(g_dir);
}

static void write_part(const char *path, const uint8_t *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (n) CHECK(fwrite(p, 1, n, fp) == n);
    CHECK(fclose(fp) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/tm-fuzz-gate-XXXXXX");
        CHECK(mkdtemp(g_dir) != NULL);
        atexit(cleanup);
    }
    static const char *const names[3] = {"manifest.json", "evidence.json", "policy.json"};
    char (*paths)[128] = g_paths;
    const uint8_t *p = data, *end = data + size;
    for (int k = 0; k < 3; k++) {
        const uint8_t *q = p;
        size_t left = (size_t)(end - p);
        const uint8_t *sep = NULL;
        for (size_t i = 0; k < 2 && i + 6 <= left; i++)
            if (!memcmp(q + i, "\n----\n", 6)) { sep = q + i; break; }
        size_t n = sep ? (size_t)(sep - q) : left;
        snprintf(paths[k], sizeof paths[k], "%s/%s", g_dir, names[k]);
        write_part(paths[k], q, n);
        p = sep ? sep + 6 : end;
    }
    tm_gate_params gp;
    memset(&gp, 0, sizeof gp);
    gp.manifest_path = paths[0];
    gp.evidence_path = paths[1];
    gp.policy_path = paths[2];
    tm_gate_result r;
    memset(&r, 0, sizeof r);
    tm_err err;
    tm_status s = tm_gate_run(&gp, &r, &err);
    CHECK(s == TM_OK || s == TM_E_NOMEM);
    if (s == TM_OK) {
        CHECK(r.report_json != NULL);
        json_t *doc = json_loads(r.report_json, 0, NULL);
        CHECK(doc != NULL);
        json_decref(doc);
        CHECK(!r.pass);
        CHECK(r.n_failed >= 1 && r.n_failed <= r.n_checks);
    }
    tm_gate_result_free(&r);
    return 0;
}
