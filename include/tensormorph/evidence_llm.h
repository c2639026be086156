/*
** tensormorph/evidence_llm.h: behaviour evidence of two GGUF language models on llama.cpp (CPU):
** KL divergence of the candidate's next-token distributions against the baseline's, same top
** token, perplexity of both, RMS delta-p, per text slice and overall, the worst positions, and
** token latency. The models run through the Node.js runner that ships with Tensormorph
** (runner/llm_evidence.js, npm package node-llama-cpp 3.21.1, prebuilt CPU binaries), one
** process per model. The evidence is the LLM variant of docs/schemas/evidence.schema.json
** (runtime "node-llama-cpp", an `llm` section); docs/evidence.md "LLM evidence" is the long form.
** Include after tensormorph.h.
**
** Protocol (llama.cpp tools/perplexity, `llama-perplexity --kl-divergence`, so numbers compare):
** each text is tokenized once with BOS first; chunk c is tokens [c*ctx, (c+1)*ctx) with its first
** token overwritten by BOS, evaluated in one batch of ctx (flash attention off); positions
** ctx/2 .. ctx-2 are scored (they predict tokens ctx/2+1 .. ctx-1: 63 per chunk of 128). Per
** scored token, in double precision over the whole vocabulary V:
**   KLD = sum_v p_b(v) * (log p_b(v) - log p_c(v))   (terms with p_b = 0 are 0; p_c = 0 is read
**   as the smallest positive float, 2^-149),
**   nll = -log p(actual next token), dp = p_c(next) - p_b(next).
** Statistics over the scored tokens of a slice (n of them): KLD mean and standard error
** sqrt((mean(k^2) - mean^2) / (n - 1)), median, p90, p99, p99.9 (nearest-rank: the p-th of the
** sorted s[0..n-1] is s[ceil(p*n/100)-1]), max; same_top1 = fraction with the same argmax (first
** maximum on ties); PPL = exp(mean nll) with error PPL * stderr(nll); ppl_ratio =
** exp(mean(nll_c - nll_b)) with error ratio * stderr(nll_c - nll_b); rms_dp = sqrt(mean(dp^2)).
** Overall is the token-weighted combination (the same sums over every slice's scored tokens).
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_EVIDENCE_LLM_H
#define TENSORMORPH_EVIDENCE_LLM_H

#ifdef __cplusplus
extern "C" {
#endif

/* One text slice: name (for --text NAME=FILE; a bare FILE is named after its base name without
** extension by the CLI) and the UTF-8 text file. */
typedef struct tm_evidence_llm_text {
    const char *name;
    const char *path;
} tm_evidence_llm_text;

typedef struct tm_evidence_llm_params {
    /* GGUF model paths; any other checkpoint tensormorph/convert.h handles is converted first
    ** (F32, into the scratch folder, tokenizer from vocab_from): its model entry gets the
    ** temporary GGUF's sha256, "source" {path, architecture, files [{path, sha256}]} and
    ** latency_representative false (it ran with dequantized weights) */
    const char *baseline;
    const char *candidate;
    const tm_evidence_llm_text *texts;/* n_texts >= 1 slices, names unique                    */
    int         n_texts;
    int         ctx;                  /* chunk length in tokens: even, 4..65536               */
    int         chunks;               /* chunks per slice; 0: every full chunk (>= 2 needed)  */
    int         gen;                  /* timed greedy decode steps per chunk, 0..ctx/2        */
    int         warmup;               /* untimed evaluations of the first chunk (>= 0)        */
    int         threads;              /* llama.cpp threads (>= 1)                             */
    const char *base_cache;           /* base distribution cache file, or NULL                */
    const char *vocab_from;           /* tokenizer GGUF for converting a non-GGUF model, or NULL */
    const char *node;                 /* node executable: a path, or a name searched in PATH  */
    const char *runner_script;        /* runner/llm_evidence.js                               */
    const char *node_modules;         /* a node_modules folder holding node-llama-cpp         */
    const char *tmp_dir;              /* where the scratch folder goes; NULL: "/tmp"          */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void *progress_ud;
    volatile const int *cancel;       /* set non-zero to stop: the runner is killed            */
} tm_evidence_llm_params;

/* tm_evidence_llm_params_default: zeroed, ctx 512, chunks 0, gen 16, warmup 1, threads 1,
** node "node". */
tm_evidence_llm_params tm_evidence_llm_params_default(void);

/* tm_evidence_llm_run: run both models (the baseline's distributions come from base_cache when
** it holds them), compute the statistics above in C, build the evidence document, validate it
** against the embedded evidence schema and return it in *json_out (malloc'd, 2-space indented,
** ends in "\n"; free() it).
** Base cache (base_cache != NULL): a file "TMLLMKL1", a little-endian u64 header length H, H
** bytes of JSON (base model sha256, every text's sha256, ctx, chunks, vocabulary, token ids,
** the base run's timings) and rows * V float32 probabilities, rows = sum over slices of
** chunks * (ctx/2 - 1): its size is 16 + H + 4 * V * rows bytes (H is about the vocabulary's
** text plus 8 bytes per token). It is reused when it names the same base sha256, texts, ctx,
** chunks and vocabulary, refused otherwise (TM_E_CORRUPT naming what differs), and written
** atomically (temp beside it, fsync, rename) when absent.
** A NaN in either model's distribution at a scored position: the position is counted
** (nan_positions) and every statistic of its slice and of overall is null; the document is still
** returned in *json_out and the status is TM_E_NONFINITE.
** Returns TM_OK | TM_E_INVALID_ARG (bad params) | TM_E_UNSUPPORTED (BASE or CAND is not a GGUF
**   file and tm_convert_gguf refuses it, e.g. no vocab_from or another architecture: its message
**   after "<phase> model <path>: conversion to GGUF (tensormorph convert) failed") | TM_E_CORRUPT (vocabularies differ: both
**   sizes, or the first differing token id; a text shorter than two chunks: tokens needed vs
**   given; llama.cpp refused a model; the runner was killed, its stderr kept in a named file; a
**   base cache of another model, text or protocol, or truncated) | TM_E_NONFINITE (above)
**   | TM_E_IO (files; node could not be started; node-llama-cpp missing) | TM_E_CANCELLED
**   | TM_E_NOMEM | TM_E_INTERNAL (the evidence failed its own schema). */
tm_status tm_evidence_llm_run(const tm_evidence_llm_params *p, char **json_out, tm_err *err);

/* tm_evidence_llm_runtime_present: 1 when <node_modules>/node-llama-cpp/package.json and
** <node_modules>/@node-llama-cpp/linux-x64/package.json exist. */
int tm_evidence_llm_runtime_present(const char *node_modules);

/* tm_is_gguf_file: 1 when the file at path starts with the GGUF magic "GGUF", else 0. */
int tm_is_gguf_file(const char *path);

#ifdef __cplusplus
}
#endif
#endif
