/*
** tensormorph/gate.h: the release gate. Given the manifest a quantize job wrote, the evidence
** `tensormorph evidence` measured (baseline vs candidate under one protocol) and a policy of
** per-target thresholds, decide PASS or FAIL, listing every check with its reason and the
** values it used. The gate fails closed: an input that is missing, unparseable or incomplete,
** an unmeasured device, a protocol mismatch, a threshold exceeded, a fallback the policy does
** not allow, a canary below the minimum or an unusable rollback each make the verdict FAIL, and
** every failed check is listed, not only the first.
**
** Formats: manifest tensormorph.manifest/1 (src/job/manifest.h), evidence
** tensormorph.evidence/1 (docs/schemas/evidence.schema.json), policy tensormorph.policy/1
** (docs/schemas/policy.schema.json, docs/gate.md). Percentiles are recomputed from the raw
** latency samples by the nearest-rank rule (for sorted s[0..n-1], the p-th percentile is
** s[ceil(p/100 * n) - 1], tm_percentile_nearest_rank in tensormorph/evidence.h); the pNN_ms
** fields of the evidence are never trusted.
** Include after tensormorph.h.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GATE_H
#define TENSORMORPH_GATE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_gate_params {
    const char *manifest_path;     /* required                                                    */
    const char *evidence_path;     /* required                                                    */
    const char *policy_path;       /* required                                                    */
    const char *target;            /* policy target to gate on; NULL: the policy's only target    */
    const char *rollback_path;     /* rollback artifact; NULL: the manifest's (first) source path  */
    int         have_canary;       /* 1: canary holds the planned canary share                    */
    double      canary;            /* planned share of traffic for the canary, in (0, 1]          */
    const char *compat_table_json; /* contract table for the compat check; NULL: compiled-in       */
} tm_gate_params;

typedef struct tm_gate_result {
    int   pass;         /* 1 PASS, 0 FAIL                                                       */
    int   unparseable;  /* 1: an input file is not JSON or has a value of the wrong type/range
                           (the CLI exits 3); incomplete inputs (a missing key) leave it 0       */
    int   n_checks;     /* checks reported                                                      */
    int   n_failed;     /* of which failed                                                      */
    char *report_json;  /* the verdict, tensormorph.gate/1 (docs/gate.md); malloc'd           */
} tm_gate_result;

/* tm_gate_run: run every check and fill *out (free with tm_gate_result_free). A FAIL verdict is
** not an error: the function returns TM_OK and out->pass == 0. File problems (missing,
** unreadable, not JSON, schema violations) become failed checks whose reason names the file,
** the JSON path and what is wrong.
** Returns TM_OK | TM_E_INVALID_ARG (a required path is NULL, canary outside (0, 1]) |
** TM_E_NOMEM. */
tm_status tm_gate_run(const tm_gate_params *p, tm_gate_result *out, tm_err *err);

/* tm_gate_result_free: release report_json; the struct itself is the caller's. */
void tm_gate_result_free(tm_gate_result *r);

#ifdef __cplusplus
}
#endif
#endif
