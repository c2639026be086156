/* heatmap_decor.h: the frame of the heatmap PNG (heatmap_decor.c). */
#ifndef TM_CLI_HEATMAP_DECOR_H
#define TM_CLI_HEATMAP_DECOR_H

#include <stdint.h>

typedef struct cli_heat_decor {
    const char *title;      /* "NAME  [shape] dtype  scheme"                               */
    const char *subtitle;   /* what a pixel shows                                          */
    const char *row_label, *col_label, *unit;
    int64_t     rows, cols; /* of the matrix drawn                                         */
    int64_t     step;       /* elements per pixel side                                     */
    int         up, vrep;   /* pixels per pixel across / down                              */
    double      lo, hi;     /* the numbers at the colour bar's bottom and top              */
    int         integer;    /* 1: ids (groups mode): the middle number rounded down        */
    /* colour at fraction f (0 bottom .. 1 top) of the bar into c */
    void      (*bar)(const void *ud, double f, uint8_t c[3]);
    const void *bar_ud;
} cli_heat_decor;

/* The decorated image (malloc'd RGB, *w x *h) with the plot (pw x ph RGB) at (*px, *py);
** NULL when out of memory. */
uint8_t *cli_heat_decorate(const uint8_t *plot, int pw, int ph, const cli_heat_decor *d, int *w, int *h,
                           int *px, int *py);

#endif
