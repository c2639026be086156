/*
** qnames.c: the one spelling of granularities and observers (include/tensormorph/quant.h
** "Names"). Every writer of a name (manifests, config.json, reports, serve's API) and every
** reader (the CLI's flags, --recipe, the API's query) goes through these, so a recorded recipe
** reads back to the run that wrote it.
*/
#include "tensormorph.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_gran_names[TM_GRAN_COUNT] = {
    [TM_GRAN_TENSOR] = "tensor",
    [TM_GRAN_CHANNEL] = "channel",
    [TM_GRAN_GROUP] = "group",
    [TM_GRAN_BLOCK] = "block",
};

static const char *const k_obs_names[TM_OBS_COUNT] = {
    [TM_OBS_MINMAX] = "minmax",       [TM_OBS_EMA_MINMAX] = "ema_minmax",
    [TM_OBS_HISTOGRAM] = "histogram", [TM_OBS_PERCENTILE] = "percentile",
    [TM_OBS_MSE] = "mse",             [TM_OBS_ENTROPY] = "entropy",
};

const char *tm_granularity_kind_name(tm_granularity kind) {
    return kind >= 0 && kind < TM_GRAN_COUNT ? k_gran_names[kind] : "?";
}

size_t tm_granularity_name(const tm_qgran *g, char *buf, size_t n) {
    char tmp[96];
    const char *k = g ? tm_granularity_kind_name(g->kind) : "?";
    if (!g) snprintf(tmp, sizeof tmp, "?");
    else if (g->kind == TM_GRAN_CHANNEL) snprintf(tmp, sizeof tmp, "%s:%d", k, g->axis);
    else if (g->kind == TM_GRAN_GROUP)
        snprintf(tmp, sizeof tmp, "%s:%lld:%d", k, (long long)g->group_size, g->axis);
    else if (g->kind == TM_GRAN_BLOCK)
        snprintf(tmp, sizeof tmp, "%s:%lldx%lld", k, (long long)g->block_h, (long long)g->block_w);
    else snprintf(tmp, sizeof tmp, "%s", k);
    if (buf && n) snprintf(buf, n, "%s", tmp);
    return strlen(tmp);
}

/* A decimal integer in [lo, hi] at *p (no sign for lo >= 0); *p advances past it. */
static int read_int(const char **p, long long lo, long long hi, long long *v) {
    const char *s = *p;
    if (!((*s >= '0' && *s <= '9') || (lo < 0 && *s == '-'))) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || x < lo || x > hi) return -1;
    *v = x;
    *p = end;
    return 0;
}

#define TM_AXIS_LIMIT 1000000 /* any axis a shape check can still reject with its own message */

tm_status tm_granularity_parse(const char *s, tm_qgran *out) {
    if (!s || !out) return TM_E_INVALID_ARG;
    tm_qgran g;
    memset(&g, 0, sizeof g);
    long long a, b;
    const char *p = s;
    if (!strcmp(s, "tensor")) {
        g.kind = TM_GRAN_TENSOR;
    } else if (!strncmp(s, "channel", 7) && (s[7] == '\0' || s[7] == ':')) {
        g.kind = TM_GRAN_CHANNEL;
        p = s + 7;
        if (*p == ':') {
            p++;
            if (read_int(&p, -TM_AXIS_LIMIT, TM_AXIS_LIMIT, &a) || *p) return TM_E_INVALID_ARG;
            g.axis = (int)a;
        }
    } else if (!strncmp(s, "group:", 6)) {
        g.kind = TM_GRAN_GROUP;
        g.axis = -1;
        p = s + 6;
        if (read_int(&p, 1, INT64_MAX, &a)) return TM_E_INVALID_ARG;
        g.group_size = a;
        if (*p == ':') {
            p++;
            if (read_int(&p, -TM_AXIS_LIMIT, TM_AXIS_LIMIT, &b)) return TM_E_INVALID_ARG;
            g.axis = (int)b;
        }
        if (*p) return TM_E_INVALID_ARG;
    } else if (!strncmp(s, "block:", 6)) {
        g.kind = TM_GRAN_BLOCK;
        p = s + 6;
        if (read_int(&p, 1, INT64_MAX, &a) || (*p != 'x' && *p != 'X')) return TM_E_INVALID_ARG;
        p++;
        if (read_int(&p, 1, INT64_MAX, &b) || *p) return TM_E_INVALID_ARG;
        g.block_h = a;
        g.block_w = b;
    } else {
        return TM_E_INVALID_ARG;
    }
    *out = g;
    return TM_OK;
}

/* The shortest %.*g text that strtod reads back to exactly v (finite v). */
static void shortest_double(double v, char *buf, size_t n) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void tm_observer_name(const tm_observer *o, char *buf, size_t n) {
    if (!buf || n == 0) return;
    if (!o || o->kind < 0 || o->kind >= TM_OBS_COUNT) { snprintf(buf, n, "?"); return; }
    const tm_observer d = tm_observer_default(o->kind);
    char text[160], num[32];
    size_t len = (size_t)snprintf(text, sizeof text, "%s", k_obs_names[o->kind]);
    if (o->kind == TM_OBS_PERCENTILE || o->kind == TM_OBS_EMA_MINMAX) {
        shortest_double(o->kind == TM_OBS_PERCENTILE ? o->percentile : o->averaging_constant, num, sizeof num);
        len += (size_t)snprintf(text + len, sizeof text - len, ":%s", num);
    }
    int uses_bins = o->kind == TM_OBS_HISTOGRAM || o->kind == TM_OBS_PERCENTILE || o->kind == TM_OBS_ENTROPY;
    if (uses_bins && o->n_bins != d.n_bins)
        len += (size_t)snprintf(text + len, sizeof text - len, ":bins=%d", o->n_bins);
    if (o->kind == TM_OBS_ENTROPY && o->n_quantized_bins != d.n_quantized_bins)
        snprintf(text + len, sizeof text - len, ":quantized_bins=%d", o->n_quantized_bins);
    snprintf(buf, n, "%s", text);
}

/* One ":bins=N" / ":quantized_bins=N" suffix at *p into r. */
static int read_bins(const char **p, tm_observer_kind k, tm_observer *r) {
    long long v;
    if (!strncmp(*p, "bins=", 5) && k != TM_OBS_MINMAX && k != TM_OBS_EMA_MINMAX && k != TM_OBS_MSE) {
        *p += 5;
        if (read_int(p, 2, 1 << 24, &v)) return -1;
        r->n_bins = (int)v;
        return 0;
    }
    if (!strncmp(*p, "quantized_bins=", 15) && k == TM_OBS_ENTROPY) {
        *p += 15;
        if (read_int(p, 2, 1 << 24, &v)) return -1;
        r->n_quantized_bins = (int)v;
        return 0;
    }
    return -1;
}

tm_status tm_observer_from_name(const char *s, tm_observer *o) {
    if (!s || !o) return TM_E_INVALID_ARG;
    size_t len = strcspn(s, ":");
    int k = 0;
    while (k < TM_OBS_COUNT && !(strlen(k_obs_names[k]) == len && !strncmp(s, k_obs_names[k], len))) k++;
    if (k == TM_OBS_COUNT) return TM_E_INVALID_ARG;
    tm_observer r = tm_observer_default((tm_observer_kind)k);
    const char *p = s + len;
    if (*p == ':' && (k == TM_OBS_PERCENTILE || k == TM_OBS_EMA_MINMAX) && strncmp(p + 1, "bins=", 5)) {
        const char *arg = p + 1;
        char *end;
        double v = strtod(arg, &end);
        if (end == arg || (*end && *end != ':') || !isfinite(v)) return TM_E_INVALID_ARG;
        if (k == TM_OBS_PERCENTILE) {
            if (!(v > 0.0 && v <= 100.0)) return TM_E_INVALID_ARG;
            r.percentile = v;
        } else {
            if (!(v >= 0.0 && v <= 1.0)) return TM_E_INVALID_ARG;
            r.averaging_constant = v;
        }
        p = end;
    }
    while (*p == ':') {
        p++;
        if (read_bins(&p, (tm_observer_kind)k, &r)) return TM_E_INVALID_ARG;
    }
    if (*p) return TM_E_INVALID_ARG;
    if (k == TM_OBS_ENTROPY && r.n_quantized_bins > r.n_bins) return TM_E_INVALID_ARG;
    *o = r;
    return TM_OK;
}
