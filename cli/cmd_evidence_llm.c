/* cmd_evidence_llm.c: `tensormorph evidence BASE.gguf CAND.gguf --text [NAME=]FILE ...`: the
** behaviour evidence of two GGUF language models on llama.cpp (tensormorph/evidence_llm.h,
** docs/evidence.md "LLM evidence"). cmd_evidence.c hands over when --text is given; this file
** parses the LLM options, finds runner/llm_evidence.js and node-llama-cpp, and prints or writes
** the evidence. */
#include "cli.h"
#include "text_slice.h"
#include "tensormorph/evidence.h"
#include "tensormorph/evidence_llm.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#ifndef TM_RUNNER_DIR
#define TM_RUNNER_DIR "runner" /* CMakeLists.txt defines it as <source dir>/runner */
#endif

int  cmd_evidence_llm(const cli_cmd *cmd, cli_args *a);
void cli_evidence_runner(const char *script_name, char *script, size_t scap, char *nm, size_t ncap,
                         char *runner_dir, size_t rcap, char *share, size_t shcap, const char **node,
                         const char **tmp_dir);

/* Absolute folder of the running binary, or "" when /proc/self/exe is unreadable. */
static void exe_dir(char *out, size_t cap) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    out[0] = '\0';
    if (n <= 0) return;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
    snprintf(out, cap, "%s", buf);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Where the runner script `script_name` and node_modules are: script gets
** TM_RUNNER_DIR/<script_name>, else <exe dir>/../share/tensormorph/runner/<script_name>; nm gets
** $TM_NODE_MODULES, else <the runner dir>/node_modules; runner_dir the folder the script is in;
** *node $TM_NODE or "node"; *tmp_dir $TMPDIR or "/tmp". */
void cli_evidence_runner(const char *script_name, char *script, size_t scap, char *nm, size_t ncap,
                         char *runner_dir, size_t rcap, char *share, size_t shcap, const char **node,
                         const char **tmp_dir) {
    const char *nd = getenv("TM_NODE"), *tmp = getenv("TMPDIR");
    *node = nd && *nd ? nd : "node";
    *tmp_dir = tmp && *tmp ? tmp : "/tmp";
    char edir[PATH_MAX];
    exe_dir(edir, sizeof edir);
    snprintf(share, shcap, "%s/../share/tensormorph/runner", edir);
    snprintf(runner_dir, rcap, "%s", TM_RUNNER_DIR);
    snprintf(script, scap, "%s/%s", runner_dir, script_name);
    if (!is_file(script) && edir[0]) {
        snprintf(script, scap, "%s/%s", share, script_name);
        if (is_file(script)) snprintf(runner_dir, rcap, "%s", share);
        else snprintf(script, scap, "%s/%s", TM_RUNNER_DIR, script_name);
    }
    const char *env_nm = getenv("TM_NODE_MODULES");
    if (env_nm && *env_nm) snprintf(nm, ncap, "%s", env_nm);
    else snprintf(nm, ncap, "%s/node_modules", runner_dir);
}


static int int_opt(const cli_cmd *cmd, const cli_args *a, const char *name, long def, long lo, long hi, int *out) {
    long v;
    int rc = cli_opt_long(cmd, a, name, def, lo, hi, &v);
    *out = (int)v;
    return rc;
}


/* v formatted with fmt after multiplying by mul, or "null" where the statistic is null (NaN
** probabilities: never printed as if it were a number) */
static const char *num(json_t *v, const char *fmt, double mul, char *buf, size_t cap) {
    if (!json_is_number(v)) return "null";
    snprintf(buf, cap, fmt, mul * json_number_value(v));
    return buf;
}

static void summary(const char *doc_text, const char *out_path) {
    json_t *d = json_loads(doc_text, 0, NULL);
    if (!d) return;
    json_t *llm = json_object_get(d, "llm");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(llm, "slices"), k, v) {
        json_t *kl = json_object_get(v, "kld");
        char b[7][48];
        printf("slice %-12s KLD mean %s  p99 %s  max %s  same top-1 %s%%  PPL %s -> %s (x%s)  %lld tokens", k,
               num(json_object_get(kl, "mean"), "%.6g", 1, b[0], 48), num(json_object_get(kl, "p99"), "%.6g", 1, b[1], 48),
               num(json_object_get(kl, "max"), "%.6g", 1, b[2], 48), num(json_object_get(v, "same_top1"), "%.3f", 100, b[3], 48),
               num(json_object_get(v, "ppl_base"), "%.4f", 1, b[4], 48), num(json_object_get(v, "ppl_cand"), "%.4f", 1, b[5], 48),
               num(json_object_get(v, "ppl_ratio"), "%.4f", 1, b[6], 48),
               (long long)json_integer_value(json_object_get(v, "scored_tokens")));
        json_int_t nan = json_integer_value(json_object_get(v, "nan_positions"));
        if (nan > 0) printf("  %lld positions with NaN probabilities: statistics null", (long long)nan);
        printf("\n");
    }
    const char *names[2] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_object_get(json_object_get(d, "models"), names[i]);
        printf("%-10s prompt %.1f tok/s  decode p50 %.3f ms  p99 %.3f ms  peak RSS %.1f MiB  %s\n", names[i],
               json_number_value(json_object_get(m, "prompt_tokens_per_s")),
               json_number_value(json_object_get(m, "decode_p50_ms")), json_number_value(json_object_get(m, "decode_p99_ms")),
               (double)json_integer_value(json_object_get(m, "peak_rss_bytes")) / 1048576.0,
               json_string_value(json_object_get(m, "path")));
    }
    if (out_path) printf("wrote %s\n", out_path);
    json_decref(d);
}

int cmd_evidence_llm(const cli_cmd *cmd, cli_args *a) {
    tm_evidence_llm_params p = tm_evidence_llm_params_default();
    p.baseline = a->pos[0];
    p.candidate = a->pos[1];
    p.threads = g_cli.threads_given ? g_cli.threads : 1;
    p.base_cache = cli_get(a, "base-cache");
    p.vocab_from = cli_get(a, "vocab-from");
    const char *outp = cli_get(a, "output");
    static const char *const onnx_only[] = {"inputs", "random-inputs", "input-shape", "slices", "runs"};
    for (size_t i = 0; i < sizeof onnx_only / sizeof onnx_only[0]; i++)
        if (cli_has(a, onnx_only[i])) return cli_usage_error(cmd, "--%s applies to ONNX models, not with --text", onnx_only[i]);
    int rc = 0;
    if ((rc = int_opt(cmd, a, "ctx", 512, 4, 65536, &p.ctx))) return rc;
    if (p.ctx % 2) return cli_usage_error(cmd, "--ctx must be even (positions ctx/2..ctx-2 are scored), got %d", p.ctx);
    if ((rc = int_opt(cmd, a, "chunks", 0, 2, 1000000, &p.chunks))) return rc;
    if ((rc = int_opt(cmd, a, "gen", p.ctx / 2 < 16 ? p.ctx / 2 : 16, 0, p.ctx / 2, &p.gen))) return rc;
    if ((rc = int_opt(cmd, a, "warmup", 1, 0, 100000, &p.warmup))) return rc;
    int n = cli_n(a, "text");
    tm_evidence_llm_text *texts = calloc((size_t)n, sizeof *texts);
    char **names = calloc((size_t)n, sizeof *names);
    if (!texts || !names) { free(texts); free(names); fprintf(stderr, "tensormorph: out of memory\n"); return EXIT_IO; }
    for (int i = 0; i < n && !rc; i++) rc = cli_parse_text_slice(cmd, cli_get_i(a, "text", i), &texts[i], &names[i]);
    p.texts = texts;
    p.n_texts = n;

    /* the outputs, before any work: -o (a previous evidence document is replaced, nothing else)
    ** and --base-cache never an input; their directories exist */
    if (!rc) {
        const char **ins = calloc((size_t)n + 5, sizeof *ins);
        if (!ins) rc = cli_error(EXIT_IO, "out of memory");
        int k = 0;
        if (ins) {
            ins[k++] = p.baseline;
            ins[k++] = p.candidate;
            ins[k++] = p.vocab_from;
            for (int i = 0; i < n; i++) ins[k++] = texts[i].path;
        }
        tm_err oe;
        if (!rc && outp) {
            ins[k] = p.base_cache;
            if (tm_check_report_output("-o", outp, ins, k + 1, "tensormorph.evidence/1", &oe)) rc = cli_fail(oe.code, &oe);
        }
        if (!rc && p.base_cache) {
            ins[k] = outp;
            if (tm_check_report_output("--base-cache", p.base_cache, ins, k + 1, NULL, &oe)) rc = cli_fail(oe.code, &oe);
        }
        free(ins);
    }
    char share[PATH_MAX + 64], script[PATH_MAX + 128], nm[PATH_MAX + 128], runner_dir[PATH_MAX + 64];
    cli_evidence_runner("llm_evidence.js", script, sizeof script, nm, sizeof nm, runner_dir, sizeof runner_dir,
                        share, sizeof share, &p.node, &p.tmp_dir);
    p.runner_script = script;
    p.node_modules = nm;
    struct stat st;
    if (!rc && stat(script, &st) != 0) {
        fprintf(stderr, "tensormorph: the runner script is missing: looked for %s and %s/llm_evidence.js\n", script, share);
        rc = EXIT_IO;
    }
    if (!rc && !tm_evidence_llm_runtime_present(nm)) {
        fprintf(stderr, "tensormorph: node-llama-cpp is not installed in %s.\nInstall it with:\n"
                        "  cd %s && npm i -E node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 --omit=optional --ignore-scripts\n"
                        "(scripts/setup.sh does) or set TM_NODE_MODULES to a node_modules folder that holds it.\n",
                nm, runner_dir);
        rc = EXIT_IO;
    }
    if (!rc) {
        p.progress = cli_progress_cb;
        p.cancel = &g_cli_interrupted;
        char *text = NULL;
        tm_err err;
        tm_status s = tm_evidence_llm_run(&p, &text, &err);
        cli_progress_end();
        tm_err werr;
        /* NaN probabilities: the (complete) evidence with null statistics is still written */
        tm_status ws = text && outp && (s == TM_OK || s == TM_E_NONFINITE) ? tm_evidence_write(outp, text, &werr) : TM_OK;
        if (ws) { s = ws; err = werr; }
        if (text && (s == TM_OK || s == TM_E_NONFINITE) && p.chunks > 0 && !g_cli.quiet) {
            /* --chunks asks for more than a slice holds: every full chunk is scored (as
            ** llama-perplexity does), said here rather than silently */
            json_t *d = json_loads(text, 0, NULL);
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(json_object_get(d, "llm"), "slices"), k, v) {
                json_int_t got = json_integer_value(json_object_get(v, "chunks"));
                if (got < p.chunks)
                    fprintf(stderr, "tensormorph: warning: --chunks %d: slice '%s' holds %lld full chunks of %d tokens; "
                                    "those %lld were scored\n", p.chunks, k, (long long)got, p.ctx, (long long)got);
            }
            json_decref(d);
        }
        if (text && (s == TM_OK || s == TM_E_NONFINITE)) {
            if (!outp || g_cli.json) fputs(text, stdout);
            else if (!g_cli.quiet) summary(text, outp);
        }
        if (s) rc = s == TM_E_NONFINITE && text && g_cli.json ? (fprintf(stderr, "tensormorph: %s\n", err.msg), EXIT_INPUT)
                                                             : cli_fail(s, &err);
        free(text);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(texts);
    return rc;
}
