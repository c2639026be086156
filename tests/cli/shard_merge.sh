#!/bin/bash
# shard_merge.sh: `quantize --shard I/N` + `merge OUT` give the bytes of one run (docs/scale-out.md).
# Compressed-tensors output of the built-in demo checkpoint (no download) without and with
# --max-shard-size (N below and above the number of output shards), a real two-file checkpoint
# of ../shared when present; a missing, a damaged and a mismatched part each fail the merge
# naming it (exit 4, 3, 3; every damaged part in one message) and leave the parts as they were;
# re-running that part alone is enough (also a re-run killed mid-write, a part interrupted with
# SIGINT while writing); a part being written
# (its lock held) refuses the merge (exit 4); a part of another layout than the shared files'
# (an unmerged run of another type before) or of another recipe refuses before writing (exit 2); a refused --shard
# run leaves nothing; afterwards only OUT is left.
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_scratch shard

# same_output REF OUT: every file byte-identical, the manifests equal but for times, host,
# command_line and the merge's "parts"
same_output() {
    local a=$1 b=$2 f
    [ "$(cd "$a" && ls | sort)" = "$(cd "$b" && ls | sort)" ] || fail "$b: other files than $a: $(ls "$a") / $(ls "$b")"
    for f in $(cd "$a" && ls); do
        [ "$f" = tensormorph-manifest.json ] && continue
        cmp -s "$a/$f" "$b/$f" || fail "$b/$f differs from the one-machine run's"
    done
    python3 - "$a/tensormorph-manifest.json" "$b/tensormorph-manifest.json" <<'EOF' || fail "$b: manifest differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert "parts" in b and "parts" not in a, "merged manifest has no parts record"
assert len(b["parts"]) >= 1 and all("index" in p and "data_bytes" in p for p in b["parts"])
for m in (a, b):
    for k in ("times", "host", "command_line", "parts"):
        m.pop(k, None)
if a != b:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k): print("key differs:", k)
    sys.exit(1)
assert all(s["sha256"] and len(s["sha256"]) == 64 for s in b["sources"]), "a source without sha256"
assert all(f["sha256"] and len(f["sha256"]) == 64 for f in b["output"]["files"]), "an output file without sha256"
EOF
}

# run_parts SRC N ARGS...: quantize every part of N into out
run_parts() {
    local src=$1 n=$2 i
    shift 2
    for ((i = 0; i < n; i++)); do
        "$T" quantize "$src" -o out --shard "$i/$n" -q "$@" || fail "part $i/$n: exit $?"
    done
}

check_roundtrip() { # SRC N ARGS...: one run vs N parts + merge
    local src=$1 n=$2
    shift 2
    rm -rf ref out
    "$T" quantize "$src" -o out -q "$@" || fail "one run: exit $?"
    mv out ref
    run_parts "$src" "$n" "$@"
    [ -e out ] && fail "a part wrote into OUT itself"
    [ "$(ls -d out.part-*-of-"$n" | wc -l)" = "$n" ] || fail "not $n parts: $(ls)"
    "$T" merge out -q || fail "merge of $n parts ($*): exit $?"
    same_output ref out
    [ "$(ls | grep -v "^demo$" | sort | tr "\n" " ")" = "out ref " ] || fail "left beside OUT after the merge: $(ls)"
    echo "ok: $src, $n parts $*: byte-identical"
}

"$T" demo -o demo -q || fail "demo"
check_roundtrip demo 4
check_roundtrip demo 3 --max-shard-size 1MB
check_roundtrip demo 9 --max-shard-size 1MB --threads 1
[ "$(ls ref | grep -c 'model-0.*-of-.*safetensors')" -ge 3 ] || fail "--max-shard-size 1MB gave fewer than 3 output shards: $(ls ref)"
check_roundtrip demo 2 --type int4 --granularity group:32 --max-shard-size 700KB
check_roundtrip demo 64 # more parts than tensors: some parts hold no tensor

# --- refusals: each names the part; the parts stay; re-running the part is enough ---
rm -rf ref out
"$T" quantize demo -o out -q && mv out ref
run_parts demo 4
rm -rf out.part-2-of-4
out_msg=$("$T" merge out 2>&1); rc=$?
[ $rc = 4 ] || fail "merge with part 2 missing: exit $rc, not 4 ($out_msg)"
echo "$out_msg" | grep -q "out.part-2-of-4" || fail "the missing part is not named: $out_msg"
echo "$out_msg" | grep -q -- "--shard 2/4" || fail "the --shard to re-run is not named: $out_msg"
[ -e out ] && fail "a failed merge left OUT"
[ "$(ls -d out.part-* | wc -l)" = 3 ] || fail "a failed merge touched the parts: $(ls)"
"$T" quantize demo -o out --shard 2/4 -q || fail "re-run of part 2"

# own_segment I: "FILE OFFSET LENGTH" of a segment of part I (of 4) of at least 17 bytes, FILE
# as it lies (out.parts-of-4/NAME: the files every part writes into; else in the part)
own_segment() {
    python3 - "$1" <<'EOF'
import json, sys
i = int(sys.argv[1])
r = json.load(open(f"out.part-{i}-of-4/tensormorph-manifest.json"))["part"]
for f in r["files"]:
    for off, ln, owner, crc in f["segments"]:
        if owner == i and ln > 16:
            d = "out.parts-of-4" if f.get("shared") else f"out.part-{i}-of-4"
            print(f"{d}/{f['file']}", off, ln); raise SystemExit
EOF
}
# damage a byte that part 1 owns (a segment of its own)
set -- $(own_segment 1)
[ -n "${2:-}" ] || fail "part 1 owns no segment"
case "$1" in out.parts-of-4/*) ;; *) fail "part 1's tensor bytes are not in the shared out.parts-of-4: $1" ;; esac
flip_byte() { python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^0x5a]))" "$1" "$2"; }
flip_byte "$1" $(($2 + $3 / 2))
f1=$1
set -- $(own_segment 3) # and one of part 3: merge names both at once (one round of re-runs)
[ -n "${2:-}" ] || fail "part 3 owns no segment"
flip_byte "$1" $(($2 + $3 / 2))
out_msg=$("$T" merge out 2>&1); rc=$?
[ $rc = 3 ] || fail "merge with damaged parts 1 and 3: exit $rc, not 3 ($out_msg)"
echo "$out_msg" | grep -q "$f1" || fail "the damaged file is not named: $out_msg"
for i in 1 3; do
    echo "$out_msg" | grep -q "out.part-$i-of-4" || fail "damaged part $i is not named: $out_msg"
    echo "$out_msg" | grep -q -- "--shard $i/4" || fail "the --shard $i/4 to re-run is not named: $out_msg"
done
echo "$out_msg" | grep -q "checksum" || fail "no checksum named: $out_msg"
[ -e out ] && fail "a failed merge left OUT"
"$T" quantize demo -o out --shard 1/4 -q || fail "re-run of part 1"
"$T" quantize demo -o out --shard 3/4 -q || fail "re-run of part 3"

# a re-run of part 2 that crashed (kill -9) mid-write: its lock (a dead pid), its staging
# directory, its record of the run before, and the second half of its bytes in the shared file
# not yet rewritten (here: zeros); the merge refuses naming part 2, its re-run is enough
set -- $(own_segment 2)
[ -n "${2:-}" ] || fail "part 2 owns no segment"
dead=999999
while kill -0 $dead 2>/dev/null; do dead=$((dead - 1)); done
echo $dead > out.part-2-of-4.lock
mkdir out.part-2-of-4.tmp.$dead
python3 -c "import sys; f=open(sys.argv[1],'r+b'); o,n=int(sys.argv[2]),int(sys.argv[3]); f.seek(o+n//2); f.write(bytes(n-n//2))" "$1" "$2" "$3"
out_msg=$("$T" merge out 2>&1); rc=$?
[ $rc = 3 ] || fail "merge with part 2 killed mid-write: exit $rc, not 3 ($out_msg)"
echo "$out_msg" | grep -q "out.part-2-of-4" || fail "the killed part is not named: $out_msg"
echo "$out_msg" | grep -q -- "--shard 2/4" || fail "the --shard to re-run is not named: $out_msg"
[ -e out ] && fail "a failed merge left OUT"
"$T" quantize demo -o out --shard 2/4 -q || fail "re-run of the killed part 2"
[ -e out.part-2-of-4.tmp.$dead ] && fail "the re-run left the killed run's staging directory"

# a part being rewritten (its lock held by a live run, its record of the run before still
# there): merge refuses (exit 4) naming it and the writer's pid, and leaves every part
python3 -c '
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.write(fd, b"%d\n" % os.getpid())
open(sys.argv[1] + ".ready", "w").close()
time.sleep(30)' out.part-2-of-4.lock &
holder=$!
for ((k = 0; k < 200; k++)); do [ -e out.part-2-of-4.lock.ready ] && break; sleep 0.05; done
rm -f out.part-2-of-4.lock.ready
out_msg=$("$T" merge out 2>&1); rc=$?
kill $holder; wait $holder 2>/dev/null
[ $rc = 4 ] || fail "merge while part 2 is being written: exit $rc, not 4 ($out_msg)"
echo "$out_msg" | grep -q "out.part-2-of-4" || fail "the part being written is not named: $out_msg"
echo "$out_msg" | grep -q "being written" || fail "the refusal does not say the part is being written: $out_msg"
echo "$out_msg" | grep -q "pid $holder" || fail "the refusal does not name the writer's pid $holder: $out_msg"
[ -e out ] && fail "a merge refused for a part being written left OUT"
[ "$(ls -d out.part-?-of-4 | wc -l)" = 4 ] && [ -d out.parts-of-4 ] || fail "a refused merge touched the parts: $(ls)"
rm -f out.part-2-of-4.lock # what the killed holder left (a part run would take it over)

# a part of another layout (int4: smaller shared files) refuses at the start, the shared files untouched
sum0=$(cat out.parts-of-4/* | cksum)
out_msg=$("$T" quantize demo -o out --shard 1/4 -q --type int4 2>&1); rc=$?
[ $rc = 2 ] || fail "a part of another layout: exit $rc, not 2 ($out_msg)"
echo "$out_msg" | grep -q "another recipe, options or tool version (\`.*--shard 0/4" || fail "the refusal does not name the first part's command: $out_msg"
[ "$(cat out.parts-of-4/* | cksum)" = "$sum0" ] || fail "the refused part changed the shared files"
[ -d out.part-1-of-4 ] || fail "the refused part removed its previous record"

# a part of another recipe, the same sizes: refused at its start (tests/cli/shard_force.sh); one
# made elsewhere meanwhile (here: its recorded recipe_sha256 changed) is refused by the merge
"$T" quantize demo -o out --shard 3/4 -q --observer mse 2>/dev/null; [ $? = 2 ] || fail "part 3 with --observer mse not refused at its start"
python3 - out.part-3-of-4/tensormorph-manifest.json <<'EOF2' || fail "editing part 3's record"
import json, sys
m = json.load(open(sys.argv[1])); m["part"]["recipe_sha256"] = "0" * 64
json.dump(m, open(sys.argv[1], "w"), indent=2)
EOF2
out_msg=$("$T" merge out --json 2>/dev/null); rc=$?
[ $rc = 3 ] || fail "merge with part 3 of another recipe: exit $rc, not 3"
echo "$out_msg" | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['error']['code']==3 and 'out.part-3-of-4' in d['error']['message'] and 'recipe' in d['error']['message'], d" \
    || fail "--json error document does not name part 3 and the recipe: $out_msg"
"$T" quantize demo -o out --shard 3/4 -q || fail "re-run of part 3"
doc=$("$T" merge out --json) || fail "merge after the re-runs: exit $?"
echo "$doc" | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['schema']=='tensormorph.merge/1' and d['n_parts']==4 and d['manifest']['parts'][3]['index']==3, d" \
    || fail "merge --json document: $doc"
same_output ref out
[ "$(ls | sort | tr '\n' ' ')" = "demo out ref " ] || fail "left beside OUT after the merge: $(ls)"
echo "ok: missing (exit 4), damaged (exit 3), killed mid-write (exit 3), other recipe (exit 3) parts refused; re-run parts merged"

# a part run killed with -9 leaves its lock (a dead pid) and staging directory: the re-run takes
# them over, and merge removes a stale staging path of a part that was re-run elsewhere
rm -rf ref out out.part-*
"$T" quantize demo -o out -q && mv out ref
run_parts demo 3
dead=999999
while kill -0 $dead 2>/dev/null; do dead=$((dead - 1)); done
rm -rf out.part-1-of-3
echo $dead > out.part-1-of-3.lock
mkdir out.part-1-of-3.tmp.$dead && echo partial > out.part-1-of-3.tmp.$dead/model.safetensors
mkdir out.part-2-of-3.tmp.$((dead - 7))   # another node's killed run of part 2 (no lock here)
"$T" merge out -q 2>/dev/null; [ $? = 4 ] || fail "merge with part 1 killed: not exit 4"
"$T" quantize demo -o out --shard 1/3 -q || fail "re-run of the killed part 1"
[ -e out.part-1-of-3.tmp.$dead ] && fail "the re-run left the killed run's staging directory"
[ -e out.part-1-of-3.lock ] && fail "the re-run left the lock file"
"$T" merge out -q || fail "merge after the re-run of the killed part"
same_output ref out
[ "$(ls | grep -v -E '^(demo|saved)$' | sort | tr '\n' ' ')" = "out ref " ] || fail "left beside OUT after the merge: $(ls)"
echo "ok: a killed part (lock of a dead pid, staging left) re-run and merged; stale staging removed"

# Ctrl-C (SIGINT) of a part while it writes its bytes into the shared file (its progress shows
# bytes done, not all): exit 130, no record, lock or staging path of it left; merge refuses
# naming it (exit 4); its re-run is enough. A generated 128 MB F32 checkpoint (4 tensors of
# 2048x4096), one thread, so that the part is still writing when the signal comes.
rm -rf ref out out.part-* out.parts-of-*
python3 - big <<'EOF'
import json, os, struct, sys
d = sys.argv[1]; os.makedirs(d)
R, C, n = 2048, 4096, 4
tab = bytes((b & 0x80) | 0x3C | (b & 0x03) for b in range(256))  # finite values in [2^-7, 2^0]
hdr = {f"model.layers.{i}.mlp.down_proj.weight": {"dtype": "F32", "shape": [R, C], "data_offsets": [i * R * C * 4, (i + 1) * R * C * 4]} for i in range(n)}
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(n):
        ba = bytearray(os.urandom(R * C * 4)); ba[3::4] = ba[3::4].translate(tab); f.write(ba)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, open(os.path.join(d, "config.json"), "w"))
EOF
[ -f big/model.safetensors ] || fail "generating the 128 MB checkpoint"
"$T" quantize big -o out -q --threads 1 && mv out ref || fail "one run of big"
for i in 0 1 3; do "$T" quantize big -o out --shard $i/4 -q --threads 1 || fail "big part $i/4"; done
rc=$(TM_FAKE_TTY=1 python3 - "$T" <<'EOF'
import re, signal, subprocess, sys
p = subprocess.Popen([sys.argv[1], "quantize", "big", "-o", "out", "--shard", "2/4", "--threads", "1"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
buf, sent = b"", False
while not sent:
    b = p.stderr.read1(4096)
    if not b: break
    buf += b
    m = re.search(rb"quantize +[0-9.]+% \(([0-9.]+) / ", buf)
    if m and float(m.group(1)) > 0:
        p.send_signal(signal.SIGINT); sent = True
p.stderr.read()
print(p.wait() if sent else "no-progress")
EOF
)
[ "$rc" = 130 ] || fail "part 2 interrupted while writing: exit $rc, not 130"
[ "$(ls | grep '^out\.part-2-of-4' | tr '\n' ' ')" = "" ] || fail "the interrupted part left: $(ls)"
[ -d out.parts-of-4 ] || fail "the shared files of the other parts are gone"
out_msg=$("$T" merge out 2>&1); rc=$?
[ $rc = 4 ] || fail "merge with part 2 interrupted: exit $rc, not 4 ($out_msg)"
echo "$out_msg" | grep -q -- "--shard 2/4" || fail "the --shard to re-run is not named: $out_msg"
[ -e out ] && fail "a failed merge left OUT"
"$T" quantize big -o out --shard 2/4 -q --threads 1 || fail "re-run of the interrupted part 2"
"$T" merge out -q || fail "merge after the re-run of the interrupted part"
same_output ref out
rm -rf big ref # OUT stays: the usage checks below refuse to overwrite it
echo "ok: a part interrupted (SIGINT) while writing: exit 130, nothing of it left, merge refused (exit 4), re-run merged"

# usage: bad --shard, an existing OUT without --force, other output forms
"$T" quantize demo -o x --shard 4/4 -q 2>/dev/null; [ $? = 2 ] || fail "--shard 4/4 not refused with exit 2"
"$T" quantize demo -o x --shard 1 -q 2>/dev/null; [ $? = 2 ] || fail "--shard 1 not refused with exit 2"
"$T" quantize demo -o out --shard 0/2 -q 2>/dev/null; [ $? = 2 ] || fail "a part for an existing OUT without --force not refused"
[ -e out.part-0-of-2 ] && fail "a refused part left its directory"
"$T" quantize demo -o x.onnx --shard 0/2 -q 2>/dev/null; [ $? = 2 ] || fail "--shard for ONNX output not refused with exit 2"
"$T" merge nothing -q 2>/dev/null; [ $? = 4 ] || fail "merge without parts: not exit 4"
echo "ok: usage refusals"

# a real two-file checkpoint: each part hashes its share of the sources
S="${TM_SHARED:-}/models/safetensors/stories260K-f32-2shards"
if [ -n "${TM_SHARED:-}" ] && [ -d "$S" ]; then
    check_roundtrip "$S" 4 --max-shard-size 200KB
    check_roundtrip "$S" 3 --type int4 --granularity group:16
    # a --shard run refused in its plan (GGUF converted from another checkpoint) leaves nothing
    out_msg=$("$T" quantize "$TM_SHARED/models/safetensors/stories260K-f32" -o lo.gguf --vocab-from \
        "$TM_SHARED/models/gguf/stories260K-F32.gguf" --type Q4_K_M --shard 0/2 -q 2>&1); rc=$?
    [ $rc = 3 ] || fail "--shard of a converted GGUF: exit $rc, not 3 ($out_msg)"
    [ -z "$(ls -d lo.gguf* 2>/dev/null)" ] || fail "the refused --shard run left: $(ls -d lo.gguf*)"
    # GGUF: one file OUT.gguf + OUT.gguf.manifest.json
    G="$TM_SHARED/models/gguf/stories260K-F32.gguf"
    for n in 3 5; do
        rm -rf ref.gguf* out.gguf*
        "$T" quantize "$G" -o out.gguf --type Q4_K_M -q || fail "GGUF one run"
        mv out.gguf ref.gguf && mv out.gguf.manifest.json ref.gguf.manifest.json
        if [ $n = 3 ]; then # an earlier run of another layout (Q8_0: a larger file), never merged,
            # left its shared file and records: a part of this run refuses at the start (exit 2),
            # naming the Q8_0 run and how to clear it, the shared file untouched; then cleared
            for ((i = 0; i < n; i++)); do "$T" quantize "$G" -o out.gguf --type Q8_0 --shard $i/$n -q || fail "GGUF Q8_0 part $i/$n"; done
            [ -f out.gguf.parts-of-3/out.gguf ] || fail "no shared file out.gguf.parts-of-3/out.gguf: $(ls)"
            sum0=$(cksum < out.gguf.parts-of-3/out.gguf)
            out_msg=$("$T" quantize "$G" -o out.gguf --type Q4_K_M --shard 1/3 -q 2>&1); rc=$?
            [ $rc = 2 ] || fail "a Q4_K_M part over the Q8_0 layout: exit $rc, not 2 ($out_msg)"
            echo "$out_msg" | grep -q -- "--type Q8_0" || fail "the refusal does not name the layout's recipe: $out_msg"
            echo "$out_msg" | grep -q "remove" || fail "the refusal does not say how to clear the layout: $out_msg"
            [ "$(cksum < out.gguf.parts-of-3/out.gguf)" = "$sum0" ] || fail "the refused part changed the shared file"
            "$T" merge out.gguf -q || fail "the Q8_0 parts (untouched by the refused part) do not merge at once"
            rm -f out.gguf out.gguf.manifest.json
            for ((i = 0; i < n; i++)); do "$T" quantize "$G" -o out.gguf --type Q8_0 --shard $i/$n -q || fail "GGUF Q8_0 part $i/$n"; done
            rm -rf out.gguf.parts-of-3 out.gguf.part-?-of-3 # cleared as the message says: this run lays it out again
        fi
        for ((i = 0; i < n; i++)); do "$T" quantize "$G" -o out.gguf --type Q4_K_M --shard $i/$n -q || fail "GGUF part $i/$n"; done
        [ -e out.gguf ] && fail "a GGUF part wrote OUT"
        "$T" merge out.gguf -q || fail "GGUF merge of $n parts"
        cmp ref.gguf out.gguf || fail "GGUF merged from $n parts differs from one run"
        python3 - ref.gguf.manifest.json out.gguf.manifest.json <<'EOF' || fail "GGUF manifest differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(b.pop("parts")) > 0
for m in (a, b):
    for k in ("times", "host", "command_line"):
        m.pop(k, None)
sys.exit(a != b)
EOF
        [ "$(ls | grep '^out\.gguf' | tr '\n' ' ')" = "out.gguf out.gguf.manifest.json " ] || fail "left beside the GGUF OUT: $(ls)"
        echo "ok: GGUF Q4_K_M, $n parts: byte-identical$([ $n = 3 ] && echo ' (a part over an unmerged Q8_0 layout refused, untouched)')"
    done
elif [ "${TM_REQUIRE_SHARED:-0}" = 1 ]; then
    fail "TM_REQUIRE_SHARED=1 but $S is missing"
else
    echo "SKIP (part): ../shared not found (set TM_SHARED): stories260K-f32-2shards not run"
fi
echo "PASS"
