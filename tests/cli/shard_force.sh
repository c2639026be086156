#!/bin/bash
# shard_force.sh: a part (quantize --shard I/N, docs/scale-out.md) checks the recipe of the parts
# of OUT present at its start. One of another recipe whose shared files have the same sizes
# (--observer mse over the default) is refused before it writes (exit 2), naming the first such
# part's command, the shared files and records untouched; with --force the part starts the
# layout over: the parts of the other recipe and the shared files their records name are
# removed, a file they do not name is kept, and the new parts merge into one run's bytes (also
# over a layout of other sizes, and for GGUF). Without records, a layout of other sizes is still
# refused by the shared files' sizes (exit 2).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_scratch shard_force

same_files() { # REF OUT: every file but the manifest byte-identical
    local f
    [ "$(cd "$1" && ls | sort)" = "$(cd "$2" && ls | sort)" ] || fail "$2: other files than $1"
    for f in $(cd "$1" && ls); do
        [ "$f" = tensormorph-manifest.json ] || cmp -s "$1/$f" "$2/$f" || fail "$2/$f differs from one run's"
    done
}
finish_parts() { # "I ..." ARGS...: run those parts of 4 with ARGS, merge, compare with one run
    local i idx=$1
    shift
    for i in $idx; do "$T" quantize demo -o out --shard $i/4 -q "$@" || fail "part $i/4 $*: exit $?"; done
    "$T" merge out -q || fail "merge of the parts started over ($*): exit $?"
    "$T" quantize demo -o ref -q "$@" || fail "one run $*"
    same_files ref out
}
"$T" demo -o demo -q || fail "demo"
for ((i = 0; i < 4; i++)); do "$T" quantize demo -o out --shard $i/4 -q || fail "part $i/4"; done
sum0=$(cat out.parts-of-4/* out.part-1-of-4/* | cksum)

# another recipe, the same sizes: refused at the start (before: accepted, caught only at merge)
out_msg=$("$T" quantize demo -o out --shard 1/4 -q --observer mse 2>&1); rc=$?
[ $rc = 2 ] || fail "a part of another recipe over the parts of the default: exit $rc, not 2 ($out_msg)"
echo "$out_msg" | grep -q "out.part-0-of-4 was made from another recipe" || fail "the refusal does not name part 0: $out_msg"
echo "$out_msg" | grep -q "(\`.*--shard 0/4 -q\`)" || fail "the refusal does not name part 0's command: $out_msg"
echo "$out_msg" | grep -q -- "--force" || fail "the refusal does not say how to start over: $out_msg"
[ "$(cat out.parts-of-4/* out.part-1-of-4/* | cksum)" = "$sum0" ] || fail "the refused part changed the shared files or its record"
[ "$(ls -d out.part-* | wc -l)" = 4 ] || fail "the refused part touched the parts: $(ls)"
echo "ok: a part of another recipe (same sizes) refused at its start (exit 2), nothing written"

# --force: the layout starts over; a file no part wrote stays
echo mine > out.parts-of-4/keep.txt
"$T" quantize demo -o out --shard 1/4 -q --observer mse --force || fail "part 1 --observer mse --force: exit $?"
[ "$(ls | grep '^out' | tr '\n' ' ')" = "out.part-1-of-4 out.parts-of-4 " ] || fail "--force left parts of the other recipe: $(ls)"
[ "$(cat out.parts-of-4/keep.txt)" = mine ] || fail "--force removed a file no part wrote"
rm out.parts-of-4/keep.txt
finish_parts "0 2 3" --observer mse
echo "ok: --force started the layout over (same sizes): merged into one run's bytes, a foreign file kept"

# --force over a layout of other sizes (int4 over int8), the forcing part not part 0
rm -rf out ref
for ((i = 0; i < 4; i++)); do "$T" quantize demo -o out --shard $i/4 -q || fail "part $i/4"; done
"$T" quantize demo -o out --shard 2/4 -q --type int4 --force || fail "part 2 int4 --force over the int8 layout: exit $?"
finish_parts "0 1 3" --type int4
echo "ok: --force started a layout of other sizes over"

# no records left, the shared files of other sizes: still refused by their sizes (exit 2)
rm -rf out ref
for ((i = 0; i < 2; i++)); do "$T" quantize demo -o out --shard $i/2 -q || fail "part $i/2"; done
rm -rf out.part-0-of-2 out.part-1-of-2
out_msg=$("$T" quantize demo -o out --shard 0/2 -q --type int4 2>&1); rc=$?
[ $rc = 2 ] || fail "a part over shared files of other sizes: exit $rc, not 2 ($out_msg)"
echo "$out_msg" | grep -q "laid out by another plan" || fail "not the layout refusal: $out_msg"
rm -rf out.parts-of-2
echo "ok: shared files of other sizes without records refused"

if [ -n "${TM_SHARED:-}" ] && [ -f "$TM_SHARED/models/gguf/stories260K-F32.gguf" ]; then
    G="$TM_SHARED/models/gguf/stories260K-F32.gguf"
    for ((i = 0; i < 3; i++)); do "$T" quantize "$G" -o out.gguf --type Q8_0 --shard $i/3 -q || fail "GGUF Q8_0 part $i"; done
    "$T" quantize "$G" -o out.gguf --type Q4_K_M --shard 1/3 -q 2>/dev/null; [ $? = 2 ] || fail "GGUF Q4_K_M part over Q8_0 parts not refused"
    "$T" quantize "$G" -o out.gguf --type Q4_K_M --shard 1/3 -q --force || fail "GGUF Q4_K_M part 1 --force"
    for i in 0 2; do "$T" quantize "$G" -o out.gguf --type Q4_K_M --shard $i/3 -q || fail "GGUF Q4_K_M part $i"; done
    "$T" merge out.gguf -q || fail "GGUF merge after --force"
    "$T" quantize "$G" -o ref.gguf --type Q4_K_M -q || fail "GGUF one run"
    cmp ref.gguf out.gguf || fail "GGUF merged after --force differs from one run"
    echo "ok: GGUF: --force started a Q8_0 layout over as Q4_K_M"
elif [ "${TM_REQUIRE_SHARED:-0}" = 1 ]; then
    fail "TM_REQUIRE_SHARED=1 but the GGUF model is missing"
fi
echo "PASS"
