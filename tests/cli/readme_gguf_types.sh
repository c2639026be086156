#!/bin/bash
# readme_gguf_types.sh: README.md's row for `quantize IN -o OUT.gguf --type T` names every GGUF
# file type the binary accepts (the one type table, src/job/gguf_job.c, as the --type refusal
# lists it) and every GGUF option of `quantize --help`; no type it names is refused.
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_scratch readmetypes
row=$(grep -F '| `tensormorph quantize IN -o OUT.gguf --type T` |' "$TM_SRC/README.md") || fail "README has no GGUF quantize row"
"$T" quantize none.gguf -o z.gguf --type BOGUS 2> err.txt; rc=$?
[ $rc = 2 ] || fail "--type BOGUS: exit $rc"
types=$(sed -n "s/.*(llama-quantize's: \([^)]*\)).*/\1/p" err.txt)
[ -n "$types" ] || fail "no type list in: $(cat err.txt)"
for t in $types; do
    printf '%s\n' "$row" | grep -qw -- "$t" || fail "README's GGUF row does not name --type $t"
done
"$T" quantize --help > help.txt || fail "--help"
for o in $(grep -o '^      --[a-z-]*  *[^ ]* *GGUF:' help.txt | awk '{print $1}'); do
    case "$o" in --vocab-from|--allow-long-names|--tensor-type-exact) continue;; esac  # in docs/gguf-quantize.md
    printf '%s\n' "$row" | grep -qF -- "\`$o" || fail "README's GGUF row does not name $o"
done
printf '%s\n' "$row" | grep -qF -- '`--max-shard-size' || fail "README's GGUF row does not name --max-shard-size"
echo "ok: $(echo $types | wc -w) types and the GGUF options"
echo PASS
