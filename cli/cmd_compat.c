/* cmd_compat.c: `tensormorph compat ARTIFACT --target TARGET`: the runtime contract check
** (tensormorph/compat.h): which quantized tensors / ONNX quantization nodes the target runs
** natively, at higher precision, through a slow fallback, or not at all, each with the reason
** and the document it comes from. */
#include "cli.h"
#include "tensormorph/compat.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const cli_opt opts_compat[] = {
    CLI_OPT_TARGET("runtime target: ort-cpu, tensorrt:smNN, vllm:smNN, llamacpp-cpu, llamacpp-cuda, llamacpp-metal (required)"),
    CLI_OPT_TABLE("use this contract table instead of the compiled-in data/compat.json (same schema)"),
    CLI_OPT_ALL("also list native items in the text output (they are always in --json)"),
    CLI_OPT_END,
};
const char details_compat[] =
    "ARTIFACT is anything tensormorph opens. Every quantized tensor (for ONNX: every node that\n"
    "quantizes, dequantizes or computes on codes) is classified for the target as native,\n"
    "higher_precision (expanded to a wider type before the math), fallback_slow or unsupported,\n"
    "by the first matching rule of the contract table (data/compat.json, docs/compat.md); each\n"
    "rule cites the public document it was read from. An item no rule covers is unsupported.\n"
    "The text lists identical rows once with their count; --json lists every item.\n"
    "Exit status: 0 every item native (or nothing quantized), 1 at least one item is not\n"
    "native, 2 unknown target, 3 the artifact or the table cannot be read.";


/* The item rows of the text report. Items that agree in status, description, reason and
** source are one row with their count ("28 items: blk.0.attn_k.weight, ..."), in the order of
** their first item; --json keeps every item. */
static int same_row(const tm_compat_item *x, const tm_compat_item *y) {
    return x->status == y->status && !strcmp(x->describe, y->describe) && !strcmp(x->reason, y->reason) &&
           (x->source_id ? y->source_id && !strcmp(x->source_id, y->source_id) : !y->source_id);
}

static void print_grouped(const tm_compat_report *r, int show_all) {
    int64_t *count = calloc((size_t)r->n_items + 1, sizeof *count); /* [i]: rows i heads; 0: in an earlier row */
    char **label = calloc((size_t)r->n_items + 1, sizeof *label);
    if (!count || !label) { free(count); free(label); return; }
    int wn = 4, wd = 4; /* column widths: the longest name / description listed, capped */
    for (int64_t i = 0; i < r->n_items; i++) {
        const tm_compat_item *it = &r->items[i];
        if (it->status == TM_COMPAT_NATIVE && !show_all) continue;
        int64_t k = 0;
        while (k < i && !(count[k] && same_row(&r->items[k], it))) k++;
        if (k < i) { count[k]++; continue; }
        count[i] = 1;
    }
    for (int64_t i = 0; i < r->n_items; i++) {
        if (!count[i]) continue;
        const tm_compat_item *it = &r->items[i];
        char buf[64];
        if (count[i] == 1) {
            snprintf(buf, sizeof buf, "%s", it->name);
        } else { /* "N items: a, b, ..." cut to the column */
            size_t p = (size_t)snprintf(buf, sizeof buf, "%" PRId64 " items: %s", count[i], it->name);
            for (int64_t j = i + 1, left = count[i] - 1; j < r->n_items && left && p < sizeof buf; j++) {
                if (j == i || !same_row(&r->items[j], it) || (r->items[j].status == TM_COMPAT_NATIVE && !show_all)) continue;
                left--;
                p += (size_t)snprintf(buf + p, sizeof buf - p, ", %s", r->items[j].name);
            }
            if (p >= 60) memcpy(buf + 56, "...", 4);
        }
        label[i] = strdup(buf);
        int ln = (int)strlen(buf), ld = (int)strlen(it->describe);
        if (ln > wn) wn = ln > 60 ? 60 : ln;
        if (ld > wd) wd = ld > 60 ? 60 : ld;
    }
    int64_t shown = 0;
    for (int64_t i = 0; i < r->n_items; i++) {
        if (!count[i]) continue;
        const tm_compat_item *it = &r->items[i];
        if (!shown++) printf("  %-16s  %-*s  %-*s  %s\n", "STATUS", wn, "ITEM", wd, "WHAT", "REASON [source]");
        printf("  %-16s  %-*s  %-*s  %s [%s]\n", tm_compat_status_name(it->status), wn, label[i] ? label[i] : it->name,
               wd, it->describe, it->reason, it->source_id ? it->source_id : "no row");
    }
    for (int64_t i = 0; i < r->n_items; i++) free(label[i]);
    free(label);
    free(count);
}

int cmd_compat(const cli_cmd *cmd, cli_args *a) {
    const char *target = cli_get(a, "target");
    if (!target) return cli_usage_error(cmd, "--target is required (e.g. --target vllm:sm80)");
    tm_err err;
    char *table = NULL;
    const char *table_path = cli_get(a, "table");
    if (table_path && !(table = cli_read_text(table_path, &err))) return cli_fail(err.code, &err);
    tm_file *f;
    int rc = cli_open(a->pos[0], &f);
    if (rc) { free(table); return rc; }
    tm_compat_report *r = NULL;
    tm_status s = tm_compat_check(f, target, table, table_path, &r, &err);
    free(table);
    if (s) { rc = cli_fail(s, &err); tm_close(f); return rc; }
    int all_native = r->counts[TM_COMPAT_NATIVE] == r->n_items;
    if (g_cli.json) {
        char *txt = tm_compat_report_json(r);
        json_t *body = txt ? json_loads(txt, 0, NULL) : NULL;
        free(txt);
        if (!body) { tm_compat_report_free(r); tm_close(f); tm_err_clear(&err); return cli_fail(TM_E_NOMEM, &err); }
        json_t *d = cli_json_doc("compat");
        json_object_set_new(d, "path", json_string(a->pos[0]));
        json_object_update(d, body);
        json_decref(body);
        cli_json_print(d);
    } else {
        printf("%s (%s) on %s: %s, %s\n", a->pos[0], r->format, r->target, r->runtime, r->device);
        if (!r->format_loaded)
            printf("  %s does not load %s artifacts: every quantized item is unsupported\n", r->family, r->format);
        if (r->n_items == 0) printf("  nothing quantized: nothing to check\n");
        int show_all = cli_has(a, "all");
        print_grouped(r, show_all);
        if (!show_all && r->counts[TM_COMPAT_NATIVE] > 0)
            printf("  (%" PRId64 " native item%s not listed; --all lists them)\n", r->counts[TM_COMPAT_NATIVE],
                   r->counts[TM_COMPAT_NATIVE] == 1 ? "" : "s");
        printf("summary: %" PRId64 " native, %" PRId64 " higher_precision, %" PRId64 " fallback_slow, %" PRId64 " unsupported\n",
               r->counts[TM_COMPAT_NATIVE], r->counts[TM_COMPAT_HIGHER_PRECISION],
               r->counts[TM_COMPAT_FALLBACK_SLOW], r->counts[TM_COMPAT_UNSUPPORTED]);
        /* each cited source once */
        int printed_hdr = 0;
        for (int64_t i = 0; i < r->n_items; i++) {
            const tm_compat_item *it = &r->items[i];
            if (!it->source_id || (it->status == TM_COMPAT_NATIVE && !show_all)) continue;
            int seen = 0;
            for (int64_t k = 0; k < i && !seen; k++)
                seen = r->items[k].source_id && !strcmp(r->items[k].source_id, it->source_id) &&
                       (r->items[k].status != TM_COMPAT_NATIVE || show_all);
            if (seen) continue;
            if (!printed_hdr++) printf("sources:\n");
            printf("  [%s] %s\n      %s\n", it->source_id, it->source_title, it->source_url);
        }
    }
    tm_compat_report_free(r);
    tm_close(f);
    return all_native ? EXIT_OK : EXIT_CHECK;
}
