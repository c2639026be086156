/*
** obs_cases.h: the observer reference cases of ../shared/vectors as ready-to-run calibration
** problems: torch_observer (case.json params -> tm_qspec, code range, batches = input.npy along
** axis 0) and ort_calibration (method/symmetric/bins -> tm_qspec, batches = input_K.npy). One
** mapping from case.json to the library's settings, for every test that replays these cases.
*/
#ifndef TM_TEST_OBS_CASES_H
#define TM_TEST_OBS_CASES_H

#include <jansson.h>

#include "tensormorph.h"

#define TMV_MAX_BATCHES 16

typedef struct tmv_obs_case {
    tm_qspec       spec;       /* observer, convention, code dtype, symmetric, granularity       */
    int64_t        qmin, qmax; /* torch: params quant_min/quant_max; ORT: tm_qspec_range         */
    int            custom;     /* torch: the call passes quant_min/quant_max (has_customized_qrange) */
    int            reduce_range; /* torch: reduce_range=True                                     */
    int            n_batches;
    tm_calib_batch batch[TMV_MAX_BATCHES];
    float         *buf[TMV_MAX_BATCHES]; /* owned float32 data the batches point into            */
    char           files[TMV_MAX_BATCHES][32]; /* input file of each batch (ORT), "input.npy"     */
} tmv_obs_case;

/* Fill c for torch_observer/<name>. Returns 0, or -1 (message on stderr). */
int tmv_torch_observer_case(const char *name, json_t *cj, tmv_obs_case *c);
/* Fill c for ort_calibration/<name>. Returns 0, or -1. */
int tmv_ort_calibration_case(const char *name, json_t *cj, tmv_obs_case *c);
void tmv_obs_case_free(tmv_obs_case *c);

#endif
