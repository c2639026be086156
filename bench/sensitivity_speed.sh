#!/usr/bin/env bash
# bench/sensitivity_speed.sh: probes per minute of `tensormorph sensitivity` (docs/sensitivity.md
# "Cost") and the share of its time spent outside the evidence runs (writing the candidate GGUF
# and its weight error, in tensormorph) vs inside them (Node.js start, node-llama-cpp/llama.cpp
# evaluating the chunks, KLD in C). Run by hand, not a test:
#   bash bench/sensitivity_speed.sh [SRC.gguf] [TEXT] [CTX] [CHUNKS] [JOBS...]
#   (default: ../shared stories260K-F32.gguf on stories260K-eval.txt, ctx 128, 4 chunks, jobs 1 2)
# Environment: BUILD (default build), TM_SHARED (default ../shared), TM_NODE_MODULES (default
# runner/node_modules), SCHEME (default "-t Q2_K"; the compressed-tensors form: e.g. "-t int4 -g
# channel --vocab-from X.gguf" with a safetensors SRC), EXTRA (more sensitivity options, e.g.
# "--units 'blk\.0$' --ladder Q2_K,Q4_K_M"), CACHE (default "on off": each --jobs value is run
# with the quantized-tensor cache and with --no-cache, interleaved; in the compressed-tensors
# form "off" is the directory-per-candidate path).
# Prints one JSON line per --jobs value and cache setting: tensors quantized/reused, evaluations,
# seconds, probes_per_minute,
# outside_share = candidate_seconds / (candidate_seconds + evaluation_seconds), and the load average.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
bin="$build/tensormorph"
[ -x "$bin" ] || { echo "bench/sensitivity_speed.sh: $bin not found; build first" >&2; exit 2; }
shared="${TM_SHARED:-$here/../shared}/models"
src="${1:-$shared/gguf/stories260K-F32.gguf}"
text="${2:-$shared/text/stories260K-eval.txt}"
ctx="${3:-128}"
chunks="${4:-4}"
shift $(( $# < 4 ? $# : 4 ))
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(1 2)
export TM_NODE_MODULES="${TM_NODE_MODULES:-$here/runner/node_modules}"
for j in "${jobs[@]}"; do
  for cache in ${CACHE:-on off}; do
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    nc=(); [ "$cache" = off ] && nc=(--no-cache)
    eval "\"\$bin\" sensitivity \"\$src\" --text \"\$text\" --ctx \"\$ctx\" --chunks \"\$chunks\" ${SCHEME:--t Q2_K} --jobs \"\$j\" ${nc[*]:-} ${EXTRA:-} --json -q" |
        python3 -c '
import json, sys
d = json.load(sys.stdin); t = d["timings"]
c, e = t["candidate_seconds"], t["evaluation_seconds"]; q = t.get("tensor_cache", {})
print(json.dumps({"src": d["source"]["path"], "units": len(d["units"]), "jobs": int(sys.argv[1]), "cache": sys.argv[3],
                  "tensors_quantized": q.get("tensors_quantized"), "tensors_reused": q.get("tensors_reused"),
                  "candidate_seconds": round(c, 2), "evaluation_seconds": round(e, 2),
                  "evaluations": t["evaluations"], "seconds": round(t["seconds"], 2),
                  "probes_per_minute": round(t["probes_per_minute"], 2),
                  "outside_share": round(c / (c + e), 4) if c + e > 0 else None, "load": sys.argv[2]}))' "$j" "$load" "$cache"
  done
done
