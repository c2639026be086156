/* cmd_serve.c: `tensormorph serve PATH [--ref REF]`: the web UI and its JSON API (cli/serve/). */
#include "serve/serve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const cli_opt opts_serve[] = {
    CLI_OPT_REF("full-precision checkpoint: enables the Quantization Diff, error heatmaps and errors in the Scalar Inspector"),
    {"port", 0, "N", 0, "TCP port, 0..65535; 0 picks a free one (default 8765)"},
    {"host", 0, "ADDR", 0, "address to listen on (default 127.0.0.1; any other address prints a warning)"},
    {"cache-mb", 0, "N", 0, "memory for heatmap summary pyramids, MiB, 1..65536 (default 512)"},
    {"allow-host", 0, "NAME", 1, "also accept requests addressed to NAME (this machine's name or address, when --host is not loopback); at most 16"},
    {"samples", 0, "SAMPLES", 1, "calibration samples for the Calibration Lab page, as calibrate takes them (.npy, FILE.npz:KEY, PATH:TENSOR); each one batch"},
    CLI_OPT_MANIFEST("Release page: the quantize job's manifest to gate (with --evidence and --policy; see `tensormorph gate`)"),
    CLI_OPT_EVIDENCE("Release page: evidence from `tensormorph evidence`"),
    CLI_OPT_POLICY("Release page: release policy (tensormorph.policy/1)"),
    CLI_OPT_TARGET("Release page: policy target (as gate --target)"),
    CLI_OPT_CANARY("Release page: planned canary share of traffic, in (0, 1] (gate --canary)"),
    CLI_OPT_ROLLBACK("Release page: rollback artifact (gate --rollback)"),
    {"sensitivity", 0, "FILE", 0, "a `tensormorph sensitivity` result: /api/v1/arch gains each unit's rank, KLD and planned scheme"},
    CLI_OPT_END,
};
const char details_serve[] =
    "Serves a local web UI over the opened checkpoint: Architecture tree with quantization\n"
    "boundaries, Heatmap, Scalar Inspector and (with --ref) the Quantization Diff, plus the JSON\n"
    "API of docs/API.md. Prints the URL on stdout once listening. Read-only; the page and its\n"
    "scripts are compiled into the binary; requests whose Host or Origin is not the address\n"
    "served are refused (DNS rebinding). Stop with Ctrl-C.";

int cmd_serve(const cli_cmd *cmd, cli_args *a) {
    long port, cache_mb;
    int rc;
    if ((rc = cli_opt_long(cmd, a, "port", 8765, 0, 65535, &port))) return rc;
    if ((rc = cli_opt_long(cmd, a, "cache-mb", 512, 1, 65536, &cache_mb))) return rc;
    const char *host = cli_get(a, "host") ? cli_get(a, "host") : "127.0.0.1";
    serve_ctx c;
    memset(&c, 0, sizeof c);
    c.path = a->pos[0];
    c.ref_path = cli_get(a, "ref");
    c.calib_args = a; /* --samples, read by /api/v1/calibrate (serve/api_calib.c) */
    c.release_args = a; /* --manifest --evidence --policy ..., read by /api/v1/release (serve/api_release.c) */
    c.cache_bytes = (uint64_t)cache_mb << 20;
    int na = cli_n(a, "allow-host");
    if (na > (int)(sizeof c.allow / sizeof c.allow[0])) return cli_usage_error(cmd, "--allow-host: at most 16 names");
    for (int k = 0; k < na; k++) {
        const char *h = cli_get_i(a, "allow-host", k);
        if (!*h || strlen(h) > 253 || strpbrk(h, "/ \t\r\n[]@"))
            return cli_usage_error(cmd, "--allow-host: '%s' is not a host name or address", h);
        c.allow[c.n_allow++] = h;
    }
    const char *sp = cli_get(a, "sensitivity");
    if (sp) {
        tm_err err;
        char *txt = cli_read_text(sp, &err);
        if (!txt) return cli_fail(err.code, &err);
        c.sensitivity = json_loads(txt, 0, NULL);
        free(txt);
        json_t *sch = json_object_get(c.sensitivity, "schema");
        if (!json_is_string(sch) || strcmp(json_string_value(sch), "tensormorph.sensitivity/1") != 0 ||
            json_object_get(c.sensitivity, "probe")) {
            json_decref(c.sensitivity);
            return cli_error(EXIT_INPUT, "--sensitivity %s: not a whole tensormorph.sensitivity/1 result (a --probe part: merge it first)", sp);
        }
    }
    if ((rc = cli_open(c.path, &c.f))) { json_decref(c.sensitivity); return rc; }
    if (c.ref_path && (rc = cli_open(c.ref_path, &c.ref))) { tm_close(c.f); json_decref(c.sensitivity); return rc; }
    pthread_mutex_init(&c.mu, NULL);
    rc = serve_run(&c, host, (int)port);
    serve_ctx_free_cache(&c);
    pthread_mutex_destroy(&c.mu);
    tm_close(c.ref);
    tm_close(c.f);
    json_decref(c.sensitivity);
    return rc;
}
