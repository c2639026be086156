/* qpipeline.c: the one quantize driver (pipeline.h, tm__qwriter): open -> plan -> run on the
** shared deterministic pool -> write -> manifest -> finish, once, for every output form. */
#include "pipeline.h"
#include "../core/pool.h"
#include "part.h"

tm_status tm__qpipe_run(const tm__qwriter *w, void *job, const tm_file *in, const char *out,
                        const tm__qpipe_opts *o, tm_err *err) {
    tm__pipe pp;
    tm__qtotals tot;
    memset(&tot, 0, sizeof tot);
    json_t *man = NULL;
    int64_t n_tasks = 0;
    const int part = o->shard_n > 0;
    char *part_path = NULL;
    tm_status s = TM_OK;
    if (part) { /* a part (part.h): refuse OUT now, not at the merge; write OUT.part-i-of-n */
        if (o->shard_i < 0 || o->shard_i >= o->shard_n)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "--shard %d/%d: the index must be in 0..%d", o->shard_i,
                            o->shard_n, o->shard_n - 1);
        else if (!w->tensor_spans)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "--shard: %s cannot be written in parts yet", w->kind_name);
        if (!s) s = tm__pipe_check_target(in, out, w->kind, w->kind_name, o->force, err);
        if (!s && !(part_path = tm__part_path(out, o->shard_i, o->shard_n)))
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (s) {
            memset(&pp, 0, sizeof pp);
            return s;
        }
    }
    /* a part replaces its own previous part (a re-run), never anything else */
    s = tm__pipe_begin(&pp, in, part ? part_path : out, part ? TM__PIPE_DIR : w->kind, w->kind_name,
                       part ? 1 : o->force, o->n_threads, o->cancel, err);
    if (part) {
        pp.shard_i = o->shard_i;
        pp.shard_n = o->shard_n;
        pp.final_out = out;
        pp.part_of_file = w->kind == TM__PIPE_FILE;
        pp.qw = w;
        pp.qjob = job;
        pp.command_line = o->command_line;
        pp.no_checksums = o->no_checksums;
        pp.shard_force = o->force;
        if (!s) s = tm__part_begin(&pp, in, err);
    }
    /* hash the sources in a thread beside the work */
    if (!s) s = tm__pipe_hash_start(&pp, o->no_checksums, err);
    if (!s) {
        s = w->plan(job, &pp, &n_tasks, err);
        if (part) tm__part_planned(&pp, o->command_line, s, err);
    }
    if (!s) s = tm__parallel_for(n_tasks, pp.threads, w->run_task, job, o->cancel, err);
    if (!s) s = tm__pipe_hash_wait(&pp, err);
    if (!s) s = w->write(job, &pp, err);
    if (!s) s = tm__pipe_phase(&pp, "fsync", err);
    if (!s) s = w->results(job, &pp, &tot, err);
    if (!s) {
        tot.seconds = tm__pipe_seconds(&pp);
        man = tm__pipe_manifest_new(&pp, o->command_line, o->no_checksums, pp.threads);
        if (!man) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) s = w->manifest_add(job, man, err);
    if (!s) {
        const char *file1 = tm__pipe_file_target(&pp);
        const char *const *files = &file1;
        int n_files = w->output_files ? w->output_files(job, &files) : (file1 ? 1 : -1);
        s = n_files < 0 ? tm__err_set(err, TM_E_NOMEM, -1, "out of memory")
                        : tm__pipe_add_output(&pp, man, w->format, files, n_files, o->no_checksums || part,
                                              &tot.out_bytes, err); /* a part's files: merge hashes them */
    }
    if (!s) {
        json_t *sum = tm__manifest_results_new(tot.n_tensors, tot.n_quantized);
        s = w->summary(job, man, sum, err);
        if (!s && w->kind == TM__PIPE_FILE &&
            !(tot.manifest_path = part ? tm__aprintf("%s/tensormorph-manifest.json", pp.out) : tm__strdup(pp.man_final)))
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s && part) s = tm__part_record(&pp, w, job, man, err);
        if (s) json_decref(sum);
        else s = tm__pipe_finish(&pp, man, sum, tot.src_bytes, tot.out_bytes, tot.seconds, &tot.manifest_json, err);
    }
    json_decref(man);
    if (!s) { /* the result bookkeeping every job shares */
        *tot.at.out_bytes = tot.out_bytes;
        *tot.at.seconds = tot.seconds;
        *tot.at.manifest_json = tot.manifest_json;
        if (tot.at.manifest_path) *tot.at.manifest_path = tot.manifest_path;
        else free(tot.manifest_path);
        if (tot.at.out_path) *tot.at.out_path = tm__strdup(pp.out);
    } else {
        free(tot.manifest_json);
        free(tot.manifest_path);
    }
    if (s && part) tm__part_refused(&pp);
    tm__pipe_end(&pp);
    free(part_path);
    return s;
}
