#!/bin/bash
# qdiff_imatrix_other.sh: qdiff --imatrix with another model's importance matrix (stories260K's
# for synth256: the names match, the sizes differ) is refused with exit 2 naming the tensor and
# both sizes, as quantize refuses it; the model's own imatrix still weights its tensors.
# Needs ../shared (gguf/imatrix/).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/imatrix/synth256-F32.gguf
I=$(dirname "$G")
tm_scratch qdimx

"$T" qdiff "$I/synth256-F32.gguf" "$I/synth256-IQ2_XS-imx.gguf" --imatrix "$I/stories260K.imatrix" >out.txt 2>err.txt
rc=$?
[ "$rc" = 2 ] || fail "another model's imatrix: exit $rc, want 2: $(cat out.txt err.txt)"
grep -q "imatrix size 64 is different from tensor size 256" err.txt || fail "message: $(cat err.txt)"
"$T" quantize "$I/synth256-F32.gguf" -o q.gguf --type IQ2_XS --imatrix "$I/stories260K.imatrix" >/dev/null 2>qerr.txt
rc=$?
[ "$rc" = 2 ] || fail "quantize with that imatrix: exit $rc, want 2"
"$T" qdiff "$I/synth256-F32.gguf" "$I/synth256-IQ2_XS-imx.gguf" --imatrix "$I/synth256.imatrix" >out.txt 2>err.txt || fail "own imatrix: $(cat err.txt)"
grep -q "14 of 16 tensors have an entry" out.txt || fail "own imatrix: $(grep 'have an entry' out.txt)"
echo PASS
