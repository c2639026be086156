#!/usr/bin/env bash
# bench/shard_bench.sh: the cost of a sharded quantize run (docs/scale-out.md) on this machine:
# the CPU time (user + system, and user alone) of `quantize --shard I/4` x 4 + `merge` against one `quantize`,
# and merge's own wall time and peak RSS, for two model sizes (merge's memory must not grow
# with the model). Figures: docs/PERFORMANCE.md "Sharded quantize".
#   bash bench/shard_bench.sh [MB ...]      (default: 128 512; F32 source size in MB)
# Environment: BUILD (default build), TM_BENCH_DIR (scratch parent, default /tmp/tm-bench),
# REPS (default 3: the median of each figure is printed). Output: one line per size and rep,
# then the medians; nothing is written into the repository.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
T="$build/tensormorph"
[ -x "$T" ] || { echo "shard_bench.sh: $T not found; build first" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "shard_bench.sh: GNU time (/usr/bin/time) not found" >&2; exit 2; }
parent="${TM_BENCH_DIR:-/tmp/tm-bench}"
mkdir -p "$parent"
S="$(mktemp -d "$parent/shard.XXXXXX")"
trap 'rm -rf -- "$S"' EXIT
trap 'exit 130' INT TERM
REPS="${REPS:-3}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(128 512)

# make_model DIR MB: a safetensors checkpoint of 4096x4096 F32 weights (64 MB each) with finite
# random values (the exponent byte kept in [2^-7, 2^0]), a norm and config.json
make_model() {
    python3 - "$1" "$2" << 'EOF'
import json, os, struct, sys
d, mb = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
n = max(1, mb // 64)
R = C = 4096
tab = bytes((b & 0x80) | 0x3C | (b & 0x03) for b in range(256))
hdr, off = {}, 0
names = [f"model.layers.{i}.mlp.down_proj.weight" for i in range(n)]
for nm in names:
    hdr[nm] = {"dtype": "F32", "shape": [R, C], "data_offsets": [off, off + R * C * 4]}
    off += R * C * 4
hdr["model.norm.weight"] = {"dtype": "F32", "shape": [C], "data_offsets": [off, off + C * 4]}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in names:
        ba = bytearray(os.urandom(R * C * 4))
        ba[3::4] = ba[3::4].translate(tab)
        f.write(ba)
    f.write(struct.pack("<f", 1.0) * C)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, open(os.path.join(d, "config.json"), "w"))
EOF
}

# cpu CMD...: run CMD, print "wall user+sys maxrss_kb user"
cpu() {
    /usr/bin/time -f "%e %U %S %M" -o "$S/time" "$@" > /dev/null
    awk '{printf "%.3f %.3f %d %.3f\n", $1, $2 + $3, $4, $2}' "$S/time"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; threads: tensormorph default"
for mb in "${sizes[@]}"; do
    M="$S/m$mb"
    make_model "$M" "$mb"
    "$T" quantize "$M" -o "$S/warm" -q && rm -rf "$S/warm" # page cache warm for every run
    : > "$S/rows"
    for ((r = 0; r < REPS; r++)); do
        read -r w1 c1 m1 u1 < <(cpu "$T" quantize "$M" -o "$S/one" -q)
        cp_sum=0 up_sum=0
        for i in 0 1 2 3; do
            read -r wp cp mp up < <(cpu "$T" quantize "$M" -o "$S/out" --shard $i/4 -q)
            cp_sum=$(awk -v a="$cp_sum" -v b="$cp" 'BEGIN {print a + b}')
            up_sum=$(awk -v a="$up_sum" -v b="$up" 'BEGIN {print a + b}')
        done
        read -r wm cm mm um < <(cpu "$T" merge "$S/out" -q)
        for f in $(ls "$S/one"); do
            [ "$f" = tensormorph-manifest.json ] || cmp -s "$S/one/$f" "$S/out/$f" || { echo "DIFFERENT: $f" >&2; exit 1; }
        done
        rm -rf "$S/one" "$S/out"
        ov=$(awk -v p="$cp_sum" -v m="$cm" -v o="$c1" 'BEGIN {printf "%.1f", 100 * ((p + m) / o - 1)}')
        ou=$(awk -v p="$up_sum" -v m="$um" -v o="$u1" 'BEGIN {printf "%.1f", 100 * ((p + m) / o - 1)}')
        echo "${mb}MB rep $r: one run cpu ${c1}s (user ${u1}s, wall ${w1}s); 4 parts cpu ${cp_sum}s (user ${up_sum}s) + merge cpu ${cm}s (user ${um}s) = overhead ${ov}% (user alone ${ou}%); merge wall ${wm}s, peak RSS $((mm / 1024)) MiB"
        echo "$c1 $cp_sum $cm $wm $mm $ov $ou" >> "$S/rows"
    done
    echo "${mb}MB median: one run cpu $(awk '{print $1}' "$S/rows" | median)s; parts cpu $(awk '{print $2}' "$S/rows" | median)s; merge cpu $(awk '{print $3}' "$S/rows" | median)s; overhead $(awk '{print $6}' "$S/rows" | median)% (user time alone $(awk '{print $7}' "$S/rows" | median)%); merge wall $(awk '{print $4}' "$S/rows" | median)s; merge peak RSS $(($(awk '{print $5}' "$S/rows" | median) / 1024)) MiB"
    rm -rf "$M"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
