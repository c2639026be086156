/* obs_cases.c: ../shared/vectors observer cases as calibration problems (obs_cases.h). */
#include "helpers/obs_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/vectors.h"

void tmv_obs_case_free(tmv_obs_case *c) {
    for (int k = 0; k < TMV_MAX_BATCHES; k++) free(c->buf[k]);
    memset(c, 0, sizeof *c);
}

int tmv_torch_observer_case(const char *name, json_t *cj, tmv_obs_case *c) {
    memset(c, 0, sizeof *c);
    json_t *pr = json_object_get(cj, "params");
    const char *dtype = json_string_value(json_object_get(pr, "dtype"));
    const char *qs = json_string_value(json_object_get(pr, "qscheme"));
    const char *call = json_string_value(json_object_get(cj, "call"));
    if (!dtype || !qs || !call) {
        fprintf(stderr, "torch_observer/%s: case.json lacks params.dtype/qscheme or call\n", name);
        return -1;
    }
    c->spec = tm_qspec_default();
    c->spec.convention = TM_CONV_TORCH;
    c->spec.code_dtype = strcmp(dtype, "qint8") == 0 ? TM_I8 : TM_U8;
    c->spec.symmetric = strstr(qs, "symmetric") != NULL;
    c->qmin = json_integer_value(json_object_get(pr, "quant_min"));
    c->qmax = json_integer_value(json_object_get(pr, "quant_max"));
    c->custom = strstr(call, "quant_min=") != NULL;
    c->reduce_range = json_is_true(json_object_get(pr, "reduce_range"));
    json_t *ax = json_object_get(pr, "ch_axis");
    c->spec.gran = ax ? (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = (int)json_integer_value(ax)}
                      : (tm_qgran){.kind = TM_GRAN_TENSOR};
    if (strncmp(name, "movavg", 6) == 0) {
        c->spec.observer = tm_observer_default(TM_OBS_EMA_MINMAX);
        c->spec.observer.averaging_constant = json_number_value(json_object_get(pr, "averaging_constant"));
    } else if (strncmp(name, "histogram", 9) == 0) {
        c->spec.observer = tm_observer_default(TM_OBS_HISTOGRAM);
        c->spec.observer.n_bins = (int)json_integer_value(json_object_get(pr, "bins"));
    } else {
        c->spec.observer = tm_observer_default(TM_OBS_MINMAX);
    }
    tmv_npy in;
    if (tmv_npy_load_case("torch_observer", name, "input.npy", &in) != 0) return -1;
    c->buf[0] = tmv_npy_as_f32(&in);
    if (!c->buf[0] || in.ndim < 1 || in.shape[0] > TMV_MAX_BATCHES) {
        fprintf(stderr, "torch_observer/%s: input.npy: not float or too many batches\n", name);
        tmv_npy_free(&in);
        return -1;
    }
    c->n_batches = (int)in.shape[0];
    int64_t per = in.shape[0] ? in.n / in.shape[0] : 0;
    for (int b = 0; b < c->n_batches; b++) {
        c->batch[b].ndim = in.ndim - 1;
        for (int d = 1; d < in.ndim; d++) c->batch[b].shape[d - 1] = in.shape[d];
        c->batch[b].x = c->buf[0] + b * per;
        snprintf(c->files[b], sizeof c->files[b], "input.npy");
    }
    tmv_npy_free(&in);
    return 0;
}

int tmv_ort_calibration_case(const char *name, json_t *cj, tmv_obs_case *c) {
    memset(c, 0, sizeof *c);
    json_t *pr = json_object_get(cj, "params");
    const char *method = json_string_value(json_object_get(pr, "method"));
    c->spec = tm_qspec_default();
    c->spec.gran.kind = TM_GRAN_TENSOR;
    c->spec.symmetric = json_is_true(json_object_get(pr, "symmetric"));
    if (method && strcmp(method, "entropy") == 0) c->spec.observer = tm_observer_default(TM_OBS_ENTROPY);
    else if (method && strcmp(method, "percentile") == 0) c->spec.observer = tm_observer_default(TM_OBS_PERCENTILE);
    else {
        fprintf(stderr, "ort_calibration/%s: unknown method %s\n", name, method ? method : "(none)");
        return -1;
    }
    c->spec.observer.n_bins = (int)json_integer_value(json_object_get(pr, "num_bins"));
    c->spec.observer.n_quantized_bins = (int)json_integer_value(json_object_get(pr, "num_quantized_bins"));
    c->spec.observer.percentile = json_number_value(json_object_get(pr, "percentile"));
    tm_qspec_range(&c->spec, &c->qmin, &c->qmax);
    for (int b = 0; b < TMV_MAX_BATCHES; b++) {
        char file[32], path[4096];
        snprintf(file, sizeof file, "input_%d.npy", b);
        tmv_case_path(path, sizeof path, "ort_calibration", name, file);
        FILE *f = fopen(path, "rb");
        if (!f) break;
        fclose(f);
        tmv_npy in;
        if (tmv_npy_load_case("ort_calibration", name, file, &in) != 0) return -1;
        c->buf[b] = tmv_npy_as_f32(&in);
        c->batch[b].ndim = in.ndim;
        memcpy(c->batch[b].shape, in.shape, sizeof in.shape);
        c->batch[b].x = c->buf[b];
        memcpy(c->files[b], file, sizeof file);
        c->n_batches = b + 1;
        tmv_npy_free(&in);
        if (!c->buf[b]) return -1;
    }
    return c->n_batches > 0 ? 0 : -1;
}
