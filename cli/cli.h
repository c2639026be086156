/* cli.h: shared pieces of the tensormorph command line: the option table, parsed arguments,
** exit codes, JSON output and progress. Only cli/ uses this; it includes only the public API. */
#ifndef TM_CLI_H
#define TM_CLI_H

#include "tensormorph.h"

#include <jansson.h>
#include <stdio.h>

/* Exit codes: stable, documented in docs/exit-codes.md. */
enum {
    EXIT_OK = 0,        /* success                                                           */
    EXIT_CHECK = 1,     /* a check the user asked for failed (qdiff --fail-on-flag, ...)     */
    EXIT_USAGE = 2,     /* bad usage, or an option the chosen output cannot honour           */
    EXIT_INPUT = 3,     /* input invalid, corrupt or unsupported                             */
    EXIT_IO = 4,        /* I/O or system error                                               */
    EXIT_INTERNAL = 5,  /* internal error                                                    */
    EXIT_INTERRUPT = 130
};

/* One option of a command: the same table drives parsing, --help and the docs test. */
typedef struct cli_opt {
    const char *name;      /* long name without "--"                                          */
    char        short_name;/* 0 when none                                                     */
    const char *arg;       /* argument placeholder ("N", "FILE"); NULL for a flag             */
    int         repeat;    /* may be given more than once                                      */
    const char *help;      /* one line: meaning, range, default                                */
} cli_opt;

/* One vocabulary of flags (docs/cli.md "Options shared by several commands"): an option that
** several commands take is spelled here once, with its short name and argument placeholder;
** the command gives the help line where its meaning needs its own words. */
#define CLI_OPT_OUTPUT(arg, help)   {"output", 'o', arg, 0, help}
#define CLI_OPT_TYPE(help)          {"type", 't', "T", 0, help}
#define CLI_OPT_VOCAB_FROM(help)    {"vocab-from", 0, "X.gguf", 0, help}
#define CLI_OPT_GRANULARITY(help)   {"granularity", 'g', "G", 0, help}
#define CLI_OPT_SYMMETRIC(help)     {"symmetric", 0, NULL, 0, help}
#define CLI_OPT_ASYMMETRIC          {"asymmetric", 0, NULL, 0, "affine codes with a zero point"}
#define CLI_OPT_OBSERVER(help)      {"observer", 0, "O", 0, help}
#define CLI_OPT_CONVENTION(help)    {"convention", 0, "C", 0, help}
#define CLI_OPT_TARGET(help)        {"target", 0, "TARGET", 0, help}
#define CLI_OPT_TOP(help)           {"top", 0, "N", 0, help}
#define CLI_OPT_REF(help)           {"ref", 0, "REF", 0, help}
#define CLI_OPT_TABLE(help)         {"table", 0, "FILE", 0, help}
#define CLI_OPT_MANIFEST(help)      {"manifest", 0, "FILE", 0, help}
#define CLI_OPT_EVIDENCE(help)      {"evidence", 0, "FILE", 0, help}
#define CLI_OPT_POLICY(help)        {"policy", 0, "FILE", 0, help}
#define CLI_OPT_CANARY(help)        {"canary", 0, "FRACTION", 0, help}
#define CLI_OPT_ROLLBACK(help)      {"rollback", 0, "PATH", 0, help}
#define CLI_OPT_ALL(help)           {"all", 0, NULL, 0, help}
#define CLI_OPT_SEED(arg, help)     {"seed", 0, arg, 0, help}
#define CLI_OPT_FORCE               {"force", 'f', NULL, 0, "replace OUT when it holds a previous tensormorph output (never anything else)"}
#define CLI_OPT_NO_CHECKSUMS        {"no-checksums", 0, NULL, 0, "skip sha256 of inputs and outputs (the manifest says so)"}
/* In an option's help line: the GGUF file types the quantizer takes, as --help prints them
** (tm_gguf_ftype_list: the one table of them). */
#define CLI_HELP_GGUF_FTYPES        "{GGUF_FTYPES}"
#define CLI_OPT_END                 {NULL, 0, NULL, 0, NULL} /* ends every option table */

/* An old spelling of an option, kept so old command lines still work: --NAME (or -SHORT) of
** command CMD means --CANONICAL. Listed in --help beside the option and in docs/cli.md; `note`
** (may be NULL) is printed on stderr when the old spelling is used. */
typedef struct cli_alias {
    const char *cmd;
    const char *name;        /* long alias without "--", or NULL                                 */
    char        short_name;  /* short alias, or 0                                                */
    const char *canonical;   /* the option's long name                                           */
    const char *note;
} cli_alias;
extern const cli_alias cli_aliases[];
extern const int       cli_n_aliases;

typedef struct cli_args {
    int          n_opts;
    const cli_opt *opts;
    int         *count;    /* [n_opts] times given                                             */
    char      ***values;   /* [n_opts][count] arguments                                        */
    char       **pos;      /* positional arguments                                             */
    int          n_pos;
} cli_args;

struct cli_cmd;
typedef int (*cli_fn)(const struct cli_cmd *cmd, cli_args *a);

typedef struct cli_cmd {
    const char    *name;
    cli_fn         fn;
    const char    *summary;   /* one line                                                      */
    const char    *usage;     /* "inspect PATH [options]"                                      */
    const char    *details;   /* paragraphs printed by --help, may be NULL                     */
    const cli_opt *opts;      /* terminated by {NULL}                                          */
    int            min_pos, max_pos;
} cli_cmd;

extern const cli_cmd cli_commands[];
extern const int     cli_n_commands;

/* Options every command has (appended to each command's table by the parser). */
extern const cli_opt cli_common_opts[];

/* Parsing. Returns 0 ok, EXIT_USAGE after printing one line + hint, or -1 when --help was
** printed (exit 0). */
int  cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_args *out);
void cli_args_free(cli_args *a);
const char *cli_get(const cli_args *a, const char *name);        /* last value or NULL      */
int  cli_has(const cli_args *a, const char *name);               /* given at least once     */
int  cli_n(const cli_args *a, const char *name);                 /* times given             */
const char *cli_get_i(const cli_args *a, const char *name, int i);
void cli_print_help(const cli_cmd *cmd, FILE *out);
int  cli_usage_error(const cli_cmd *cmd, const char *fmt, ...);  /* prints, returns 2       */
/* --name as a decimal integer in [lo, hi]: *out = def when not given; a value that is not
** one, or is out of range, is a usage error ("--NAME must be an integer in [lo, hi], got 'V'",
** returns 2). 0 when *out is set. */
/* --canary F of gate and serve: when given, a fraction in (0, 1] (strtod, nothing after it):
** sets *have = 1 and *canary; not given leaves both. -1 when given and not such a fraction. */
int  cli_opt_canary(const cli_args *a, int *have, double *canary);
int  cli_opt_long(const cli_cmd *cmd, const cli_args *a, const char *name, long def, long lo,
                  long hi, long *out);

/* Global state set from the common options. */
typedef struct cli_state {
    int json;          /* --json                                              */
    int quiet;         /* -q                                                  */
    int verbose;       /* -v                                                  */
    int progress;      /* draw progress on stderr                             */
    int color;         /* colour on stdout                                    */
    int threads;       /* --threads / TM_NUM_THREADS / tm_usable_cpus()       */
    int threads_given; /* 1 when --threads or TM_NUM_THREADS set it           */
    char *argv_line;   /* the command line, for manifests                     */
} cli_state;
extern cli_state g_cli;
extern volatile int g_cli_interrupted;
/* 1 while a command holds nothing to clean up (no output started, no temp file): the first
** SIGINT/SIGTERM then exits 130 at once instead of waiting for the next cancel check. */
extern volatile int g_cli_exit_on_interrupt;

/* Map a library status to an exit code, print err->msg on stderr ("tensormorph: ..."). */
int cli_fail(tm_status s, const tm_err *err);

/* The whole of a text file (a JSON table or policy) as a NUL-terminated malloc'd string, at most
** 64 MiB. NULL with err set: TM_E_IO (cannot open; errno kept) or TM_E_LIMIT (larger, or out of
** memory). */
char *cli_read_text(const char *path, tm_err *err);
/* With --json, a failing command (rc >= 2) that printed no document yet prints
** {"error": {"code", "status", "message"}} on stdout (cli_fail and cli_usage_error do it at once). */
void cli_json_error_fallback(int rc);
/* cli_stderr_tap: pass stderr through a tap that keeps its last message line (without the
** "tensormorph[ CMD]: " prefix; notes, warnings and the --help hint skipped), the message of
** that error document; cli_stderr_last returns it, NULL when there is none (stderr_tap.c). */
void cli_stderr_tap(void);
const char *cli_stderr_last(void);
/* Print "tensormorph: <message>" on stderr (and the --json error document); returns code. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_exit_code(tm_status s);

/* JSON helpers. Non-finite numbers become the strings "nan", "inf", "-inf". */
json_t *cli_json_num(double v);
json_t *cli_json_doc(const char *cmd);  /* {"schema": "tensormorph.<cmd>/1"} */
void    cli_json_print(json_t *doc);    /* prints to stdout and decrefs     */
/* The same on one line (compact), flushed: serve --json prints its address so (docs/cli.md). */
void    cli_json_print_line(json_t *doc);
json_t *cli_json_shape(int ndim, const int64_t *shape);
void    cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* cli_quant_str: tm_qtensor_label of t, "-" when t is not quantized. cli_quant_json: the
** "quantization" object (label and description included), null when not quantized. */
void    cli_quant_str(const tm_file *f, const tm_tensor *t, char *buf, size_t n);
json_t *cli_quant_json(const tm_file *f, const tm_tensor *t);
/* cli_json_set_label: set "label" and "description" (tm_qtensor_label/_describe) on o when t is
** quantized; every JSON document that describes a quantized tensor carries both. */
void    cli_json_set_label(json_t *o, const tm_file *f, const tm_tensor *t);
/* GPTQ zero-point convention applied to q: "v1" (stored z - 1) or "v2" (stored z); NULL when q
** is not GPTQ (docs/formats.md "GPTQ and AWQ"). */
const char *cli_gptq_convention(const tm_qtensor *q);

/* Progress on stderr (only when enabled: TTY or --progress, not -q). Rate-limited to 10 Hz. */
void cli_progress(const char *phase, uint64_t done, uint64_t total);
void cli_progress_end(void);
/* the same for a count of items ("12 / 40 tensors") */
void cli_progress_count(const char *phase, uint64_t done, uint64_t total, const char *unit);
void cli_progress_cb(void *ud, const char *phase, uint64_t done, uint64_t total);

/* All values of a repeatable option, as a NULL-terminated array (malloc'd; the strings belong to
** a); *n their count. NULL when out of memory. */
const char **cli_get_all(const cli_args *a, const char *name, int64_t *n);
/* --top N|all (quantize and qdiff: rows of the report, flagged first, worst first): *top = N,
** -1 for all; CLI_TOP_DEFAULT when not given. 0, or the usage error's exit code. */
#define CLI_TOP_DEFAULT 10
int cli_parse_top(const cli_cmd *cmd, const cli_args *a, int *top);
/* quantize's --kernel auto|ref|avx2|avx512 (or TM_FORCE_KERNEL) into *kernels (the job's kernel
** set, tm_kernels_get; NULL for auto) and --top (cli_parse_top; top may be NULL) for the output
** forms that take them; 0, or the usage error's exit code. */
int cli_quantize_kernel_top(const cli_cmd *cmd, const cli_args *a, const tm_kernels **kernels, int *top);
/* Parse an observer name for quantize (tm_observer_from_name: minmax, ema_minmax[:C], histogram,
** percentile[:P], mse, entropy, with the optional :bins=N suffixes), entropy without them with
** ONNX Runtime's EntropyCalibrater defaults (128 bins, 128 quantized bins): tm_observer_name
** writes those as "entropy:bins=128", which reads back the same. 0 ok, -1 unknown name or bad
** number. */
int cli_parse_observer(const char *s, tm_observer *o);
/* Parse "1,2,3" into coords; returns count or -1. */
int cli_parse_coords(const char *s, int64_t *out, int max);
/* Parse a size like "5GB", "500MiB", "1000000". 0 on error. */
uint64_t cli_parse_size(const char *s);
/* Open a checkpoint, printing the error, and each of the file's warnings (tm_file_warning:
** config disagreements, a stray file beside an index, GPTQ zero points that look like v2) on
** stderr as "tensormorph: warning: PATH: ..." unless -q. Returns 0 ok else exit code.
** cli_open_warn with warn 0 leaves the warnings to the caller (inspect prints them itself). */
int cli_open(const char *path, tm_file **f);
int cli_open_warn(const char *path, tm_file **f, int warn);

#endif
