/* llama_rt.h: whether the tests can run llama.cpp (node-llama-cpp 3.21.1 through Node.js), one
** check for every test file that does (evidence, sensitivity, convert, the GGUF quantizers). */
#ifndef TM_TEST_LLAMA_RT_H
#define TM_TEST_LLAMA_RT_H

/* The node_modules folder holding node-llama-cpp: $TM_NODE_MODULES, else
** $TM_SRC/runner/node_modules (scripts/setup.sh installs it there), when `node` runs and
** tm_evidence_llm_runtime_present accepts the folder. Otherwise NULL after printing
** "SKIP: <what is missing>" (the caller then calls cmocka's skip()), or, with
** TM_REQUIRE_LLAMA=1 (.ci/run), a cmocka failure naming what is missing. The string is static. */
const char *tmt_llama_modules(void);

#endif
