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
** to directory `dir` (model.safetensors + config.json, and tensormorph-manifest.json):
** embedding, per layer q/k/v/o and gate/up/down projections with Gaussian rows of differing
** scale, a few outlier input channels and one all-zero row, RMSNorm weights near 1, final norm
** and an untied lm_head. Same seed, same bytes. tm_write_demo_output with force 0, no cancel
** flag and no command line. */
tm_status tm_write_demo_checkpoint(const char *dir, tm_dtype dtype, uint64_t seed, tm_err *err);

/* tm_write_demo_output: the demo checkpoint written as quantize writes its output
** (src/job/pipeline.c): dir must be a new path (its parent must exist), an empty directory, or
** with force a previous tensormorph output (it holds tensormorph-manifest.json); anything else
** is refused (TM_E_INVALID_ARG), as is a dir that another run holds (DIR.lock). Built in
** "<dir>.tmp.<pid>" and renamed into place, so a failure (a full disk: TM_E_IO) or the cancel
** flag (TM_E_CANCELLED) leaves dir as it was. The manifest records command_line (may be NULL),
** the output files' sha256 and "demo": {dtype, seed}. */
tm_status tm_write_demo_output(const char *dir, tm_dtype dtype, uint64_t seed, int force, volatile const int *cancel,
                               const char *command_line, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
