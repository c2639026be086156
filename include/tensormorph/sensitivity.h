/*
** tensormorph/sensitivity.h: per-module sensitivity of a language model to quantization, measured
** on its outputs on llama.cpp, and the smallest mixed-precision GGUF plan whose measured KLD meets a
** budget (docs/sensitivity.md). Layer job, src/job/sensitivity*.c.
**
** Method. The model's units (decoder blocks, tensors or tensor classes) are probed one at a time:
** a candidate GGUF where ONLY the unit's tensors get the scheme's types (the file type's
** llama-quantize mixture rules, tm_gguf_quantize_plan, applied to those tensors) and the rest stay
** at source precision, and one where every unit is quantized EXCEPT it. Each candidate is scored
** by tm_evidence_llm_run against the source (KLD of next-token distributions, llama.cpp
** tools/perplexity's protocol), the base distributions coming once from a base cache. A unit's
** weight error is tm_qdiff of the ONLY candidate against the source (SQNR over the unit's tensors:
** 10 log10(sum x^2 / sum e^2); RMSE in LSB: sqrt(sum n_i rmse_lsb_i^2 / sum n_i)). Ranking: by
** kld_mean_only, largest first (rank 1), ties by the unit's order. Spearman: the Pearson
** correlation of the average ranks of -weight_sqnr_db and kld_mean_only (Spearman 1904), null
** with fewer than 2 units or a constant column.
** Budget: every unit starts on the first rung of the ladder; while the measured plan misses the
** budget, each unit's promotion to its next rung (the next whose types differ for that unit) is
** measured as a whole plan, and the one with the largest measured KLD gain per added byte is
** taken (a promotion that already meets the budget: the one with the fewest bytes, then stop).
** The final plan is written and re-measured as a whole.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#include "evidence_llm.h"
#ifndef TENSORMORPH_SENSITIVITY_H
#define TENSORMORPH_SENSITIVITY_H

#ifdef __cplusplus
extern "C" {
#endif

enum { TM_SENS_UNIT_LAYER = 0, TM_SENS_UNIT_TENSOR = 1, TM_SENS_UNIT_CLASS = 2 };

#define TM_SENS_MAX_LADDER 16

typedef struct tm_sensitivity_params {
    const char *src;            /* SRC: a GGUF (F32/F16/BF16 weights) or a checkpoint
                                   tm_convert_gguf converts (needs ev.vocab_from)             */
    const char *out;            /* OUT.gguf (ct: OUT a directory): the plan's artifact (with
                                   --budget), its recipe OUT.recipe.json, evidence
                                   OUT.evidence.json; NULL: none                               */
    int         ftype;          /* the scheme: a GGUF file type (TM_FTYPE_*), the first rung  */
    int         ct;             /* 1: the compressed-tensors form: SRC a safetensors
                                   checkpoint, the scheme `spec`, rungs spec -> int8 channel ->
                                   dense, candidates the GGUFs `convert` makes of compressed-
                                   tensors directories (written directly from each rung's
                                   quantized weights; with no_cache the directory, converted by
                                   the evidence, ev.vocab_from), OUT a directory; `ftype` and
                                   `ladder` unused                                             */
    tm_qspec    spec;           /* ct: the scheme (tm_qspec_default: int8 channel)            */
    int         unit;           /* TM_SENS_UNIT_*                                             */
    const char *units_regex;    /* only units whose name matches (POSIX ERE), or NULL         */
    const int  *ladder;         /* file types, first = the scheme; NULL: the default ladder
                                   Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K Q8_0 F16 from ftype up      */
    int         n_ladder;
    const tm_qspec *ct_ladder;  /* ct: the rungs' schemes, first = spec; NULL: spec -> int8
                                   channel -> dense (tm_sensitivity_ct_rung_parse)           */
    const int  *ct_dense;       /* ct: 1 for the dense rung (the last only), per ct_ladder    */
    int         n_ct_ladder;
    double      budget_kld;     /* KLD mean budget; < 0: no budget search                     */
    double      budget_p99;     /* KLD p99 budget; < 0: none                                  */
    double      min_top1;       /* same-top-1 floor in [0, 1]; < 0: none                      */
    int         probe_i, probe_n; /* probe_n > 0: only items k with k % probe_n == probe_i,
                                   a partial document (no budget)                             */
    int         jobs;           /* probes run at once (>= 1)                                  */
    int         threads;        /* llama.cpp and quantizer threads per probe (>= 1)           */
    int         force;          /* replace an OUT that is a previous tensormorph output       */
    int         no_cache;       /* 1: every candidate quantized from SRC again (--no-cache)   */
    int         cache_mb;       /* quantized tensors kept in memory, MiB (default 1024; 0: all
                                   spill); the rest spill to the scratch folder
                                   (docs/sensitivity.md "Cache")                              */
    int         candidate_split;/* ct with the cache: 1: every candidate is two llama.cpp split
                                   files, the second (the tensors no probe quantizes, written
                                   once) a hard link; -1: one file; 0 (auto): split when those
                                   tensors hold at least 64 MiB (docs/sensitivity.md "Cache") */
    const char *keep_candidates;/* a directory: every probe's candidate is moved there when
                                   measured (cand-N.gguf; ct without the cache: cand-N/),
                                   N counting the evaluations from 0; NULL: removed           */
    tm_evidence_llm_params ev;  /* texts, ctx, chunks, node, runner, node_modules, tmp_dir,
                                   vocab_from, base_cache (NULL: one in the scratch folder);
                                   baseline/candidate/threads/gen/warmup are set by the job   */
    const char *command_line;
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void *progress_ud;
    volatile const int *cancel;
} tm_sensitivity_params;

tm_sensitivity_params tm_sensitivity_params_default(void); /* Q2_K, layer, no budget, 1 job, 1 thread, cache 1024 MiB; spec int8 channel */

/* tm_sensitivity_ladder_default: the default GGUF ladder from `ftype` up into out[cap]: the
** rungs of Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K Q8_0 F16 above ftype, ftype first. Returns the count. */
int tm_sensitivity_ladder_default(int ftype, int *out, int cap);

/* tm_sensitivity_ct_rung_parse: one compressed-tensors rung of `--ladder` (docs/sensitivity.md
** "Ladder"): "dense", or TYPE[ GRAN][ asym|sym][ OBSERVER] with ' ' or '/' between the words, TYPE
** a code type (int4 int8 uint4 uint8 fp8_e4m3 fp8_e5m2), GRAN as tm_granularity_parse (default
** channel:0), symmetric unless asym, OBSERVER as tm_observer_from_name (default minmax); the
** convention and scale dtype are base's. The names the documents print ("int4 channel:0",
** "int8 group:32:-1 asym") parse back to their scheme. *dense 1 for "dense" (*out = base then).
** TM_E_INVALID_ARG naming the rung and the word for anything else. */
tm_status tm_sensitivity_ct_rung_parse(const char *text, const tm_qspec *base, tm_qspec *out, int *dense, tm_err *err);

/* tm_sensitivity_run: the whole job. *json_out (malloc'd, 2-space indented, "\n" at the end) gets
** the "tensormorph.sensitivity/1" document (docs/sensitivity.md "JSON"); *met (may be NULL) 1
** when a budget was given and met, 0 when it was not (the best plan reached is still written,
** "met": false), -1 without a budget. Output files are written atomically, nothing partial.
** Returns TM_OK | TM_E_INVALID_ARG (bad params; OUT exists; the unit regex matches no unit) |
** TM_E_UNSUPPORTED (a source llama.cpp or the converter refuses; a source already quantized) |
** tm_evidence_llm_run's and tm_gguf_quantize's codes | TM_E_CANCELLED. */
tm_status tm_sensitivity_run(const tm_sensitivity_params *p, char **json_out, int *met, tm_err *err);

/* tm_sensitivity_merge: combine partial documents (--probe i/n, texts in parts[n]) into the
** document one run without a budget gives: the same header (source, scheme, ladder, units,
** protocol) in every part, each unit and uniform rung exactly once; ranks and Spearman computed
** as one run does. Returns TM_OK | TM_E_CORRUPT (not a partial, parts of different runs, an
** item missing or twice: named) | TM_E_NOMEM. */
tm_status tm_sensitivity_merge(const char *const *parts, int n, char **json_out, tm_err *err);

/* tm_sensitivity_write: check json_text against docs/schemas/sensitivity.schema.json and write it
** to path atomically (temp beside it, fsync, rename). Returns TM_OK | TM_E_CORRUPT (not JSON, or
** the schema's first violation) | TM_E_IO. */
tm_status tm_sensitivity_write(const char *path, const char *json_text, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
