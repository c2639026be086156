/* pep440.h: ordering of Python package versions (PEP 440 "Version scheme"), for readers that
** decide a layout by the release of the writer (compressed-tensors' quantization_config.version). */
#ifndef TM_FORMATS_PEP440_H
#define TM_FORMATS_PEP440_H

/* tm__pep440_cmp: -1, 0 or 1 as version a sorts before, equal to or after version b under PEP
** 440: epoch "N!", release N(.N)* (trailing zeros ignored: 0.18 == 0.18.0), then
** X.devN < XaN (alpha, a) < XbN (beta, b) < XrcN (rc, c, pre, preview) < X < X.postN
** (post, rev, r, or "-N"), XaN.devM < XaN, X.postN.devM < X.postN; a local version "+label"
** sorts after the same public version without one (labels are compared as text). Separators
** "-", "_", "." and a leading "v" are accepted, case is ignored, surrounding blanks are
** skipped. *ok = 0 (and 0 returned) when either string is not a PEP 440 version. */
int tm__pep440_cmp(const char *a, const char *b, int *ok);

#endif
