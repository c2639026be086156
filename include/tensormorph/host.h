/*
** tensormorph/host.h: facts about the host a job runs on, for manifests and evidence
** (layer core, src/core/host.c).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_HOST_H
#define TENSORMORPH_HOST_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_host_info_t {
    char cpu_model[128];
    int  n_cores;          /* online logical CPUs */
    char os[192];          /* "Linux 6.1.0 x86_64" */
    char hostname[96];
} tm_host_info_t;
void tm_host_info(tm_host_info_t *h);

#ifdef __cplusplus
}
#endif
#endif
