/* qjob_part.c: what a compressed-tensors part records per quantized tensor, and merge's flagging
** of the whole model from those records (qjob_part.h). */
#include "qjob_part.h"
#include "manifest.h"

#include <math.h>
#include <string.h>

/* The tm_errsum fields, in one table for both directions. */
#define ES_D(f) {#f, offsetof(tm_errsum, f), 1}
#define ES_I(f) {#f, offsetof(tm_errsum, f), 0}
static const struct { const char *name; size_t off; int is_double; } es_fields[] = {
    ES_I(n), ES_D(sqnr_db), ES_D(rmse), ES_D(rmse_lsb), ES_D(max_abs_err), ES_D(max_err_lsb),
    ES_D(max_err_lsb_unclipped), ES_I(n_beyond_half_lsb), ES_D(clipped_fraction), ES_I(n_nonfinite),
    ES_I(worst_group), ES_D(worst_group_rmse_lsb), ES_D(cosine), ES_I(n_bad_scales),
};

json_t *tm__ct_part_qentry(const tm_qdiff_entry *q) {
    json_t *e = json_object();
    for (size_t k = 0; k < sizeof es_fields / sizeof es_fields[0]; k++) {
        const char *p = (const char *)&q->e + es_fields[k].off;
        double d;
        int64_t i;
        if (es_fields[k].is_double) {
            memcpy(&d, p, sizeof d);
            json_object_set_new(e, es_fields[k].name, tm__manifest_num(d));
        } else {
            memcpy(&i, p, sizeof i);
            json_object_set_new(e, es_fields[k].name, json_integer((json_int_t)i));
        }
    }
    return json_pack("{sssbso}", "scheme", q->scheme, "clip_expected", q->clip_expected, "e", e);
}

static int num_of(const json_t *v, double *d) {
    if (json_is_number(v)) { *d = json_number_value(v); return 1; }
    const char *s = json_string_value(v);
    if (!s) return 0;
    if (!strcmp(s, "nan")) *d = NAN;
    else if (!strcmp(s, "inf")) *d = INFINITY;
    else if (!strcmp(s, "-inf")) *d = -INFINITY;
    else return 0;
    return 1;
}

tm_status tm__ct_merge_fix(json_t *man, json_t *const *records, int64_t n_tensors, tm_err *err) {
    json_t *tensors = json_object_get(man, "tensors"), *results = json_object_get(man, "results");
    if (!json_is_array(tensors) || (int64_t)json_array_size(tensors) != n_tensors || !json_is_object(results))
        return tm__err_set(err, TM_E_CORRUPT, -1, "part 0's manifest has no tensors/results of the right size");
    tm_qdiff_result qr;
    memset(&qr, 0, sizeof qr);
    qr.entries = tm__calloc((size_t)n_tensors + 1, sizeof *qr.entries);
    if (!qr.entries) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t t = 0; t < n_tensors; t++) {
        const json_t *r = records[t];
        if (!r) continue;
        tm_qdiff_entry *q = &qr.entries[qr.n++];
        q->q_index = q->ref_index = t;
        q->name = json_string_value(json_object_get(json_array_get(tensors, (size_t)t), "name"));
        if (!q->name) q->name = "";
        const json_t *e = json_object_get(r, "e");
        const char *sc = json_string_value(json_object_get(r, "scheme"));
        if (!sc || !json_is_object(e) || !json_is_boolean(json_object_get(r, "clip_expected"))) {
            free(qr.entries);
            return tm__err_set(err, TM_E_CORRUPT, -1, "tensor %lld: its record has no scheme/e/clip_expected", (long long)t);
        }
        snprintf(q->scheme, sizeof q->scheme, "%s", sc);
        q->clip_expected = json_is_true(json_object_get(r, "clip_expected"));
        for (size_t k = 0; k < sizeof es_fields / sizeof es_fields[0]; k++) {
            const json_t *v = json_object_get(e, es_fields[k].name);
            char *p = (char *)&q->e + es_fields[k].off;
            double d;
            if (es_fields[k].is_double ? !num_of(v, &d) : !json_is_integer(v)) {
                free(qr.entries);
                return tm__err_set(err, TM_E_CORRUPT, -1, "tensor %lld: its record's e.%s is missing or not a number",
                                   (long long)t, es_fields[k].name);
            }
            if (es_fields[k].is_double) memcpy(p, &d, sizeof d);
            else { int64_t i = (int64_t)json_integer_value(v); memcpy(p, &i, sizeof i); }
        }
    }
    tm_qdiff_flag(&qr);
    for (int64_t k = 0; k < qr.n; k++) {
        json_t *row = json_array_get(tensors, (size_t)qr.entries[k].q_index);
        json_object_set_new(row, "flagged", json_boolean(qr.entries[k].flagged));
        json_object_set_new(row, "flag_reason", json_string(qr.entries[k].reason));
    }
    json_object_set_new(results, "n_flagged", json_integer((json_int_t)qr.n_flagged));
    json_object_set_new(results, "median_sqnr_db", tm__manifest_num(qr.median_sqnr_db));
    free(qr.entries);
    return TM_OK;
}
