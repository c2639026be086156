/* llama_rt.c: see llama_rt.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "llama_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "tensormorph.h"
#include "tensormorph/evidence_llm.h"

const char *tmt_llama_modules(void) {
    static char mods[2048];
    const char *nm = getenv("TM_NODE_MODULES"), *src = getenv("TM_SRC"), *req = getenv("TM_REQUIRE_LLAMA");
    if (nm && *nm) snprintf(mods, sizeof mods, "%s", nm);
    else snprintf(mods, sizeof mods, "%s/runner/node_modules", src && *src ? src : ".");
    const char *why = NULL;
    if (tmt_run(NULL, "node --version >/dev/null 2>&1") != 0) why = "node (Node.js) not found on PATH";
    else if (!tm_evidence_llm_runtime_present(mods)) why = "node-llama-cpp not installed";
    if (!why) return mods;
    if (req && !strcmp(req, "1")) fail_msg("TM_REQUIRE_LLAMA=1 but %s (node_modules %s; scripts/setup.sh)", why, mods);
    printf("SKIP: %s (node_modules %s; scripts/setup.sh)\n", why, mods);
    fflush(stdout);
    return NULL;
}
