#!/bin/bash
# qdiff_undefined_float.sh: (1) an importance matrix whose weights are all 0 leaves the weighted
# figures undefined: null in --json (never a string), "-" in the text with the reason; every
# figure of the document is a number, null, or (an exact tensor's SQNR) "inf"/"-inf". (2) a
# float target (quantize --type F16/BF16/F32 output) compares as a plain weight diff instead of
# being refused. Needs ../shared (gguf/imatrix/synth256-F32.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/imatrix/synth256-F32.gguf
tm_scratch qdundef

# an imatrix (legacy format) of the model's own names and sizes, every weight 0
python3 - "$G" zeros.imatrix <<'EOF' || fail "writing the zero imatrix"
import struct, sys
sys.path.insert(0, __import__("os").environ["TM_SRC"] + "/tests/cli/lib")
from gguf_file import read
kv, ts = read(sys.argv[1])
out = b""
ents = [t for t in ts if t[0].endswith(".weight") and len(t[1]) == 2 and t[0] != "token_embd.weight"]
out += struct.pack("<i", len(ents))
for t in ents:
    name, ne0 = t[0].encode(), t[1][0]
    out += struct.pack("<i", len(name)) + name + struct.pack("<ii", 1, ne0) + b"\0" * (4 * ne0)
out += struct.pack("<ii", 1, 4) + b"zero"
open(sys.argv[2], "wb").write(out)
EOF
"$T" quantize "$G" -o q.gguf --type Q4_0 -q || fail "Q4_0"
"$T" qdiff "$G" q.gguf --imatrix zeros.imatrix --json > d.json || fail "qdiff --json: exit $?"
python3 - d.json <<'EOF' || fail "zero-weight figures in --json"
import json, sys
d = json.load(open(sys.argv[1]))
ts = [t for t in d["tensors"] if "imatrix_sqnr_db" in t]
assert d["n_imatrix"] == len(ts) > 0, d["n_imatrix"]
for t in ts:
    assert t["imatrix_sqnr_db"] is None and t["imatrix_rmse"] is None, t
def walk(v, where):  # numbers, null, or an exact SQNR's "inf"/"-inf"; never "nan"
    if isinstance(v, dict):
        for k, x in v.items(): walk(x, where + "." + k)
    elif isinstance(v, list):
        for i, x in enumerate(v): walk(x, "%s[%d]" % (where, i))
    elif isinstance(v, str) and v in ("nan", "inf", "-inf"):
        assert v != "nan" and where.endswith("sqnr_db") and not where.endswith("imatrix_sqnr_db"), (where, v)
walk(d, "")
print("null:", len(ts), "tensors")
EOF
"$T" qdiff "$G" q.gguf --imatrix zeros.imatrix --top all > out.txt || fail "qdiff text"
grep -q "every importance weight of the entry is 0" out.txt || fail "text gives no reason: $(tail -3 out.txt)"
grep -qi "nan\|inf" <(sed -n '/^importance-weighted/,$p' out.txt) && fail "text prints nan/inf: $(cat out.txt)"
echo "ok: all-zero weights: null, and the reason in the text"

# a float target: a plain weight diff (the error of rounding to the type)
for ty in F16 BF16; do
    "$T" quantize "$G" -o x-$ty.gguf --type $ty -q || fail "$ty"
    "$T" qdiff "$G" x-$ty.gguf > out.txt 2> err.txt || fail "qdiff of an $ty target: exit $?: $(cat err.txt)"
    grep -q "float tensors compared (neither file is quantized: a plain weight diff" out.txt || fail "$ty text: $(head -3 out.txt)"
    "$T" qdiff "$G" x-$ty.gguf --json > d.json || fail "$ty --json"
    python3 - d.json $ty <<'EOF' || fail "$ty figures"
import json, sys
d, ty = json.load(open(sys.argv[1])), sys.argv[2]
assert d["plain"] is True
ts = [t for t in d["tensors"] if t["scheme"] == ty]
assert len(ts) >= 10, len(ts)
lo = {"F16": 60, "BF16": 40}[ty]
for t in ts:
    assert isinstance(t["sqnr_db"], float) and lo < t["sqnr_db"] < 100, (t["name"], t["sqnr_db"])
    assert t["rmse_lsb"] is None and t["worst_group"] == -1 and t["clipped_fraction"] == 0
    assert t["cosine"] > 0.9999 and not t["flagged"]
print(ty, "median", d["median_sqnr_db"])
EOF
done
# a quantized file is still compared by its quantized tensors only, and the swapped order refused
"$T" qdiff "$G" q.gguf --json | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['plain'] is False and all(t['scheme'] != 'F32' for t in d['tensors'])" \
    || fail "quantized target"
"$T" qdiff q.gguf "$G" > /dev/null 2> err.txt; rc=$?
[ $rc = 2 ] && grep -q "full precision first" err.txt || fail "swapped: exit $rc: $(cat err.txt)"
echo "ok: a float target is a plain weight diff"
echo PASS
