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
/* tm_usable_cpus: the CPUs this process may run on: the count of its sched_getaffinity(2) mask,
** lowered to the cgroup CPU quota when one is set (v2 cpu.max "QUOTA PERIOD", v1
** cpu.cfs_quota_us / cpu.cfs_period_us; ceil(quota / period); the smallest along the
** process's cgroup path), in [1, 256]. The default worker count of the quantize jobs
** (n_threads 0) and of the CLI's --threads, as llama-quantize uses every hardware thread. */
int  tm_usable_cpus(void);

#ifdef __cplusplus
}
#endif
#endif
