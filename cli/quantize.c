/* quantize.c: the one driver of the quantize command's output forms (quantize.h): open, run,
** report a failure, print the parts every form shares. */
#include "quantize.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int cli_quantize_shard(const cli_cmd *cmd, cli_args *a, int *index, int *count) {
    const char *v = cli_get(a, "shard");
    *index = *count = 0;
    if (!v) return 0;
    int used = 0;
    if (sscanf(v, "%d/%d%n", index, count, &used) != 2 || v[used] || *count < 1 || *count > 100000 || *index < 0 ||
        *index >= *count) {
        *index = *count = 0;
        return cli_usage_error(cmd, "--shard: '%s' is not I/N with 0 <= I < N (e.g. --shard 0/4)", v);
    }
    return 0;
}

int cli_quantize_run(const cli_qform *f, void *ctx, const char *in_path, const char *out, int top) {
    tm_file *in;
    int rc = cli_open(in_path, &in);
    if (rc) return rc;
    tm_err err;
    void *res = NULL;
    tm_status s = f->run(ctx, in, out, &res, &err);
    cli_progress_end();
    if (s) {
        rc = cli_fail(s, &err);
        tm_close(in);
        return rc;
    }
    cli_qtotals t;
    memset(&t, 0, sizeof t);
    f->totals(ctx, res, &t);
    if (f->warn && !g_cli.quiet) f->warn(res, out);
    if (g_cli.json) {
        json_t *man = json_loads(t.manifest_json, 0, NULL);
        json_t *d = cli_json_doc("quantize");
        json_object_set_new(d, "output", json_string(out));
        if (f->json_add) f->json_add(res, d);
        json_object_set_new(d, "manifest", man ? man : json_null());
        cli_json_print(d);
    } else if (!g_cli.quiet) {
        printf("quantized %" PRId64 " of %" PRId64 " %s: %s -> %s (%.2f MB -> %.2f MB) in %.2f s\n", t.n_quantized,
               t.n, t.what, in_path, out, (double)t.src_bytes / 1e6, (double)t.out_bytes / 1e6, t.seconds);
        f->print(ctx, res, in_path, out, top);
    }
    f->free_res(res);
    tm_close(in);
    return 0;
}
