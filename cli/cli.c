/* cli.c: option parsing, help, exit codes, JSON and progress helpers shared by the commands. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

cli_state g_cli;
volatile int g_cli_interrupted;
volatile int g_cli_exit_on_interrupt;

const cli_opt cli_common_opts[] = {
    {"json", 0, NULL, 0, "print one JSON document on stdout (schema tensormorph.<cmd>/1)"},
    {"quiet", 'q', NULL, 0, "print only errors on stderr"},
    {"verbose", 'v', NULL, 0, "print more detail on stderr"},
    {"threads", 0, "N", 0, "worker threads (default: TM_NUM_THREADS, else the CPUs this process may use)"},
    {"progress", 0, NULL, 0, "draw progress on stderr even when it is not a terminal"},
    {"no-progress", 0, NULL, 0, "never draw progress"},
    {"color", 0, "WHEN", 0, "colour output: auto (default), always, never"},
    {"help", 'h', NULL, 0, "show this help and exit"},
    CLI_OPT_END,
};

const cli_alias cli_aliases[] = {
    {"serve", "release-target", 0, "target", NULL},
    {"compat", NULL, 't', "target", "-t is the old spelling of --target (-t means --type in quantize and calibrate)"},
};
const int cli_n_aliases = (int)(sizeof cli_aliases / sizeof cli_aliases[0]);

static int count_opts(const cli_opt *o) {
    int n = 0;
    while (o && o[n].name) n++;
    return n;
}

/* An option's help line, CLI_HELP_GGUF_FTYPES in it replaced by the file types of the GGUF
** quantizer's table (tm_gguf_ftype_list). */
static void put_help(FILE *out, const char *h) {
    static const char tok[] = CLI_HELP_GGUF_FTYPES;
    const char *p = strstr(h, tok);
    if (!p) {
        fputs(h, out);
        return;
    }
    char names[512];
    tm_gguf_ftype_list(names, sizeof names);
    fprintf(out, "%.*s%s%s", (int)(p - h), h, names, p + sizeof tok - 1);
}

void cli_print_help(const cli_cmd *cmd, FILE *out) {
    fprintf(out, "usage: tensormorph %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->details) fprintf(out, "\n%s\n", cmd->details);
    const cli_opt *tabs[2] = {cmd->opts, cli_common_opts};
    const char *titles[2] = {"options", "common options"};
    for (int t = 0; t < 2; t++) {
        int n = count_opts(tabs[t]);
        if (!n) continue;
        fprintf(out, "\n%s:\n", titles[t]);
        for (int i = 0; i < n; i++) {
            const cli_opt *o = &tabs[t][i];
            char left[64];
            if (o->short_name)
                snprintf(left, sizeof left, "-%c, --%s%s%s", o->short_name, o->name,
                         o->arg ? " " : "", o->arg ? o->arg : "");
            else
                snprintf(left, sizeof left, "    --%s%s%s", o->name, o->arg ? " " : "",
                         o->arg ? o->arg : "");
            char also[128] = ""; /* " (old spelling: --x, -y)" */
            size_t p = 0;
            for (int k = 0; k < cli_n_aliases && t == 0; k++) {
                const cli_alias *al = &cli_aliases[k];
                if (strcmp(al->cmd, cmd->name) || strcmp(al->canonical, o->name) || p + 40 > sizeof also) continue;
                p += (size_t)snprintf(also + p, sizeof also - p, "%s", p ? ", " : " (old spelling: ");
                if (al->name) p += (size_t)snprintf(also + p, sizeof also - p, "--%.30s", al->name);
                else p += (size_t)snprintf(also + p, sizeof also - p, "-%c", al->short_name);
            }
            if (p) snprintf(also + p, sizeof also - p, ")");
            fprintf(out, "  %-30s ", left);
            put_help(out, o->help);
            fprintf(out, "%s%s\n", o->repeat ? " (repeatable)" : "", also);
        }
    }
}

static void json_error_doc(int code, const char *msg);
static char s_last_msg[1024];

int cli_usage_error(const cli_cmd *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_last_msg, sizeof s_last_msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tensormorph %s: %s\ntry 'tensormorph %s --help'\n", cmd ? cmd->name : "", s_last_msg,
            cmd ? cmd->name : "");
    json_error_doc(EXIT_USAGE, s_last_msg);
    return EXIT_USAGE;
}

int cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_args *out) {
    memset(out, 0, sizeof *out);
    int n1 = count_opts(cmd->opts), n2 = count_opts(cli_common_opts), n = n1 + n2;
    cli_opt *all = calloc((size_t)n + 1, sizeof *all);
    struct option *lo = calloc((size_t)n + (size_t)cli_n_aliases + 1, sizeof *lo);
    out->count = calloc((size_t)n + 1, sizeof(int));
    out->values = calloc((size_t)n + 1, sizeof(char **));
    out->pos = calloc((size_t)argc + 1, sizeof(char *));
    if (!all || !lo || !out->count || !out->values || !out->pos) {
        free(all); free(lo);
        fprintf(stderr, "tensormorph: out of memory\n");
        return EXIT_IO;
    }
    memcpy(all, cmd->opts, (size_t)n1 * sizeof *all);
    memcpy(all + n1, cli_common_opts, (size_t)n2 * sizeof *all);
    out->opts = all;
    out->n_opts = n;
    char shorts[128];
    size_t sp = 0;
    shorts[sp++] = '+'; /* stop at nothing: we permute ourselves below */
    shorts[0] = ':';
    for (int i = 0; i < n; i++) {
        lo[i].name = all[i].name;
        lo[i].has_arg = all[i].arg ? required_argument : no_argument;
        lo[i].flag = NULL;
        lo[i].val = 1000 + i;
        if (all[i].short_name && sp + 3 < sizeof shorts) {
            shorts[sp++] = all[i].short_name;
            if (all[i].arg) shorts[sp++] = ':';
        }
    }
    /* old spellings: a long alias returns its canonical option's value; a short one is looked
    ** up below */
    int nlo = n;
    for (int k = 0; k < cli_n_aliases; k++) {
        const cli_alias *al = &cli_aliases[k];
        if (strcmp(al->cmd, cmd->name)) continue;
        int ci = -1;
        for (int i = 0; i < n; i++) if (!strcmp(all[i].name, al->canonical)) ci = i;
        if (ci < 0) continue;
        if (al->name) {
            lo[nlo].name = al->name;
            lo[nlo].has_arg = lo[ci].has_arg;
            lo[nlo].val = 1000 + ci;
            nlo++;
        }
        if (al->short_name && sp + 3 < sizeof shorts) {
            shorts[sp++] = al->short_name;
            if (all[ci].arg) shorts[sp++] = ':';
        }
    }
    shorts[sp] = '\0';
    const char *alias_note = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strncmp(argv[i], "--json", 6) && (!argv[i][6] || argv[i][6] == '=')) {
            g_cli.json = 1; /* option errors below answer in JSON too */
            cli_stderr_tap(); /* the error document's message is what stderr said */
        }
    optind = 1;
    opterr = 0;
    int rc = 0;
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, shorts, lo, &li);
        if (c == -1) break;
        int idx = -1;
        if (c >= 1000) idx = c - 1000;
        else if (c == '?') {
            /* "-1,0": a negative number, not an option (getopt reads it as "-1") */
            const char *neg = NULL;
            for (int i = 1; i < argc && !neg; i++)
                if (argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9') neg = argv[i];
            if (neg && optopt >= '0' && optopt <= '9')
                rc = cli_usage_error(cmd, "'%s': index %lld is negative (coordinates count from 0); "
                                     "put -- before arguments that start with '-'", neg, strtoll(neg, NULL, 10));
            else if (optopt >= 1000) /* a long flag given a value: --json=yes */
                rc = cli_usage_error(cmd, "option '--%s' takes no value", all[optopt - 1000].name);
            else if (optopt)
                rc = cli_usage_error(cmd, "unknown option '-%c'", optopt);
            else
                rc = cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
            break;
        } else if (c == ':') {
            rc = cli_usage_error(cmd, "option '%s' needs an argument", argv[optind - 1]);
            break;
        } else {
            for (int i = 0; i < n; i++) if (all[i].short_name == c) idx = i;
            for (int k = 0; idx < 0 && k < cli_n_aliases; k++) {
                const cli_alias *al = &cli_aliases[k];
                if (strcmp(al->cmd, cmd->name) || al->short_name != c) continue;
                for (int i = 0; i < n; i++) if (!strcmp(all[i].name, al->canonical)) idx = i;
                if (al->note) alias_note = al->note;
            }
        }
        if (idx < 0) { rc = cli_usage_error(cmd, "bad option"); break; }
        if (out->count[idx] && !all[idx].repeat && all[idx].arg == NULL) { /* flags: idempotent */ }
        char **nv = realloc(out->values[idx], (size_t)(out->count[idx] + 1) * sizeof(char *));
        if (!nv) { rc = EXIT_IO; break; }
        out->values[idx] = nv;
        nv[out->count[idx]++] = optarg ? optarg : (char *)"";
    }
    if (rc == 0) {
        for (int i = optind; i < argc; i++) out->pos[out->n_pos++] = argv[i];
    }
    free(lo);
    if (rc) return rc;
    if (cli_has(out, "help")) {
        cli_print_help(cmd, stdout);
        return -1;
    }
    g_cli.json = cli_has(out, "json");
    g_cli.quiet = cli_has(out, "quiet");
    if (alias_note && !g_cli.quiet) fprintf(stderr, "tensormorph %s: note: %s\n", cmd->name, alias_note);
    g_cli.verbose = cli_has(out, "verbose");
    const char *th = cli_get(out, "threads");
    const char *env = getenv("TM_NUM_THREADS");
    const char *tsrc = th ? th : (env && *env ? env : NULL);
    g_cli.threads = tm_usable_cpus(); /* affinity mask and cgroup CPU quota */
    g_cli.threads_given = tsrc != NULL;
    if (tsrc) {
        char *end;
        errno = 0;
        long v = strtol(tsrc, &end, 10);
        if (errno || *end || v < 1 || v > 256)
            return cli_usage_error(cmd, "--threads must be an integer in [1, 256], got '%s'%s",
                                   tsrc, th ? "" : " (from TM_NUM_THREADS)");
        g_cli.threads = (int)v;
    }
    int tty = isatty(2) || (getenv("TM_FAKE_TTY") && !strcmp(getenv("TM_FAKE_TTY"), "1"));
    g_cli.progress = !g_cli.quiet && tty;
    if (cli_has(out, "progress")) g_cli.progress = 1;
    if (cli_has(out, "no-progress")) g_cli.progress = 0;
    const char *col = cli_get(out, "color");
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    g_cli.color = isatty(1) && !(nc && *nc) && !(term && !strcmp(term, "dumb"));
    if (col) {
        if (!strcmp(col, "always")) g_cli.color = 1;
        else if (!strcmp(col, "never")) g_cli.color = 0;
        else if (strcmp(col, "auto"))
            return cli_usage_error(cmd, "--color must be auto, always or never");
    }
    if (out->n_pos < cmd->min_pos)
        return cli_usage_error(cmd, "expected %d argument%s, got %d", cmd->min_pos,
                               cmd->min_pos == 1 ? "" : "s", out->n_pos);
    if (cmd->max_pos >= 0 && out->n_pos > cmd->max_pos)
        return cli_usage_error(cmd, "unexpected argument '%s'", out->pos[cmd->max_pos]);
    return 0;
}

void cli_args_free(cli_args *a) {
    if (!a->values) return;
    for (int i = 0; i < a->n_opts; i++) free(a->values[i]);
    free(a->values);
    free(a->count);
    free(a->pos);
    free((void *)a->opts);
    memset(a, 0, sizeof *a);
}

static int find_opt(const cli_args *a, const char *name) {
    for (int i = 0; i < a->n_opts; i++)
        if (!strcmp(a->opts[i].name, name)) return i;
    return -1;
}
const char *cli_get(const cli_args *a, const char *name) {
    int i = find_opt(a, name);
    return (i >= 0 && a->count[i]) ? a->values[i][a->count[i] - 1] : NULL;
}
int cli_has(const cli_args *a, const char *name) {
    int i = find_opt(a, name);
    return i >= 0 && a->count[i] > 0;
}
int cli_n(const cli_args *a, const char *name) {
    int i = find_opt(a, name);
    return i >= 0 ? a->count[i] : 0;
}
const char *cli_get_i(const cli_args *a, const char *name, int k) {
    int i = find_opt(a, name);
    return (i >= 0 && k < a->count[i]) ? a->values[i][k] : NULL;
}

int cli_exit_code(tm_status s) {
    switch (s) {
    case TM_OK: return EXIT_OK;
    case TM_E_INVALID_ARG: return EXIT_USAGE;
    case TM_E_CORRUPT: case TM_E_UNSUPPORTED: case TM_E_LIMIT: case TM_E_NONFINITE:
    case TM_E_RANGE: return EXIT_INPUT;
    case TM_E_IO: case TM_E_NOMEM: return EXIT_IO;
    case TM_E_CANCELLED: return EXIT_INTERRUPT;
    default: return EXIT_INTERNAL;
    }
}

/* --json failures: whether a document already went to stdout, and the last error message */
static int s_json_printed;

static const char *exit_status_name(int code) {
    switch (code) {
    case EXIT_USAGE: return "usage";
    case EXIT_INPUT: return "input";
    case EXIT_IO: return "io";
    case EXIT_INTERNAL: return "internal";
    case EXIT_INTERRUPT: return "interrupted";
    default: return "failed";
    }
}

/* {"error": {"code", "status", "message"}} on stdout, once, when --json was given and no
** document was printed yet (docs/exit-codes.md). */
static void json_error_doc(int code, const char *msg) {
    if (!g_cli.json || s_json_printed) return;
    json_t *e = json_object();
    json_object_set_new(e, "code", json_integer(code));
    json_object_set_new(e, "status", json_string(exit_status_name(code)));
    json_object_set_new(e, "message", json_string(msg && *msg ? msg : exit_status_name(code)));
    json_t *d = json_object();
    json_object_set_new(d, "error", e);
    cli_json_print(d);
}

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_last_msg, sizeof s_last_msg, fmt, ap);
    va_end(ap);
    cli_progress_end();
    fprintf(stderr, "tensormorph: %s\n", s_last_msg);
    json_error_doc(code, s_last_msg);
    return code;
}

void cli_json_error_fallback(int rc) {
    if (rc >= EXIT_USAGE) json_error_doc(rc, s_last_msg[0] ? s_last_msg : cli_stderr_last());
}

int cli_fail(tm_status s, const tm_err *err) {
    cli_progress_end();
    const char *msg = err && err->msg[0] ? err->msg : tm_status_str(s);
    fprintf(stderr, "tensormorph: %s\n", msg);
    snprintf(s_last_msg, sizeof s_last_msg, "%s", msg);
    int code = cli_exit_code(s);
    json_error_doc(code, msg);
    return code;
}

json_t *cli_json_num(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

json_t *cli_json_doc(const char *cmd) {
    json_t *d = json_object();
    char buf[64];
    snprintf(buf, sizeof buf, "tensormorph.%s/1", cmd);
    json_object_set_new(d, "schema", json_string(buf));
    return d;
}

void cli_json_print(json_t *doc) {
    s_json_printed = 1;
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(doc);
}

void cli_json_print_line(json_t *doc) {
    s_json_printed = 1;
    json_dumpf(doc, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(doc);
}

json_t *cli_json_shape(int ndim, const int64_t *shape) {
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++) json_array_append_new(a, json_integer(shape[d]));
    return a;
}

void cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t p = 0;
    p += (size_t)snprintf(buf + p, n - p, "[");
    for (int d = 0; d < ndim && p < n; d++)
        p += (size_t)snprintf(buf + p, n - p, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (p < n) snprintf(buf + p, n - p, "]");
}

void cli_json_set_label(json_t *o, const tm_file *f, const tm_tensor *t) {
    if (!t || !t->quant) return;
    char lab[TM_QLABEL_MAX], desc[TM_QDESC_MAX];
    json_object_set_new(o, "label", json_string(tm_qtensor_label(f, t, lab, sizeof lab)));
    json_object_set_new(o, "description", json_string(tm_qtensor_describe(f, t, desc, sizeof desc)));
}

void cli_quant_str(const tm_file *f, const tm_tensor *t, char *buf, size_t n) {
    if (!t->quant) snprintf(buf, n, "-");
    else tm_qtensor_label(f, t, buf, n);
}

const char *cli_gptq_convention(const tm_qtensor *q) {
    if (!q->layout || !q->transposed || strncmp(q->layout, "gptq", 4) != 0) return NULL;
    return strcmp(q->layout, "gptq_v2") == 0 ? "v2" : "v1";
}

json_t *cli_quant_json(const tm_file *f, const tm_tensor *t) {
    if (!t->quant) return json_null();
    const tm_qtensor *q = t->quant;
    json_t *o = json_object();
    cli_json_set_label(o, f, t);
    const tm_dtype_traits *cd = tm_dtype_get(q->code_dtype);
    json_object_set_new(o, "type", json_string(cd ? cd->name : "?"));
    /* codes narrower than their dtype (3-bit pack-quantized in I4, 2-bit GPTQ in U4): their width */
    int cbits = cd ? cd->bits : 0;
    if (!q->ggml_type && q->packing.codes_per_container > 1 && q->packing.bits > 0 && q->packing.bits < cbits)
        cbits = q->packing.bits;
    json_object_set_new(o, "bits", json_integer(cbits));
    json_object_set_new(o, "granularity", json_string(tm_granularity_kind_name(q->gran.kind)));
    if (q->gran.kind == TM_GRAN_CHANNEL || q->gran.kind == TM_GRAN_GROUP)
        json_object_set_new(o, "axis", json_integer(q->gran.axis));
    json_object_set_new(o, "group_size",
                        q->gran.kind == TM_GRAN_GROUP ? json_integer(q->gran.group_size) : json_null());
    if (q->gran.kind == TM_GRAN_BLOCK) {
        json_t *b = json_array();
        json_array_append_new(b, json_integer(q->gran.block_h));
        json_array_append_new(b, json_integer(q->gran.block_w));
        json_object_set_new(o, "block", b);
    }
    const tm_tensor *sc = tm_file_tensor(f, q->scale_tensor);
    const tm_dtype_traits *sd = sc ? tm_dtype_get(sc->dtype) : NULL;
    json_object_set_new(o, "scale_dtype", json_string(sd ? sd->name : "?"));
    json_object_set_new(o, "symmetric", json_boolean(q->symmetric));
    json_object_set_new(o, "qmin", json_integer(q->qmin));
    json_object_set_new(o, "qmax", json_integer(q->qmax));
    json_object_set_new(o, "layout", json_string(q->layout ? q->layout : ""));
    const char *zc = cli_gptq_convention(q);
    if (zc) json_object_set_new(o, "zero_point_convention", json_string(zc));
    json_t *pk = json_object();
    const tm_dtype_traits *ct = tm_dtype_get(q->packing.container);
    json_object_set_new(pk, "container", json_string(ct ? ct->name : "?"));
    json_object_set_new(pk, "bits", json_integer(q->packing.bits));
    json_object_set_new(pk, "codes_per_container", json_integer(q->packing.codes_per_container));
    json_object_set_new(pk, "packed_axis", json_integer(q->packing.packed_axis));
    json_object_set_new(pk, "offset", json_integer(q->packing.offset));
    if (q->packing.lsb_first == TM_PACK_LSB_PER_WORD) /* whole codes per word (compressed-tensors < 0.18) */
        json_object_set_new(pk, "per_word", json_true());
    if (q->transposed) { /* GPTQ / AWQ (docs/formats.md "GPTQ and AWQ") */
        json_object_set_new(pk, "transposed", json_true());
        json_object_set_new(pk, "zero_point_offset", json_integer(q->zp_packing.offset));
    }
    if (q->field_order) {
        json_t *fo = json_array();
        for (int j = 0; j < q->packing.codes_per_container && j < 8; j++)
            json_array_append_new(fo, json_integer(q->field_order[j]));
        json_object_set_new(pk, "field_order", fo);
    }
    json_object_set_new(o, "packing", pk);
    if (q->ggml_type) { /* GGUF block type */
        const tm_ggml_type_info *gi = tm_ggml_type_info_get(q->ggml_type);
        json_object_set_new(o, "ggml_type", json_string(gi ? gi->name : "?"));
        json_object_set_new(o, "ggml_type_id", json_integer(q->ggml_type));
        json_object_set_new(o, "block_size", json_integer(q->ggml_block_size));
        json_object_set_new(o, "has_min", json_boolean(!q->symmetric));
        json_object_set_new(o, "scale_dtype", json_string(q->ggml_type == TM_GGML_Q8_K ? "F32" : "F16"));
    }
    return o;
}

static struct timespec g_last_prog;
static int g_prog_drawn;

/* 1 when a progress line is due: progress is on, and this is the first line, the last one
** (done == total) or 0.1 s have passed since the one before (then that time is kept). */
static int progress_due(uint64_t done, uint64_t total) {
    if (!g_cli.progress) return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double dt = (double)(now.tv_sec - g_last_prog.tv_sec) +
                (double)(now.tv_nsec - g_last_prog.tv_nsec) * 1e-9;
    if (g_prog_drawn && dt < 0.1 && done < total) return 0;
    g_last_prog = now;
    return 1;
}

void cli_progress(const char *phase, uint64_t done, uint64_t total) {
    if (!progress_due(done, total)) return;
    double pct = total ? 100.0 * (double)done / (double)total : 0;
    fprintf(stderr, "\r%-12s %6.1f%% (%.1f / %.1f MB)   ", phase, pct, (double)done / 1e6,
            (double)total / 1e6);
    fflush(stderr);
    g_prog_drawn = 1;
}

void cli_progress_count(const char *phase, uint64_t done, uint64_t total, const char *unit) {
    if (!progress_due(done, total)) return;
    fprintf(stderr, "\r%-12s %6.1f%% (%llu / %llu %s)   ", phase,
            total ? 100.0 * (double)done / (double)total : 0.0, (unsigned long long)done,
            (unsigned long long)total, unit);
    fflush(stderr);
    g_prog_drawn = 1;
}

void cli_progress_end(void) {
    if (g_prog_drawn) {
        fputc('\n', stderr);
        g_prog_drawn = 0;
    }
}

void cli_progress_cb(void *ud, const char *phase, uint64_t done, uint64_t total) {
    (void)ud;
    cli_progress(phase, done, total);
}

const char **cli_get_all(const cli_args *a, const char *name, int64_t *n) {
    *n = cli_n(a, name);
    const char **v = calloc((size_t)*n + 1, sizeof *v);
    for (int i = 0; v && i < (int)*n; i++) v[i] = cli_get_i(a, name, i);
    return v;
}

int cli_quantize_kernel_top(const cli_cmd *cmd, const cli_args *a, const tm_kernels **kernels, int *top) {
    const char *kern = cli_get(a, "kernel");
    if (!kern) kern = getenv("TM_FORCE_KERNEL");
    *kernels = NULL; /* auto */
    if (kern && *kern) {
        tm_status ks = tm_kernels_get(kern, kernels);
        if (ks == TM_E_UNSUPPORTED) return cli_usage_error(cmd, "--kernel %s: this CPU cannot run it (auto picks what it can)", kern);
        if (ks) return cli_usage_error(cmd, "--kernel must be auto, ref, avx2 or avx512");
    }
    if (!top) return 0;
    return cli_parse_top(cmd, a, top);
}

int cli_opt_canary(const cli_args *a, int *have, double *canary) {
    const char *cs = cli_get(a, "canary");
    if (!cs) return 0;
    char *end;
    errno = 0;
    double v = strtod(cs, &end);
    if (errno || end == cs || *end || !(v > 0 && v <= 1)) return -1;
    *have = 1;
    *canary = v;
    return 0;
}

int cli_opt_long(const cli_cmd *cmd, const cli_args *a, const char *name, long def, long lo,
                 long hi, long *out) {
    const char *v = cli_get(a, name);
    *out = def;
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return cli_usage_error(cmd, "--%s must be an integer in [%ld, %ld], got '%s'", name, lo, hi, v);
    *out = x;
    return 0;
}

int cli_parse_top(const cli_cmd *cmd, const cli_args *a, int *top) {
    const char *v = cli_get(a, "top");
    *top = CLI_TOP_DEFAULT;
    if (!v) return 0;
    if (!strcmp(v, "all")) { *top = -1; return 0; }
    char *end;
    errno = 0;
    long t = strtol(v, &end, 10);
    if (errno || *end || end == v || t < 0 || t > 1000000)
        return cli_usage_error(cmd, "--top must be a non-negative integer or 'all', got '%s'", v);
    *top = (int)t;
    return 0;
}

int cli_parse_observer(const char *s, tm_observer *o) {
    if (!s || tm_observer_from_name(s, o) != TM_OK) return -1;
    if (o->kind == TM_OBS_ENTROPY && !strstr(s, "bins=")) { o->n_bins = 128; o->n_quantized_bins = 128; }
    return 0;
}

int cli_parse_coords(const char *s, int64_t *out, int max) {
    int n = 0;
    const char *p = s;
    if (!*p) return -1;
    while (*p) {
        if (n >= max) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p) return -1;
        out[n++] = v;
        p = end;
        if (*p == ',') { p++; if (!*p) return -1; }
        else if (*p) return -1;
    }
    return n;
}

uint64_t cli_parse_size(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return 0;
    double mul = 1;
    if (!strcasecmp(end, "") || !strcasecmp(end, "b")) mul = 1;
    else if (!strcasecmp(end, "kb")) mul = 1e3;
    else if (!strcasecmp(end, "mb")) mul = 1e6;
    else if (!strcasecmp(end, "gb")) mul = 1e9;
    else if (!strcasecmp(end, "kib") || !strcasecmp(end, "k")) mul = 1024.0;
    else if (!strcasecmp(end, "mib") || !strcasecmp(end, "m")) mul = 1048576.0;
    else if (!strcasecmp(end, "gib") || !strcasecmp(end, "g")) mul = 1073741824.0;
    else return 0;
    double b = v * mul;
    if (b < 1 || b > 1.8e19) return 0;
    return (uint64_t)b;
}

int cli_open_warn(const char *path, tm_file **f, int warn) {
    tm_err err;
    tm_status s = tm_open(path, NULL, f, &err);
    if (s != TM_OK) return cli_fail(s, &err);
    for (int64_t k = 0; warn && !g_cli.quiet && k < tm_file_n_warnings(*f); k++)
        fprintf(stderr, "tensormorph: warning: %s: %s\n", path, tm_file_warning(*f, k));
    return 0;
}

int cli_open(const char *path, tm_file **f) { return cli_open_warn(path, f, 1); }

char *cli_read_text(const char *path, tm_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tm_err_clear(err);
        err->code = TM_E_IO;
        err->sys_errno = errno;
        snprintf(err->msg, sizeof err->msg, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += r;
        if (cap - n < 2) {
            if (cap > (64u << 20)) { free(buf); buf = NULL; break; }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(fp);
    if (!buf) {
        tm_err_clear(err);
        err->code = TM_E_LIMIT;
        snprintf(err->msg, sizeof err->msg, "%s: larger than 64 MiB or out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}
