/* cmd_demo.c: `tensormorph demo -o DIR`: write the built-in demo checkpoint. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const cli_opt opts_demo[] = {
    CLI_OPT_OUTPUT("DIR", "directory to write (model.safetensors + config.json)"),
    {"dtype", 0, "T", 0, "F32 (default), F16 or BF16"},
    CLI_OPT_SEED("N", "generator seed (default 1); same seed, same bytes"),
    {"force", 'f', NULL, 0, "replace DIR when it holds a previous tensormorph output (never anything else)"},
    CLI_OPT_END,
};
const char details_demo[] =
    "The demo checkpoint is LLaMA-shaped (4 layers, dim 256, hidden 688, 8 heads, 4 KV heads,\n"
    "vocab 1024, about 3.4M parameters): Gaussian rows of differing scale, outlier input\n"
    "channels (strongest in model.layers.2.mlp.down_proj), an all-zero row\n"
    "(model.layers.1.self_attn.o_proj row 3), RMSNorm weights near 1, an embedding and an\n"
    "untied lm_head. It needs no download. DIR is written as quantize writes OUT: a new path\n"
    "(its parent must exist) or an empty directory (--force: a previous tensormorph output),\n"
    "built in DIR.tmp.<pid> under DIR.lock and renamed; Ctrl-C leaves nothing (exit 130).";

int cmd_demo(const cli_cmd *cmd, cli_args *a) {
    const char *out = cli_get(a, "output");
    if (!out) return cli_usage_error(cmd, "missing -o DIR");
    tm_dtype dt = TM_F32;
    const char *ds = cli_get(a, "dtype");
    if (ds && (tm_dtype_from_name(ds, &dt) != TM_OK || (dt != TM_F32 && dt != TM_F16 && dt != TM_BF16)))
        return cli_usage_error(cmd, "--dtype must be F32, F16 or BF16");
    uint64_t seed = 1;
    const char *ss = cli_get(a, "seed");
    if (ss) {
        char *end;
        errno = 0;
        seed = strtoull(ss, &end, 10);
        if (errno || *end || ss[0] == '-' || end == ss) return cli_usage_error(cmd, "--seed must be a non-negative integer");
    }
    tm_err err;
    tm_status s = tm_write_demo_output(out, dt, seed, cli_has(a, "force"), &g_cli_interrupted, g_cli.argv_line, &err);
    if (s) return cli_fail(s, &err);
    if (g_cli.json) {
        json_t *d = cli_json_doc("demo");
        json_object_set_new(d, "path", json_string(out));
        cli_json_print(d);
    } else if (!g_cli.quiet) {
        printf("wrote demo checkpoint to %s\n", out);
    }
    return 0;
}
