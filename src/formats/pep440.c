/* pep440.c: PEP 440 version ordering (pep440.h). Written from the PEP's "Version scheme",
** "Summary of permitted suffixes and relative ordering" and "Normalization" sections. */
#include "pep440.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

enum { REL_MAX = 16 };

typedef struct pver {
    int64_t     epoch;
    int64_t     rel[REL_MAX];
    int         n_rel;
    int         pre_phase;  /* 0 a, 1 b, 2 rc; -1 none */
    int64_t     pre_n;
    int64_t     post;       /* -1 none */
    int64_t     dev;        /* -1 none */
    const char *local;      /* after '+', NULL none */
    size_t      local_n;
} pver;

static int is_sep(char c) { return c == '-' || c == '_' || c == '.'; }

/* Digits at *s into *v (at most 18 of them); 0 when none. */
static int take_num(const char **s, int64_t *v) {
    const char *p = *s;
    int64_t x = 0;
    int n = 0;
    while (isdigit((unsigned char)*p)) {
        if (++n > 18) return 0;
        x = x * 10 + (*p++ - '0');
    }
    if (n == 0) return 0;
    *v = x;
    *s = p;
    return 1;
}

/* Case-insensitive word w at *s (advancing past it). */
static int take_word(const char **s, const char *w) {
    size_t n = strlen(w);
    if (strncasecmp(*s, w, n) != 0) return 0;
    *s += n;
    return 1;
}

/* An optional separator and number after a suffix word: "rc1", "rc.1", "rc" (= 0). */
static void take_suffix_num(const char **s, int64_t *v) {
    const char *p = *s;
    if (is_sep(*p) && isdigit((unsigned char)p[1])) p++;
    *v = 0;
    if (take_num(&p, v)) *s = p;
}

static int parse(const char *s, pver *v) {
    memset(v, 0, sizeof *v);
    v->pre_phase = -1;
    v->post = -1;
    v->dev = -1;
    while (isspace((unsigned char)*s)) s++;
    if (*s == 'v' || *s == 'V') s++;
    int64_t x;
    if (!take_num(&s, &x)) return 0;
    if (*s == '!') {
        v->epoch = x;
        s++;
        if (!take_num(&s, &x)) return 0;
    }
    v->rel[v->n_rel++] = x;
    while (*s == '.' && isdigit((unsigned char)s[1])) {
        s++;
        if (!take_num(&s, &x) || v->n_rel == REL_MAX) return 0;
        v->rel[v->n_rel++] = x;
    }
    /* pre-release; longer spellings first */
    static const struct { const char *w; int phase; } pre[] = {
        {"alpha", 0}, {"a", 0}, {"beta", 1}, {"b", 1}, {"preview", 2}, {"pre", 2}, {"rc", 2}, {"c", 2},
    };
    const char *t = is_sep(*s) ? s + 1 : s;
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (take_word(&t, pre[i].w)) {
            v->pre_phase = pre[i].phase;
            take_suffix_num(&t, &v->pre_n);
            s = t;
            break;
        }
    /* post-release: "-N" or [sep](post|rev|r)[sep][N] */
    if (*s == '-' && isdigit((unsigned char)s[1])) {
        s++;
        take_num(&s, &v->post);
    } else {
        t = is_sep(*s) ? s + 1 : s;
        if (take_word(&t, "post") || take_word(&t, "rev") || take_word(&t, "r")) {
            take_suffix_num(&t, &v->post);
            s = t;
        }
    }
    /* development release */
    t = is_sep(*s) ? s + 1 : s;
    if (take_word(&t, "dev")) {
        take_suffix_num(&t, &v->dev);
        s = t;
    }
    /* local version label */
    if (*s == '+') {
        v->local = ++s;
        while (isalnum((unsigned char)*s) || (is_sep(*s) && isalnum((unsigned char)s[1]))) s++;
        v->local_n = (size_t)(s - v->local);
        if (v->local_n == 0 || !isalnum((unsigned char)v->local[0])) return 0;
    }
    while (isspace((unsigned char)*s)) s++;
    return *s == '\0';
}

static int cmp64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

/* PEP 440's sort key: a dev release of X with no pre or post part sorts before every pre-release
** of X; no pre-release sorts after all of them. */
static int64_t pre_key(const pver *v) {
    if (v->pre_phase < 0) return v->post < 0 && v->dev >= 0 ? -1 : 3;
    return v->pre_phase;
}

int tm__pep440_cmp(const char *a, const char *b, int *ok) {
    pver x, y;
    *ok = a && b && parse(a, &x) && parse(b, &y);
    if (!*ok) return 0;
    int c = cmp64(x.epoch, y.epoch);
    for (int i = 0; !c && (i < x.n_rel || i < y.n_rel); i++)
        c = cmp64(i < x.n_rel ? x.rel[i] : 0, i < y.n_rel ? y.rel[i] : 0);
    if (!c) c = cmp64(pre_key(&x), pre_key(&y));
    if (!c && x.pre_phase >= 0) c = cmp64(x.pre_n, y.pre_n);
    if (!c) c = cmp64(x.post, y.post);
    if (!c) c = cmp64(x.dev < 0 ? INT64_MAX : x.dev, y.dev < 0 ? INT64_MAX : y.dev);
    if (!c) c = cmp64(x.local != NULL, y.local != NULL);
    if (!c && x.local) {
        size_t n = x.local_n < y.local_n ? x.local_n : y.local_n;
        c = strncasecmp(x.local, y.local, n);
        c = c ? (c > 0) - (c < 0) : cmp64((int64_t)x.local_n, (int64_t)y.local_n);
    }
    return c;
}
