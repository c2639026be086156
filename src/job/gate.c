/* gate.c: the release gate (tensormorph/gate.h). Reads manifest, evidence and policy, runs every
** check whatever failed before it (each check needs only the inputs it reads), and writes the
** verdict as tensormorph.gate/1 JSON: {"schema", "verdict", "exit_code", "target", "inputs",
** "checks": [{"name", "status" (pass | fail | not_run | skipped), "reason", "evidence"}],
** "reasons": ["<check>: <reason>", ...]} (docs/gate.md). */
#include "../core/core.h"
#include "../core/fsutil.h"
#include "../core/jschema.h"
#include "tensormorph/compat.h"
#include "tensormorph/evidence.h"
#include "tensormorph/gate.h"
#include "gate_llm.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---- percentiles --------------------------------------------------------------------------- */

/* nearest-rank percentile of unsorted samples (tm_percentile_nearest_rank wants them sorted) */
static double percentile_of(double *samples, int64_t n, int p) {
    qsort(samples, (size_t)n, sizeof *samples, tm__cmp_double);
    return tm_percentile_nearest_rank(samples, n, p);
}

/* ---- the report ------------------------------------------------------------------------ */

typedef struct gate {
    json_t *checks, *reasons;
    int     unparseable, n_failed;
    json_t *table;                 /* the compat table (targets' evidence specs)            */
    const char *man_path, *ev_path, *pol_path; /* the inputs, named in messages           */
    const char *target;            /* the policy target, for JSON paths into the policy     */
} gate;

static void add_check(gate *g, const char *name, const char *status, json_t *evidence, const char *fmt, ...)
    TM_PRINTF(5, 6);
static void add_check(gate *g, const char *name, const char *status, json_t *evidence, const char *fmt, ...) {
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(name));
    json_object_set_new(c, "status", json_string(status));
    json_object_set_new(c, "reason", json_string(reason));
    json_object_set_new(c, "evidence", evidence ? evidence : json_object());
    json_array_append_new(g->checks, c);
    if (!strcmp(status, "fail")) {
        g->n_failed++;
        char *line = tm__aprintf("%s: %s", name, reason);
        json_array_append_new(g->reasons, json_string(line ? line : reason));
        free(line);
    }
}

/* report the checks gate_llm.c appended to arr (taken) */
static void add_checks(gate *g, json_t *arr) {
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c)
        add_check(g, tm__json_str(c, "name"), tm__json_str(c, "status"), json_incref(json_object_get(c, "evidence")), "%s",
                  tm__json_str(c, "reason"));
    json_decref(arr);
}

/* ---- reading integers ------------------------------------------------------------------ */

/* Integer `key` of obj (a JSON integer or an integral real such as 4.0 or 1e12, which the schemas'
** "integer" admits: tm__json_int). Returns 1 and sets *out when present and usable, 0 (*out = 0)
** when absent, -1 when present but fractional or outside int64: that adds a failed
** "inputs.integers" check naming file and JSON path (path_fmt, printf-style) and marks the run
** unparseable (exit 3). */
static int gint(gate *g, const json_t *obj, const char *key, const char *file, json_int_t *out, const char *path_fmt, ...)
    TM_PRINTF(6, 7);
static int gint(gate *g, const json_t *obj, const char *key, const char *file, json_int_t *out, const char *path_fmt, ...) {
    *out = 0;
    const json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    char path[400];
    va_list ap;
    va_start(ap, path_fmt);
    vsnprintf(path, sizeof path, path_fmt, ap);
    va_end(ap);
    tm_err err;
    tm_err_clear(&err);
    if (tm__json_int(v, file, path, out, &err) == TM_OK) return 1;
    *out = 0;
    g->unparseable = 1;
    json_t *ev = json_object();
    json_object_set_new(ev, "file", json_string(file));
    json_object_set_new(ev, "path", json_string(path));
    add_check(g, "inputs.integers", "fail", ev, "%s", err.msg);
    return -1;
}

/* ---- reading inputs -------------------------------------------------------------------- */

/* Load `path` as JSON and validate it against the embedded schema `schema`. On any problem a
** failed check `check` is added and NULL returned; a file that is not JSON, or holds a value of
** the wrong type or range, marks the run unparseable; a missing file or a missing key does not
** (incomplete). */
static json_t *load_input(gate *g, const char *check, const char *what, const char *path, const char *schema) {
    struct stat st;
    json_t *ev = json_object();
    json_object_set_new(ev, "path", json_string(path));
    if (stat(path, &st) != 0) {
        add_check(g, check, "fail", ev, "%s %s: %s (missing %s)", what, path, strerror(errno), what);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        add_check(g, check, "fail", ev, "%s %s: not a regular file", what, path);
        return NULL;
    }
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        g->unparseable = 1;
        add_check(g, check, "fail", ev, "%s %s: not valid JSON: line %d column %d (byte %d): %s", what, path,
                  je.line, je.column, je.position, je.text);
        return NULL;
    }
    tm_err err;
    tm_err_clear(&err);
    tm_status s = tm__jschema_validate_named(schema, doc, path, &err);
    if (s) {
        if (s != TM_E_CORRUPT || !strstr(err.msg, "missing required property")) g->unparseable = 1;
        add_check(g, check, "fail", ev, "%s %s", what, err.msg);
        json_decref(doc);
        return NULL;
    }
    add_check(g, check, "pass", ev, "%s %s is valid %s", what, path,
              json_string_value(json_object_get(doc, "schema")) ? json_string_value(json_object_get(doc, "schema")) : schema);
    return doc;
}


static int file_exists(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- manifest checks ------------------------------------------------------------------- */

typedef struct artifact {
    char  *path;        /* the artifact to open: the directory of a multi-file output or the file */
    char **files;       /* resolved path of each output file                                      */
    int    n_files;
} artifact;

static void artifact_free(artifact *a) {
    for (int i = 0; i < a->n_files; i++) free(a->files[i]);
    free(a->files);
    free(a->path);
}

/* Where output file `name` is: beside the manifest first (the manifest travels with its output),
** then under/at the manifest's output.path. malloc'd; NULL when none exists. */
static char *resolve_output_file(const char *manifest_path, const char *out_path, const char *name) {
    char *md = tm__dirname(manifest_path);
    char *c1 = md ? tm__aprintf("%s/%s", md, name) : NULL;
    free(md);
    if (c1 && file_exists(c1)) return c1;
    free(c1);
    if (is_dir(out_path)) {
        char *c2 = tm__aprintf("%s/%s", out_path, name);
        if (c2 && file_exists(c2)) return c2;
        free(c2);
    } else if (out_path && file_exists(out_path)) {
        const char *b = strrchr(out_path, '/') ? strrchr(out_path, '/') + 1 : out_path;
        if (!strcmp(b, name)) return tm__strdup(out_path);
    }
    return NULL;
}

/* NULL when an output file name stays inside the manifest's folder, else why not: an absolute path
** or a ".." component would make the gate hash (and compat open) a file the manifest does not own. */
static const char *unsafe_file_name(const char *name) {
    if (!name || !name[0]) return "an empty file name";
    if (name[0] == '/') return "an absolute path (output files are named relative to the manifest's folder)";
    for (const char *p = name; *p;) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 2 && p[0] == '.' && p[1] == '.') return "a \"..\" path component (output files must stay inside the manifest's folder)";
        p += l;
        while (*p == '/') p++;
    }
    return NULL;
}

static void check_manifest_files(gate *g, const char *manifest_path, const json_t *man, artifact *art) {
    const json_t *out = json_object_get(man, "output");
    const json_t *files = json_object_get(out, "files");
    const char *out_path = tm__json_str(out, "path"), *format = tm__json_str(out, "format");
    json_t *ev = json_array();
    int bad = 0, no_sum = 0;
    char first_bad[600] = "";
    size_t n = json_array_size(files), i;
    art->files = calloc(n ? n : 1, sizeof *art->files);
    art->n_files = art->files ? (int)n : 0; /* out of memory: no file resolves, the check fails */
    for (i = 0; i < n; i++) {
        const json_t *fe = json_array_get(files, i);
        if (!art->files) { bad++; snprintf(first_bad, sizeof first_bad, "out of memory"); break; }
        const char *name = tm__json_str(fe, "file"), *want = tm__json_str(fe, "sha256");
        json_int_t want_bytes;
        gint(g, fe, "bytes", g->man_path, &want_bytes, "$.output.files[%zu].bytes", i);
        json_t *e = json_object();
        json_object_set_new(e, "file", json_string(name));
        json_object_set_new(e, "expected_sha256", want ? json_string(want) : json_null());
        const char *unsafe = unsafe_file_name(name);
        char *p = art->files && !unsafe ? resolve_output_file(manifest_path, out_path, name) : NULL;
        if (art->files) art->files[i] = p;
        json_object_set_new(e, "path", p ? json_string(p) : json_null());
        if (unsafe) {
            bad++;
            json_object_set_new(e, "ok", json_false());
            if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "$.output.files[%zu].file \"%s\" is refused: %s", i, name ? name : "", unsafe);
        } else if (!want) {
            no_sum++;
            json_object_set_new(e, "ok", json_false());
            if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s: the manifest holds no sha256 (written with --no-checksums)", name);
        } else if (!p) {
            bad++;
            json_object_set_new(e, "ok", json_false());
            if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s: not found beside the manifest nor under %s", name, out_path);
        } else {
            char hex[65];
            uint64_t nb = 0;
            tm_err err;
            if (tm_sha256_file(p, hex, &nb, &err)) {
                bad++;
                json_object_set_new(e, "ok", json_false());
                if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s", err.msg);
            } else {
                int ok = !strcmp(hex, want) && (json_int_t)nb == want_bytes;
                json_object_set_new(e, "actual_sha256", json_string(hex));
                json_object_set_new(e, "bytes", json_integer((json_int_t)nb));
                json_object_set_new(e, "ok", json_boolean(ok));
                if (!ok) {
                    bad++;
                    if (!first_bad[0])
                        snprintf(first_bad, sizeof first_bad, "%s: sha256 %.12s... (%llu bytes) on disk, the manifest says %.12s... (%lld bytes)",
                                 p, hex, (unsigned long long)nb, want, (long long)want_bytes);
                }
            }
        }
        json_array_append_new(ev, e);
    }
    /* the artifact a runtime would load */
    if (art->n_files == 1 && art->files && art->files[0] && !(format && !strcmp(format, "compressed-tensors")))
        art->path = tm__strdup(art->files[0]);
    else if (art->n_files >= 1 && art->files && art->files[0])
        art->path = tm__dirname(art->files[0]);
    json_t *wrap = json_object();
    json_object_set_new(wrap, "files", ev);
    json_object_set_new(wrap, "artifact", art->path ? json_string(art->path) : json_null());
    if (bad || no_sum)
        add_check(g, "manifest.checksums", "fail", wrap, "%d of %zu output file%s do%s not match the manifest: %s",
                  bad + no_sum, n, n == 1 ? "" : "s", bad + no_sum == 1 ? "es" : "", first_bad);
    else
        add_check(g, "manifest.checksums", "pass", wrap, "%zu output file%s match%s the manifest's sha256 and size", n, n == 1 ? "" : "s", n == 1 ? "es" : "");
}

/* A release candidate must have changed something: results.n_quantized >= 1 (written by every
** quantize job, src/job/qjob.c, gguf_job.c, onnx_job.c). A manifest without it, or with 0, is a
** copy of its source, not a quantized artifact. */
static void check_quantized(gate *g, const json_t *man) {
    const json_t *res = json_object_get(man, "results");
    json_int_t nq = 0, nt = 0;
    int r = gint(g, res, "n_quantized", g->man_path, &nq, "$.results.n_quantized");
    gint(g, res, "n_tensors", g->man_path, &nt, "$.results.n_tensors");
    json_t *ev = json_object();
    json_object_set_new(ev, "n_quantized", r > 0 ? json_integer(nq) : json_null());
    json_object_set_new(ev, "n_tensors", json_object_get(res, "n_tensors") ? json_integer(nt) : json_null());
    if (r < 0) add_check(g, "manifest.quantized", "fail", ev, "$.results.n_quantized is unreadable (see inputs.integers)");
    else if (r == 0) add_check(g, "manifest.quantized", "fail", ev, "the manifest has no results.n_quantized: nothing shows the artifact was quantized");
    else if (nq <= 0) add_check(g, "manifest.quantized", "fail", ev, "results.n_quantized is %lld: the job quantized no tensor, the artifact is its source unchanged (not a release candidate)", (long long)nq);
    else add_check(g, "manifest.quantized", "pass", ev, "%lld tensor%s quantized", (long long)nq, nq == 1 ? "" : "s");
}

/* ---- rollback -------------------------------------------------------------------------- */

static void check_rollback(gate *g, const tm_gate_params *p, const json_t *man) {
    const char *path = p->rollback_path;
    if (!path && man) path = tm__json_str(json_array_get(json_object_get(man, "sources"), 0), "path");
    json_t *ev = json_object();
    json_object_set_new(ev, "path", path ? json_string(path) : json_null());
    json_object_set_new(ev, "from", json_string(p->rollback_path ? "--rollback" : "manifest sources[0].path"));
    if (!man) { add_check(g, "rollback", "not_run", ev, "needs the manifest's rollback checksums (manifest unusable)"); return; }
    const json_t *want = json_object_get(json_object_get(man, "rollback"), "sha256");
    if (!path) { add_check(g, "rollback", "fail", ev, "no rollback artifact: give --rollback PATH"); return; }
    if (!file_exists(path)) { add_check(g, "rollback", "fail", ev, "rollback artifact %s: %s", path, strerror(errno)); return; }
    if (json_array_size(want) == 0) {
        add_check(g, "rollback", "fail", ev, "the manifest lists no rollback sha256 (written with --no-checksums): %s cannot be verified", path);
        return;
    }
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(path, NULL, &f, &err);
    if (s) {
        json_object_set_new(ev, "loads", json_false());
        add_check(g, "rollback", "fail", ev, "rollback artifact does not load: %s", err.msg);
        return;
    }
    json_object_set_new(ev, "loads", json_true());
    json_object_set_new(ev, "format", json_string(tm_format_name(tm_file_format(f))));
    json_t *got = json_array();
    int n = tm_file_n_paths(f), matched = 0;
    char bad[600] = "";
    for (int i = 0; i < n; i++) {
        char hex[65];
        if (tm_sha256_file(tm_file_path(f, i), hex, NULL, &err)) { snprintf(bad, sizeof bad, "%s", err.msg); break; }
        json_array_append_new(got, json_string(hex));
        int found = 0;
        size_t k;
        json_t *w;
        json_array_foreach(want, k, w) if (json_is_string(w) && !strcmp(json_string_value(w), hex)) found = 1;
        if (found) matched++;
        else if (!bad[0]) snprintf(bad, sizeof bad, "%s has sha256 %.12s..., not one of the manifest's rollback checksums", tm_file_path(f, i), hex);
    }
    tm_close(f);
    json_object_set_new(ev, "sha256", got);
    json_object_set_new(ev, "expected_sha256", json_deep_copy(want));
    if (!bad[0] && matched == n && (size_t)n == json_array_size(want))
        add_check(g, "rollback", "pass", ev, "%s loads and its %d file%s match%s the manifest's source checksums", path, n, n == 1 ? "" : "s", n == 1 ? "es" : "");
    else if (!bad[0])
        add_check(g, "rollback", "fail", ev, "%s has %d file%s, the manifest's source had %zu", path, n, n == 1 ? "" : "s", json_array_size(want));
    else
        add_check(g, "rollback", "fail", ev, "%s", bad);
}

/* ---- evidence checks ------------------------------------------------------------------- */

static const json_t *table_target(const json_t *table, const char *target) {
    const char *colon = strchr(target, ':');
    size_t fl = colon ? (size_t)(colon - target) : strlen(target), i;
    json_t *tg;
    json_array_foreach(json_object_get(table, "targets"), i, tg) {
        const char *nm = tm__json_str(tg, "name");
        if (nm && strlen(nm) == fl && !strncmp(nm, target, fl)) return tg;
    }
    return NULL;
}

/* Append a reason to why (cap bytes, *u of them used): "; " before all but the first; output
** beyond cap is cut. WHY(...) appends to the local `why` and `u` of the check. */
static void why_add(char *why, size_t cap, size_t *u, const char *fmt, ...) TM_PRINTF(4, 5);
static void why_add(char *why, size_t cap, size_t *u, const char *fmt, ...) {
    if (*u >= cap) return;
    int w = snprintf(why + *u, cap - *u, "%s", *u ? "; " : "");
    if (w > 0) *u += (size_t)w;
    if (*u >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    w = vsnprintf(why + *u, cap - *u, fmt, ap);
    va_end(ap);
    if (w > 0) *u += (size_t)w;
}
#define WHY(...) why_add(why, sizeof why, &u, __VA_ARGS__)

static void check_device(gate *g, const json_t *evd, const char *target) {
    if (!evd || !target) { add_check(g, "evidence.device", "not_run", NULL, "needs the evidence and a policy target"); return; }
    const json_t *rt = json_object_get(evd, "runtime"), *dev = json_object_get(evd, "device");
    json_t *ev = json_object();
    json_object_set_new(ev, "runtime", json_deep_copy(rt));
    json_object_set_new(ev, "device", json_deep_copy(dev));
    char why[800] = "";
    size_t u = 0;
    if (!json_is_true(json_object_get(dev, "measured"))) WHY("device.measured is false: the evidence holds no measurement of a device");
    const json_t *tg = g->table ? table_target(g->table, target) : NULL;
    json_t *llm_spec = tm__gate_llm_target(target) ? tm__gate_llm_spec() : NULL;
    const json_t *spec = llm_spec ? llm_spec : json_object_get(tg, "evidence");
    if (!spec) {
        WHY("no evidence runner measures target '%s' (tensormorph evidence runs %s); the device is unmeasured", target, "onnxruntime-node on cpu");
    } else {
        const char *want_rt = tm__json_str(spec, "runtime"), *want_ep = tm__json_str(spec, "execution_provider"), *want_dev = tm__json_str(spec, "device_kind");
        const char *rn = tm__json_str(rt, "name"), *ep = tm__json_str(rt, "execution_provider"), *dk = tm__json_str(dev, "kind");
        if (!rn || strcmp(rn, want_rt)) WHY("runtime.name is '%s', target %s is measured by %s", rn ? rn : "?", target, want_rt);
        if (!ep || strcmp(ep, want_ep)) WHY("runtime.execution_provider is '%s', target %s needs %s", ep ? ep : "?", target, want_ep);
        if (!dk || strcmp(dk, want_dev)) WHY("device.kind is '%s', target %s needs %s", dk ? dk : "?", target, want_dev);
    }
    json_decref(llm_spec);
    if (why[0]) add_check(g, "evidence.device", "fail", ev, "%s", why);
    else add_check(g, "evidence.device", "pass", ev, "measured on %s (%s, %s)", tm__json_str(dev, "name") ? tm__json_str(dev, "name") : "?",
                   tm__json_str(rt, "name"), tm__json_str(rt, "execution_provider"));
}

/* 1 when every file of a converted model's source (evidence models.X.source.files, non-empty)
** has its sha256 among the strings list (arr of strings, or of objects with "sha256" when key);
** -1 when the model records no source files (it ran as given). */
static int source_in(const json_t *model, const json_t *arr, int objects) {
    const json_t *files = json_object_get(json_object_get(model, "source"), "files");
    if (!json_is_array(files) || !json_array_size(files)) return -1;
    size_t i, j;
    json_t *f, *e;
    json_array_foreach(files, i, f) {
        const char *h = tm__json_str(f, "sha256");
        int found = 0;
        json_array_foreach(arr, j, e) {
            const char *x = objects ? tm__json_str(e, "sha256") : json_string_value(e);
            if (h && x && !strcmp(h, x)) found = 1;
        }
        if (!found) return 0;
    }
    return 1;
}

/* baseline = the manifest's source, candidate = one of its output files; a model the evidence
** converted first (a checkpoint, not a GGUF) is matched by its source files' sha256 instead
** (baseline: all among the rollback checksums; candidate: all among the output files). */
static void check_models(gate *g, const json_t *evd, const json_t *man) {
    if (!evd || !man) { add_check(g, "evidence.models", "not_run", NULL, "needs the evidence and the manifest"); return; }
    const json_t *models = json_object_get(evd, "models");
    const json_t *bm = json_object_get(models, "baseline"), *cm = json_object_get(models, "candidate");
    const char *bs = tm__json_str(bm, "sha256");
    const char *cs = tm__json_str(cm, "sha256");
    const json_t *rb = json_object_get(json_object_get(man, "rollback"), "sha256");
    const json_t *of = json_object_get(json_object_get(man, "output"), "files");
    int b_src = source_in(bm, rb, 0), c_src = source_in(cm, of, 1);
    int b_ok = b_src > 0, c_ok = c_src > 0;
    size_t i;
    json_t *e;
    if (b_src < 0)
        json_array_foreach(rb, i, e)
            if (bs && json_is_string(e) && !strcmp(json_string_value(e), bs)) b_ok = 1;
    if (c_src < 0)
        json_array_foreach(of, i, e)
            if (cs && tm__json_str(e, "sha256") && !strcmp(tm__json_str(e, "sha256"), cs)) c_ok = 1;
    json_t *ev = json_object();
    json_object_set_new(ev, "baseline_sha256", bs ? json_string(bs) : json_null());
    json_object_set_new(ev, "candidate_sha256", cs ? json_string(cs) : json_null());
    json_object_set_new(ev, "baseline_matched_by", json_string(b_src < 0 ? "sha256" : "source.files"));
    json_object_set_new(ev, "candidate_matched_by", json_string(c_src < 0 ? "sha256" : "source.files"));
    if (b_ok && c_ok) {
        add_check(g, "evidence.models", "pass", ev, "the baseline is the manifest's source and the candidate its output");
        return;
    }
    char why[600] = "";
    if (!b_ok && b_src < 0) snprintf(why, sizeof why, "baseline sha256 %.12s... is not the manifest's source (rollback) checksum", bs ? bs : "?");
    if (!b_ok && b_src == 0) snprintf(why, sizeof why, "a source file of the baseline (models.baseline.source.files) is not among the manifest's source (rollback) checksums");
    if (!c_ok)
        snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", why[0] ? "; " : "",
                 c_src < 0 ? "candidate sha256 " : "a source file of the candidate (models.candidate.source.files) is not an output file of the manifest");
    if (!c_ok && c_src < 0)
        snprintf(why + strlen(why), sizeof why - strlen(why), "%.12s... is not an output file of the manifest", cs ? cs : "?");
    add_check(g, "evidence.models", "fail", ev, "the evidence measured other files: %s", why);
}

/* latency samples of a model as doubles; *n = count; NULL when absent or malformed. *bad = the
** index of the first sample <= 0 ms (no inference takes no time: a clock or runner fault), or -1. */
static double *samples_of(const json_t *model, int64_t *n, int64_t *bad) {
    const json_t *a = json_object_get(model, "latency_ms");
    if (!a) a = json_object_get(model, "decode_ms"); /* LLM evidence: per-token decode latency */
    *n = (int64_t)json_array_size(a);
    *bad = -1;
    if (*n < 1) return NULL;
    double *s = tm__malloc_n((size_t)*n, sizeof *s);
    for (int64_t i = 0; s && i < *n; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v)) { free(s); return NULL; }
        s[i] = json_number_value(v);
        if (*bad < 0 && !(s[i] > 0)) *bad = i;
    }
    return s;
}

static void check_protocol(gate *g, const json_t *evd, const json_t *pt) {
    if (!evd) { add_check(g, "evidence.protocol", "not_run", NULL, "needs the evidence"); return; }
    if (tm__gate_llm_evidence(evd)) {
        json_t *arr = json_array();
        tm__gate_llm_protocol(arr, evd, pt);
        add_checks(g, arr);
        return;
    }
    const json_t *proto = json_object_get(evd, "protocol"), *models = json_object_get(evd, "models");
    json_int_t runs, warm, threads, count;
    gint(g, proto, "runs", g->ev_path, &runs, "$.protocol.runs");
    gint(g, proto, "warmup", g->ev_path, &warm, "$.protocol.warmup");
    gint(g, proto, "threads", g->ev_path, &threads, "$.protocol.threads");
    const json_t *inp = json_object_get(proto, "inputs");
    gint(g, inp, "count", g->ev_path, &count, "$.protocol.inputs.count");
    json_int_t nb = (json_int_t)json_array_size(json_object_get(json_object_get(models, "baseline"), "latency_ms"));
    json_int_t nc = (json_int_t)json_array_size(json_object_get(json_object_get(models, "candidate"), "latency_ms"));
    json_t *ev = json_object();
    json_object_set_new(ev, "runs", json_integer(runs));
    json_object_set_new(ev, "warmup", json_integer(warm));
    json_object_set_new(ev, "threads", json_integer(threads));
    json_object_set_new(ev, "inputs_count", json_integer(count));
    json_object_set_new(ev, "inputs_sha256", tm__json_str(inp, "sha256") ? json_string(tm__json_str(inp, "sha256")) : json_null());
    json_object_set_new(ev, "baseline_samples", json_integer(nb));
    json_object_set_new(ev, "candidate_samples", json_integer(nc));
    char why[1000] = "";
    size_t u = 0;
    /* runs and count are >= 1 by the schema; a product beyond int64 cannot match any file */
    json_int_t want = (runs > 0 && count > 0 && count <= INT64_MAX / runs) ? runs * count : -1;
    if (nb != want) WHY("baseline has %lld latency samples, the protocol's runs x inputs = %lld x %lld = %lld", (long long)nb, (long long)runs, (long long)count, (long long)want);
    if (nc != want) WHY("candidate has %lld latency samples, the protocol's runs x inputs = %lld x %lld = %lld", (long long)nc, (long long)runs, (long long)count, (long long)want);
    const json_t *req = json_object_get(pt, "protocol"), *v;
    const char *tg = g->target ? g->target : "?";
    json_int_t want_v;
    /* a requirement present but unreadable (-1) is already a failed inputs.integers check */
    if (gint(g, req, "threads", g->pol_path, &want_v, "$.targets[\"%s\"].protocol.threads", tg) > 0 && want_v != threads)
        WHY("threads %lld, the policy requires %lld", (long long)threads, (long long)want_v);
    if (gint(g, req, "min_runs", g->pol_path, &want_v, "$.targets[\"%s\"].protocol.min_runs", tg) > 0 && runs < want_v)
        WHY("runs %lld < the policy's min_runs %lld", (long long)runs, (long long)want_v);
    if (gint(g, req, "min_warmup", g->pol_path, &want_v, "$.targets[\"%s\"].protocol.min_warmup", tg) > 0 && warm < want_v)
        WHY("warmup %lld < the policy's min_warmup %lld", (long long)warm, (long long)want_v);
    if (gint(g, req, "min_inputs", g->pol_path, &want_v, "$.targets[\"%s\"].protocol.min_inputs", tg) > 0 && count < want_v)
        WHY("inputs.count %lld < the policy's min_inputs %lld", (long long)count, (long long)want_v);
    if ((v = json_object_get(req, "inputs_sha256")) && (!tm__json_str(inp, "sha256") || strcmp(tm__json_str(inp, "sha256"), json_string_value(v))))
        WHY("inputs.sha256 %.12s... differs from the policy's %.12s...", tm__json_str(inp, "sha256") ? tm__json_str(inp, "sha256") : "?", json_string_value(v));
    if (why[0]) add_check(g, "evidence.protocol", "fail", ev, "protocol mismatch: %s", why);
    else add_check(g, "evidence.protocol", "pass", ev, "baseline and candidate measured under one protocol: %lld runs x %lld inputs, %lld threads, warmup %lld",
                   (long long)runs, (long long)count, (long long)threads, (long long)warm);
}

/* one bound {max, max_ratio} on a candidate value against its baseline */
static void check_bound(gate *g, const char *name, const char *what, const char *unit, double cand, double base,
                        const json_t *bound, json_t *ev) {
    int whole = !strcmp(unit, "bytes"); /* byte counts print in full, milliseconds to 6 digits */
    const json_t *mx = json_object_get(bound, "max"), *mr = json_object_get(bound, "max_ratio");
    json_object_set_new(ev, "candidate", json_real(cand));
    json_object_set_new(ev, "baseline", json_real(base));
    if (mx) json_object_set_new(ev, "max", json_real(json_number_value(mx)));
    if (mr) json_object_set_new(ev, "max_ratio", json_real(json_number_value(mr)));
    double ratio = base > 0 ? cand / base : (cand > 0 ? INFINITY : 1.0);
    json_object_set_new(ev, "ratio", isfinite(ratio) ? json_real(ratio) : json_null());
    if (!mx && !mr) { g->unparseable = 1; add_check(g, name, "fail", ev, "the policy's bound for %s has neither max nor max_ratio", what); return; }
    char why[400] = "";
    const char *nf = whole ? "%.0f" : "%.6g";
    char c_s[48], b_s[48], m_s[48];
    snprintf(c_s, sizeof c_s, nf, cand);
    snprintf(b_s, sizeof b_s, nf, base);
    snprintf(m_s, sizeof m_s, nf, mx ? json_number_value(mx) : 0.0);
    if (mx && cand > json_number_value(mx))
        snprintf(why, sizeof why, "candidate %s %s %s > max %s %s", what, c_s, unit, m_s, unit);
    if (mr && !(ratio <= json_number_value(mr)))
        snprintf(why + strlen(why), sizeof why - strlen(why), "%scandidate %s %s %s is %.4gx the baseline's %s %s > max_ratio %.4g",
                 why[0] ? "; " : "", what, c_s, unit, ratio, b_s, unit, json_number_value(mr));
    if (why[0]) add_check(g, name, "fail", ev, "%s", why);
    else add_check(g, name, "pass", ev, "candidate %s %s %s (baseline %s %s) within the policy", what, c_s, unit, b_s, unit);
}

static void check_latency(gate *g, const json_t *evd, const json_t *pt) {
    static const struct { const char *key, *name, *file_key; int p; } P[] = {
        {"p50", "latency.p50", "p50_ms", 50}, {"p95", "latency.p95", "p95_ms", 95}, {"p99", "latency.p99", "p99_ms", 99}};
    const json_t *lat = json_object_get(pt, "latency_ms");
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        const json_t *bound = json_object_get(lat, P[k].key);
        if (!bound) continue;
        if (!evd) { add_check(g, P[k].name, "not_run", NULL, "needs the evidence"); continue; }
        const json_t *models = json_object_get(evd, "models");
        const json_t *bm = json_object_get(models, "baseline"), *cm = json_object_get(models, "candidate");
        int64_t nb, nc, bb, bc;
        double *sb = samples_of(bm, &nb, &bb), *sc = samples_of(cm, &nc, &bc);
        json_t *ev = json_object();
        if (!sb || !sc) {
            free(sb); free(sc);
            add_check(g, P[k].name, "fail", ev, "missing latency samples: the %s has no latency_ms", !sc ? "candidate" : "baseline");
            continue;
        }
        if (bb >= 0 || bc >= 0) {
            const char *who = bc >= 0 ? "candidate" : "baseline";
            int64_t at = bc >= 0 ? bc : bb;
            double val = bc >= 0 ? sc[at] : sb[at];
            free(sb); free(sc);
            add_check(g, P[k].name, "fail", ev, "implausible latency: %s $.models.%s.latency_ms[%lld] is %.6g ms (a sample must be > 0 ms)",
                      g->ev_path, who, (long long)at, val);
            continue;
        }
        double pb = percentile_of(sb, nb, P[k].p), pc = percentile_of(sc, nc, P[k].p);
        free(sb); free(sc);
        json_object_set_new(ev, "method", json_string("nearest-rank over latency_ms (the file's pNN_ms fields are not used)"));
        json_object_set_new(ev, "baseline_samples", json_integer(nb));
        json_object_set_new(ev, "candidate_samples", json_integer(nc));
        const json_t *fb = json_object_get(bm, P[k].file_key), *fc = json_object_get(cm, P[k].file_key);
        json_object_set_new(ev, "file_baseline", json_is_number(fb) ? json_real(json_number_value(fb)) : json_null());
        json_object_set_new(ev, "file_candidate", json_is_number(fc) ? json_real(json_number_value(fc)) : json_null());
        if ((json_is_number(fc) && fabs(json_number_value(fc) - pc) > 1e-9 * (1 + fabs(pc))) ||
            (json_is_number(fb) && fabs(json_number_value(fb) - pb) > 1e-9 * (1 + fabs(pb))))
            json_object_set_new(ev, "note", json_string("the file's pNN_ms disagrees with its own samples; the recomputed value is used"));
        check_bound(g, P[k].name, P[k].key, "ms", pc, pb, bound, ev);
    }
}

static void check_memory(gate *g, const json_t *evd, const json_t *pt) {
    const json_t *bound = json_object_get(pt, "peak_rss_bytes");
    if (!bound) return;
    if (!evd) { add_check(g, "memory.peak_rss", "not_run", NULL, "needs the evidence"); return; }
    const json_t *models = json_object_get(evd, "models");
    json_int_t bi, ci;
    int rb = gint(g, json_object_get(models, "baseline"), "peak_rss_bytes", g->ev_path, &bi, "$.models.baseline.peak_rss_bytes");
    int rc = gint(g, json_object_get(models, "candidate"), "peak_rss_bytes", g->ev_path, &ci, "$.models.candidate.peak_rss_bytes");
    if (rb < 0 || rc < 0) { add_check(g, "memory.peak_rss", "fail", NULL, "peak_rss_bytes is unreadable (see inputs.integers)"); return; }
    if (rb == 0 || rc == 0) {
        add_check(g, "memory.peak_rss", "fail", NULL, "missing evidence: the %s has no peak_rss_bytes", rc == 0 ? "candidate" : "baseline");
        return;
    }
    double b = (double)bi, c = (double)ci;
    check_bound(g, "memory.peak_rss", "peak RSS", "bytes", c, b, bound, json_object());
}

/* every output of one drift map {output: {max_abs, rel_l2, top1_agreement}} against a bound;
** appends reasons to why; returns the outputs checked */
static int drift_against(const json_t *outputs, const json_t *bound, const char *where, char *why, size_t n, json_t *ev) {
    const char *out;
    json_t *d;
    int k = 0;
    json_object_foreach((json_t *)outputs, out, d) {
        k++;
        json_t *e = json_deep_copy(d);
        json_object_set_new(ev, out, e);
        static const struct { const char *bkey, *dkey; int is_min; } B[] = {
            {"max_abs", "max_abs", 0}, {"max_rel_l2", "rel_l2", 0}, {"min_top1_agreement", "top1_agreement", 1}};
        for (size_t q = 0; q < sizeof B / sizeof B[0]; q++) {
            const json_t *bv = json_object_get(bound, B[q].bkey);
            if (!bv) continue;
            const json_t *dv = json_object_get(d, B[q].dkey);
            size_t u = strlen(why);
            if (!json_is_number(dv))
                snprintf(why + u, n - u, "%s%s output '%s': %s is null (not measurable), bound %s %.6g", u ? "; " : "", where, out,
                         B[q].dkey, B[q].bkey, json_number_value(bv));
            else if (B[q].is_min ? json_number_value(dv) < json_number_value(bv) : json_number_value(dv) > json_number_value(bv))
                snprintf(why + u, n - u, "%s%s output '%s': %s %.6g %s %s %.6g", u ? "; " : "", where, out, B[q].dkey,
                         json_number_value(dv), B[q].is_min ? "<" : ">", B[q].bkey, json_number_value(bv));
        }
    }
    return k;
}

static void check_drift(gate *g, const json_t *evd, const json_t *pt) {
    const json_t *pd = json_object_get(pt, "drift");
    const json_t *po = json_object_get(pd, "overall"), *ps = json_object_get(pd, "slices");
    if (po) {
        if (!evd) add_check(g, "drift.overall", "not_run", NULL, "needs the evidence");
        else {
            const json_t *eo = json_object_get(json_object_get(evd, "drift"), "overall");
            char why[1200] = "";
            json_t *ev = json_object();
            int k = drift_against(eo, po, "overall", why, sizeof why, ev);
            if (k == 0) add_check(g, "drift.overall", "fail", ev, "missing evidence: drift.overall lists no output");
            else if (why[0]) add_check(g, "drift.overall", "fail", ev, "%s", why);
            else add_check(g, "drift.overall", "pass", ev, "%d output%s within the overall drift budget", k, k == 1 ? "" : "s");
        }
    }
    if (ps && json_object_size(ps)) {
        if (!evd) { add_check(g, "drift.slices", "not_run", NULL, "needs the evidence"); return; }
        const json_t *es = json_object_get(json_object_get(evd, "drift"), "slices");
        char why[1600] = "";
        json_t *ev = json_object();
        const char *sn;
        json_t *b;
        int n_checked = 0;
        /* named slices must be there */
        json_object_foreach((json_t *)ps, sn, b) {
            if (!strcmp(sn, "*")) continue;
            const json_t *s = json_object_get(es, sn);
            size_t u = strlen(why);
            if (!s) { snprintf(why + u, sizeof why - u, "%smissing evidence: no drift for slice '%s'", u ? "; " : "", sn); continue; }
            char where[160];
            snprintf(where, sizeof where, "slice '%s'", sn);
            json_t *sev = json_object();
            if (drift_against(s, b, where, why, sizeof why, sev) == 0) {
                u = strlen(why);
                snprintf(why + u, sizeof why - u, "%smissing evidence: slice '%s' lists no output", u ? "; " : "", sn);
            }
            json_object_set_new(ev, sn, sev);
            n_checked++;
        }
        const json_t *star = json_object_get(ps, "*");
        if (star) {
            json_t *s;
            if (json_object_size(es) == 0) {
                size_t u = strlen(why);
                snprintf(why + u, sizeof why - u, "%smissing evidence: the policy bounds every slice but the evidence has none", u ? "; " : "");
            }
            json_object_foreach((json_t *)es, sn, s) {
                char where[160];
                snprintf(where, sizeof where, "slice '%s'", sn);
                json_t *sev = json_object_get(ev, sn);
                if (!sev) { sev = json_object(); json_object_set_new(ev, sn, sev); }
                drift_against(s, star, where, why, sizeof why, sev);
                n_checked++;
            }
        }
        if (why[0]) add_check(g, "drift.slices", "fail", ev, "%s", why);
        else add_check(g, "drift.slices", "pass", ev, "%d slice check%s within budget", n_checked, n_checked == 1 ? "" : "s");
    }
}

static void check_compat(gate *g, const tm_gate_params *p, const json_t *pt, const char *target, const artifact *art) {
    const json_t *allowed = json_object_get(pt, "allowed_fallbacks");
    if (!allowed) {
        add_check(g, "compat", "skipped", NULL, "the policy sets no allowed_fallbacks for this target: the runtime contract is not checked");
        return;
    }
    if (!art->path) { add_check(g, "compat", "not_run", NULL, "needs the manifest's artifact on disk"); return; }
    tm_file *f = NULL;
    tm_err err;
    json_t *ev = json_object();
    json_object_set_new(ev, "artifact", json_string(art->path));
    json_object_set_new(ev, "allowed_fallbacks", json_deep_copy(allowed));
    if (tm_open(art->path, NULL, &f, &err)) { add_check(g, "compat", "fail", ev, "the artifact does not open: %s", err.msg); return; }
    tm_compat_report *r = NULL;
    tm_status s = tm_compat_check(f, target, p->compat_table_json, NULL, &r, &err);
    if (s) { tm_close(f); add_check(g, "compat", "fail", ev, "%s", err.msg); return; }
    json_t *bad = json_array();
    int64_t n_bad = 0;
    char first[600] = "";
    for (int64_t i = 0; i < r->n_items; i++) {
        const tm_compat_item *it = &r->items[i];
        if (it->status == TM_COMPAT_NATIVE) continue;
        size_t k;
        json_t *a;
        int ok = 0;
        json_array_foreach(allowed, k, a) if (!strcmp(json_string_value(a), tm_compat_status_name(it->status))) ok = 1;
        if (ok) continue;
        n_bad++;
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(it->name));
        json_object_set_new(e, "describe", json_string(it->describe));
        json_object_set_new(e, "domain", it->domain ? json_string(it->domain) : json_null());
        json_object_set_new(e, "status", json_string(tm_compat_status_name(it->status)));
        json_object_set_new(e, "reason", json_string(it->reason));
        json_object_set_new(e, "source", it->source_url ? json_string(it->source_url) : json_null());
        json_array_append_new(bad, e);
        if (!first[0]) snprintf(first, sizeof first, "%s (%s) is %s: %s", it->name, it->describe, tm_compat_status_name(it->status), it->reason);
    }
    json_t *counts = json_object();
    for (int k = 0; k < TM_COMPAT_STATUS_COUNT; k++)
        json_object_set_new(counts, tm_compat_status_name((tm_compat_status)k), json_integer(r->counts[k]));
    json_object_set_new(ev, "counts", counts);
    json_object_set_new(ev, "not_allowed", bad);
    int64_t n_items = r->n_items;
    tm_compat_report_free(r);
    tm_close(f);
    if (n_bad) add_check(g, "compat", "fail", ev, "%lld of %lld quantized items run in a way the policy does not allow on %s; first: %s",
                         (long long)n_bad, (long long)n_items, target, first);
    else add_check(g, "compat", "pass", ev, "all %lld quantized items are native or an allowed fallback on %s", (long long)n_items, target);
}

static void check_canary(gate *g, const tm_gate_params *p, const json_t *pt) {
    const json_t *c = json_object_get(pt, "canary");
    json_t *ev = json_object();
    json_object_set_new(ev, "planned", p->have_canary ? json_real(p->canary) : json_null());
    if (!c) {
        if (p->have_canary) add_check(g, "canary", "pass", ev, "planned canary share %.4g recorded (the policy sets no minimum)", p->canary);
        else add_check(g, "canary", "skipped", ev, "the policy sets no canary minimum and no --canary was given");
        return;
    }
    double mn = json_number_value(json_object_get(c, "min_fraction"));
    json_object_set_new(ev, "min_fraction", json_real(mn));
    if (!p->have_canary) add_check(g, "canary", "fail", ev, "the policy needs a canary of at least %.4g of traffic: give --canary FRACTION", mn);
    else if (p->canary < mn) add_check(g, "canary", "fail", ev, "planned canary share %.4g < the policy's min_fraction %.4g", p->canary, mn);
    else add_check(g, "canary", "pass", ev, "planned canary share %.4g >= min_fraction %.4g", p->canary, mn);
}

/* ---- the run --------------------------------------------------------------------------- */

void tm_gate_result_free(tm_gate_result *r) {
    if (!r) return;
    free(r->report_json);
    r->report_json = NULL;
}

tm_status tm_gate_run(const tm_gate_params *p, tm_gate_result *out, tm_err *err) {
    memset(out, 0, sizeof *out);
    if (!p || !p->manifest_path || !p->evidence_path || !p->policy_path)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gate: --manifest, --evidence and --policy are all required");
    if (p->have_canary && !(p->canary > 0 && p->canary <= 1))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "gate: --canary must be a fraction in (0, 1], got %g", p->canary);
    gate g;
    memset(&g, 0, sizeof g);
    g.checks = json_array();
    g.reasons = json_array();
    g.table = json_loads(p->compat_table_json ? p->compat_table_json : tm_compat_table_default(), 0, NULL);
    if (!g.checks || !g.reasons) { json_decref(g.checks); json_decref(g.reasons); json_decref(g.table); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }

    g.man_path = p->manifest_path;
    g.ev_path = p->evidence_path;
    g.pol_path = p->policy_path;
    json_t *man = load_input(&g, "inputs.manifest", "manifest", p->manifest_path, "manifest");
    json_t *evd = load_input(&g, "inputs.evidence", "evidence", p->evidence_path, "evidence");
    json_t *pol = load_input(&g, "inputs.policy", "policy", p->policy_path, "policy");

    /* the policy target */
    const char *target = NULL;
    const json_t *pt = NULL;
    if (pol) {
        const json_t *targets = json_object_get(pol, "targets");
        json_t *ev = json_object();
        if (p->target) {
            pt = json_object_get(targets, p->target);
            if (pt) target = p->target;
        } else if (json_object_size(targets) == 1) {
            void *it = json_object_iter((json_t *)targets);
            target = json_object_iter_key(it);
            pt = json_object_iter_value(it);
        }
        json_object_set_new(ev, "target", target ? json_string(target) : json_null());
        g.target = target;
        if (!pt && p->target)
            add_check(&g, "policy.target", "fail", ev, "the policy has no thresholds for target '%s'", p->target);
        else if (!pt)
            add_check(&g, "policy.target", "fail", ev, "the policy has %zu targets: choose one with --target", json_object_size(targets));
        else if (g.table && !table_target(g.table, target) && !tm__gate_llm_target(target))
            add_check(&g, "policy.target", "fail", ev, "target '%s' is not a target of the contract table (tensormorph compat lists them)", target);
        else
            add_check(&g, "policy.target", "pass", ev, "gating on target %s", target);
    } else {
        add_check(&g, "policy.target", "not_run", NULL, "needs the policy");
    }

    artifact art;
    memset(&art, 0, sizeof art);
    if (man) { check_manifest_files(&g, p->manifest_path, man, &art); check_quantized(&g, man); }
    else {
        add_check(&g, "manifest.checksums", "not_run", NULL, "needs the manifest");
        add_check(&g, "manifest.quantized", "not_run", NULL, "needs the manifest");
    }
    check_device(&g, evd, pt ? target : NULL);
    check_models(&g, evd, man);
    check_protocol(&g, evd, pt);
    if (pt) {
        check_latency(&g, evd, pt);
        check_memory(&g, evd, pt);
        check_drift(&g, evd, pt);
        json_t *llm_checks = json_array();
        tm__gate_check_llm(llm_checks, evd, pt, target);
        add_checks(&g, llm_checks);
        check_compat(&g, p, pt, target, &art);
        check_canary(&g, p, pt);
    } else {
        add_check(&g, "thresholds", "not_run", NULL, "latency, memory, drift, compat and canary need a usable policy target");
    }
    check_rollback(&g, p, man);
    artifact_free(&art);

    out->pass = g.n_failed == 0;
    out->unparseable = g.unparseable;
    out->n_checks = (int)json_array_size(g.checks);
    out->n_failed = g.n_failed;
    json_t *doc = json_object();
    json_object_set_new(doc, "schema", json_string("tensormorph.gate/1"));
    json_object_set_new(doc, "verdict", json_string(out->pass ? "PASS" : "FAIL"));
    json_object_set_new(doc, "exit_code", json_integer(out->pass ? 0 : (out->unparseable ? 3 : 1)));
    json_object_set_new(doc, "target", target ? json_string(target) : json_null());
    json_t *inputs = json_object();
    json_object_set_new(inputs, "manifest", json_string(p->manifest_path));
    json_object_set_new(inputs, "evidence", json_string(p->evidence_path));
    json_object_set_new(inputs, "policy", json_string(p->policy_path));
    json_object_set_new(inputs, "rollback", p->rollback_path ? json_string(p->rollback_path) : json_null());
    json_object_set_new(inputs, "canary", p->have_canary ? json_real(p->canary) : json_null());
    json_object_set_new(doc, "inputs", inputs);
    json_object_set_new(doc, "n_checks", json_integer(out->n_checks));
    json_object_set_new(doc, "n_failed", json_integer(out->n_failed));
    json_object_set_new(doc, "checks", g.checks);
    json_object_set_new(doc, "reasons", g.reasons);
    out->report_json = json_dumps(doc, JSON_PRESERVE_ORDER | JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(doc);
    json_decref(man);
    json_decref(evd);
    json_decref(pol);
    json_decref(g.table);
    if (!out->report_json) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return TM_OK;
}
