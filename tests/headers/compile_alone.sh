#!/usr/bin/env bash
# compile_alone.sh [CC]: every public header (include/tensormorph.h and each
# include/tensormorph/*.h) compiles on its own, as the first and only include of a translation
# unit, with `cc -std=c11 -fsyntax-only -Iinclude` (warnings are errors); and the umbrella
# header does not pull in tensormorph/experimental.h (docs/ARCHITECTURE.md "Public headers").
# Run from anywhere; exits non-zero naming each header that fails.
set -u
cd "$(dirname "$0")/../.."
CC="${1:-${CC:-cc}}"
fail=0; n=0
for h in include/tensormorph.h include/tensormorph/*.h; do
  n=$((n + 1))
  if ! out=$("$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -Iinclude -x c "$h" 2>&1); then
    echo "FAIL: $h does not compile alone:"; echo "$out" | head -20; fail=1
  fi
done
# the umbrella must not declare the experimental (test-only) entry points
probe=$(printf '#include "tensormorph.h"\n#ifdef TENSORMORPH_EXPERIMENTAL_H\n#error tensormorph.h includes tensormorph/experimental.h\n#endif\n')
if ! out=$(printf '%s\n' "$probe" | "$CC" -std=c11 -fsyntax-only -Iinclude -x c - 2>&1); then
  echo "FAIL: $out"; fail=1
fi
[ "$fail" = 0 ] && echo "ok: $n public headers compile alone; tensormorph.h leaves out experimental.h"
exit "$fail"
