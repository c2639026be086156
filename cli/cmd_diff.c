/* cmd_diff.c: `tensormorph diff A B`: weight diff by name. */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

const cli_opt opts_diff[] = {
    {"exit-code", 0, NULL, 0, "exit 1 when the checkpoints differ (diff(1) convention)"},
    CLI_OPT_ALL("also list identical tensors"),
    CLI_OPT_END,
};
const char details_diff[] =
    "Matches tensors by name; where B has no tensor of A's name, by its name in the other\n"
    "convention (Hugging Face <-> llama.cpp GGUF, e.g. model.layers.0.self_attn.q_proj.weight =\n"
    "blk.0.attn_q.weight, with llama.cpp's q/k row permutation undone; docs/formats.md).\n"
    "Lists tensors added, removed, with a changed shape or dtype, and for tensors present in\n"
    "both (values through the view, dequantized where quantized) the max |a-b|, relative L2\n"
    "||a-b||/||a|| and cosine similarity.";

static const char *kind_name(tm_diff_kind k) {
    switch (k) {
    case TM_DIFF_SAME: return "same";
    case TM_DIFF_CHANGED: return "changed";
    case TM_DIFF_ADDED: return "added";
    case TM_DIFF_REMOVED: return "removed";
    case TM_DIFF_SHAPE: return "shape";
    case TM_DIFF_DTYPE: return "dtype";
    }
    return "?";
}

int cmd_diff(const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    tm_file *fa, *fb;
    int rc = cli_open(a->pos[0], &fa);
    if (rc) return rc;
    rc = cli_open(a->pos[1], &fb);
    if (rc) { tm_close(fa); return rc; }
    tm_err err;
    tm_diff_result *r;
    tm_status s = tm_diff(fa, fb, g_cli.threads, &r, &err);
    if (s) { rc = cli_fail(s, &err); tm_close(fa); tm_close(fb); return rc; }
    if (g_cli.json) {
        json_t *d = cli_json_doc("diff");
        json_object_set_new(d, "a", json_string(a->pos[0]));
        json_object_set_new(d, "b", json_string(a->pos[1]));
        json_object_set_new(d, "n_differ", json_integer(r->n_differ));
        json_object_set_new(d, "n_renamed", json_integer(r->n_renamed));
        json_t *ts = json_array();
        for (int64_t i = 0; i < r->n; i++) {
            tm_diff_entry *e = &r->entries[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(e->name));
            json_object_set_new(o, "status", json_string(kind_name(e->kind)));
            if (e->b_name) json_object_set_new(o, "b_name", json_string(e->b_name));
            const tm_tensor *ta = tm_file_tensor(fa, e->a_index), *tb = tm_file_tensor(fb, e->b_index);
            if (ta) {
                json_object_set_new(o, "a_dtype", json_string(tm_dtype_get(ta->dtype)->name));
                json_object_set_new(o, "a_shape", cli_json_shape(ta->ndim, ta->shape));
            }
            if (tb) {
                json_object_set_new(o, "b_dtype", json_string(tm_dtype_get(tb->dtype)->name));
                json_object_set_new(o, "b_shape", cli_json_shape(tb->ndim, tb->shape));
            }
            if (e->kind == TM_DIFF_SAME || e->kind == TM_DIFF_CHANGED || e->kind == TM_DIFF_DTYPE) {
                json_object_set_new(o, "max_abs_diff", cli_json_num(e->max_abs_diff));
                json_object_set_new(o, "rel_l2", cli_json_num(e->rel_l2));
                json_object_set_new(o, "cosine", cli_json_num(e->cosine));
            }
            json_array_append_new(ts, o);
        }
        json_object_set_new(d, "tensors", ts);
        cli_json_print(d);
    } else {
        printf("%-48s %-8s %12s %12s %10s\n", "tensor", "status", "max|a-b|", "rel L2", "cosine");
        for (int64_t i = 0; i < r->n; i++) {
            tm_diff_entry *e = &r->entries[i];
            if (e->kind == TM_DIFF_SAME && !cli_has(a, "all")) continue;
            if (e->kind == TM_DIFF_SAME || e->kind == TM_DIFF_CHANGED || e->kind == TM_DIFF_DTYPE)
                printf("%-48s %-8s %12.6g %12.6g %10.6f\n", e->name, kind_name(e->kind), e->max_abs_diff, e->rel_l2, e->cosine);
            else {
                const tm_tensor *ta = tm_file_tensor(fa, e->a_index), *tb = tm_file_tensor(fb, e->b_index);
                char sa[64] = "-", sb[64] = "-";
                if (ta) cli_shape_str(ta->ndim, ta->shape, sa, sizeof sa);
                if (tb) cli_shape_str(tb->ndim, tb->shape, sb, sizeof sb);
                printf("%-48s %-8s %s -> %s\n", e->name, kind_name(e->kind), sa, sb);
            }
        }
        printf("%" PRId64 " of %" PRId64 " tensors differ\n", r->n_differ, r->n);
        for (int64_t i = 0; i < r->n && r->n_renamed; i++) /* say how the names were paired */
            if (r->entries[i].b_name && strcmp(r->entries[i].b_name, r->entries[i].name)) {
                printf("%" PRId64 " tensors paired across naming conventions (e.g. %s = %s)\n", r->n_renamed,
                       r->entries[i].name, r->entries[i].b_name);
                break;
            }
    }
    int differ = r->n_differ > 0;
    tm_diff_free(r);
    tm_close(fa);
    tm_close(fb);
    return (differ && cli_has(a, "exit-code")) ? EXIT_CHECK : 0;
}
