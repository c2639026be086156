/* gate_llm.h: the gate's LLM checks (gate_llm.c). Not installed. */
#ifndef TM_JOB_GATE_LLM_H
#define TM_JOB_GATE_LLM_H
#include "../core/core.h"
#include "../core/jschema.h"

#include <jansson.h>

/* The policy target name of llama.cpp on CPU (tensormorph evidence --text measures it). */
#define TM__GATE_LLM_TARGET "llamacpp-cpu"

/* The check functions below append checks {"name", "status" (pass | fail | not_run), "reason",
** "evidence"} to the array `out`; gate.c reports them in that order. */

/* 1 when target is llamacpp-cpu. */
int     tm__gate_llm_target(const char *target);
/* 1 when the evidence is the LLM variant (runtime.name "node-llama-cpp"). */
int     tm__gate_llm_evidence(const json_t *evd);
/* The evidence spec of llamacpp-cpu as the contract table writes one: {"runtime":
** "node-llama-cpp", "execution_provider": "cpu", "device_kind": "cpu"}; the caller decrefs. */
json_t *tm__gate_llm_spec(void);
/* evidence.protocol for LLM evidence: gen x chunks decode samples per model; the policy's
** protocol threads, min_warmup, inputs_sha256 (= the text_sha256); min_runs and min_inputs do
** not apply and fail. */
void    tm__gate_llm_protocol(json_t *out, const json_t *evd, const json_t *pt);
/* latency.representative (LLM evidence, a target other than llamacpp-cpu with latency or memory
** bounds: fails unless both models' latency_representative are true), llm.overall and
** llm.slices (the target's llm bounds; evidence without an llm section fails naming what is
** missing). */
void    tm__gate_check_llm(json_t *out, const json_t *evd, const json_t *pt, const char *target);

#endif
