#!/bin/bash
# quantize_imatrix_edges.sh: GGUF quantize with odd importance matrices (issue 16), every input
# made here from synth256.imatrix:
#   - parts of one --shard run made with two different imatrix contents (same name): the later
#     part refuses before writing, merge refuses a record of another imatrix (exit 3 each,
#     naming the part and "imatrix differs"); the recipe records the sha256, and a recipe
#     replay with another content of its matrix is exit 3;
#   - negative importances: Q4_K_S is quantized as ggml's arithmetic gives it (no all-zero
#     super-block scales), with a warning naming the entries; all-zero importances: the NaN
#     scales ggml computes are refused (exit 3) as llama-quantize's validation refuses them;
#   - a matrix of other names: a notice naming the unweighted tensors, a warning that nothing
#     matched, and a manifest that says 0 tensors were weighted;
#   - a NaN in an entry --exclude-weights drops is accepted (llama-quantize filters first);
#   - --type IQ2_XS whose filters left 0 entries says so; --imatrix '' (exit 2), a directory
#     (exit 4, "is a directory");
#   - --override-kv int outside int32: exit 2 naming the key;
#   - --token-embedding-type iq2_xxs for stories260K's 64-wide embedding without an entry:
#     llama-quantize's "Missing importance matrix" refusal (exit 2).
# Needs ../shared (gguf/imatrix/).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/imatrix/synth256-F32.gguf
I=$(dirname "$G")
tm_scratch imxedge
M="$I/synth256-F32.gguf"

python3 - "$I/synth256.imatrix" <<'EOF' || fail "making the imatrices"
import struct, sys
b = open(sys.argv[1], 'rb').read(); o = 0
n, = struct.unpack_from('<i', b, o); o += 4; ents = []
for i in range(n):
    l, = struct.unpack_from('<i', b, o); o += 4
    name = b[o:o + l]; o += l
    nc, nv = struct.unpack_from('<ii', b, o); o += 8
    ents.append([name, nc, list(struct.unpack_from('<%df' % nv, b, o))]); o += 4 * nv
trailer = b[o:]
def write(path, ents):
    out = struct.pack('<i', len(ents))
    for name, nc, v in ents:
        out += struct.pack('<i', len(name)) + name + struct.pack('<ii', nc, len(v)) + struct.pack('<%df' % len(v), *v)
    open(path, 'wb').write(out + trailer)
write('a.imatrix', ents)
write('b.imatrix', [[nm, nc, [x * 2 + 1 for x in v]] for nm, nc, v in ents])
write('neg.imatrix', [[nm, nc, [-x for x in v]] for nm, nc, v in ents])
write('zero.imatrix', [[nm, nc, [0.0] * len(v)] for nm, nc, v in ents])
write('hf.imatrix', [[b'model.' + nm, nc, v] for nm, nc, v in ents])
nan = [list(e) for e in ents]; nan[1] = [nan[1][0], nan[1][1], list(nan[1][2])]; nan[1][2][5] = float('nan')
write('nan.imatrix', nan)
print(nan[1][0].decode(), file=open('nan_name', 'w'))
EOF

# --- shard parts with two imatrix contents under one name: the second part refuses before it
# writes (exit 3); a part record edited to another imatrix is refused by merge (exit 3)
cp a.imatrix im.imatrix
"$T" quantize "$M" -o s.gguf --type Q4_K_M --imatrix im.imatrix --shard 0/2 -q || fail "part 0: exit $?"
cp b.imatrix im.imatrix
"$T" quantize "$M" -o s.gguf --type Q4_K_M --imatrix im.imatrix --shard 1/2 -q 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "part 1 with another imatrix content: exit $rc, want 3: $(cat err.txt)"
grep -q "s.gguf.part-0-of-2: imatrix differs" err.txt || fail "part message: $(cat err.txt)"
[ -e s.gguf.part-1-of-2 ] && fail "the refused part left s.gguf.part-1-of-2"
cp a.imatrix im.imatrix
"$T" quantize "$M" -o s.gguf --type Q4_K_M --imatrix im.imatrix --shard 1/2 -q || fail "part 1: exit $?"
python3 - s.gguf.part-1-of-2/tensormorph-manifest.json <<'EOF' || fail "editing part 1"
import json, sys
m = json.load(open(sys.argv[1]))
m["recipe"]["importance_matrix"]["sha256"] = "0" * 64
json.dump(m, open(sys.argv[1], "w"))
EOF
"$T" merge s.gguf -q >out.txt 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "merge of parts of two imatrices: exit $rc, want 3: $(cat err.txt)"
grep -q "part-1-of-2: imatrix differs" err.txt || fail "merge message: $(cat err.txt)"
[ -e s.gguf ] && fail "merge wrote s.gguf"
rm -rf s.gguf.*
"$T" quantize "$M" -o one.gguf --type Q4_K_M --imatrix a.imatrix -q || fail "one run: exit $?"
python3 - one.gguf.manifest.json "$(sha256sum a.imatrix | cut -c1-64)" <<'EOF' || fail "recipe sha256"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["recipe"]["importance_matrix"]["sha256"] == sys.argv[2], m["recipe"]["importance_matrix"]
EOF

# --- a recipe replays only with the matrix content it records
python3 -c "import json; json.dump(json.load(open('one.gguf.manifest.json'))['recipe'], open('r.json', 'w'))"
"$T" quantize "$M" -o r1.gguf --recipe r.json -q || fail "recipe replay: exit $?"
cmp -s r1.gguf one.gguf || fail "recipe replay: other bytes"
cp b.imatrix a.imatrix
"$T" quantize "$M" -o r2.gguf --recipe r.json -q 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "recipe replay with another imatrix content: exit $rc, want 3"
grep -q "imatrix differs from the recipe's" err.txt || fail "recipe message: $(cat err.txt)"
cp im.imatrix a.imatrix

# --- negative importances: K-quant super-block scales as ggml computes them (not all zero)
"$T" quantize "$M" -o neg.gguf --type Q4_K_S --imatrix neg.imatrix >out.txt 2>err.txt || fail "negative: exit $?: $(cat err.txt)"
grep -q "warning: importance matrix neg.imatrix: 14 entries hold negative values" err.txt || fail "negative warning: $(cat err.txt)"
python3 - neg.gguf.manifest.json <<'EOF' || fail "negative imatrix: 0 dB tensors"
import json, sys
m = json.load(open(sys.argv[1]))
bad = [t["name"] for t in m["tensors"] if t["type"] == "q4_K" and t["imatrix"] and t["error"]["sqnr_db"] < 1]
assert not bad, bad
assert any(t.get("imatrix_values") == "negative" for t in m["tensors"])
assert "with negative" in m["calibration"]["data"], m["calibration"]["data"]
EOF
"$T" quantize "$M" -o zero.gguf --type Q4_K_S --imatrix zero.imatrix >out.txt 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "all-zero imatrix Q4_K_S: exit $rc, want 3: $(cat err.txt)"
grep -q "is NaN" err.txt && grep -q "quantized data validation failed" err.txt || fail "all-zero message: $(cat err.txt)"
grep -q "entries are all zero" err.txt || fail "all-zero warning: $(cat err.txt)"

# --- a matrix of other names
"$T" quantize "$M" -o hf.gguf --type Q4_K_M --imatrix hf.imatrix >out.txt 2>err.txt || fail "hf names: exit $?"
grep -q "matched no tensor" err.txt || fail "no-match warning: $(cat err.txt)"
grep -q "had no entry and were quantized without" err.txt || fail "no-entry notice: $(cat err.txt)"
grep -q '"data": "importance matrix hf.imatrix.*of 0 tensors weighted' hf.gguf.manifest.json || fail "manifest: $(grep '"data"' hf.gguf.manifest.json)"
"$T" quantize "$M" -o ex.gguf --type Q4_K_M --imatrix a.imatrix --exclude-weights attn_q -v >out.txt 2>err.txt || fail "exclude: exit $?"
grep -q "dropped by --include-weights/--exclude-weights.*blk.0.attn_q.weight" err.txt || fail "excluded notice: $(cat err.txt)"

# --- NaN in an entry the filters drop: accepted; kept: refused
"$T" quantize "$M" -o nan.gguf --type Q4_K_M --imatrix nan.imatrix --exclude-weights "$(cat nan_name)" -q || fail "NaN in an excluded entry: exit $?"
"$T" quantize "$M" -o nan2.gguf --type Q4_K_M --imatrix nan.imatrix -q 2>err.txt
rc=$?
[ "$rc" = 3 ] || fail "NaN kept: exit $rc, want 3"
grep -q "nan.imatrix: entry '$(cat nan_name)' at byte [0-9]*: value 5 is NaN" err.txt || fail "NaN message: $(cat err.txt)"

# --- messages
"$T" quantize "$M" -o x.gguf --type IQ2_XS --imatrix a.imatrix --include-weights nothing.matches -q 2>err.txt
rc=$?
[ "$rc" = 2 ] || fail "IQ2_XS, filters left 0: exit $rc, want 2"
grep -q "left 0 of the 14 entries of a.imatrix" err.txt || fail "filters-left-0 message: $(cat err.txt)"
"$T" quantize "$M" -o x.gguf --type Q4_K_M --imatrix '' -q 2>err.txt
rc=$?
[ "$rc" = 2 ] || fail "--imatrix '': exit $rc, want 2: $(cat err.txt)"
mkdir d.imatrix
"$T" quantize "$M" -o x.gguf --type Q4_K_M --imatrix d.imatrix -q 2>err.txt
rc=$?
[ "$rc" = 4 ] || fail "--imatrix DIR: exit $rc, want 4"
grep -q "d.imatrix: is a directory" err.txt || fail "directory message: $(cat err.txt)"
"$T" quantize "$M" -o x.gguf --type Q8_0 --override-kv my.int=int:5000000000 -q 2>err.txt
rc=$?
[ "$rc" = 2 ] || fail "--override-kv int:5000000000: exit $rc, want 2"
grep -q "key 'my.int'.*outside int32" err.txt || fail "override message: $(cat err.txt)"
"$T" quantize "$M" -o x.gguf --type Q8_0 --override-kv my.int=int:-2147483648 -q || fail "INT32_MIN override: exit $?"
# --- an override to a very low-bit type the row cannot hold, without an entry: refused as
# llama-quantize refuses it (not "kept in F16; ... quantized without weights")
if [ -f "$I/../stories260K-F32.gguf" ]; then
    "$T" quantize "$I/../stories260K-F32.gguf" -o st.gguf --type Q4_K_M --imatrix "$I/stories260K.imatrix" \
        --token-embedding-type iq2_xxs -q 2>err.txt
    rc=$?
    [ "$rc" = 2 ] || fail "--token-embedding-type iq2_xxs without an entry: exit $rc, want 2"
    grep -q "Missing importance matrix for tensor token_embd.weight" err.txt || fail "token_embd message: $(cat err.txt)"
fi
echo PASS
