/*
** tensormorph/demo.h: the built-in deterministic demo checkpoint (layer job, src/job/demo.c).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_DEMO_H
#define TENSORMORPH_DEMO_H

#ifdef __cplusplus
extern "C" {
#endif

/* tm_write_demo_checkpoint: write a small deterministic LLaMA-shaped checkpoint (F32 or BF16)
** to directory `dir` (model.safetensors + config.json): embedding, per layer q/k/v/o and
** gate/up/down projections with Gaussian rows of differing scale, a few outlier input
** channels and one all-zero row, RMSNorm weights near 1, final norm and an untied lm_head.
** Same seed, same bytes. Built in "<dir>.tmp.<pid>" beside dir and renamed into place (into a
** non-empty existing dir the two files are renamed one by one), so a failed write (a full
** disk) leaves dir as it was. Returns TM_OK | TM_E_IO | TM_E_NOMEM. */
tm_status tm_write_demo_checkpoint(const char *dir, tm_dtype dtype, uint64_t seed, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
