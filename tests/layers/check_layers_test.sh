#!/usr/bin/env bash
# check_layers_test.sh: scripts/check-layers.py passes on the real tree and fails, naming
# file:line and the rule, on copies of it with one deliberate violation each: an upward
# include by a relative path or <...>, an upward public header (an include inside #if 0 is
# ignored), a cli/ include of src/, a fuzz/ include
# of src/, a cli/ use of a library internal, an upward call and a new file cycle.
set -u
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

( cd "$src" && python3 scripts/check-layers.py >/dev/null ) || { echo "FAIL: the real tree does not pass"; ( cd "$src" && python3 scripts/check-layers.py ); fail=1; }

# fresh copy of what the checker reads
fresh() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t"
  cp -r "$src/src" "$src/cli" "$src/include" "$src/fuzz" "$src/scripts" "$tmp/t/"
}
# expect FILE LINE RULE: the checker fails and names FILE:LINE: RULE
expect() {
  local what="$1" file="$2" line="$3" rule="$4" out rc
  out="$(cd "$tmp/t" && python3 scripts/check-layers.py 2>&1)"; rc=$?
  if [ "$rc" = 0 ]; then echo "FAIL: $what: check-layers passed"; fail=1; return; fi
  if ! grep -q "^$file:$line: $rule: " <<<"$out"; then
    echo "FAIL: $what: expected '$file:$line: $rule:' in:"; echo "$out"; fail=1; return
  fi
  echo "ok: $what -> $(grep "^$file:$line: $rule: " <<<"$out" | head -1 | cut -c1-110)"
}
append() { printf '%s\n' "$2" >>"$tmp/t/$1"; wc -l <"$tmp/t/$1" | tr -d ' '; }

fresh; n=$(append src/core/err.c '#include "../../cli/cli.h"')
expect "src/core includes a cli/ header by a relative path" src/core/err.c "$n" include-up
fresh; n=$(append src/core/hash.c '#include "tensormorph/qjob.h"')
expect "src/core includes the job layer's public header" src/core/hash.c "$n" include-up
fresh; n=$(append src/core/cpu.c '#include <tensormorph/qjob.h>')
expect "src/core includes the job layer's public header by <...>" src/core/cpu.c "$n" include-up
fresh; n=$(append src/core/cpu.c '#include <job/pipeline.h>')
expect "src/core includes a src/job header by <...>" src/core/cpu.c "$n" include-up
# an include the preprocessor drops (#if 0, the #else of #if 1) is no violation
fresh; append src/core/cpu.c '#if 0' >/dev/null; append src/core/cpu.c '#include <tensormorph/qjob.h>' >/dev/null
append src/core/cpu.c '#include "../job/job.h"' >/dev/null; append src/core/cpu.c '#endif' >/dev/null
append src/core/cpu.c '#if 1 /* on */' >/dev/null; append src/core/cpu.c '#else' >/dev/null
append src/core/cpu.c '#include "tensormorph/qjob.h"' >/dev/null; append src/core/cpu.c '#endif' >/dev/null
if out="$(cd "$tmp/t" && python3 scripts/check-layers.py 2>&1)"; then echo "ok: includes inside #if 0 / the #else of #if 1 are ignored"
else echo "FAIL: an include inside #if 0 or the #else of #if 1 is reported:"; echo "$out"; fail=1; fi
# ... but the #else branch of #if 0 is live
append src/core/cpu.c '#if 0' >/dev/null; append src/core/cpu.c '#else' >/dev/null
n=$(append src/core/cpu.c '#include <tensormorph/qjob.h>'); append src/core/cpu.c '#endif' >/dev/null
expect "an upward include in the #else of #if 0" src/core/cpu.c "$n" include-up
fresh; n=$(append src/quant/qgran.c '#include "../formats/file.h"')
expect "quant includes a formats header" src/quant/qgran.c "$n" include-up
fresh; n=$(append cli/cmd_inspect.c '#include "../src/core/core.h"')
expect "cli includes src/" cli/cmd_inspect.c "$n" cli-src
fresh; n=$(append cli/cmd_inspect.c 'char *tm__aprintf(const char *fmt, ...); /* its own prototype */')
append cli/cmd_inspect.c 'void cli_bad(void) { free(tm__aprintf("x")); }' >/dev/null
expect "cli calls a library internal" cli/cmd_inspect.c "$n" cli-internal
fresh; n=$(append fuzz/fuzz_npy_open.c '#include "formats/file.h"')
expect "a fuzzer includes src/" fuzz/fuzz_npy_open.c "$n" fuzz-src
fresh; append src/quant/qgran.c 'void tm__bad_up(void);' >/dev/null
n=$(append src/quant/qgran.c 'void tm__bad_up(void) { tm_close(NULL); }')
expect "quant calls formats (tm_close)" src/quant/qgran.c "$n" call-up
fresh; append src/formats/npy.c 'int tm__bad_cycle(void);' >/dev/null
n=$(append src/formats/npy.c 'int tm__bad_cycle(void) { return tm__zip_probe(0, 0, 0); }')
expect "npy.c calls back into zipckpt.c" src/formats/npy.c "$n" cycle
fresh; n=$(append include/tensormorph/hash.h '#include "qjob.h"')
expect "a core public header includes a job one" include/tensormorph/hash.h "$n" include-up
fresh; printf '#include "../tensormorph.h"\n' >"$tmp/t/include/tensormorph/newthing.h"
expect "a public header without a layer" include/tensormorph/newthing.h 1 public-layer

[ "$fail" = 0 ] && echo "ok: check-layers passes on the tree and fails on each bad copy"
exit "$fail"
