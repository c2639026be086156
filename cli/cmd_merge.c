/* cmd_merge.c: `tensormorph merge OUT`: assemble the output of a sharded quantize run
** (`quantize IN -o OUT --shard I/N`) from its parts OUT.part-I-of-N (tensormorph/merge.h). */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int cmd_merge(const cli_cmd *cmd, cli_args *a);

const cli_opt opts_merge[] = {
    CLI_OPT_FORCE,
    CLI_OPT_END,
};

const char details_merge[] =
    "Finds the parts OUT.part-I-of-N beside OUT that `tensormorph quantize IN -o OUT --shard I/N`\n"
    "wrote (every part records N), checks each (present; the same tool, recipe, options and\n"
    "source checkpoint as part 0; the same layout; the CRC-32C of every byte range it wrote into\n"
    "the shared output files OUT.parts-of-N), builds OUT in OUT.tmp.<pid> beside it (those files\n"
    "hard-linked, copied where links fail), computes the output's sha256,\n"
    "writes the whole manifest (a one-machine run's, but times, host and command_line, plus\n"
    "\"parts\"), renames it into place and only then removes the parts and OUT.parts-of-N: afterwards only OUT is\n"
    "left. OUT is byte-identical to one `quantize IN -o OUT` with the same options. A missing\n"
    "part fails with exit 4, a damaged or mismatched one with exit 3, each naming the part and\n"
    "the --shard to re-run; the parts stay as they were. docs/scale-out.md.";

int cmd_merge(const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    const char *out = a->pos[0];
    tm_merge_params p;
    memset(&p, 0, sizeof p);
    p.force = cli_has(a, "force");
    p.command_line = g_cli.argv_line;
    p.cancel = &g_cli_interrupted;
    tm_merge_result *r = NULL;
    tm_err err;
    tm_status s = tm_merge(out, &p, &r, &err);
    if (s) return cli_fail(s, &err);
    if (g_cli.json) {
        json_t *d = cli_json_doc("merge");
        json_object_set_new(d, "output", json_string(r->out_path));
        json_object_set_new(d, "format", json_string(r->format));
        json_object_set_new(d, "n_parts", json_integer(r->n_parts));
        json_object_set_new(d, "n_files", json_integer((json_int_t)r->n_files));
        json_object_set_new(d, "copied_bytes", json_integer((json_int_t)r->copied_bytes));
        json_object_set_new(d, "seconds", json_real(r->seconds));
        json_t *man = json_loads(r->manifest_json, 0, NULL);
        json_object_set_new(d, "manifest", man ? man : json_null());
        cli_json_print(d);
    } else if (!g_cli.quiet) {
        printf("merged %d parts into %s (%s, %" PRId64 " files, %.2f MB copied) in %.2f s\n", r->n_parts, r->out_path,
               r->format, r->n_files, (double)r->copied_bytes / 1e6, r->seconds);
    }
    tm_merge_result_free(r);
    return 0;
}
