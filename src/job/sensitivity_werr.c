/* sensitivity_werr.c: a unit's weight error summed over its tensors' qdiff entries (SQNR from
** the error and signal energies, RMSE in LSB of each tensor's own scale), shared by the
** candidate paths (sensitivity_core.c, sensitivity_ctdirect.c). */
#include "sensitivity_impl.h"
#include <math.h>

void tm__sens_werr_add(const tm_qdiff_entry *e, double *x2, double *e2, double *l2, double *nn) {
    double ee = e->e.rmse * e->e.rmse * (double)e->e.n;
    *e2 += ee;
    *x2 += isfinite(e->e.sqnr_db) ? ee * pow(10.0, e->e.sqnr_db / 10.0) : 0;
    *l2 += e->e.rmse_lsb * e->e.rmse_lsb * (double)e->e.n;
    *nn += (double)e->e.n;
}

void tm__sens_werr_finish(double x2, double e2, double l2, double nn, sens_meas *m) {
    m->w_have = nn > 0;
    m->w_sqnr_db = e2 > 0 ? 10.0 * log10(x2 / e2) : INFINITY;
    m->w_rmse_lsb = nn > 0 ? sqrt(l2 / nn) : 0;
}
