/* cmd_qdiff.c: `tensormorph qdiff REF QUANT`: Quantization Diff. */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const cli_opt opts_qdiff[] = {
    CLI_OPT_TOP("rows to print, flagged and worst first: N or all (default 10); --json always lists all"),
    {"fail-on-flag", 0, NULL, 0, "exit 1 when any tensor is flagged"},
    {"imatrix", 0, "FILE", 0, "importance matrix (llama-imatrix, legacy or GGUF): also the error weighted by each input column's importance"},
    CLI_OPT_END,
};
const char details_qdiff[] =
    "For each quantized tensor of QUANT matched to its full-precision source in REF (by name;\n"
    "across naming conventions, e.g. HF safetensors against its GGUF, by the name table of\n"
    "docs/formats.md): SQNR (dB), RMSE, max |error|, the same in LSB (error divided by the\n"
    "element's own scale), fraction clipped and the worst channel or group. Plain rounding gives\n"
    "RMSE ~0.29 LSB and max 0.5 LSB. A tensor is flagged when its RMSE exceeds 0.45 LSB, an\n"
    "unclipped value is off by more than half an LSB, more than 1% of values are clipped, or its\n"
    "SQNR is more than 10 dB below the median SQNR of the tensors quantized with the same scheme\n"
    "(the header shows that median, per scheme when there are several). The half-LSB and\n"
    "clipping rules are not applied to ggml block types (GGUF: llama.cpp's quantizers break the\n"
    "half-LSB bound by design) nor to tensors whose manifest names an observer that clips by\n"
    "design (percentile, mse, entropy, histogram); RMSE and SQNR rules always apply\n"
    "(docs/qdiff.md \"Flags\"). Flagged tensors come first, worst first, with the reason; the\n"
    "text lists --top rows (default 10, 'all' for every tensor), --json every tensor.\n"
    "--imatrix FILE adds, for every tensor with an entry in the importance matrix, the SQNR and\n"
    "RMSE weighted by the importance of each element's input column (the error the imatrix\n"
    "searches of llama-quantize minimise; docs/qdiff.md \"Importance-weighted error\").";

/* A tensormorph output records each tensor's observer in its manifest: where the observer
** clips by design (percentile, mse, entropy, histogram), clipping is not a finding. */
static void mark_clip_expected(const char *quant_path, tm_qdiff_result *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tensormorph-manifest.json", quant_path);
    json_t *m = json_load_file(path, 0, NULL);
    if (!m) {
        snprintf(path, sizeof path, "%s.manifest.json", quant_path);
        m = json_load_file(path, 0, NULL);
    }
    if (!m) return;
    json_t *ts = json_object_get(m, "tensors"), *t;
    size_t i;
    int changed = 0;
    json_array_foreach(ts, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *obs = json_string_value(json_object_get(json_object_get(t, "scheme"), "observer"));
        if (!name || !obs) continue;
        tm_observer o;
        int clips = tm_observer_from_name(obs, &o) == TM_OK && (o.kind == TM_OBS_PERCENTILE || o.kind == TM_OBS_MSE ||
                                                               o.kind == TM_OBS_ENTROPY || o.kind == TM_OBS_HISTOGRAM);
        if (!clips) continue;
        for (int64_t k = 0; k < r->n; k++)
            if (!strcmp(r->entries[k].name, name) && !r->entries[k].clip_expected) {
                r->entries[k].clip_expected = 1;
                changed = 1;
            }
    }
    json_decref(m);
    if (changed) tm_qdiff_flag(r);
}

/* 1 when the arguments look swapped: `ref` holds quantized tensors whose source `q` holds (by
** name, or by name across conventions), so qdiff QUANT REF was probably meant as REF QUANT. */
static int looks_swapped(const tm_file *ref, const tm_file *q) {
    for (int64_t i = 0; i < tm_file_n_tensors(ref); i++) {
        const tm_tensor *t = tm_file_tensor(ref, i);
        if (!t->quant || t->role != TM_ROLE_DATA) continue;
        tm_tensor_pair p;
        tm_ref_pair(q, ref, i, &p);
        const tm_tensor *u = tm_file_tensor(q, p.index);
        if (u && !u->quant && u->n_elems == t->n_elems) return 1;
    }
    return 0;
}

/* The number of entries with entries[i]'s scheme when i is the first of them, else 0. */
static int64_t scheme_count(const tm_qdiff_result *r, int64_t i) {
    int64_t cnt = 0;
    for (int64_t k = 0; k < r->n; k++)
        if (!strcmp(r->entries[k].scheme, r->entries[i].scheme)) {
            if (k < i) return 0;
            cnt++;
        }
    return cnt;
}

/* The SQNR flag compares a tensor with the median of the tensors quantized the same way: with
** more than one scheme, say what those medians are. */
static void print_scheme_medians(const tm_qdiff_result *r) {
    int first = 1;
    for (int64_t i = 0; i < r->n; i++) {
        int64_t cnt = scheme_count(r, i);
        if (!cnt) continue;
        if (cnt == r->n) return; /* one scheme: its median is the one above */
        printf("%s%s %.2f dB (%" PRId64 ")", first ? "median SQNR by scheme: " : ", ", r->entries[i].scheme,
               tm_qdiff_scheme_median(r, r->entries[i].scheme), cnt);
        first = 0;
    }
    if (!first) printf("\n");
}

static void qdiff_progress(void *ud, uint64_t done, uint64_t total) {
    (void)ud;
    cli_progress_count("qdiff", done, total, "tensors");
}

/* A figure of the qdiff document: a number, null when it is undefined (NaN: 0/0, no scale to
** measure LSB in, every importance weight 0), "inf"/"-inf" for an exact tensor's SQNR and its
** limit (docs/qdiff.md "JSON numbers"). */
static json_t *qnum(double v) { return isnan(v) ? json_null() : cli_json_num(v); }

/* qdiff_json: the `qdiff --json` document (also served as /api/v1/qdiff). qf: the quantized
** checkpoint r was computed on (for each entry's label and description). */
json_t *qdiff_json(const tm_qdiff_result *r, const tm_file *qf, const char *ref_path, const char *q_path) {
    json_t *d = cli_json_doc("qdiff");
    json_object_set_new(d, "ref", json_string(ref_path));
    json_object_set_new(d, "quant", json_string(q_path));
    json_object_set_new(d, "median_sqnr_db", qnum(r->median_sqnr_db));
    json_object_set_new(d, "n_flagged", json_integer(r->n_flagged));
    json_object_set_new(d, "n_unmatched", json_integer(r->n_unmatched));
    json_object_set_new(d, "n_imatrix", json_integer(r->n_imatrix));
    json_object_set_new(d, "plain", json_boolean(r->n > 0 && r->entries[0].plain));
    json_t *sch = json_array(); /* the median each tensor's SQNR is compared with (docs/qdiff.md) */
    for (int64_t i = 0; i < r->n; i++) {
        int64_t cnt = scheme_count(r, i);
        if (!cnt) continue;
        json_t *o = json_object();
        json_object_set_new(o, "scheme", json_string(r->entries[i].scheme));
        json_object_set_new(o, "n", json_integer(cnt));
        json_object_set_new(o, "median_sqnr_db", qnum(tm_qdiff_scheme_median(r, r->entries[i].scheme)));
        json_array_append_new(sch, o);
    }
    json_object_set_new(d, "schemes", sch);
    json_t *ts = json_array();
    for (int64_t i = 0; i < r->n; i++) {
        tm_qdiff_entry *e = &r->entries[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(e->name));
        json_object_set_new(o, "ref_name", json_string(e->ref_name ? e->ref_name : e->name));
        json_object_set_new(o, "scheme", json_string(e->scheme));
        char desc[TM_QDESC_MAX];
        json_object_set_new(o, "label", json_string(e->scheme)); /* tm_qtensor_label */
        json_object_set_new(o, "description",
                            json_string(tm_qtensor_describe(qf, tm_file_tensor(qf, e->q_index), desc, sizeof desc)));
        json_object_set_new(o, "n", json_integer(e->e.n));
        json_object_set_new(o, "sqnr_db", qnum(e->e.sqnr_db));
        json_object_set_new(o, "rmse", qnum(e->e.rmse));
        json_object_set_new(o, "rmse_lsb", qnum(e->e.rmse_lsb));
        json_object_set_new(o, "max_abs_err", qnum(e->e.max_abs_err));
        json_object_set_new(o, "max_err_lsb", qnum(e->e.max_err_lsb));
        json_object_set_new(o, "max_err_lsb_unclipped", qnum(e->e.max_err_lsb_unclipped));
        json_object_set_new(o, "clipped_fraction", qnum(e->e.clipped_fraction));
        json_object_set_new(o, "cosine", qnum(e->e.cosine));
        json_object_set_new(o, "worst_group", json_integer(e->e.worst_group));
        json_object_set_new(o, "worst_group_rmse_lsb", qnum(e->e.worst_group_rmse_lsb));
        if (e->imatrix) {
            json_object_set_new(o, "imatrix_sqnr_db", qnum(e->imx_sqnr_db));
            json_object_set_new(o, "imatrix_rmse", qnum(e->imx_rmse));
        }
        json_object_set_new(o, "flagged", json_boolean(e->flagged));
        json_object_set_new(o, "reason", json_string(e->reason));
        json_array_append_new(ts, o);
    }
    json_object_set_new(d, "tensors", ts);
    return d;
}

int cmd_qdiff(const cli_cmd *cmd, cli_args *a) {
    int top;
    int trc = cli_parse_top(cmd, a, &top);
    if (trc) return trc;
    tm_file *ref, *q;
    int rc = cli_open(a->pos[0], &ref);
    if (rc) return rc;
    rc = cli_open(a->pos[1], &q);
    if (rc) { tm_close(ref); return rc; }
    tm_qdiff_params p;
    memset(&p, 0, sizeof p);
    tm_imatrix *imx = NULL;
    if (cli_has(a, "imatrix")) {
        tm_err ie;
        tm_status is = tm_imatrix_load(cli_get(a, "imatrix"), &imx, &ie);
        if (is) {
            tm_close(ref);
            tm_close(q);
            return cli_fail(is, &ie);
        }
        p.imatrix = imx;
    }
    p.n_threads = g_cli.threads;
    p.cancel = &g_cli_interrupted;
    p.progress = qdiff_progress;
    tm_err err;
    tm_qdiff_result *r;
    tm_status s = tm_qdiff(ref, q, &p, &r, &err);
    cli_progress_end();
    if (s) { rc = cli_fail(s, &err); tm_close(ref); tm_close(q); tm_imatrix_free(imx); return rc; }
    if (r->n == 0) {
        fprintf(stderr, "tensormorph: %s holds no quantized tensor (nor, both files unquantized, a float tensor) "
                "matching a tensor of %s by name and size%s\n",
                a->pos[1], a->pos[0],
                looks_swapped(ref, q) ? " (the order is qdiff REF QUANT: full precision first)" : "");
        tm_qdiff_free(r);
        tm_close(ref);
        tm_close(q);
        tm_imatrix_free(imx);
        return EXIT_USAGE;
    }
    mark_clip_expected(a->pos[1], r);
    if (g_cli.json) {
        cli_json_print(qdiff_json(r, q, a->pos[0], a->pos[1]));
    } else {
        printf("Quantization Diff: %s vs %s\n", a->pos[1], a->pos[0]);
        const int plain = r->entries[0].plain;
        if (plain) /* no scale: the error of rounding to the float type, in the tensor's units */
            printf("%" PRId64 " float tensors compared (neither file is quantized: a plain weight diff, no LSB "
                   "figures), %" PRId64 " flagged, median SQNR %.2f dB\n", r->n, r->n_flagged, r->median_sqnr_db);
        else
            printf("%" PRId64 " quantized tensors compared, %" PRId64 " flagged, median SQNR %.2f dB\n", r->n,
                   r->n_flagged, r->median_sqnr_db);
        print_scheme_medians(r);
        if (plain) printf("%-44s %-28s %8s %12s %12s %10s  %s\n", "tensor", "type", "SQNR dB", "RMSE", "max err",
                          "cosine", "flag");
        else printf("%-44s %-28s %8s %8s %8s %8s %8s  %s\n", "tensor", "scheme", "SQNR dB", "RMSE LSB", "max LSB",
                    "clipped", "worst", "flag");
        for (int64_t i = 0; i < r->n && (top < 0 || i < top); i++) {
            tm_qdiff_entry *e = &r->entries[i];
            if (plain)
                printf("%-44s %-28s %8.2f %12.4g %12.4g %10.6f  %s\n", e->name, e->scheme, e->e.sqnr_db, e->e.rmse,
                       e->e.max_abs_err, e->e.cosine, e->reason);
            else
                printf("%-44s %-28s %8.2f %8.3f %8.3f %7.3f%% %8" PRId64 "  %s\n", e->name, e->scheme, e->e.sqnr_db,
                       e->e.rmse_lsb, e->e.max_err_lsb, 100 * e->e.clipped_fraction, e->e.worst_group, e->reason);
        }
        if (imx) { /* the importance-weighted figures beside the plain ones */
            printf("importance-weighted (%s): %" PRId64 " of %" PRId64 " tensors have an entry\n", cli_get(a, "imatrix"),
                   r->n_imatrix, r->n);
            printf("%-44s %8s %12s %12s %12s\n", "tensor", "SQNR dB", "imx SQNR dB", "RMSE", "imx RMSE");
            int64_t n_zero = 0, n_zero_src = 0;
            for (int64_t i = 0, shown = 0; i < r->n && (top < 0 || shown < top); i++) {
                tm_qdiff_entry *e = &r->entries[i];
                if (!e->imatrix) continue;
                char sq[32], rm[32]; /* undefined: "-", with the reason below the table */
                if (isnan(e->imx_sqnr_db)) snprintf(sq, sizeof sq, "-");
                else snprintf(sq, sizeof sq, "%.2f", e->imx_sqnr_db);
                if (isnan(e->imx_rmse)) snprintf(rm, sizeof rm, "-");
                else snprintf(rm, sizeof rm, "%.4g", e->imx_rmse);
                n_zero += isnan(e->imx_rmse);
                n_zero_src += isnan(e->imx_sqnr_db) && !isnan(e->imx_rmse);
                printf("%-44s %8.2f %12s %12.4g %12s\n", e->name, e->e.sqnr_db, sq, e->e.rmse, rm);
                shown++;
            }
            if (n_zero)
                printf("-: undefined for %" PRId64 " tensor(s): every importance weight of the entry is 0, so no error "
                       "is weighted (null in --json)\n", n_zero);
            if (n_zero_src)
                printf("-: weighted SQNR undefined for %" PRId64 " tensor(s): the weighted source and error are both 0 "
                       "(null in --json)\n", n_zero_src);
        }
        if (top >= 0 && r->n > top) printf("... %" PRId64 " more (--top all lists every tensor)\n", r->n - top);
    }
    int flagged = r->n_flagged > 0;
    tm_imatrix_free(imx);
    tm_qdiff_free(r);
    tm_close(ref);
    tm_close(q);
    return (flagged && cli_has(a, "fail-on-flag")) ? EXIT_CHECK : 0;
}

/* qdiff_apply_manifest: what `qdiff` does to the library's result from QUANT's manifest (observers
** that clip by design), so `serve` reports the same document. */
void qdiff_apply_manifest(const char *quant_path, tm_qdiff_result *r) { mark_clip_expected(quant_path, r); }
