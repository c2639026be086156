/* cmd_sensitivity.c: `tensormorph sensitivity SRC --text FILE -t TYPE [...]` and
** `tensormorph sensitivity merge PART... [-o OUT]` (tensormorph/sensitivity.h,
** docs/sensitivity.md): parses the options, runs the job, prints the ranking and the plan table
** or the JSON document. */
#include "cli.h"
#include "text_slice.h"
#include "recipe.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/sensitivity.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cmd_sensitivity(const cli_cmd *cmd, cli_args *a);
void cli_evidence_runner(const char *script_name, char *script, size_t scap, char *nm, size_t ncap,
                         char *runner_dir, size_t rcap, char *share, size_t shcap, const char **node,
                         const char **tmp_dir);

const cli_opt opts_sensitivity[] = {
    CLI_OPT_TYPE("the scheme: a GGUF file type (Q2_K, Q4_K_M, ...; default Q2_K), or int4/int8/fp8 for the compressed-tensors form (OUT a directory)"),
    CLI_OPT_GRANULARITY("compressed-tensors form: tensor, channel[:AXIS], group:N (default channel)"),
    CLI_OPT_SYMMETRIC("compressed-tensors form: zero point 0 (default)"),
    CLI_OPT_ASYMMETRIC,
    CLI_OPT_OBSERVER("compressed-tensors form: minmax (default), percentile:P, mse, ..."),
    {"text", 0, "[NAME=]FILE", 1, "a text slice (UTF-8) the outputs are scored on (llama-perplexity --kl-divergence)"},
    {"ctx", 0, "N", 0, "chunk length in tokens (even, default 512)"},
    {"chunks", 0, "K", 0, "chunks per slice (default: every full chunk, at least 2)"},
    {"unit", 0, "U", 0, "layer (each decoder block, default) | tensor (each weight) | class (q k v o gate up down embedding head)"},
    {"units", 0, "REGEX", 0, "only the units whose name matches (POSIX ERE, e.g. 'blk\\.[0-3]$')"},
    {"budget", 0, "KLD", 0, "find the plan with the fewest bytes whose measured KLD mean is at most KLD"},
    {"budget-p99", 0, "X", 0, "with --budget: the KLD p99 must also be at most X"},
    {"min-top1", 0, "F", 0, "with --budget: same-top-1 must be at least F (0..1)"},
    {"ladder", 0, "A,B,...", 0, "the precision ladder, first = --type: GGUF file types (default Q2_K,Q3_K_M,Q4_K_M,Q5_K_M,Q6_K,Q8_0,F16 from --type up) or compressed-tensors schemes TYPE[/GRAN][/asym][/OBSERVER] and dense (default: the scheme,int8/channel,dense)"},
    CLI_OPT_VOCAB_FROM("tokenizer GGUF for a non-GGUF SRC (it is converted first)"),
    CLI_OPT_OUTPUT("OUT", "OUT.gguf: the plan (with --budget), OUT.recipe.json, OUT.evidence.json, OUT.sensitivity.json; with --probe or merge: the JSON file"),
    {"jobs", 0, "N", 0, "probes run at once (default 1)"},
    {"probe", 0, "i/n", 0, "only probe items k with k % n == i (i from 0); writes a partial result for `sensitivity merge`"},
    {"base-cache", 0, "FILE", 0, "base distributions cached here (default: one in the scratch folder)"},
    {"no-cache", 0, NULL, 0, "quantize every candidate from SRC again (default: quantized tensors are reused between probes)"},
    {"cache-mb", 0, "MIB", 0, "quantized tensors kept in memory (default 1024; 0: all spill); the rest spill to the scratch folder"},
    {"candidate-split", 0, "auto|on|off", 0, "compressed-tensors form: write each candidate as two split files, the tensors no probe quantizes shared (auto: when they hold >= 64 MiB)"},
    {"keep-candidates", 0, "DIR", 0, "move every probe's candidate into DIR once measured (cand-N.gguf, N from 0), for inspection"},
    CLI_OPT_FORCE,
    CLI_OPT_END,
};

const char details_sensitivity[] =
    "Measures each unit's sensitivity on the model's outputs on llama.cpp: for every unit (decoder\n"
    "block, tensor or tensor class) a candidate GGUF with ONLY that unit quantized (the file type's\n"
    "mixture rules applied to its tensors, the rest at source precision) and one with every unit\n"
    "quantized EXCEPT it, each scored against SRC (KLD mean/p99, same top-1) with the base\n"
    "distributions computed once; the unit's weight error (qdiff SQNR, RMSE in LSB), a ranking (1 =\n"
    "most sensitive), the Spearman correlation of weight error and KLD, and the uniform rungs of the\n"
    "ladder. With --budget KLD it searches the ladder (promoting by measured KLD gain per byte) for\n"
    "the plan with the fewest bytes that meets the budget, writes it (OUT.gguf or a compressed-tensors\n"
    "directory for -t int4/int8 and OUT a directory, its manifest, its\n"
    "evidence, OUT.recipe.json for `quantize --recipe`) and exits 1 when no plan meets it (the best\n"
    "reached is written, met false). `sensitivity merge PART...` combines --probe i/n parts into the\n"
    "result of one run. --threads T: llama.cpp and quantizer threads per probe. docs/sensitivity.md.";


static int dbl_opt(const cli_cmd *cmd, const cli_args *a, const char *name, double lo, double hi, double *out) {
    const char *v = cli_get(a, name);
    if (!v) return 0;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d >= lo && d <= hi)) return cli_usage_error(cmd, "--%s must be a number in [%g, %g], got '%s'", name, lo, hi, v);
    *out = d;
    return 0;
}

static double jnum_(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void print_report(json_t *d) {
    printf("%-5s %-28s %12s %12s %10s %12s %10s %12s\n", "rank", "unit", "KLD only", "KLD all-but", "top-1 only", "bytes q/src", "SQNR dB", "RMSE LSB");
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(d, "units"), i, u) {
        char b[48];
        snprintf(b, sizeof b, "%lld/%lld", (long long)json_integer_value(json_object_get(u, "bytes_quantized")),
                 (long long)json_integer_value(json_object_get(u, "bytes_source")));
        printf("%-5lld %-28s %12.6g %12.6g %10.4f %12s %10.2f %12.3f\n", (long long)json_integer_value(json_object_get(u, "rank")),
               json_string_value(json_object_get(u, "name")), jnum_(u, "kld_mean_only"), jnum_(u, "kld_mean_all_but"),
               jnum_(u, "same_top1_only"), b, jnum_(u, "weight_sqnr_db"), jnum_(u, "weight_rmse_lsb"));
    }
    if (json_is_number(json_object_get(d, "spearman_weight_vs_kld")))
        printf("Spearman (weight error vs KLD): %.4f\n", jnum_(d, "spearman_weight_vs_kld"));
    else
        printf("Spearman (weight error vs KLD): null (it needs two or more units with a weight error and a KLD)\n");
    json_t *plan = json_object_get(d, "plan");
    printf("\n%-10s %12s %10s %12s %12s %8s\n", "plan", "bytes", "bits/param", "KLD mean", "KLD p99", "top-1");
    json_array_foreach(json_object_get(d, "uniform"), i, u)
        printf("%-10s %12lld %10.3f %12.6g %12.6g %8.4f\n", json_string_value(json_object_get(u, "scheme")),
               (long long)json_integer_value(json_object_get(u, "bytes")), jnum_(u, "bits_per_param"), jnum_(u, "kld_mean"),
               jnum_(u, "kld_p99"), jnum_(u, "same_top1"));
    if (plan) {
        printf("%-10s %12lld %10.3f %12.6g %12.6g %8.4f  budget %s\n", "mixed", (long long)json_integer_value(json_object_get(plan, "bytes")),
               jnum_(plan, "bits_per_param"), jnum_(plan, "kld_mean"), jnum_(plan, "kld_p99"), jnum_(plan, "same_top1"),
               json_is_true(json_object_get(plan, "met")) ? "met" : "NOT met (the best plan reached)");
        const char *k;
        json_t *v;
        printf("assignments:");
        json_object_foreach(json_object_get(plan, "assignments"), k, v) printf(" %s=%s", k, json_string_value(v));
        if (json_object_get(plan, "tensor_types")) {
            printf("\nquantize flags: -t %s --tensor-type-exact", json_string_value(json_object_get(plan, "file_type")));
            json_array_foreach(json_object_get(plan, "tensor_types"), i, u)
                printf(" --tensor-type '%s=%s'", json_string_value(json_object_get(u, "pattern")), json_string_value(json_object_get(u, "type")));
        } else {
            printf("\nquantize rules (first match wins):");
            json_array_foreach(json_object_get(plan, "rules"), i, u)
                printf(" %s=%s", json_string_value(json_object_get(u, "pattern")),
                       json_is_true(json_object_get(u, "ignore")) ? "dense"
                       : json_string_value(json_object_get(json_object_get(u, "scheme"), "type")));
        }
        printf("\n");
        if (json_is_string(json_object_get(plan, "artifact")))
            printf("wrote %s (+ its manifest), %s, %s\n", json_string_value(json_object_get(plan, "artifact")),
                   json_string_value(json_object_get(plan, "recipe")), json_string_value(json_object_get(plan, "evidence")));
    }
}

/* Print or write the document; the report when neither --json nor a JSON file was asked for. */
static int emit(const char *text, const char *json_path, int report) {
    tm_err err;
    if (json_path) {
        tm_status s = tm_sensitivity_write(json_path, text, &err);
        if (s) return cli_fail(s, &err);
    }
    if (g_cli.json) fputs(text, stdout);
    else if (report && !g_cli.quiet) {
        json_t *d = json_loads(text, 0, NULL);
        if (d) print_report(d);
        json_decref(d);
        if (json_path) printf("wrote %s\n", json_path);
    } else if (!json_path) fputs(text, stdout);
    return 0;
}

static int cmd_merge(const cli_cmd *cmd, cli_args *a) {
    int n = a->n_pos - 1;
    if (n < 1) return cli_usage_error(cmd, "sensitivity merge needs PART.json files");
    char **texts = calloc((size_t)n, sizeof *texts);
    int rc = texts ? 0 : EXIT_IO;
    tm_err err;
    for (int i = 0; i < n && !rc; i++)
        if (!(texts[i] = cli_read_text(a->pos[i + 1], &err))) rc = cli_fail(err.code, &err);
    const char *mo = cli_get(a, "output");
    if (!rc && mo && tm_check_report_output("-o", mo, (const char *const *)(a->pos + 1), n, "tensormorph.sensitivity/1", &err))
        rc = cli_fail(err.code, &err);
    char *out = NULL;
    if (!rc) {
        tm_status s = tm_sensitivity_merge((const char *const *)texts, n, &out, &err);
        if (s) rc = cli_fail(s, &err);
    }
    if (!rc) rc = emit(out, cli_get(a, "output"), 1);
    free(out);
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    return rc;
}

int cmd_sensitivity(const cli_cmd *cmd, cli_args *a) {
    if (!strcmp(a->pos[0], "merge")) return cmd_merge(cmd, a);
    if (a->n_pos != 1) return cli_usage_error(cmd, "one SRC (or `sensitivity merge PART...`)");
    tm_sensitivity_params p = tm_sensitivity_params_default();
    p.src = a->pos[0];
    p.threads = g_cli.threads_given ? g_cli.threads : 1;
    p.ev.vocab_from = cli_get(a, "vocab-from");
    p.ev.base_cache = cli_get(a, "base-cache");
    p.force = cli_has(a, "force");
    p.command_line = g_cli.argv_line;
    const char *tv = cli_get(a, "type"), *o0 = cli_get(a, "output");
    /* the form: OUT ending in .gguf or a GGUF file type: GGUF; a code type or OUT a directory:
    ** compressed-tensors */
    int gguf_type = tv ? tm_gguf_ftype_from_name(tv) : -1;
    p.ct = tv ? gguf_type < 0 : (o0 && !cli_has(a, "probe") && !strstr(o0, ".gguf") && cli_has(a, "budget"));
    const char *lad = cli_get(a, "ladder");
    if (!tv && lad) { /* no -t: the ladder's first rung is the scheme, and says the form */
        char first[64];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(lad, ","), lad);
        p.ct = tm_gguf_ftype_from_name(first) < 0;
    }
    if (o0 && cli_has(a, "budget") && !cli_has(a, "probe") && p.ct == (strlen(o0) > 5 && !strcmp(o0 + strlen(o0) - 5, ".gguf")))
        return cli_usage_error(cmd, "-o %s: %s", o0, p.ct ? "the compressed-tensors plan is a directory (OUT not ending in .gguf)"
                                                          : "a GGUF plan is written to OUT ending in .gguf");
    if (!p.ct && tv) p.ftype = gguf_type;
    static tm_qspec ct_ladder[TM_SENS_MAX_LADDER];
    static int ct_dense[TM_SENS_MAX_LADDER];
    if (p.ct) {
        const char *v;
        if (!tv) tv = "int8";
        if (cli_parse_code_type(tv, &p.spec.code_dtype))
            return cli_usage_error(cmd, "--type: '%s' is neither a GGUF file type (Q2_K ...) nor a code type (int4 int8 fp8_e4m3)", tv);
        if ((v = cli_get(a, "granularity")) && tm_granularity_parse(v, &p.spec.gran))
            return cli_usage_error(cmd, "--granularity: cannot parse '%s' (tensor | channel[:AXIS] | group:N[:AXIS])", v);
        if (cli_has(a, "asymmetric")) p.spec.symmetric = 0;
        if ((v = cli_get(a, "observer")) && tm_observer_from_name(v, &p.spec.observer))
            return cli_usage_error(cmd, "--observer: unknown '%s'", v);
        if (lad) { /* rungs as quantize's schemes: "int4/channel,int8/group:32/asym,dense" */
            char *dup = strdup(lad), *save = NULL;
            int n = 0, rc = 0;
            if (!dup) return cli_error(EXIT_IO, "out of memory");
            for (char *tok = strtok_r(dup, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
                tm_err e;
                if (n == TM_SENS_MAX_LADDER) rc = cli_usage_error(cmd, "--ladder: at most %d rungs", TM_SENS_MAX_LADDER);
                else if (tm_sensitivity_ct_rung_parse(tok, &p.spec, &ct_ladder[n], &ct_dense[n], &e)) rc = cli_usage_error(cmd, "%s", e.msg);
                else n++;
            }
            free(dup);
            if (rc) return rc;
            if (!cli_has(a, "type") && !ct_dense[0]) p.spec = ct_ladder[0]; /* no -t: the first rung is the scheme */
            p.ct_ladder = ct_ladder;
            p.ct_dense = ct_dense;
            p.n_ct_ladder = n;
        }
    } else {
        static const char *const ct_only[] = {"granularity", "asymmetric", "symmetric", "observer"};
        for (size_t k = 0; k < sizeof ct_only / sizeof ct_only[0]; k++)
            if (cli_has(a, ct_only[k])) return cli_usage_error(cmd, "--%s applies to the compressed-tensors form (-t int4/int8/fp8)", ct_only[k]);
    }
    const char *unit = cli_get(a, "unit");
    if (unit) {
        if (!strcmp(unit, "layer")) p.unit = TM_SENS_UNIT_LAYER;
        else if (!strcmp(unit, "tensor")) p.unit = TM_SENS_UNIT_TENSOR;
        else if (!strcmp(unit, "class")) p.unit = TM_SENS_UNIT_CLASS;
        else return cli_usage_error(cmd, "--unit must be layer, tensor or class, got '%s'", unit);
    }
    p.units_regex = cli_get(a, "units");
    long v;
    int rc = 0;
    if ((rc = cli_opt_long(cmd, a, "ctx", 512, 4, 65536, &v))) return rc;
    p.ev.ctx = (int)v;
    if (p.ev.ctx % 2) return cli_usage_error(cmd, "--ctx must be even, got %d", p.ev.ctx);
    if ((rc = cli_opt_long(cmd, a, "chunks", 0, 2, 1000000, &v))) return rc;
    p.ev.chunks = (int)v;
    if ((rc = cli_opt_long(cmd, a, "jobs", 1, 1, 256, &v))) return rc;
    p.jobs = (int)v;
    p.no_cache = cli_has(a, "no-cache");
    p.keep_candidates = cli_get(a, "keep-candidates");
    const char *cs = cli_get(a, "candidate-split");
    if (cs && strcmp(cs, "auto") && strcmp(cs, "on") && strcmp(cs, "off"))
        return cli_usage_error(cmd, "--candidate-split must be auto, on or off, got '%s'", cs);
    p.candidate_split = !cs || !strcmp(cs, "auto") ? 0 : !strcmp(cs, "on") ? 1 : -1;
    if ((rc = cli_opt_long(cmd, a, "cache-mb", 1024, 0, 1 << 30, &v))) return rc;
    p.cache_mb = (int)v;
    if ((rc = dbl_opt(cmd, a, "budget", 0, 1e300, &p.budget_kld)) || (rc = dbl_opt(cmd, a, "budget-p99", 0, 1e300, &p.budget_p99)) ||
        (rc = dbl_opt(cmd, a, "min-top1", 0, 1, &p.min_top1)))
        return rc;
    int ladder[TM_SENS_MAX_LADDER];
    const char *ls = p.ct ? NULL : cli_get(a, "ladder");
    if (ls) {
        char *dup = strdup(ls), *save = NULL;
        int n = 0;
        for (char *tok = strtok_r(dup, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
            if (n == TM_SENS_MAX_LADDER) rc = cli_usage_error(cmd, "--ladder: at most %d rungs", TM_SENS_MAX_LADDER);
            else if ((ladder[n++] = tm_gguf_ftype_from_name(tok)) < 0) rc = cli_usage_error(cmd, "--ladder: '%s' is not a GGUF file type", tok);
        }
        free(dup);
        if (rc) return rc;
        if (!tv) p.ftype = ladder[0];
        p.ladder = ladder;
        p.n_ladder = n;
    }
    const char *pr = cli_get(a, "probe");
    if (pr) {
        int i, n, used = 0;
        if (sscanf(pr, "%d/%d%n", &i, &n, &used) != 2 || pr[used] || n < 1 || i < 0 || i >= n)
            return cli_usage_error(cmd, "--probe must be i/n with 0 <= i < n, got '%s'", pr);
        p.probe_i = i;
        p.probe_n = n;
    }
    const char *outp = cli_get(a, "output");
    p.out = pr ? NULL : outp;
    int n = cli_n(a, "text");
    if (n < 1) return cli_usage_error(cmd, "--text FILE is needed (the text the outputs are scored on)");
    tm_evidence_llm_text *texts = calloc((size_t)n, sizeof *texts);
    char **names = calloc((size_t)n, sizeof *names);
    if (!texts || !names) { free(texts); free(names); return cli_error(EXIT_IO, "out of memory"); }
    for (int i = 0; i < n && !rc; i++) rc = cli_parse_text_slice(cmd, cli_get_i(a, "text", i), &texts[i], &names[i]);
    p.ev.texts = texts;
    p.ev.n_texts = n;
    /* the JSON file this run writes (--probe: -o itself; else OUT.sensitivity.json) and the base
    ** cache, checked before any probe: a previous sensitivity document is replaced, never an
    ** input or another file; their directories exist */
    char *jp = NULL;
    if (!rc && outp) {
        size_t l = strlen(outp) + 32;
        if ((jp = malloc(l))) snprintf(jp, l, pr ? "%s" : "%s.sensitivity.json", outp);
        else rc = cli_error(EXIT_IO, "out of memory");
    }
    if (!rc && (jp || p.ev.base_cache)) {
        const char **ins = calloc((size_t)n + 4, sizeof *ins);
        int k = 0;
        if (!ins) rc = cli_error(EXIT_IO, "out of memory");
        else {
            ins[k++] = p.src;
            ins[k++] = p.ev.vocab_from;
            for (int i = 0; i < n; i++) ins[k++] = texts[i].path;
            tm_err oe;
            ins[k] = p.ev.base_cache;
            if (jp && tm_check_report_output(pr ? "-o" : "-o (its OUT.sensitivity.json)", jp, ins, k + 1, "tensormorph.sensitivity/1", &oe))
                rc = cli_fail(oe.code, &oe);
            ins[k] = jp;
            if (!rc && p.ev.base_cache && tm_check_report_output("--base-cache", p.ev.base_cache, ins, k + 1, NULL, &oe))
                rc = cli_fail(oe.code, &oe);
            free(ins);
        }
    }
    char share[PATH_MAX + 64], script[PATH_MAX + 128], nm[PATH_MAX + 128], runner_dir[PATH_MAX + 64];
    cli_evidence_runner("llm_evidence.js", script, sizeof script, nm, sizeof nm, runner_dir, sizeof runner_dir, share,
                        sizeof share, &p.ev.node, &p.ev.tmp_dir);
    p.ev.runner_script = script;
    p.ev.node_modules = nm;
    struct stat st;
    if (!rc && stat(script, &st) != 0) rc = cli_error(EXIT_IO, "the runner script is missing: looked for %s and %s/llm_evidence.js", script, share);
    if (!rc && !tm_evidence_llm_runtime_present(nm))
        rc = cli_error(EXIT_IO, "node-llama-cpp is not installed in %s (scripts/setup.sh installs it, or set TM_NODE_MODULES)", nm);
    if (!rc) {
        p.progress = cli_progress_cb;
        p.cancel = &g_cli_interrupted;
        char *text = NULL;
        int met = -1;
        tm_err err;
        tm_status s = tm_sensitivity_run(&p, &text, &met, &err);
        cli_progress_end();
        if (s) rc = cli_fail(s, &err);
        else {
            rc = emit(text, jp, !pr);
            if (!rc && met == 0) {
                fprintf(stderr, "tensormorph: no plan on the ladder meets the budget; the best plan reached was written (met: false)\n");
                rc = EXIT_CHECK;
            }
        }
        free(text);
    }
    free(jp);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(texts);
    return rc;
}
