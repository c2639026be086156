/* api_calib.c: GET /api/v1/calibrate (docs/API.md): the `tensormorph calibrate --json` document
** for one tensor of the served checkpoint (or serve's --samples), plus a histogram of the values
** for the Calibration Lab page (web/calib.js). The same request parser, sample loader, run and
** serializer as the command. */
#include "serve.h"
#include "../calibrate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CALIB_API_MAX_ELEMS (1 << 24)  /* samples one request may read (64 MiB of float32) */
#define CALIB_API_MAX_BINS  1024       /* display histogram bins                            */
#define CALIB_API_MAX_BATCHES 64       /* serve --samples arguments                         */
/* Observer cost bounds for one request (docs/API.md), so that one request takes about a second
** at most and the server stays responsive. The entropy search is O(bins^2) per param unit
** (measured, one core: 4096 bins 0.08 s, 8192 0.38 s, 16384 1.3 s, 131072 83 s); the histogram
** observers hold bins counts per unit. */
#define CALIB_API_MAX_ENTROPY_BINS 8192
#define CALIB_API_MAX_ENTROPY_WORK ((int64_t)1 << 27) /* units * bins^2: about 0.8 s          */
#define CALIB_API_MAX_HIST_CELLS   ((int64_t)1 << 24) /* units * bins of the histogram observers */

static json_t *calib_error(int *status, int code, const char *msg) {
    *status = code;
    json_t *d = cli_json_doc("error");
    json_object_set_new(d, "status", json_integer(code));
    json_t *m = json_string(msg);
    if (!m) { /* not UTF-8 (a request's bytes, or a name cut inside a character): show them as '?' */
        char safe[1200];
        size_t k = 0;
        for (; msg[k] && k + 1 < sizeof safe; k++) safe[k] = (unsigned char)msg[k] < 0x80 ? msg[k] : '?';
        safe[k] = '\0';
        m = json_string(safe);
    }
    json_object_set_new(d, "error", m);
    return d;
}

/* batch k's name for messages: the tensor, or serve's k-th --samples argument */
typedef struct api_names { serve_ctx *c; const char *tensor; } api_names;
static const char *api_batch_name(void *ud, int k) {
    api_names *an = ud;
    return an->tensor ? an->tensor : cli_get_i(an->c->calib_args, "samples", k);
}

/* NULL when the observers' cost on these batches is inside the bounds above, else a 400 */
static json_t *check_cost(const calib_req *r, const tm_calib_batch *b, int *status) {
    int64_t units = 1;
    if (r->p.spec.gran.kind == TM_GRAN_CHANNEL) {
        int ax = r->p.spec.gran.axis < 0 ? r->p.spec.gran.axis + b[0].ndim : r->p.spec.gran.axis;
        units = b[0].shape[ax]; /* calibrate_check_batches: the axis exists */
        if (units < 1) units = 1;
    }
    char msg[400];
    for (int k = 0; k < r->n_obs; k++) {
        const tm_observer *o = &r->obs[k];
        if (o->kind != TM_OBS_HISTOGRAM && o->kind != TM_OBS_PERCENTILE && o->kind != TM_OBS_ENTROPY) continue;
        int64_t nb = o->n_bins;
        if (o->kind == TM_OBS_ENTROPY && (nb > CALIB_API_MAX_ENTROPY_BINS || units * nb > CALIB_API_MAX_ENTROPY_WORK / nb)) {
            snprintf(msg, sizeof msg, "bins: the entropy observer costs (param units) x bins^2; over the API at most %d bins "
                     "and units x bins^2 <= 2^27 (about a second), here %" PRId64 " unit(s) x %" PRId64 " bins: use fewer bins, "
                     "or tensormorph calibrate", CALIB_API_MAX_ENTROPY_BINS, units, nb);
            return calib_error(status, 400, msg);
        }
        if (units * nb > CALIB_API_MAX_HIST_CELLS) {
            snprintf(msg, sizeof msg, "bins: %" PRId64 " unit(s) x %" PRId64 " bins exceed the API's bound of 2^24 histogram "
                     "cells per request: use fewer bins, or tensormorph calibrate", units, nb);
            return calib_error(status, 400, msg);
        }
    }
    return NULL;
}

/* "1", "true" -> 1; "0", "false" -> 0; NULL -> -1; else -2 */
static int parse_bool(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "1") || !strcmp(s, "true")) return 1;
    if (!strcmp(s, "0") || !strcmp(s, "false")) return 0;
    return -2;
}

/* The samples of the request: tensor=NAME of the served checkpoint, or samples=1 for serve's
** --samples (each one batch). Fills b[] / bufs[] (freed by the caller); NULL or an error doc. */
static json_t *request_samples(serve_ctx *c, serve_query_fn q, void *ud, int *status, tm_calib_batch *b,
                               float **bufs, int *nb, const char **tensor, int *all_weights) {
    char msg[1100];
    *nb = 0;
    *all_weights = 1;
    *tensor = NULL;
    const char *sq = q(ud, "samples"), *name = q(ud, "tensor");
    if (sq && strcmp(sq, "1"))
        return calib_error(status, 400, "samples must be 1 (serve's --samples) or list");
    if (sq && name) return calib_error(status, 400, "give tensor=NAME or samples=1, not both");
    if (!sq && !name) return calib_error(status, 400, "give tensor=NAME (a tensor of the served checkpoint) or samples=1");
    if (sq) {
        int n = c->calib_args ? cli_n(c->calib_args, "samples") : 0;
        if (n == 0) return calib_error(status, 404, "serve was started without --samples");
        if (n > CALIB_API_MAX_BATCHES) return calib_error(status, 400, "more than 64 --samples");
        int64_t total = 0;
        for (int k = 0; k < n; k++) {
            calib_samples sm;
            const char *arg = cli_get_i(c->calib_args, "samples", k);
            char why[1024];
            if (calibrate_load_samples(arg, &sm, why, sizeof why)) {
                snprintf(msg, sizeof msg, "--samples %.1000s", why);
                return calib_error(status, 400, msg);
            }
            bufs[k] = sm.x;
            *all_weights &= sm.weight;
            b[k].ndim = sm.ndim;
            memcpy(b[k].shape, sm.shape, sizeof b[k].shape);
            b[k].x = sm.x;
            *nb = k + 1;
            if ((total += sm.n) > CALIB_API_MAX_ELEMS) {
                snprintf(msg, sizeof msg, "--samples hold more than %d values: the page calibrates at most that many (use tensormorph calibrate)",
                         CALIB_API_MAX_ELEMS);
                return calib_error(status, 400, msg);
            }
        }
        return NULL;
    }
    json_t *u = json_string(name);
    if (!u) return calib_error(status, 400, "tensor: the name is not valid UTF-8");
    json_decref(u);
    int64_t ti = tm_file_find(c->f, name);
    const tm_tensor *t = tm_file_tensor(c->f, ti); /* any tensor by name: a scale tensor too */
    if (!t) {
        snprintf(msg, sizeof msg, "no tensor named '%.300s'", name);
        return calib_error(status, 404, msg);
    }
    if (calibrate_tensor_ok(t, msg, sizeof msg)) return calib_error(status, 400, msg);
    if (t->n_elems > CALIB_API_MAX_ELEMS) {
        snprintf(msg, sizeof msg, "tensor '%.300s' has %" PRId64 " elements: the page calibrates at most %d (use tensormorph calibrate)",
                 t->name, t->n_elems, CALIB_API_MAX_ELEMS);
        return calib_error(status, 400, msg);
    }
    float *x = malloc((size_t)t->n_elems * sizeof(float));
    if (!x) return calib_error(status, 500, "out of memory");
    bufs[0] = x;
    *nb = 1;
    tm_err err;
    tm_status s = tm_tensor_read_f32(c->f, ti, 0, t->n_elems, x, &err);
    if (s) return calib_error(status, 500, err.msg);
    for (int64_t i = 0; i < t->n_elems; i++)
        if (!isfinite(x[i])) {
            snprintf(msg, sizeof msg, "tensor '%.300s': %s at flat index %" PRId64 ": calibration needs finite samples",
                     t->name, isnan(x[i]) ? "NaN" : "inf", i);
            return calib_error(status, 400, msg);
        }
    b[0].ndim = t->ndim;
    memcpy(b[0].shape, t->shape, sizeof b[0].shape);
    b[0].x = x;
    *tensor = t->name;
    *all_weights = tm_file_format(c->f) != TM_FMT_NPY && tm_file_format(c->f) != TM_FMT_NPZ;
    return NULL;
}

json_t *api_calibrate(serve_ctx *c, serve_query_fn q, void *ud, int *status) {
    char msg[1400];  /* duplicate parameters and NUL bytes: refused for every endpoint (server.c) */
    if (q(ud, "samples") && !strcmp(q(ud, "samples"), "list")) { /* what serve --samples gave */
        json_t *d = cli_json_doc("calibrate_samples"), *sa = json_array();
        int n = c->calib_args ? cli_n(c->calib_args, "samples") : 0;
        for (int k = 0; k < n; k++) json_array_append_new(sa, json_string(cli_get_i(c->calib_args, "samples", k)));
        json_object_set_new(d, "samples", sa);
        return d;
    }
    /* probe=X,Y,...: comma-separated */
    char pbuf[1024];
    const char *probes[CALIB_MAX_PROBES];
    int np = 0;
    const char *pq = q(ud, "probe");
    if (pq && *pq) {
        if (strlen(pq) >= sizeof pbuf) return calib_error(status, 400, "probe: list too long");
        strcpy(pbuf, pq);
        for (char *save = NULL, *tok = strtok_r(pbuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (np == CALIB_MAX_PROBES) return calib_error(status, 400, "probe: at most 64 values");
            probes[np++] = tok;
        }
    }
    int sym = parse_bool(q(ud, "symmetric"));
    if (sym == -2) return calib_error(status, 400, "symmetric must be 1, 0, true or false");
    int rr = parse_bool(q(ud, "reduce_range"));
    if (rr == -2) return calib_error(status, 400, "reduce_range must be 1, 0, true or false");
    long hist_bins = 100;
    const char *hb = q(ud, "hist_bins");
    if (hb) {
        char *end;
        errno = 0;
        hist_bins = strtol(hb, &end, 10);
        if (errno || end == hb || *end || hist_bins < 1 || hist_bins > CALIB_API_MAX_BINS)
            return calib_error(status, 400, "hist_bins must be an integer in [1, 1024]");
    }
    calib_args ca = {.observer = q(ud, "observer"), .convention = q(ud, "convention"), .type = q(ud, "type"),
                     .granularity = q(ud, "granularity"), .symmetric = sym, .bins = q(ud, "bins"),
                     .quantized_bins = q(ud, "quantized_bins"), .qrange = q(ud, "qrange"),
                     .reduce_range = rr == 1, .probes = probes, .n_probes = np};
    calib_req req;
    if (calibrate_parse(&ca, &req, msg, sizeof msg)) return calib_error(status, 400, msg);
    tm_calib_batch b[CALIB_API_MAX_BATCHES];
    float *bufs[CALIB_API_MAX_BATCHES] = {0};
    int nb = 0;
    const char *tname = NULL;
    int all_weights = 0;
    json_t *e = request_samples(c, q, ud, status, b, bufs, &nb, &tname, &all_weights);
    if (e) {
        for (int k = 0; k < nb; k++) free(bufs[k]);
        return e;
    }
    calibrate_default_granularity(&req, all_weights); /* one rule with the CLI and quantize */
    api_names an = {c, tname};
    if (calibrate_check_batches(&req, b, nb, api_batch_name, &an, msg, sizeof msg)) e = calib_error(status, 400, msg);
    if (!e) e = check_cost(&req, b, status);
    if (e) {
        for (int k = 0; k < nb; k++) free(bufs[k]);
        return e;
    }
    tm_err err;
    tm_calib_result *res[CALIB_MAX_OBS] = {0};
    req.p.cancel = &g_cli_interrupted; /* serve's SIGINT/SIGTERM: stop, so the daemon can shut down */
    tm_status s = calibrate_run(&req, b, nb, res, &err);
    if (s) {
        for (int k = 0; k < nb; k++) free(bufs[k]);
        return calib_error(status, s == TM_E_CANCELLED ? 503 : s == TM_E_INVALID_ARG || s == TM_E_NONFINITE || s == TM_E_RANGE ? 400 : 500,
                           err.msg);
    }
    json_t *d = calibrate_json(&req, res, b, nb);
    if (tname) json_object_set_new(d, "tensor", json_string(tname));
    else {
        json_t *sa = json_array();
        for (int k = 0; k < nb; k++) json_array_append_new(sa, json_string(cli_get_i(c->calib_args, "samples", k)));
        json_object_set_new(d, "samples", sa);
    }
    /* display histogram over the sample range (a constant tensor: +-0.5 around it) */
    double lo = res[0]->sample_min, hi = res[0]->sample_max;
    if (!(lo < hi)) { lo -= 0.5; hi += 0.5; }
    int64_t *counts = malloc((size_t)hist_bins * sizeof(int64_t));
    if (counts && tm_calib_histogram_samples(b, nb, lo, hi, (int)hist_bins, counts, &err) == TM_OK) {
        json_t *h = json_object(), *ca_ = json_array(), *ea = json_array();
        for (long k = 0; k < hist_bins; k++) json_array_append_new(ca_, json_integer(counts[k]));
        for (long k = 0; k <= hist_bins; k++) json_array_append_new(ea, json_real(lo + (hi - lo) * (double)k / (double)hist_bins));
        json_object_set_new(h, "counts", ca_);
        json_object_set_new(h, "edges", ea);
        json_object_set_new(d, "histogram", h);
    } else {
        json_decref(d);
        d = calib_error(status, 500, "out of memory for the histogram");
    }
    free(counts);
    for (int k = 0; k < CALIB_MAX_OBS; k++) tm_calib_result_free(res[k]);
    for (int k = 0; k < nb; k++) free(bufs[k]);
    return d;
}

int api_calib_check_samples(const serve_ctx *c) {
    int n = c->calib_args ? cli_n(c->calib_args, "samples") : 0;
    if (n > CALIB_API_MAX_BATCHES) {
        fprintf(stderr, "tensormorph serve: at most %d --samples\n", CALIB_API_MAX_BATCHES);
        return EXIT_USAGE;
    }
    for (int k = 0; k < n; k++) {
        calib_samples sm;
        char why[1024];
        int rc = calibrate_load_samples(cli_get_i(c->calib_args, "samples", k), &sm, why, sizeof why);
        free(sm.x);
        if (rc) {
            fprintf(stderr, "tensormorph serve: --samples %s\n", why);
            return rc;
        }
    }
    return 0;
}
