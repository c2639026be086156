#!/bin/bash
# gguf_split.sh: GGUF output with --max-shard-size writes llama.cpp's gguf-split files
# (NAME-00001-of-0000N.gguf; split.no u16, split.count u16, split.tensors.count i32; every other
# key in the first file only), which llama.cpp (node-llama-cpp) loads from the first file with
# the same next-token probabilities as the one-file GGUF; sharded (--shard I/N + merge) the split
# files are byte-identical to one run's. Needs ../shared (stories260K-F32.gguf).
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-F32.gguf
tm_scratch gsplit

"$T" quantize "$G" -o one.gguf --type Q8_0 -q || fail "one-file run"
"$T" quantize "$G" -o m.gguf --type Q8_0 --max-shard-size 300KB -q || fail "split run"
[ -e m.gguf ] && fail "a split run wrote m.gguf itself"
[ "$(ls m-*-of-*.gguf | tr '\n' ' ')" = "m-00001-of-00002.gguf m-00002-of-00002.gguf " ] || fail "split files: $(ls)"
PYTHONPATH="${TM_SRC:?}/tests/cli/lib" python3 - one.gguf m-00001-of-00002.gguf m-00002-of-00002.gguf <<'EOF' || fail "split files' keys or tensors"
import sys
from gguf_file import read
def read_names(p):
    kv, ts = read(p)
    return kv, [t[0] for t in ts]
one_kv, one_names = read_names(sys.argv[1])
parts = [read_names(p) for p in sys.argv[2:]]
n = len(parts)
for i, (kv, names) in enumerate(parts):
    assert kv["split.no"] == (2, i), kv.get("split.no")           # u16
    assert kv["split.count"] == (2, n), kv.get("split.count")     # u16
    assert kv["split.tensors.count"] == (5, len(one_names))       # i32
    other = set(kv) - {"split.no", "split.count", "split.tensors.count"}
    assert other == (set(one_kv) if i == 0 else set()), (i, sorted(other ^ set(one_kv))[:5])
assert all(parts[0][0][k] == one_kv[k] for k in one_kv), "the first file's keys differ from the one file's"
assert sum((p[1] for p in parts), []) == one_names, "tensors not split in order"
assert all(len(p[1]) > 0 for p in parts)
print("keys ok:", n, "files,", len(one_names), "tensors")
EOF
echo "ok: split files with llama.cpp's split keys"

# llama.cpp loads the split set, with the one file's probabilities
. "${TM_SRC:?}/tests/cli/lib/llama_same_probs.sh"
llama_same_probs one.gguf m-00001-of-00002.gguf "the split files"

# a file with a split file's name that tensormorph did not write is never replaced
"$T" quantize "$G" -o x.gguf --type Q8_0 --max-shard-size 300KB -q || fail "x split"
rm x.gguf.manifest.json
"$T" quantize "$G" -o x.gguf --type Q8_0 --max-shard-size 300KB -q --force 2> /dev/null; rc=$?
[ $rc = 2 ] || fail "replacing foreign split files: exit $rc, not 2"
[ -e x.gguf.manifest.json ] && fail "a refused run left a manifest"
echo "ok: foreign files at the split names refused"

# sharded: the same split files
mkdir sh && cd sh || fail cd
"$T" quantize "$G" -o m.gguf --type Q4_K_M --max-shard-size 200KB -q || fail "one run"
mkdir ref && mv m-*.gguf m.gguf.manifest.json ref/
n_files=$(ls ref | grep -c -- '-of-')
[ "$n_files" -ge 2 ] || fail "fewer than 2 split files: $(ls ref)"
for i in 0 1 2 3 4; do "$T" quantize "$G" -o m.gguf --type Q4_K_M --max-shard-size 200KB --shard $i/5 -q || fail "part $i"; done
ls m-*.gguf > /dev/null 2>&1 && fail "a part wrote split files beside OUT"
"$T" merge m.gguf -q || fail "merge of the split parts"
for f in $(ls ref); do
    [ "$f" = m.gguf.manifest.json ] && continue
    cmp "ref/$f" "$f" || fail "$f differs from the one run's"
done
python3 - ref/m.gguf.manifest.json m.gguf.manifest.json <<'EOF' || fail "manifest differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(b.pop("parts")) == 5
for m in (a, b):
    for k in ("times", "host", "command_line"):
        m.pop(k, None)
assert len(a["output"]["files"]) >= 2
sys.exit(a != b)
EOF
[ "$(ls | grep -v '^ref$' | wc -l)" = $((n_files + 1)) ] || fail "left beside OUT: $(ls)"
echo "ok: $n_files split files merged from 5 parts: byte-identical"
echo PASS
