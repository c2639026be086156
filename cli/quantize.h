/* quantize.h: the one driver of `tensormorph quantize`'s three output forms (compressed-tensors
** directory, GGUF file, ONNX model). cmd_quantize.c picks the form from OUT and the form parses
** its own flags into its job's parameters; cli_quantize_run then opens IN, runs the job, reports
** a failure (cli_fail: message and exit code) and prints the parts every form shares (the
** --json document {"output", the form's keys, "manifest"}, the warnings, the text report),
** asking the form's table for the rest. Only cli/ uses this. */
#ifndef TM_CLI_QUANTIZE_H
#define TM_CLI_QUANTIZE_H
#include "cli.h"

typedef struct cli_qtotals {
    int64_t     n_quantized, n;
    uint64_t    src_bytes, out_bytes;
    double      seconds;
    const char *manifest_json;
    char        what[64];
} cli_qtotals;

/* A totals callback's common part: res is the job's result (the three result structs name
** n_quantized, n, src_bytes, out_bytes, seconds and manifest_json alike). */
#define CLI_QTOTALS_OF(t, res)                 \
    do {                                       \
        (t)->n_quantized = (res)->n_quantized; \
        (t)->n = (res)->n;                     \
        (t)->src_bytes = (res)->src_bytes;     \
        (t)->out_bytes = (res)->out_bytes;     \
        (t)->seconds = (res)->seconds;         \
        (t)->manifest_json = (res)->manifest_json; \
    } while (0)

typedef struct cli_qform {
    /* Run the form's job (its parameters in ctx) on in into out; *res: its result. */
    tm_status (*run)(void *ctx, tm_file *in, const char *out, void **res, tm_err *err);
    /* What every result holds: the counts, sizes and time of the first report line, the
    ** manifest the job wrote; `what` names the output ("tensors to GGUF Q4_K_M"). */
    void (*totals)(const void *ctx, const void *res, struct cli_qtotals *t);
    /* Optional: warnings on stderr after a run (not under --quiet). */
    void (*warn)(const void *res, const char *out);
    /* Optional: the form's keys of the --json document, between "output" and "manifest". */
    void (*json_add)(const void *res, json_t *doc);
    /* The text report after its first line "quantized N of M WHAT: IN -> OUT (a MB -> b MB) in
    ** t s" (not under --quiet); top: --top N rows, -1 for all. */
    void (*print)(const void *ctx, const void *res, const char *in_path, const char *out, int top);
    void (*free_res)(void *res);
} cli_qform;

/* The options every form's job takes alike (their parameter structs name the fields alike):
** --no-checksums, --force, the command line for the manifest and the interrupt flag. */
#define CLI_QUANTIZE_COMMON(p, a)                           \
    do {                                                    \
        (p).no_checksums = cli_has((a), "no-checksums");    \
        (p).force = cli_has((a), "force");                  \
        (p).command_line = g_cli.argv_line;                 \
        (p).cancel = &g_cli_interrupted;                    \
    } while (0)

/* --shard I/N into *index, *count (0, 0 without it). Returns 0, or 2 after a usage error
** (not I/N with 0 <= I < N <= 100000). */
int cli_quantize_shard(const cli_cmd *cmd, cli_args *a, int *index, int *count);

/* Open in_path, run f on it into out and report. Returns 0 or the exit code (cli_open's, or
** cli_fail's for the job's status: docs/exit-codes.md). */
int cli_quantize_run(const cli_qform *f, void *ctx, const char *in_path, const char *out, int top);

#endif
