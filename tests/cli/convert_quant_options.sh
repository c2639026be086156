#!/bin/bash
# convert_quant_options.sh: `convert IN -o OUT.gguf --type T` takes the GGUF quantizer's options
# (one table with quantize: --imatrix, --include/--exclude-weights, --output-tensor-type,
# --token-embedding-type, --leave-output-tensor, --pure, --override-kv, --tensor-type) and gives
# the same file as `convert` then `quantize --type T` with them; the imatrix names the llama.cpp
# tensors convert writes (a legacy imatrix made here for them), and the file and manifest record
# it as quantize does. convert --help and its --type check take every file type quantize takes
# for GGUF (the quantizer's one table), IQ4_XS and TQ2_0 included.
# Needs ../shared (safetensors/stories260K-f32, gguf/stories260K-F32.gguf for the tokenizer).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/safetensors/stories260K-f32/model.safetensors
ST=$(dirname "$G")
VOCAB="$TM_SHARED/models/gguf/stories260K-F32.gguf"
tm_scratch convq
LIB="$TM_SRC/tests/cli/lib"

# the plain conversion, and a legacy imatrix for its 2-D weights (llama.cpp names, ne0 values each)
"$T" convert "$ST" -o f32.gguf --vocab-from "$VOCAB" -q --no-checksums || fail "plain convert"
python3 - f32.gguf imx.dat "$LIB" <<'PY' || fail "making the imatrix"
import struct, sys
sys.path.insert(0, sys.argv[3])
import gguf_file
kv, ts = gguf_file.read(sys.argv[1])
ents = [(n, ne[0]) for n, ne, ty, off, b in ts if len(ne) == 2 and n != "token_embd.weight"]
assert len(ents) >= 7, ents
out = struct.pack("<i", len(ents))
for k, (n, ne0) in enumerate(ents):
    nb = n.encode()
    vals = [0.25 + ((j * 37 + k * 11) % 29) / 4.0 for j in range(ne0)]
    out += struct.pack("<i", len(nb)) + nb + struct.pack("<ii", 1, ne0) + struct.pack("<%df" % ne0, *vals)
ds = b"convert_quant_options"
out += struct.pack("<i", 1) + struct.pack("<i", len(ds)) + ds
open(sys.argv[2], "wb").write(out)
PY

# --type Q2_K (64-wide rows fall back to IQ4_NL, an imatrix-weighted search) with the options
opts=(--imatrix imx.dat --output-tensor-type q8_0 --tensor-type 'ffn_up=q5_0' --tensor-type-exact --override-kv 'tm.test=str:convq')
"$T" convert "$ST" -o one.gguf --vocab-from "$VOCAB" --type Q2_K "${opts[@]}" -q --no-checksums 2>err.txt ||
    fail "convert --type with the quantize options: $(cat err.txt)"
"$T" quantize f32.gguf -o two.gguf --type Q2_K "${opts[@]}" -q --no-checksums 2>err.txt || fail "quantize: $(cat err.txt)"
cmp one.gguf two.gguf || fail "convert --type Q2_K --imatrix ... differs from convert + quantize --type Q2_K --imatrix ..."
"$T" quantize f32.gguf -o noimx.gguf --type Q2_K --output-tensor-type q8_0 --tensor-type 'ffn_up=q5_0' --tensor-type-exact -q --no-checksums ||
    fail "quantize without the imatrix"
cmp -s one.gguf noimx.gguf && fail "the imatrix changed nothing (no check of its use)"
python3 - one.gguf one.gguf.manifest.json two.gguf.manifest.json "$LIB" <<'PY' || fail "what the file and manifest record"
import json, sys
sys.path.insert(0, sys.argv[4])
import gguf_file
kv, ts = gguf_file.read(sys.argv[1])
assert kv["quantize.imatrix.file"][1] == "imx.dat", kv.get("quantize.imatrix.file")
assert kv["quantize.imatrix.dataset"][1] == "convert_quant_options", kv.get("quantize.imatrix.dataset")
assert kv["tm.test"][1] == "convq", kv.get("tm.test")
ty = {t[0]: t[2] for t in ts}
assert ty["token_embd.weight"] == 8, ty["token_embd.weight"]  # Q8_0: --output-tensor-type (tied embeddings: token_embd is the output)
assert ty["blk.0.ffn_up.weight"] == 6, ty["blk.0.ffn_up.weight"]  # Q5_0: --tensor-type
m1, m2 = (json.load(open(p)) for p in sys.argv[2:4])
r1, r2 = m1["recipe"], m2["recipe"]
assert r1["importance_matrix"] == r2["importance_matrix"] and r1["importance_matrix"]["file"] == "imx.dat", (r1, r2)
for k in ("output_tensor_type", "tensor_types", "file_type"):
    assert r1.get(k) == r2.get(k), (k, r1.get(k), r2.get(k))
PY

# the options mean nothing without --type; bad values are usage errors, as in quantize
"$T" convert "$ST" -o x.gguf --vocab-from "$VOCAB" --imatrix imx.dat >out.txt 2>&1
rc=$?
[ "$rc" = 2 ] || fail "--imatrix without --type: exit $rc, want 2"
grep -q -- "--imatrix.*--type" out.txt || fail "--imatrix without --type: $(cat out.txt)"
"$T" convert "$ST" -o x.gguf --vocab-from "$VOCAB" -t Q4_0 --output-tensor-type nope >/dev/null 2>&1
[ "$?" = 2 ] || fail "--output-tensor-type nope: want exit 2"
[ -e x.gguf ] && fail "a refused run wrote x.gguf"

# every GGUF file type of the quantizer's table: in convert --help and accepted by --type
"$T" convert --help >help.txt || fail "convert --help"
for t in Q4_0 IQ4_XS IQ4_NL TQ1_0 TQ2_0 IQ2_XXS IQ3_S Q2_K_S Q3_K_L Q4_K_M Q6_K Q8_0 F16 BF16 COPY; do
    grep -- "--type T" help.txt | grep -qw "$t" || fail "convert --help does not list $t"
done
"$T" convert "$ST" -o iq4xs.gguf --vocab-from "$VOCAB" --type IQ4_XS -q --no-checksums 2>err.txt ||
    fail "convert --type IQ4_XS: $(cat err.txt)"
"$T" quantize f32.gguf -o iq4xs2.gguf --type IQ4_XS -q --no-checksums || fail "quantize --type IQ4_XS"
cmp iq4xs.gguf iq4xs2.gguf || fail "convert --type IQ4_XS differs from convert + quantize"
"$T" convert "$ST" -o tq.gguf --vocab-from "$VOCAB" --type tq2_0 --imatrix imx.dat -q --no-checksums 2>err.txt ||
    fail "convert --type tq2_0: $(cat err.txt)"
"$T" convert "$ST" -o x.gguf --vocab-from "$VOCAB" --type Q9_Z >out.txt 2>&1
[ "$?" = 2 ] || fail "--type Q9_Z: want exit 2"
grep -q "TQ2_0" out.txt && grep -q "IQ4_XS" out.txt || fail "--type Q9_Z: the message does not list the table: $(cat out.txt)"
echo PASS
