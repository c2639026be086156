#!/bin/bash
# quantize_requantize.sh: an already-quantized GGUF quantized to a file type that changes no
# tensor's type (Q4_K_M to Q4_K_M) is refused with exit 3 and nothing written, as a type that
# would requantize (Q8_0) is (docs/exit-codes.md); --allow-empty writes the unchanged copy, and
# its summary counts file bytes on both sides (source and output the same size for a copy).
# Needs ../shared (stories260K-Q4_K_M.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-Q4_K_M.gguf
tm_scratch requant

"$T" quantize "$G" -o same.gguf --type Q4_K_M >out.txt 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "Q4_K_M -> Q4_K_M exit $rc, want 3: $(cat out.txt err.txt)"
grep -q "already quantized" err.txt || fail "no 'already quantized' in: $(cat err.txt)"
grep -q -- "--allow-empty" err.txt || fail "the refusal does not name --allow-empty: $(cat err.txt)"
[ -e same.gguf ] && fail "a refused run wrote same.gguf"
"$T" quantize "$G" -o q8.gguf --type Q8_0 >/dev/null 2>&1
rc=$?
[ "$rc" = 3 ] || fail "Q4_K_M -> Q8_0 exit $rc, want 3"
"$T" quantize "$G" -o copy.gguf --type Q4_K_M --allow-empty --no-checksums >out.txt 2>err.txt || fail "--allow-empty: $(cat err.txt)"
cmp -s "$G" copy.gguf || fail "--allow-empty: the copy differs from the input"
# "(A MB -> B MB)": both file bytes, so equal for a byte-identical copy
mb=$(sed -n 's/.*(\([0-9.]*\) MB -> \([0-9.]*\) MB).*/\1 \2/p' out.txt)
set -- $mb
[ "$#" = 2 ] || fail "no '(A MB -> B MB)' in: $(cat out.txt)"
[ "$1" = "$2" ] || fail "a byte-identical copy reported $1 MB -> $2 MB"
want=$(python3 -c "import os,sys; print('%.2f' % (os.path.getsize(sys.argv[1]) / 1e6))" "$G")
[ "$1" = "$want" ] || fail "source $1 MB, the file is $want MB"
echo PASS
