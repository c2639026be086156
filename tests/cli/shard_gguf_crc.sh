#!/bin/bash
# shard_gguf_crc.sh: a GGUF part (quantize --shard I/N, docs/scale-out.md) records for each segment
# it owns the CRC-32C of the bytes that lie there (computed from what it wrote, not read back):
# every recorded CRC equals the CRC of the file's bytes, for one output file and for llama.cpp
# split files (--max-shard-size); a flipped byte in a segment of a part fails the merge (exit 3)
# naming that part, and its re-run is enough.
set -u
. "${TM_SRC:?TM_SRC: the source folder}/tests/cli/lib/scratch.sh"
tm_need_shared models/gguf/stories260K-F32.gguf
tm_scratch shard_gguf_crc

# check_crcs OUT N: every segment a part of N owns has the CRC-32C of its bytes; prints
# "FILE OFFSET LENGTH PART" of one owned segment of part 1 (for the damage below)
check_crcs() {
    python3 - "$1" "$2" <<'EOF'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
T = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b: c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
checked, pick = 0, None
for i in range(n):
    d = f"{out}.part-{i}-of-{n}"
    r = json.load(open(f"{d}/tensormorph-manifest.json"))["part"]
    assert r and r["index"] == i, f"part {i}: no record in {d}"
    for f in r["files"]:
        p = f"{out}.parts-of-{n}/{f['file']}" if f.get("shared") else f"{d}/{f['file']}"
        data = open(p, "rb").read()
        for off, ln, owner, crc in f["segments"]:
            if owner != i: assert crc == -1, f"{p}: part {i} records a CRC for part {owner}'s bytes"; continue
            got = crc32c(data[off:off + ln])
            assert got == crc, f"{p}: part {i}, bytes {off}+{ln}: recorded CRC {crc:#x}, the bytes' {got:#x}"
            checked += 1
            if i == 1 and ln > 16 and f.get("shared") and pick is None: pick = f"{p} {off} {ln}"
assert checked >= n, f"only {checked} segments checked"
assert pick, "part 1 owns no segment of the shared files"
print(pick)
EOF
}

G="${TM_SHARED}/models/gguf/stories260K-F32.gguf"
for args in "--type Q4_K_M" "--type Q8_0 --max-shard-size 200KB"; do
    rm -rf out.gguf* out-*.gguf*
    n=3
    for ((i = 0; i < n; i++)); do "$T" quantize "$G" -o out.gguf $args --shard $i/$n -q || fail "part $i/$n ($args): exit $?"; done
    seg=$(check_crcs out.gguf $n) || fail "recorded CRCs ($args): $seg"
    set -- $seg
    python3 -c "import sys; f=open(sys.argv[1],'r+b'); o=int(sys.argv[2]); f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^0x5a]))" "$1" $(($2 + $3 / 2))
    out_msg=$("$T" merge out.gguf 2>&1); rc=$?
    [ $rc = 3 ] || fail "merge with a flipped byte in part 1 ($args): exit $rc, not 3 ($out_msg)"
    echo "$out_msg" | grep -q -- "--shard 1/$n" || fail "the damaged part 1 is not named ($args): $out_msg"
    "$T" quantize "$G" -o out.gguf $args --shard 1/$n -q || fail "re-run of part 1 ($args)"
    "$T" merge out.gguf -q || fail "merge after the re-run ($args): exit $?"
    echo "ok: GGUF parts $args: every recorded CRC-32C is that of the bytes; a flipped byte refused (exit 3)"
done
echo "PASS"
