/* cmd_gate.c: `tensormorph gate --manifest M --evidence E --policy P`: the release gate
** (tensormorph/gate.h): every check with its reason and evidence, then PASS or FAIL.
** Exit 0 only on PASS, 1 on FAIL, 3 on FAIL with an input that cannot be parsed. */
#include "cli.h"
#include "tensormorph/gate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const cli_opt opts_gate[] = {
    CLI_OPT_MANIFEST("the quantize job's manifest (tensormorph-manifest.json, OUT.gguf.manifest.json) (required)"),
    CLI_OPT_EVIDENCE("evidence from `tensormorph evidence` (tensormorph.evidence/1) (required)"),
    CLI_OPT_POLICY("release policy (tensormorph.policy/1, docs/gate.md) (required)"),
    CLI_OPT_TARGET("policy target to gate on (default: the policy's only target)"),
    CLI_OPT_CANARY("planned canary share of traffic, in (0, 1]; checked against the policy's minimum (the tool serves no traffic)"),
    CLI_OPT_ROLLBACK("rollback artifact (default: the manifest's source path); must exist, load and match the manifest's source sha256"),
    CLI_OPT_TABLE("contract table for the compat check instead of the compiled-in data/compat.json"),
    CLI_OPT_END,
};
const char details_gate[] =
    "Checks, each listed with pass/fail, its reason and the values used: the three inputs parse\n"
    "and match their schemas (integers may be written 4.0 or 1e12, never with a fraction); the\n"
    "manifest's output files (named inside its folder: no absolute path, no \"..\") match their\n"
    "sha256 on disk and its results.n_quantized is at least 1 (a no-op copy is no candidate); the\n"
    "evidence measured the policy target's device (device.measured true, the target's runtime);\n"
    "it measured the manifest's source (baseline) and output (candidate); both were measured\n"
    "under one protocol that meets the policy; p50/p95/p99 recomputed from the raw samples\n"
    "(nearest rank; a sample <= 0 ms fails) and peak RSS within absolute and relative bounds;\n"
    "drift overall and per slice\n"
    "within budget; with allowed_fallbacks, the artifact's runtime contract (tensormorph compat);\n"
    "the planned canary share against the minimum; the rollback artifact exists, loads and\n"
    "matches the manifest's source checksums. It fails closed and lists every failed check.\n"
    "Exit status: 0 PASS, 1 FAIL, 3 FAIL and an input cannot be parsed (the verdict is printed\n"
    "in every case), 2 usage.";


static void print_text(json_t *doc) {
    const char *verdict = json_string_value(json_object_get(doc, "verdict"));
    const char *target = json_string_value(json_object_get(doc, "target"));
    printf("gate: target %s\n", target ? target : "(none)");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "checks"), i, c) {
        const char *st = json_string_value(json_object_get(c, "status"));
        char tag[16];
        snprintf(tag, sizeof tag, "%s", st);
        for (char *q = tag; *q; q++) if (*q >= 'a' && *q <= 'z') *q = (char)(*q - 'a' + 'A');
        printf("  %-8s %-20s %s\n", tag, json_string_value(json_object_get(c, "name")),
               json_string_value(json_object_get(c, "reason")));
    }
    json_t *reasons = json_object_get(doc, "reasons");
    if (json_array_size(reasons)) {
        printf("reasons:\n");
        json_array_foreach(reasons, i, c) printf("  - %s\n", json_string_value(c));
    }
    printf("verdict: %s (%lld of %lld checks failed)\n", verdict,
           (long long)json_integer_value(json_object_get(doc, "n_failed")),
           (long long)json_integer_value(json_object_get(doc, "n_checks")));
}

int cmd_gate(const cli_cmd *cmd, cli_args *a) {
    tm_gate_params p;
    memset(&p, 0, sizeof p);
    p.manifest_path = cli_get(a, "manifest");
    p.evidence_path = cli_get(a, "evidence");
    p.policy_path = cli_get(a, "policy");
    p.target = cli_get(a, "target");
    p.rollback_path = cli_get(a, "rollback");
    if (!p.manifest_path || !p.evidence_path || !p.policy_path)
        return cli_usage_error(cmd, "--manifest, --evidence and --policy are all required");
    if (cli_opt_canary(a, &p.have_canary, &p.canary))
        return cli_usage_error(cmd, "--canary must be a fraction in (0, 1] (e.g. 0.05), got '%s'",
                               cli_get(a, "canary"));
    tm_err err;
    char *table = NULL;
    if (cli_get(a, "table") && !(table = cli_read_text(cli_get(a, "table"), &err))) return cli_fail(err.code, &err);
    p.compat_table_json = table;
    tm_gate_result r;
    tm_status s = tm_gate_run(&p, &r, &err);
    free(table);
    if (s) return cli_fail(s, &err);
    json_t *doc = json_loads(r.report_json, 0, NULL);
    int rc = r.pass ? EXIT_OK : (r.unparseable ? EXIT_INPUT : EXIT_CHECK);
    if (!doc) { tm_gate_result_free(&r); tm_err_clear(&err); fprintf(stderr, "tensormorph: gate: out of memory\n"); return EXIT_IO; }
    if (g_cli.json) {
        cli_json_print(doc);
    } else {
        print_text(doc);
        json_decref(doc);
    }
    if (!r.pass) {
        /* one line per reason on stderr too, for logs that keep only stderr */
        fprintf(stderr, "tensormorph: gate: FAIL (%d of %d checks failed)%s\n", r.n_failed, r.n_checks,
                r.unparseable ? "; an input could not be parsed" : "");
    }
    tm_gate_result_free(&r);
    return rc;
}
