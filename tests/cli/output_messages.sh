#!/bin/bash
# output_messages.sh: errors name their real cause: quantize to a compressed-tensors directory
# under a missing parent names -o and the missing directory (as the GGUF output does); a broken
# config.json is a JSON error with its line and column (not "architecture '(none...)'"); a
# truncated imatrix says how many bytes are left. Needs ../shared (safetensors/stories260K-f32,
# gguf/imatrix/stories260K.imatrix).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/safetensors/stories260K-f32/model.safetensors
ST=$(dirname "$G")
tm_need_shared models/gguf/imatrix/stories260K.imatrix
IM="$G"
tm_scratch outmsg

"$T" quantize "$ST" -o "$W/nope/sub/ct" --type int8 >/dev/null 2>err.txt && fail "a missing parent was accepted"
grep -q -- "-o $W/nope/sub/ct: directory '$W/nope/sub' does not exist" err.txt || fail "missing parent: $(cat err.txt)"
mkdir bad && cp "$ST/model.safetensors" bad/ && printf '{"architectures": ["LlamaForCausalLM"],\n "hidden_size": 64,,\n}' > bad/config.json
"$T" convert bad -o bad.gguf --vocab-from "$IM" >/dev/null 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "broken config.json: exit $rc, want 3"
grep -q "config.json is not valid JSON: line 2, column 20" err.txt || fail "broken config.json: $(cat err.txt)"
grep -q "architecture '(none" err.txt && fail "broken config.json still blamed on the architecture"
# the first entry's name length read, then the file cut 2 bytes into the name
head -c 10 "$IM" > cut.imatrix
"$T" quantize "$ST/model.safetensors" -o q.gguf --type Q4_0 --imatrix cut.imatrix >/dev/null 2>err.txt && fail "a truncated imatrix was accepted"
grep -q "name length 21 at byte 4) at byte 8 needs 21 bytes, but only 2 are left" err.txt || fail "truncated imatrix: $(cat err.txt)"
echo PASS
