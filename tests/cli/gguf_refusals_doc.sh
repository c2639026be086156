#!/bin/bash
# gguf_refusals_doc.sh: the exit-2 refusals docs/exit-codes.md "GGUF quantize refusals" lists,
# each with its message and nothing written: a missing importance matrix (up front by file
# type, and per tensor), --override-kv syntax, --keep-split with --max-shard-size.
# Needs ../shared (gguf/imatrix/synth256-F32.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/imatrix/synth256-F32.gguf
tm_scratch grefdoc
E=$(mktemp) || fail mktemp
trap 'rm -rf "$W" "$E"' EXIT
refused() { # refused WANT-IN-MESSAGE ARGS...: exit 2, the message, nothing beside OUT
    local want=$1; shift
    "$T" quantize "$G" -o o.gguf -q "$@" 2> "$E"; local rc=$?
    [ $rc = 2 ] || fail "$*: exit $rc, not 2: $(cat "$E")"
    grep -qF -- "$want" "$E" || fail "$*: message lacks '$want': $(cat "$E")"
    [ -z "$(ls | grep -vx m)" ] || fail "$*: left $(ls)"
}
for ty in IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S Q2_K_S; do
    refused "(--type $ty needs --imatrix FILE, as llama-quantize)" --type $ty
done
# a matrix with an entry for one tensor only: the first other tensor IQ2_XS is refused
python3 - "$G" one.imatrix <<'EOF2' || fail "imatrix"
import os, struct, sys
sys.path.insert(0, os.environ["TM_SRC"] + "/tests/cli/lib")
from gguf_file import read
kv, ts = read(sys.argv[1])
t = [t for t in ts if t[0] == "blk.0.attn_q.weight"][0]
name, ne0 = t[0].encode(), t[1][0]
out = struct.pack("<i", 1) + struct.pack("<i", len(name)) + name + struct.pack("<ii", 1, ne0) + struct.pack("<%df" % ne0, *([1.0] * ne0))
open(sys.argv[2], "wb").write(out + struct.pack("<ii", 1, 1) + b"x")
EOF2
mkdir m && mv one.imatrix m/ || fail mv
refused "in a very low-bit quantization (IQ2_XS): the result would be garbage" --type IQ2_XS --imatrix m/one.imatrix
# the filters leave no entry: the up-front refusal
refused "left 0 of the 1 entries of m/one.imatrix" --type IQ2_XS --imatrix m/one.imatrix --exclude-weights attn_q
for kvarg in "=int:1" "nokey" "$(printf 'k%.0s' $(seq 128))=int:1" "a=int:x" "a=int:" "a=int:99999999999999999999" \
             "a=float:q" "a=bool:yes" "a=str:$(printf 'v%.0s' $(seq 128))" "a=u8:1"; do
    refused "--override-kv '" --type Q8_0 --override-kv "$kvarg"
done
refused "--keep-split keeps the input's split files; --max-shard-size makes new ones" --type Q8_0 --keep-split --max-shard-size 1MB
echo PASS
