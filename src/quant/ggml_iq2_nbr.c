/* ggml_iq2_nbr.c: the search tables of the 8-value IQ grids (IQ2_XXS 256, IQ2_XS 512, IQ2_S
** 1024, IQ1_S/IQ1_M 2048 points): the level positions of each grid point, the key -> grid index
** map and the neighbour lists of the keys that are not grid points (ggml_quant_iq2.h). The rule
** is llama.cpp's iq2xs_init_impl (ggml/src/ggml-quants.c at ggml-org/llama.cpp@c392e509):
** llama.cpp sorts (distance, index) pairs with a comparator that orders both fields, a total
** order, so the lists are fixed by the rule; we build them with a histogram of the distances
** instead of a sort. The grids themselves are the format data of ggml_iq_tables.c. */
#include "ggml_iq.h"
#include "ggml_quant_iq2.h"

#include <pthread.h>
#include <stdlib.h>

#define MAXD2 (8 * 36 + 1) /* squared distances of 8 levels 2l+1, l in 0..3: at most 8 * 6^2 */

static tm__iq2_tab g_tab[4];
static int g_ok[4];
static pthread_once_t g_once[4] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                   PTHREAD_ONCE_INIT};

/* Level (0..2) of grid value v of grid g; -1 if v is not a level of that grid. */
static int level_of(int g, int v) {
    if (g == TM__IQ2_GRID_1S) return v >= -1 && v <= 1 ? v + 1 : -1;
    return v == 0x08 ? 0 : v == 0x19 ? 1 : v == 0x2b ? 2 : -1;
}

static int build(int g) {
    static const int ngrids[4] = {256, 512, 1024, 2048};
    static const int nwants[4] = {2, 2, 1, 3};
    const int ngrid = ngrids[g], nwant = nwants[g];
    if (!tm__ggml_iq_init()) return 0;
    int8_t (*pos)[8] = malloc((size_t)ngrid * sizeof *pos);
    int32_t *map = malloc(TM__IQ2_KMAP * sizeof *map);
    /* column-major levels for the distance loop: lv[k][j] = pos[j][k] */
    int16_t *lv = malloc((size_t)8 * ngrid * sizeof *lv);
    int16_t *d2 = malloc((size_t)ngrid * sizeof *d2);
    size_t cap = 1u << 16, used = 0;
    uint16_t *nbr = malloc(cap * sizeof *nbr);
    int ok = pos && map && lv && d2 && nbr;
    for (int i = 0; ok && i < TM__IQ2_KMAP; i++) map[i] = -1;
    int prev = -1;
    for (int j = 0; ok && j < ngrid; j++) {
        int key = 0;
        for (int k = 0; k < 8; k++) {
            const int v = g == TM__IQ2_GRID_XXS ? tm__iq2xxs_grid[j][k]
                        : g == TM__IQ2_GRID_XS  ? tm__iq2xs_grid[j][k]
                        : g == TM__IQ2_GRID_S   ? tm__iq2s_grid[j][k]
                                                : tm__iq1s_grid[j][k];
            const int l = level_of(g, v);
            if (l < 0) { ok = 0; break; }
            pos[j][k] = (int8_t)(2 * l + 1);
            lv[(size_t)k * ngrid + j] = (int16_t)(2 * l + 1);
            key |= l << 2 * k;
        }
        /* the grids are sorted by key and hold each key once (as llama.cpp's kgrid lists) */
        if (ok && key <= prev) ok = 0;
        if (ok) map[key] = j;
        prev = key;
    }
    int hist[MAXD2];
    for (int u = 0; ok && u < TM__IQ2_KMAP; u++) {
        if (map[u] >= 0) continue;
        for (int j = 0; j < ngrid; j++) d2[j] = 0;
        for (int k = 0; k < 8; k++) {
            const int16_t p = (int16_t)(2 * ((u >> 2 * k) & 3) + 1);
            const int16_t *col = lv + (size_t)k * ngrid;
            for (int j = 0; j < ngrid; j++) d2[j] = (int16_t)(d2[j] + (col[j] - p) * (col[j] - p));
        }
        for (int d = 0; d < MAXD2; d++) hist[d] = 0;
        for (int j = 0; j < ngrid; j++) hist[d2[j]]++;
        /* the nwant smallest distances present, and how many points they hold */
        int want[3], nw = 0, count = 0;
        for (int d = 0; d < MAXD2 && nw < nwant; d++)
            if (hist[d]) { want[nw++] = d; count += hist[d]; }
        if (used + 1 + (size_t)count > cap) {
            while (used + 1 + (size_t)count > cap) cap *= 2;
            uint16_t *t = realloc(nbr, cap * sizeof *nbr);
            if (!t) { ok = 0; break; }
            nbr = t;
        }
        map[u] = -(int32_t)used - 1;
        nbr[used++] = (uint16_t)count;
        for (int w = 0; w < nw; w++)
            for (int j = 0; j < ngrid; j++)
                if (d2[j] == want[w]) nbr[used++] = (uint16_t)j;
    }
    free(lv);
    free(d2);
    /* the transposed, padded copy of the lists */
    size_t ntq = 0;
    for (int u = 0; ok && u < TM__IQ2_KMAP; u++)
        if (map[u] < 0) ntq += 8 * (((size_t)nbr[-map[u] - 1] + 7) & ~(size_t)7);
    int8_t *tq = ok ? malloc(ntq ? ntq : 1) : NULL;
    uint32_t *tqo = ok ? malloc(TM__IQ2_KMAP * sizeof *tqo) : NULL;
    uint16_t *tk = ok ? malloc((ntq ? ntq : 8) / 8 * sizeof *tk) : NULL;
    if (!tq || !tqo || !tk) ok = 0;
    size_t at = 0;
    for (int u = 0; ok && u < TM__IQ2_KMAP; u++) {
        tqo[u] = 0;
        if (map[u] >= 0) continue;
        const uint16_t *l = nbr + (-map[u] - 1);
        const int nn = l[0], n8 = (nn + 7) & ~7;
        tqo[u] = (uint32_t)at;
        for (int j = 0; j < n8; j++) {
            const int8_t *pj = pos[l[1 + (j < nn ? j : nn - 1)]];
            unsigned key = 0;
            for (int k = 0; k < 8; k++) {
                tq[at + (size_t)k * n8 + j] = pj[k];
                key |= (unsigned)(pj[k] - 1) / 2 << 2 * k;
            }
            tk[at / 8 + (size_t)j] = (uint16_t)key;
        }
        at += 8 * (size_t)n8;
    }
    if (!ok) {
        free(pos); free(map); free(nbr); free(tq); free(tqo); free(tk);
        return 0;
    }
    g_tab[g].tk = tk;
    g_tab[g].tqo = tqo;
    g_tab[g].tq = tq;
    g_tab[g].ngrid = ngrid;
    g_tab[g].pos = (const int8_t (*)[8])pos;
    g_tab[g].map = map;
    g_tab[g].nbr = nbr;
    return 1; /* kept for the life of the process, as the grids */
}

static void once0(void) { g_ok[0] = build(0); }
static void once1(void) { g_ok[1] = build(1); }
static void once2(void) { g_ok[2] = build(2); }
static void once3(void) { g_ok[3] = build(3); }

const tm__iq2_tab *tm__iq2_tab_get(int g) {
    static void (*const fns[4])(void) = {once0, once1, once2, once3};
    if (g < 0 || g > 3) return NULL;
    pthread_once(&g_once[g], fns[g]);
    return g_ok[g] ? &g_tab[g] : NULL;
}
