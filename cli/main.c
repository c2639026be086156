/* main.c: the tensormorph command table and dispatch (git.c commands[] style). */
#include "cli.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

int cmd_inspect(const cli_cmd *cmd, cli_args *a);
int cmd_quantize(const cli_cmd *cmd, cli_args *a);
int cmd_merge(const cli_cmd *cmd, cli_args *a);
int cmd_convert(const cli_cmd *cmd, cli_args *a);
int cmd_qdiff(const cli_cmd *cmd, cli_args *a);
int cmd_scalar(const cli_cmd *cmd, cli_args *a);
int cmd_diff(const cli_cmd *cmd, cli_args *a);
int cmd_demo(const cli_cmd *cmd, cli_args *a);
int cmd_version(const cli_cmd *cmd, cli_args *a);
int cmd_graph(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_graph[];
extern const char details_graph[];
int cmd_compat(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_compat[];
extern const char details_compat[];
int cmd_evidence(const cli_cmd *cmd, cli_args *a);
int cmd_sensitivity(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_sensitivity[];
extern const char details_sensitivity[];
extern const cli_opt opts_evidence[];
extern const char details_evidence[];
int cmd_gate(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_gate[];
extern const char details_gate[];
int cmd_heatmap(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_heatmap[];
extern const char details_heatmap[];
int cmd_serve(const cli_cmd *cmd, cli_args *a);
int cmd_calibrate(const cli_cmd *cmd, cli_args *a);
extern const cli_opt opts_calibrate[];
extern const char details_calibrate[];
extern const cli_opt opts_serve[];
extern const char details_serve[];

extern const cli_opt opts_convert[];
extern const char details_convert[];
extern const cli_opt opts_merge[];
extern const char details_merge[];
extern const cli_opt opts_inspect[], opts_quantize[], opts_qdiff[], opts_scalar[], opts_diff[],
    opts_demo[], opts_none[];
extern const char details_quantize[], details_qdiff[], details_inspect[], details_scalar[],
    details_diff[], details_demo[];

const cli_opt opts_none[] = {CLI_OPT_END};

const cli_cmd cli_commands[] = {
    {"inspect", cmd_inspect, "List the tensors of a checkpoint: dtypes, shapes, bytes, quantization.",
     "inspect PATH [options]", details_inspect, opts_inspect, 1, 1},
    {"quantize", cmd_quantize, "Quantize a checkpoint and report the Quantization Diff.",
     "quantize IN -o OUT [options]", details_quantize, opts_quantize, 1, 1},
    {"merge", cmd_merge, "Assemble the output of a sharded quantize run (--shard I/N) from its parts.",
     "merge OUT [options]", details_merge, opts_merge, 1, 1},
    {"convert", cmd_convert, "Convert a LLaMA/Mistral checkpoint into a llama GGUF that llama.cpp loads (optionally quantized).",
     "convert IN -o OUT.gguf [options]", details_convert, opts_convert, 1, 1},
    {"qdiff", cmd_qdiff, "Quantization Diff: error of each quantized tensor in units of its own scale.",
     "qdiff REF QUANT [options]", details_qdiff, opts_qdiff, 2, 2},
    {"scalar", cmd_scalar, "Scalar Inspector: stored code, container word, scale, zero point and value of one element.",
     "scalar PATH TENSOR INDEX [options]", details_scalar, opts_scalar, 3, 3},
    {"diff", cmd_diff, "Weight diff by name: added, removed, changed shape/dtype, and value differences.",
     "diff A B [options]", details_diff, opts_diff, 2, 2},
    {"demo", cmd_demo, "Write the built-in demo checkpoint (deterministic, LLaMA-shaped).",
     "demo -o DIR [options]", details_demo, opts_demo, 0, 0},
    {"heatmap", cmd_heatmap, "Draw a tensor as a PNG heatmap: values, |values|, quantization groups or error in LSB.",
     "heatmap PATH TENSOR -o FILE.png [options]", details_heatmap, opts_heatmap, 2, 2},
    {"calibrate", cmd_calibrate, "Calibration lab: range, scale, zero point, clipped tails, SQNR and probes of each observer over samples.",
     "calibrate SAMPLES... [options]", details_calibrate, opts_calibrate, 1, 64},
    {"serve", cmd_serve, "Serve the web UI (architecture, heatmaps, Scalar Inspector, Quantization Diff) on localhost.",
     "serve PATH [--ref REF] [options]", details_serve, opts_serve, 1, 1},
    {"graph", cmd_graph, "The graph of an ONNX model: nodes, values, dtypes and where quantization sits.",
     "graph PATH [options]", details_graph, opts_graph, 1, 1},
    {"compat", cmd_compat, "Runtime contract: which quantized tensors/nodes a target runs natively, and why not.",
     "compat ARTIFACT --target TARGET [options]", details_compat, opts_compat, 1, 1},
    {"evidence", cmd_evidence, "Serving evidence: ONNX models on ONNX Runtime (latency, memory, drift), LLMs on llama.cpp (KLD, top-1, PPL by slice, latency).",
     "evidence BASELINE.onnx CANDIDATE.onnx --inputs DIR|--random-inputs N [options] | evidence BASE CAND --text [NAME=]FILE... [options]",
     details_evidence, opts_evidence, 2, 2},
    {"sensitivity", cmd_sensitivity, "Per-module sensitivity on llama.cpp outputs, and the smallest mixed-precision plan meeting a KLD budget.",
     "sensitivity SRC --text FILE [-t TYPE] [--budget KLD] [-o OUT.gguf|DIR] [options] | sensitivity merge PART... [-o OUT]",
     details_sensitivity, opts_sensitivity, 1, 4096},
    {"gate", cmd_gate, "Release gate: checksums, evidence, policy thresholds, canary and rollback -> PASS/FAIL.",
     "gate --manifest M --evidence E --policy P [options]", details_gate, opts_gate, 0, 0},
    {"version", cmd_version, "Print the version.", "version [options]",
     "Prints tensormorph's version and the git commit it was built from (--json: both as fields).",
     opts_none, 0, 0},
};
const int cli_n_commands = (int)(sizeof cli_commands / sizeof cli_commands[0]);

int cmd_version(const cli_cmd *cmd, cli_args *a) {
    (void)cmd; (void)a;
    if (g_cli.json) {
        json_t *d = cli_json_doc("version");
        json_object_set_new(d, "version", json_string(TM_VERSION_STRING));
        json_object_set_new(d, "git_commit", json_string(tm_git_commit()));
        cli_json_print(d);
    } else {
        printf("tensormorph %s (%s)\n", TM_VERSION_STRING, tm_git_commit());
    }
    return 0;
}

static void usage_main(FILE *out) {
    fprintf(out, "usage: tensormorph <command> [options] [args]\n\ncommands:\n");
    int w = 0;
    for (int i = 0; i < cli_n_commands; i++)
        if ((int)strlen(cli_commands[i].name) > w) w = (int)strlen(cli_commands[i].name);
    for (int i = 0; i < cli_n_commands; i++)
        fprintf(out, "  %-*s %s\n", w, cli_commands[i].name, cli_commands[i].summary);
    fprintf(out, "\n'tensormorph help <command>' or 'tensormorph <command> --help' for details.\n"
                 "Exit status: 0 ok, 1 check failed, 2 usage, 3 bad input, 4 I/O, 5 internal, 130 interrupted.\n");
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *prev = calloc(lb + 1, sizeof *prev), *cur = calloc(lb + 1, sizeof *cur);
    if (!prev || !cur) { free(prev); free(cur); return (size_t)-1; }
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t c = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < c) c = prev[j] + 1;
            if (cur[j - 1] + 1 < c) c = cur[j - 1] + 1;
            cur[j] = c;
        }
        size_t *t = prev; prev = cur; cur = t;
    }
    size_t d = prev[lb];
    free(prev); free(cur);
    return d;
}

static const cli_cmd *find_cmd(const char *name) {
    for (int i = 0; i < cli_n_commands; i++)
        if (!strcmp(cli_commands[i].name, name)) return &cli_commands[i];
    return NULL;
}

/* A repeated signal exits at once only while no job holds files beside an output (OUT.lock,
** OUT.tmp.<pid>): otherwise the job sees the flag at its next check, removes them and the run
** ends with 130 (docs/exit-codes.md). timeout(1) sends its signal twice (to the child and to its
** process group), so this is the common case, not only a user's second Ctrl-C. Nor after an
** output was published: that run has succeeded and exits 0. */
static void on_sigint(int sig) {
    (void)sig;
    if (g_cli_exit_on_interrupt ||
        (g_cli_interrupted && tm_outputs_pending() == 0 && tm_outputs_published() == 0))
        _Exit(130);
    g_cli_interrupted = 1;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage_main(stderr); return EXIT_USAGE; }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) { usage_main(stdout); return 0; }
    if (!strcmp(name, "--version")) name = "version";
    if (!strcmp(name, "help")) {
        if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) { usage_main(stdout); return 0; }
        const cli_cmd *c = find_cmd(argv[2]);
        if (!c) { fprintf(stderr, "tensormorph: no command '%s'\n", argv[2]); return EXIT_USAGE; }
        cli_print_help(c, stdout);
        return 0;
    }
    const cli_cmd *cmd = find_cmd(name);
    if (!cmd) {
        const char *best = NULL;
        size_t bd = (size_t)-1;
        for (int i = 0; i < cli_n_commands; i++) {
            size_t d = edit_distance(name, cli_commands[i].name);
            if (d < bd) { bd = d; best = cli_commands[i].name; }
        }
        fprintf(stderr, "tensormorph: '%s' is not a command.", name);
        if (best && bd <= 3) fprintf(stderr, " Did you mean '%s'?", best);
        fprintf(stderr, "\ntry 'tensormorph --help'\n");
        return EXIT_USAGE;
    }
    /* the command line, for manifests */
    size_t len = 0;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 3;
    g_cli.argv_line = calloc(len + 1, 1);
    if (g_cli.argv_line) {
        size_t p = 0;
        for (int i = 0; i < argc; i++) {
            size_t l = strlen(argv[i]);
            if (i) g_cli.argv_line[p++] = ' ';
            memcpy(g_cli.argv_line + p, argv[i], l);
            p += l;
        }
        g_cli.argv_line[p] = '\0';
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    cli_args args;
    int rc = cli_parse(cmd, argc - 1, argv + 1, &args);
    if (rc == -1) { cli_args_free(&args); free(g_cli.argv_line); return 0; }
    if (rc == 0) rc = cmd->fn(cmd, &args);
    cli_args_free(&args);
    free(g_cli.argv_line);
    if (g_cli_interrupted && rc != 0) rc = EXIT_INTERRUPT;
    cli_json_error_fallback(rc);
    return rc;
}
