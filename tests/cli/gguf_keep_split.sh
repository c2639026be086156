#!/bin/bash
# gguf_keep_split.sh: `quantize SPLIT-00001-of-0000N.gguf -o OUT.gguf --keep-split` (as
# llama-quantize --keep-split): a split GGUF input (gguf-split files, here made by our own
# --max-shard-size from a real model) is read as one model, and the output is the same number of
# split files OUT-0000k-of-0000N.gguf, each holding the tensors of its input file in order, with
# llama.cpp's split keys; every tensor's bytes (type, shape, data) equal those of a one-file run
# from the same input, the first file's other keys equal the one file's; llama.cpp
# (node-llama-cpp) loads the set with the one file's probabilities. Needs ../shared.
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-F32.gguf
tm_scratch keepsplit

# the split input: F16, three files
"$T" quantize "$G" -o in.gguf --type F16 --max-shard-size 200KB -q || fail "making the split input"
[ "$(ls in-*-of-*.gguf | wc -l)" = 3 ] || fail "the split input is not 3 files: $(ls)"
"$T" inspect in-00001-of-00003.gguf | grep -q "^files: *3 " || fail "the split input is not read as 3 files: $("$T" inspect in-00001-of-00003.gguf | head -4)"
"$T" inspect in-00002-of-00003.gguf > /dev/null 2> msg && fail "opening the second split file was accepted"
grep -q "00001-of-00003" msg || fail "opening the second split file: no pointer to the first: $(cat msg)"

"$T" quantize in-00001-of-00003.gguf -o one.gguf --type Q8_0 -q || fail "one-file run from the split input"
"$T" quantize in-00001-of-00003.gguf -o k.gguf --type Q8_0 --keep-split -q || fail "--keep-split run"
[ -e k.gguf ] && fail "a --keep-split run wrote k.gguf itself"
[ "$(ls k-*-of-*.gguf | tr '\n' ' ')" = "k-00001-of-00003.gguf k-00002-of-00003.gguf k-00003-of-00003.gguf " ] \
    || fail "--keep-split files: $(ls)"
"$T" quantize in-00001-of-00003.gguf -o x.gguf --type Q8_0 --keep-split --max-shard-size 1MB -q 2> /dev/null
[ $? = 2 ] || fail "--keep-split with --max-shard-size: not a usage error"
PYTHONPATH="${TM_SRC:?}/tests/cli/lib" python3 - one.gguf in-0000{1,2,3}-of-00003.gguf k-0000{1,2,3}-of-00003.gguf <<'EOF' || fail "--keep-split files' tensors, bytes or keys"
import sys
from gguf_file import read
one_kv, one_t = read(sys.argv[1])
ins = [read(p) for p in sys.argv[2:5]]
outs = [read(p) for p in sys.argv[5:8]]
one = {t[0]: t for t in one_t}
n = len(outs)
for i, ((ikv, its), (kv, ts)) in enumerate(zip(ins, outs)):
    assert [t[0] for t in ts] == [t[0] for t in its], f"file {i}: other tensors than input file {i}"
    assert kv["split.no"] == (2, i) and kv["split.count"] == (2, n), (kv.get("split.no"), kv.get("split.count"))
    assert kv["split.tensors.count"] == (5, len(one_t)), kv.get("split.tensors.count")
    other = set(kv) - {"split.no", "split.count", "split.tensors.count"}
    assert other == (set(one_kv) if i == 0 else set()), (i, sorted(other ^ set(one_kv))[:5])
    for t in ts:
        o = one[t[0]]
        assert t[1] == o[1] and t[2] == o[2], f"{t[0]}: shape/type {t[1:3]} vs {o[1:3]}"
        assert t[4] == o[4], f"{t[0]}: other bytes than the one-file run's"
assert all(outs[0][0][k] == one_kv[k] for k in one_kv), "the first file's keys differ from the one file's"
print("ok:", n, "files;", [len(o[1]) for o in outs], "tensors per file as the input's; bytes as the one file's")
EOF
echo "ok: --keep-split keeps the input's split files, tensors and bytes as a one-file run's"

# a one-file input: OUT-00001-of-00001.gguf without split keys (llama-quantize names it so and
# sets split keys only for 2 or more files), its tensors in the input file's order
"$T" quantize "$G" -o single.gguf --type Q8_0 --keep-split -q || fail "--keep-split on a one-file input"
[ -e single.gguf ] && fail "--keep-split on a one-file input wrote single.gguf"
[ -e single-00001-of-00001.gguf ] || fail "--keep-split on a one-file input: $(ls single*)"
PYTHONPATH="${TM_SRC:?}/tests/cli/lib" python3 - "$G" single-00001-of-00001.gguf <<'EOF2' || fail "--keep-split one-file output: keys or order"
import sys
from gguf_file import read
ikv, its = read(sys.argv[1])
kv, ts = read(sys.argv[2])
assert not any(k.startswith("split.") for k in kv), [k for k in kv if k.startswith("split.")]
assert [t[0] for t in ts] == [t[0] for t in its], "not the input file's tensor order"
print("ok: one file,", len(ts), "tensors in the input's order, no split keys")
EOF2

. "${TM_SRC:?}/tests/cli/lib/llama_same_probs.sh"
llama_same_probs one.gguf k-00001-of-00003.gguf "the --keep-split files"
