/* manifest.c: the shared parts of tensormorph.manifest/1 (manifest.h). */
#include "manifest.h"
#include "../core/fsutil.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>


json_t *tm__manifest_num(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

json_t *tm__manifest_host(void) {
    tm_host_info_t h;
    tm_host_info(&h);
    json_t *host = json_object();
    json_object_set_new(host, "cpu_model", json_string(h.cpu_model));
    json_object_set_new(host, "cores", json_integer(h.n_cores));
    json_object_set_new(host, "os", json_string(h.os));
    json_object_set_new(host, "hostname", json_string(h.hostname));
    return host;
}

json_t *tm__manifest_new(const char *command_line, int no_checksums, const tm_file *in,
                         char (*hex)[65]) {
    json_t *man = json_object();
    if (!man) return NULL;
    json_object_set_new(man, "schema", json_string("tensormorph.manifest/1"));
    json_t *tool = json_object();
    json_object_set_new(tool, "name", json_string("tensormorph"));
    json_object_set_new(tool, "version", json_string(TM_VERSION_STRING));
    json_object_set_new(tool, "git_commit", json_string(tm_git_commit()));
    json_object_set_new(man, "tool", tool);
    json_object_set_new(man, "command_line", command_line ? json_string(command_line) : json_null());
    json_object_set_new(man, "host", tm__manifest_host());
    json_object_set_new(man, "checksums", json_string(no_checksums ? "skipped (--no-checksums)" : "sha256"));
    json_t *srcs = json_array();
    json_t *rb = json_array();
    for (int i = 0; i < tm_file_n_paths(in); i++) {
        json_t *o = json_object();
        json_object_set_new(o, "path", json_string(tm_file_path(in, i)));
        json_object_set_new(o, "bytes", json_integer((json_int_t)tm_file_size(in, i)));
        json_object_set_new(o, "sha256", no_checksums || !hex ? json_null() : json_string(hex[i]));
        json_array_append_new(srcs, o);
        if (!no_checksums && hex) json_array_append_new(rb, json_string(hex[i]));
    }
    json_object_set_new(man, "sources", srcs);
    json_t *rollback = json_object();
    json_object_set_new(rollback, "note", json_string("the source checkpoint is the higher-precision rollback artifact; its sha256 values are the rollback checksums"));
    json_object_set_new(rollback, "sha256", rb);
    json_object_set_new(man, "rollback", rollback);
    return man;
}

static void iso_time(time_t t, char *buf, size_t n) {
    struct tm tmv;
    gmtime_r(&t, &tmv);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

void tm__manifest_add_times(json_t *man, time_t wall0, double seconds) {
    char tb[32], te[32];
    iso_time(wall0, tb, sizeof tb);
    iso_time(time(NULL), te, sizeof te);
    json_t *times = json_object();
    json_object_set_new(times, "started_utc", json_string(tb));
    json_object_set_new(times, "finished_utc", json_string(te));
    json_object_set_new(times, "seconds", json_real(seconds));
    json_object_set_new(man, "times", times);
}

void tm__manifest_add_calibration(json_t *man, const char *data) {
    json_t *cal = json_object();
    json_object_set_new(cal, "data", json_string(data));
    json_object_set_new(man, "calibration", cal);
}

json_t *tm__manifest_results_new(int64_t n_tensors, int64_t n_quantized) {
    json_t *r = json_object();
    json_object_set_new(r, "n_tensors", json_integer(n_tensors));
    json_object_set_new(r, "n_quantized", json_integer(n_quantized));
    return r;
}

tm_status tm__manifest_finish(json_t *man, json_t *results, uint64_t source_bytes, uint64_t output_bytes,
                              time_t wall0, double seconds, const char *path, char **json_out, tm_err *err) {
    *json_out = NULL;
    if (results) {
        json_object_set_new(results, "source_bytes", json_integer((json_int_t)source_bytes));
        json_object_set_new(results, "output_bytes", json_integer((json_int_t)output_bytes));
        json_object_set_new(man, "results", results);
    }
    tm__manifest_add_times(man, wall0, seconds);
    *json_out = json_dumps(man, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!*json_out || !path) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return tm__write_file_atomic(path, *json_out, strlen(*json_out), err);
}
json_t *tm__manifest_scheme(const tm_qspec *s, int axis_2d) {
    json_t *o = json_object();
    char ob[96];
    tm_observer_name(&s->observer, ob, sizeof ob);
    json_object_set_new(o, "type", json_string(tm_dtype_get(s->code_dtype)->name));
    json_object_set_new(o, "granularity", json_string(tm_granularity_kind_name(s->gran.kind)));
    if (s->gran.kind == TM_GRAN_CHANNEL || s->gran.kind == TM_GRAN_GROUP) /* 2-D weights: -2 -> 0, -1 -> 1 */
        json_object_set_new(o, "axis", json_integer(axis_2d && s->gran.axis < 0 ? s->gran.axis + 2 : s->gran.axis));
    if (s->gran.kind == TM_GRAN_GROUP) json_object_set_new(o, "group_size", json_integer(s->gran.group_size));
    if (s->gran.kind == TM_GRAN_BLOCK) {
        json_t *b = json_array();
        json_array_append_new(b, json_integer(s->gran.block_h));
        json_array_append_new(b, json_integer(s->gran.block_w));
        json_object_set_new(o, "block", b);
    }
    json_object_set_new(o, "symmetric", json_boolean(s->symmetric));
    json_object_set_new(o, "observer", json_string(ob));
    json_object_set_new(o, "convention", json_string(s->convention == TM_CONV_TORCH ? "torch" : "onnx"));
    json_object_set_new(o, "scale_dtype", json_string(tm_dtype_get(s->scale_dtype)->name));
    json_object_set_new(o, "allow_nonfinite", json_boolean(s->allow_nonfinite));
    return o;
}

json_t *tm__manifest_source_files(const json_t *man) {
    json_t *files = json_array(), *e;
    size_t i;
    if (!files) return NULL;
    json_array_foreach(json_object_get(man, "sources"), i, e) {
        json_t *o = json_object();
        if (!o || json_object_set(o, "path", json_object_get(e, "path")) ||
            json_object_set(o, "sha256", json_object_get(e, "sha256")) || json_array_append_new(files, o)) {
            json_decref(files);
            return NULL;
        }
    }
    return files;
}
