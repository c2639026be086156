/* evidence_runner.c: the Node.js runner (runner/evidence.js) for one model (evidence_impl.h),
** in describe mode (the inputs ONNX Runtime requires) or measuring mode: write its job file,
** start `node evidence.js JOB.json` with posix_spawn (no shell; stdout a pipe carrying
** "progress DONE TOTAL" lines, stderr a file kept for errors), wait for it and read its result.
** The job and result formats are documented at the top of runner/evidence.js. */
#include "evidence_impl.h"
#include "../core/jschema.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void tm__ev_result_free(tm__ev_result *r, int64_t n_samples) {
    for (int k = 0; r->out_names && k < r->n_out; k++) free(r->out_names[k]);
    for (int64_t i = 0; r->out_files && i < n_samples * r->n_out; i++) free(r->out_files[i]);
    free(r->out_names);
    free(r->out_files);
    free(r->latency_ms);
    free(r->runtime_version);
    free(r->node);
    memset(r, 0, sizeof *r);
}

/* The runner's stderr as one line (malloc'd; NULL when unreadable or empty): its own last
** "evidence.js: " line when there is one, else the whole text; newlines become " | ". Whole:
** ONNX Runtime puts the cause of a failure at the end of its message. At most 1 MiB is read. */
static char *read_stderr(const char *path) {
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *all = malloc(cap + 1);
    if (!all) { fclose(fp); return NULL; }
    n = fread(all, 1, cap, fp);
    fclose(fp);
    all[n] = '\0';
    /* the runner's own line, when it wrote one: the last that starts a line */
    const char *from = all, *end = all + n;
    for (const char *q = all; q < end; q++) {
        if ((q == all || q[-1] == '\n') && !strncmp(q, "evidence.js: ", 13)) {
            from = q;
        }
    }
    if (from != all) {
        const char *nl = strchr(from, '\n');
        if (nl) end = nl;
    }
    char *line = malloc((size_t)(end - from) * 3 + 1);
    size_t o = 0;
    for (const char *q = from; line && q < end; q++) {
        if (*q == '\n') { memcpy(line + o, " | ", 3); o += 3; }
        else if (*q != '\r') line[o++] = *q;
    }
    free(all);
    if (!line) return NULL;
    while (o && (line[o - 1] == ' ' || line[o - 1] == '|')) o--;
    line[o] = '\0';
    if (!o) { free(line); return NULL; }
    return line;
}

/* Keep the runner's whole stderr where the user can read it after the scratch folder is gone:
** copied to <tmp_dir>/tensormorph-evidence-<phase>-XXXXXX.stderr. malloc'd path, NULL on failure. */
static char *keep_stderr(const tm_evidence_params *p, const char *phase, const char *errp) {
    char *dst = tm__aprintf("%s/tensormorph-evidence-%s-XXXXXX.stderr", p->tmp_dir ? p->tmp_dir : "/tmp", phase);
    if (!dst) return NULL;
    int fd = mkstemps(dst, 7);
    FILE *in = fd >= 0 ? fopen(errp, "rb") : NULL;
    int ok = in != NULL;
    char buf[8192];
    size_t k;
    while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0) ok = write(fd, buf, k) == (ssize_t)k;
    if (in) fclose(in);
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (!ok) { if (fd >= 0) unlink(dst); free(dst); return NULL; }
    return dst;
}

/* The runner's failure as one tm_err line: "<head>: <message>". The message is whole when it
** fits tm_err.msg; else its first 80 characters, " ... ", and as much of its end as fits (the
** end holds ONNX Runtime's cause), and the whole stderr is kept in a file the line names. */
static tm_status runner_failure(tm_err *err, tm_status st, const tm_evidence_params *p, const char *phase,
                                const char *errp, const char *head) {
    char *msg = read_stderr(errp);
    if (!msg) return tm__err_set(err, st, -1, "%s: (no message)", head);
    size_t hl = strlen(head), ml = strlen(msg);
    if (hl + 2 + ml < TM_ERR_MSG_MAX) {
        tm_status r = tm__err_set(err, st, -1, "%s: %s", head, msg);
        free(msg);
        return r;
    }
    char *kept = keep_stderr(p, phase, errp);
    char tail_note[300];
    snprintf(tail_note, sizeof tail_note, " (whole stderr: %s)", kept ? kept : "could not be kept");
    free(kept);
    size_t budget = TM_ERR_MSG_MAX - 1, used = hl + 2 + strlen(tail_note) + 5;
    size_t headn = 80, tailn = budget > used + headn ? budget - used - headn : 0;
    if (headn + tailn >= ml) { headn = ml; tailn = 0; }
    tm_status r = tm__err_set(err, st, -1, "%s: %.*s ... %s%s", head, (int)headn, msg, msg + ml - tailn, tail_note);
    free(msg);
    return r;
}

static tm_status write_job(const tm_evidence_params *p, const char *model, const tm__ev_inputs *in,
                           const tm__ev_samples *smp, const char *out_dir, const char *job_path,
                           tm_err *err) {
    json_t *job = json_object(), *samples = json_array();
    json_object_set_new(job, "node_modules", json_string(p->node_modules));
    json_object_set_new(job, "model", json_string(model));
    json_object_set_new(job, "threads", json_integer(p->threads));
    json_object_set_new(job, "warmup", json_integer(p->warmup));
    json_object_set_new(job, "runs", json_integer(p->runs));
    json_object_set_new(job, "out_dir", json_string(out_dir));
    for (int64_t i = 0; i < smp->n; i++) {
        json_t *o = json_object(), *m = json_object();
        json_object_set_new(o, "id", json_string(smp->ids[i]));
        for (int k = 0; k < in->n; k++)
            json_object_set_new(m, in->in[k].name, json_string(smp->files[i * in->n + k]));
        json_object_set_new(o, "inputs", m);
        json_array_append_new(samples, o);
    }
    json_object_set_new(job, "samples", samples);
    int rc = json_dump_file(job, job_path, JSON_COMPACT);
    json_decref(job);
    if (rc != 0) return tm__err_sys(err, errno, "%s: cannot write the runner's job", job_path);
    return TM_OK;
}

/* Start the runner and follow its progress; *status gets waitpid's status. */
static tm_status spawn_runner(const tm_evidence_params *p, const char *phase, const char *job_path,
                              const char *stderr_path, int *status, tm_err *err) {
    int pfd[2];
    if (pipe(pfd) != 0) return tm__err_sys(err, errno, "%s: pipe", phase);
    fcntl(pfd[0], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[1]);
    posix_spawn_file_actions_addopen(&fa, 2, stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)p->node, (char *)p->runner_script, (char *)job_path, NULL};
    pid_t pid;
    int rc = strchr(p->node, '/') ? posix_spawn(&pid, p->node, &fa, NULL, argv, environ)
                                  : posix_spawnp(&pid, p->node, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        return tm__err_sys(err, rc, "%s: cannot start Node.js as '%s' (install Node.js 18 or newer, "
                           "or set TM_NODE to its path)", phase, p->node);
    }
    FILE *rf = fdopen(pfd[0], "r");
    char line[256];
    int killed = 0;
    while (rf) {
        if (p->cancel && *p->cancel && !killed) { kill(pid, SIGTERM); killed = 1; }
        if (!fgets(line, sizeof line, rf)) {
            if (ferror(rf) && errno == EINTR) { clearerr(rf); continue; }
            break;
        }
        unsigned long long done, total;
        if (p->progress && sscanf(line, "progress %llu %llu", &done, &total) == 2)
            p->progress(p->progress_ud, phase, done, total);
    }
    if (rf) fclose(rf);
    else close(pfd[0]);
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) return tm__err_sys(err, errno, "%s: waitpid", phase);
        if (p->cancel && *p->cancel && !killed) { kill(pid, SIGTERM); killed = 1; }
    }
    if (p->cancel && *p->cancel) return tm__err_set(err, TM_E_CANCELLED, -1, "%s: cancelled", phase);
    return TM_OK;
}

static int plain_name(const char *s) {
    return s && s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

static tm_status read_result(const char *phase, const char *res_path, const char *out_dir,
                             const tm_evidence_params *p, const tm__ev_samples *smp,
                             tm__ev_result *r, tm_err *err) {
    json_error_t je;
    json_t *doc = json_load_file(res_path, 0, &je);
    if (!doc) return tm__err_set(err, TM_E_IO, -1, "%s: the runner left no readable %s: %s", phase, res_path, je.text);
    tm_status s = TM_OK;
    json_t *names = json_object_get(doc, "output_names"), *samples = json_object_get(doc, "samples");
    json_t *rss = json_object_get(doc, "peak_rss_bytes");
    const char *ver = json_string_value(json_object_get(doc, "runtime_version"));
    const char *node = json_string_value(json_object_get(doc, "node"));
    if (!json_is_array(names) || json_array_size(names) < 1 || !json_is_array(samples) ||
        (int64_t)json_array_size(samples) != smp->n || !json_is_number(rss) || !ver || !node)
        s = tm__err_set(err, TM_E_IO, -1, "%s: %s: not the runner's result (output_names, samples "
                        "[%lld], peak_rss_bytes, runtime_version, node)", phase, res_path, (long long)smp->n);
    int n_out = s ? 0 : (int)json_array_size(names);
    if (!s) {
        r->n_out = n_out;
        r->out_names = tm__calloc((size_t)n_out, sizeof *r->out_names);
        r->out_files = tm__calloc((size_t)(smp->n * n_out), sizeof *r->out_files);
        r->n_latency = smp->n * p->runs;
        r->latency_ms = tm__calloc((size_t)r->n_latency, sizeof *r->latency_ms);
        r->runtime_version = tm__strdup(ver);
        r->node = tm__strdup(node);
        json_int_t rb = 0;
        char jp[600];
        snprintf(jp, sizeof jp, "%s: %s", phase, res_path);
        s = tm__json_int(rss, jp, "$.peak_rss_bytes", &rb, err);
        r->peak_rss_bytes = rb;
        if (!s && (!r->out_names || !r->out_files || !r->latency_ms || !r->runtime_version || !r->node))
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int k = 0; !s && k < n_out; k++) {
        const char *nm = json_string_value(json_array_get(names, (size_t)k));
        if (!nm) { s = tm__err_set(err, TM_E_IO, -1, "%s: %s: output_names[%d] is not a string", phase, res_path, k); break; }
        if (!(r->out_names[k] = tm__strdup(nm))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t i = 0; !s && i < smp->n; i++) {
        json_t *o = json_array_get(samples, (size_t)i);
        json_t *lat = json_object_get(o, "latency_ms"), *files = json_object_get(o, "outputs");
        if (!json_is_array(lat) || (int64_t)json_array_size(lat) != p->runs || !json_is_object(files)) {
            s = tm__err_set(err, TM_E_IO, -1, "%s: %s: samples[%lld] lacks %d latency_ms or outputs",
                            phase, res_path, (long long)i, p->runs);
            break;
        }
        for (int rr = 0; rr < p->runs; rr++) {
            json_t *v = json_array_get(lat, (size_t)rr);
            if (!json_is_number(v) || !(json_number_value(v) >= 0)) {
                s = tm__err_set(err, TM_E_IO, -1, "%s: %s: samples[%lld].latency_ms[%d] is not a "
                                "time", phase, res_path, (long long)i, rr);
                break;
            }
            r->latency_ms[i * p->runs + rr] = json_number_value(v);
        }
        for (int k = 0; !s && k < n_out; k++) {
            const char *fn = json_string_value(json_object_get(files, r->out_names[k]));
            if (!plain_name(fn)) {
                s = tm__err_set(err, TM_E_IO, -1, "%s: %s: samples[%lld] has no file for output '%s'",
                                phase, res_path, (long long)i, r->out_names[k]);
                break;
            }
            if (!(r->out_files[i * n_out + k] = tm__aprintf("%s/%s", out_dir, fn)))
                s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
    }
    json_decref(doc);
    return s;
}

/* Run one job; map a failure to a status with the runner's stderr. `what` names the model(s).
** crash_is_input (the LLM runner): a runner killed by a signal is TM_E_CORRUPT (the runtime died
** on this model) and its whole stderr is always kept in a file the message names. */
static tm_status run_job_as(const tm_evidence_params *p, const char *phase, const char *what,
                            const char *job, const char *errp, int crash_is_input, tm_err *err) {
    int status = 0;
    tm_status s = spawn_runner(p, phase, job, errp, &status, err);
    if (!s && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        char head[TM_ERR_MSG_MAX];
        tm_status st = crash_is_input && WIFSIGNALED(status) ? TM_E_CORRUPT : TM_E_IO;
        if (WIFSIGNALED(status)) {
            snprintf(head, sizeof head, "%s model %s: the runner was killed by signal %d", phase, what, WTERMSIG(status));
        } else {
            int code = WEXITSTATUS(status);
            st = code == 3 ? TM_E_CORRUPT : code == 2 ? TM_E_INTERNAL : TM_E_IO;
            snprintf(head, sizeof head, "%s model %s: the runner failed (exit %d)", phase, what, code);
        }
        s = runner_failure(err, st, p, phase, errp, head);
        if (crash_is_input && err && !strstr(err->msg, "(whole stderr: ")) {
            char *kept = keep_stderr(p, phase, errp);
            size_t ml = strlen(err->msg), room = sizeof err->msg - 1;
            if (kept && ml + strlen(kept) + 20 > room) ml = room > strlen(kept) + 20 ? room - strlen(kept) - 20 : 0;
            if (kept) snprintf(err->msg + ml, sizeof err->msg - ml, " (whole stderr: %s)", kept);
            free(kept);
        }
    }
    return s;
}

static tm_status run_job(const tm_evidence_params *p, const char *phase, const char *what,
                         const char *job, const char *errp, tm_err *err) {
    return run_job_as(p, phase, what, job, errp, 0, err);
}

tm_status tm__ev_run_llm_job(const tm_evidence_params *p, const char *phase, const char *what,
                             const char *job, const char *errp, tm_err *err) {
    return run_job_as(p, phase, what, job, errp, 1, err);
}

tm_status tm__ev_describe(const tm_evidence_params *p, const char *phase, const char *model,
                          const char *scratch, char ***names, int *n_names, tm_err *err) {
    *names = NULL;
    *n_names = 0;
    char *job = tm__aprintf("%s/%s.describe.job.json", scratch, phase);
    char *errp = tm__aprintf("%s/%s.describe.stderr", scratch, phase);
    char *res = tm__aprintf("%s/%s.describe.json", scratch, phase);
    tm_status s = TM_OK;
    if (!job || !errp || !res) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) {
        json_t *j = json_object(), *m = json_array();
        json_object_set_new(j, "node_modules", json_string(p->node_modules));
        json_array_append_new(m, json_string(model));
        json_object_set_new(j, "describe", m);
        json_object_set_new(j, "out_file", json_string(res));
        if (json_dump_file(j, job, JSON_COMPACT) != 0) s = tm__err_sys(err, errno, "%s: cannot write", job);
        json_decref(j);
    }
    if (!s) s = run_job(p, phase, model, job, errp, err);
    json_t *doc = NULL;
    if (!s) {
        json_error_t je;
        doc = json_load_file(res, 0, &je);
        json_t *in = json_object_get(json_array_get(json_object_get(doc, "models"), 0), "inputs");
        size_t n = json_array_size(in);
        if (!json_is_array(in)) s = tm__err_set(err, TM_E_IO, -1, "%s: not the runner's description", res);
        else if (!(*names = tm__calloc(n ? n : 1, sizeof **names))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (size_t i = 0; !s && i < n; i++) {
            const char *nm = json_string_value(json_array_get(in, i));
            if (!nm) s = tm__err_set(err, TM_E_IO, -1, "%s: input name %zu is not a string", res, i);
            else if (!((*names)[(*n_names)++] = tm__strdup(nm))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
    }
    json_decref(doc);
    if (s) tm__ev_names_free(names, n_names);
    free(job); free(errp); free(res);
    return s;
}

void tm__ev_names_free(char ***names, int *n_names) {
    for (int i = 0; *names && i < *n_names; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
    *n_names = 0;
}

tm_status tm__ev_run_model(const tm_evidence_params *p, const char *phase, const char *model,
                           const tm__ev_inputs *in, const tm__ev_samples *smp,
                           const char *scratch, tm__ev_result *out, tm_err *err) {
    memset(out, 0, sizeof *out);
    char *out_dir = tm__aprintf("%s/%s", scratch, phase);
    char *job = tm__aprintf("%s/%s.job.json", scratch, phase);
    char *errp = tm__aprintf("%s/%s.stderr", scratch, phase);
    char *res = tm__aprintf("%s/%s/result.json", scratch, phase);
    tm_status s = TM_OK;
    if (!out_dir || !job || !errp || !res) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s && mkdir(out_dir, 0700) != 0) s = tm__err_sys(err, errno, "%s: cannot create", out_dir);
    if (!s) s = write_job(p, model, in, smp, out_dir, job, err);
    if (!s) s = run_job(p, phase, model, job, errp, err);
    if (!s) s = read_result(phase, res, out_dir, p, smp, out, err);
    if (s) tm__ev_result_free(out, smp->n);
    free(out_dir); free(job); free(errp); free(res);
    return s;
}
