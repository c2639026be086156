/* api_release.c: GET /api/v1/release (docs/API.md): the release gate's verdict for the inputs
** serve was started with (--manifest, --evidence, --policy, --target, --canary,
** --rollback), for the Release page (web/release.js). The files are read again on every
** request, so the page shows the gate on the files as they are now; the document is exactly
** `tensormorph gate --json`'s (tensormorph.gate/1) with "configured": true added. Without the
** three inputs: {"configured": false, "hint": ...}. LLM evidence (tensormorph evidence --text)
** adds "llm": its evidence's `llm` section as it is (overall, slices, histogram, worst) for the
** page's KLD histogram per slice and worst positions. Paths come only from the command line,
** never from the request. */
#include "serve.h"
#include "tensormorph/gate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static json_t *release_error(int *status, int code, const char *msg) {
    *status = code;
    json_t *d = cli_json_doc("error");
    json_object_set_new(d, "status", json_integer(code));
    json_object_set_new(d, "error", json_string(msg));
    return d;
}

json_t *api_release(serve_ctx *c, int *status) {
    const cli_args *a = c->release_args;
    tm_gate_params p;
    memset(&p, 0, sizeof p);
    if (a) {
        p.manifest_path = cli_get(a, "manifest");
        p.evidence_path = cli_get(a, "evidence");
        p.policy_path = cli_get(a, "policy");
        p.target = cli_get(a, "target"); /* or its old spelling --release-target */
        p.rollback_path = cli_get(a, "rollback");
    }
    if (!p.manifest_path || !p.evidence_path || !p.policy_path) {
        json_t *d = cli_json_doc("gate");
        json_object_set_new(d, "configured", json_false());
        json_object_set_new(d, "hint", json_string("start serve with --manifest M --evidence E --policy P "
                                                   "(and optionally --target T --canary F --rollback PATH) "
                                                   "to see the release gate here"));
        return d;
    }
    if (cli_opt_canary(a, &p.have_canary, &p.canary))
        return release_error(status, 400, "serve --canary must be a fraction in (0, 1]");
    tm_gate_result r;
    tm_err err;
    tm_status s = tm_gate_run(&p, &r, &err);
    if (s) return release_error(status, s == TM_E_NOMEM ? 500 : 400, err.msg);
    json_t *d = json_loads(r.report_json, 0, NULL);
    tm_gate_result_free(&r);
    if (!d) return release_error(status, 500, "out of memory");
    json_object_set_new(d, "configured", json_true());
    json_t *ev = json_load_file(p.evidence_path, 0, NULL);
    json_t *llm = json_object_get(ev, "llm");
    if (json_is_object(llm)) json_object_set(d, "llm", llm);
    json_decref(ev);
    return d;
}
