/* cmd_evidence.c: `tensormorph evidence BASELINE.onnx CANDIDATE.onnx`: serving evidence from a
** real runtime (tensormorph/evidence.h, docs/evidence.md). This file finds Node.js, the runner
** script and onnxruntime-node (the library reads no environment), parses the options and prints
** or writes the evidence. */
#include "cli.h"
#include "tensormorph/evidence.h"
#include "tensormorph/evidence_llm.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TM_RUNNER_DIR
#define TM_RUNNER_DIR "runner" /* CMakeLists.txt defines it as <source dir>/runner */
#endif

const cli_opt opts_evidence[] = {
    {"inputs", 0, "DIR", 0, "sample sets: DIR/inputs.json (docs/schemas/inputs.schema.json) and its .npy files"},
    {"random-inputs", 0, "N", 0, "instead of --inputs: N seeded random sample sets (1..100000)"},
    {"input-shape", 0, "NAME=D1,D2,...", 1, "fix the shape of model input NAME (needed for dynamic dims)"},
    CLI_OPT_SEED("S", "seed of --random-inputs (0..2^63-1, default 0)"),
    {"warmup", 0, "W", 0, "untimed runs per sample set before the timed ones (default 3)"},
    {"runs", 0, "R", 0, "timed runs per sample set (default 10)"},
    {"slices", 0, "SLICES.json", 0, "named subsets of --inputs ids (docs/schemas/slices.schema.json): drift per slice"},
    CLI_OPT_OUTPUT("FILE", "write the evidence JSON here (atomically); without it, it goes to stdout"),
    /* GGUF language models on llama.cpp (cmd_evidence_llm.c) */
    {"text", 0, "[NAME=]FILE", 1, "GGUF models: a text slice (UTF-8) scored as llama-perplexity --kl-divergence does"},
    {"ctx", 0, "N", 0, "GGUF models: chunk length in tokens (even, default 512)"},
    {"chunks", 0, "K", 0, "GGUF models: chunks per slice (default: every full chunk, at least 2)"},
    {"gen", 0, "N", 0, "GGUF models: timed greedy decode steps per chunk (0..ctx/2, default 16)"},
    {"base-cache", 0, "FILE", 0, "GGUF models: base distributions cached here and reused by later candidates"},
    CLI_OPT_VOCAB_FROM("GGUF models: tokenizer for converting a non-GGUF BASE or CAND (tensormorph convert)"),
    CLI_OPT_END,
};
const char details_evidence[] =
    "Runs BASELINE and CANDIDATE (ONNX models) on ONNX Runtime's CPU execution provider under one\n"
    "frozen protocol: the same sample sets and shapes, --threads T as intraOpNumThreads (default\n"
    "$TM_NUM_THREADS, else 1; interOpNumThreads 1), graph optimization level 'all', W warmup and R\n"
    "timed runs per sample set, one Node.js process per model (runner/evidence.js, npm package\n"
    "onnxruntime-node). Writes evidence JSON (docs/schemas/evidence.schema.json): the protocol,\n"
    "raw latency samples and nearest-rank p50/p95/p99 per model, peak RSS, output drift per output\n"
    "(max |c-b|, relative L2, top-1 agreement) overall and per slice, and the candidate's operators\n"
    "by type.\n"
    "\n"
    "Where things are found: onnxruntime-node in $TM_NODE_MODULES (a node_modules folder), else in\n"
    "<source dir>/runner/node_modules, else <prefix>/share/tensormorph/runner/node_modules next to\n"
    "an installed binary; node is $TM_NODE or 'node' on PATH; scratch files go to $TMPDIR or /tmp.\n"
    "\n"
    "Output: without -o the evidence JSON goes to stdout. With -o FILE it is written to FILE and\n"
    "stdout gets a short summary, or the evidence JSON again with --json. Progress on stderr.\n"
    "Exit status: 0 ok; 2 usage (also: a dynamic input dim without --input-shape); 3 bad input\n"
    "(inputs.json or SLICES.json against their schema, an .npy that does not fit the model, a model\n"
    "ONNX Runtime cannot load); 4 I/O, and Node.js or onnxruntime-node missing (the message gives\n"
    "the install command); 5 internal.\n"
    "\n"
    "GGUF language models (--text FILE, repeatable as --text NAME=FILE): both run on llama.cpp's CPU\n"
    "backend through node-llama-cpp 3.21.1 (runner/llm_evidence.js), under llama-perplexity's\n"
    "--kl-divergence protocol: KL divergence, same top token, PPL of both and their ratio, RMS delta-p\n"
    "per slice and overall, the 20 worst positions, prompt tokens/s and decode latency per model\n"
    "(docs/evidence.md \"LLM evidence\"). --warmup defaults to 1 here. Exit 3 also for vocabularies\n"
    "that differ, a text shorter than two chunks, NaN probabilities (the evidence is still written,\n"
    "its statistics null), a runner crash (its stderr kept in a named file). A non-GGUF BASE or CAND\n"
    "is converted first (tensormorph convert, tokenizer from --vocab-from X.gguf or its\n"
    "tokenizer.model); its latency is\n"
    "then marked latency_representative: false.";

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void summary(const char *doc_text, const char *out_path) {
    json_t *d = json_loads(doc_text, 0, NULL);
    if (!d) return;
    json_t *models = json_object_get(d, "models");
    const char *names[2] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_object_get(models, names[i]);
        json_int_t nops = 0;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(m, "operators"), k, v) nops += json_integer_value(v);
        printf("%-10s p50 %.3f ms  p95 %.3f ms  p99 %.3f ms  peak RSS %.1f MiB  %" PRId64 " nodes  %s\n",
               names[i], json_number_value(json_object_get(m, "p50_ms")),
               json_number_value(json_object_get(m, "p95_ms")),
               json_number_value(json_object_get(m, "p99_ms")),
               (double)json_integer_value(json_object_get(m, "peak_rss_bytes")) / 1048576.0,
               (int64_t)nops, json_string_value(json_object_get(m, "path")));
    }
    json_t *cops = json_object_get(d, "candidate_operators");
    json_t *dq = json_object_get(cops, "DequantizeLinear"), *q = json_object_get(cops, "QuantizeLinear");
    printf("candidate  QuantizeLinear %" PRId64 ", DequantizeLinear %" PRId64 "\n",
           (int64_t)(q ? json_integer_value(q) : 0), (int64_t)(dq ? json_integer_value(dq) : 0));
    json_t *drift = json_object_get(d, "drift");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(drift, "overall"), k, v) {
        json_t *t1 = json_object_get(v, "top1_agreement");
        printf("drift      %s: max_abs %.6g  rel_l2 %.6g  top1 %s", k,
               json_number_value(json_object_get(v, "max_abs")),
               json_number_value(json_object_get(v, "rel_l2")), json_is_null(t1) ? "-" : "");
        if (!json_is_null(t1)) printf("%.4f", json_number_value(t1));
        printf("\n");
    }
    const char *sk;
    json_t *sv;
    json_object_foreach(json_object_get(drift, "slices"), sk, sv) {
        json_object_foreach(sv, k, v) {
            printf("slice %-8s %s: max_abs %.6g  rel_l2 %.6g  (%" PRId64 " inputs)\n", sk, k,
                   json_number_value(json_object_get(v, "max_abs")),
                   json_number_value(json_object_get(v, "rel_l2")),
                   (int64_t)json_integer_value(json_object_get(v, "n_inputs")));
        }
    }
    printf("wrote %s\n", out_path);
    json_decref(d);
}

/* cmd_evidence_llm.c: the GGUF path, and where a runner script and its node_modules are */
int  cmd_evidence_llm(const cli_cmd *cmd, cli_args *a);
void cli_evidence_runner(const char *script_name, char *script, size_t scap, char *nm, size_t ncap,
                         char *runner_dir, size_t rcap, char *share, size_t shcap, const char **node,
                         const char **tmp_dir);

int cmd_evidence(const cli_cmd *cmd, cli_args *a) {
    if (cli_has(a, "text")) return cmd_evidence_llm(cmd, a);
    static const char *const llm_only[] = {"ctx", "chunks", "gen", "base-cache", "vocab-from"};
    for (size_t i = 0; i < sizeof llm_only / sizeof llm_only[0]; i++)
        if (cli_has(a, llm_only[i])) return cli_usage_error(cmd, "--%s needs --text FILE (GGUF language models)", llm_only[i]);
    if (tm_is_gguf_file(a->pos[0]) || tm_is_gguf_file(a->pos[1]))
        return cli_usage_error(cmd, "GGUF models need --text FILE: the text their next-token distributions are compared on");
    tm_evidence_params p = tm_evidence_params_default();
    p.baseline = a->pos[0];
    p.candidate = a->pos[1];
    p.inputs_dir = cli_get(a, "inputs");
    p.slices_path = cli_get(a, "slices");
    p.threads = g_cli.threads_given ? g_cli.threads : 1; /* the frozen protocol's default */
    const char *outp = cli_get(a, "output");
    long v;
    int rc;
    if (p.inputs_dir && cli_has(a, "random-inputs"))
        return cli_usage_error(cmd, "--inputs and --random-inputs exclude each other");
    if (!p.inputs_dir && !cli_has(a, "random-inputs"))
        return cli_usage_error(cmd, "give --inputs DIR or --random-inputs N");
    if ((rc = cli_opt_long(cmd, a, "random-inputs", 1, 1, 100000, &v))) return rc;
    p.n_random = v;
    if ((rc = cli_opt_long(cmd, a, "warmup", 3, 0, 100000, &v))) return rc;
    p.warmup = (int)v;
    if ((rc = cli_opt_long(cmd, a, "runs", 10, 1, 100000, &v))) return rc;
    p.runs = (int)v;
    if (cli_get(a, "seed")) {
        const char *s = cli_get(a, "seed");
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (errno || *end || end == s || s[0] == '-' || x > (unsigned long long)INT64_MAX)
            return cli_usage_error(cmd, "--seed must be an integer in [0, 2^63-1], got '%s'", s);
        p.seed = x;
    }
    if (p.inputs_dir && cli_has(a, "seed")) return cli_usage_error(cmd, "--seed applies to --random-inputs only");
    if (p.slices_path && !p.inputs_dir) return cli_usage_error(cmd, "--slices needs --inputs DIR");

    int n_shapes = cli_n(a, "input-shape");
    tm_evidence_shape *shapes = calloc((size_t)(n_shapes ? n_shapes : 1), sizeof *shapes);
    char **names = calloc((size_t)(n_shapes ? n_shapes : 1), sizeof *names);
    if (!shapes || !names) { free(shapes); free(names); fprintf(stderr, "tensormorph: out of memory\n"); return EXIT_IO; }
    rc = 0;
    for (int i = 0; i < n_shapes && !rc; i++) {
        const char *s = cli_get_i(a, "input-shape", i);
        const char *eq = strrchr(s, '=');
        if (!eq || eq == s) { rc = cli_usage_error(cmd, "--input-shape must be NAME=D1,D2,..., got '%s'", s); break; }
        names[i] = strndup(s, (size_t)(eq - s));
        shapes[i].name = names[i];
        int nd = eq[1] ? cli_parse_coords(eq + 1, shapes[i].shape, TM_MAX_DIMS) : 0;
        for (int d = 0; d < nd; d++) if (shapes[i].shape[d] < 0) nd = -1;
        if (nd < 0 || !names[i]) { rc = cli_usage_error(cmd, "--input-shape %s: dims must be up to %d non-negative integers, comma-separated", s, TM_MAX_DIMS); break; }
        shapes[i].ndim = nd;
        for (int j = 0; j < i; j++)
            if (!strcmp(names[j], names[i])) { rc = cli_usage_error(cmd, "--input-shape %s given twice", names[i]); break; }
    }
    p.input_shapes = shapes;
    p.n_input_shapes = n_shapes;

    /* -o before any run: a previous evidence document is replaced, never an input or another file */
    if (!rc && outp) {
        const char *ins[4] = {p.baseline, p.candidate, p.inputs_dir, p.slices_path};
        tm_err oe;
        if (tm_check_report_output("-o", outp, ins, 4, "tensormorph.evidence/1", &oe)) rc = cli_fail(oe.code, &oe);
    }
    /* where node, the runner script and onnxruntime-node are */
    char share[PATH_MAX + 64], script[PATH_MAX + 128], nm[PATH_MAX + 128], runner_dir[PATH_MAX + 64];
    cli_evidence_runner("evidence.js", script, sizeof script, nm, sizeof nm, runner_dir, sizeof runner_dir,
                        share, sizeof share, &p.node, &p.tmp_dir);
    const char *env_nm = getenv("TM_NODE_MODULES");
    p.runner_script = script;
    p.node_modules = nm;
    if (!rc && !is_file(script)) {
        fprintf(stderr, "tensormorph: the runner script is missing: looked for %s/evidence.js and %s/evidence.js\n",
                TM_RUNNER_DIR, share);
        rc = EXIT_IO;
    }
    if (!rc && !tm_evidence_runtime_present(nm)) {
        fprintf(stderr, "tensormorph: onnxruntime-node is not installed in %s (%s).\n"
                        "Install it with:\n  cd %s && npm install --ignore-scripts\n"
                        "or set TM_NODE_MODULES to a node_modules folder that holds onnxruntime-node.\n",
                nm, env_nm && *env_nm ? "from TM_NODE_MODULES" : "the runner's node_modules", runner_dir);
        rc = EXIT_IO;
    }
    if (!rc) {
        p.progress = cli_progress_cb;
        p.cancel = &g_cli_interrupted;
        char *text = NULL;
        tm_err err;
        tm_status s = tm_evidence_run(&p, &text, &err);
        cli_progress_end();
        if (!s && outp) s = tm_evidence_write(outp, text, &err);
        if (s) {
            rc = cli_fail(s, &err);
        } else if (!outp || g_cli.json) {
            fputs(text, stdout);
        } else if (!g_cli.quiet) {
            summary(text, outp);
        }
        free(text);
    }
    for (int i = 0; i < n_shapes; i++) free(names[i]);
    free(names);
    free(shapes);
    return rc;
}
