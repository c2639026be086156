#!/usr/bin/env bash
# bench/llm_evidence_speed.sh: the speed target of LLM evidence (docs/evidence.md "LLM evidence"):
# `tensormorph evidence BASE CAND --text FILE` must evaluate tokens at >= 90% of the rate of the
# runner (runner/llm_evidence.js, node-llama-cpp) evaluating the same chunks of the same models
# without the KL work (no probabilities requested, nothing written, nothing scored), and use no
# more memory than the two models' runtime RSS plus the base cache bound. Run by hand, not a test:
#   bash bench/llm_evidence_speed.sh BASE.gguf CAND.gguf TEXT [CTX] [THREADS]
#   (default: ../shared stories260K F32 vs Q4_K_M on stories260K-eval.txt, ctx 128, 1 thread)
# Environment: BUILD (default build), TM_NODE_MODULES (default runner/node_modules), REPS (default
# 3: each run is repeated and its best wall and best CPU time kept), CHUNKS (default 0: every
# full chunk; K: the first K chunks, for large models).
# Prints JSON Lines: one per run ("plain" runner; "logits": the runner asking llama.cpp for the
# scored positions' logits, as evidence does, without reading a distribution; "evidence"), then
# the verdict line with ratio = evidence tokens/s / plain tokens/s (wall clock, both models, node
# start included in both), the same ratio in CPU seconds (user + sys of the processes and their
# children, GNU time: steadier than wall clock on a shared machine), the in-runner rates (chunk
# evaluation only) and the logits-only ratio (what the output layer of the scored positions
# alone costs), then the memory line: the peak RSS summed over the evidence process and its
# runners (sampled every 20 ms, one run with --base-cache) against the issue's bound, the two
# models' runtime RSS (the plain runs' peak) + the base cache's size.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
bin="$build/tensormorph"
[ -x "$bin" ] || { echo "bench/llm_evidence_speed.sh: $bin not found; build first" >&2; exit 2; }
shared="$here/../shared/models"
base="${1:-$shared/gguf/stories260K-F32.gguf}"
cand="${2:-$shared/gguf/stories260K-Q4_K_M.gguf}"
text="${3:-$shared/text/stories260K-eval.txt}"
ctx="${4:-128}"
threads="${5:-1}"
reps="${REPS:-3}"
chunks="${CHUNKS:-0}"
command -v /usr/bin/time >/dev/null || { echo "bench/llm_evidence_speed.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
nm="${TM_NODE_MODULES:-$here/runner/node_modules}"
abs() { (cd "$(dirname "$1")" && printf '%s/%s' "$PWD" "$(basename "$1")"); }
base="$(abs "$base")"; cand="$(abs "$cand")"; text="$(abs "$text")"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/tm-llm-bench.XXXXXX")"
trap 'rm -rf -- "$scratch"' EXIT
trap 'exit 130' INT TERM
now() { date +%s.%N; }
# best_of N CMD...: run CMD N times; prints "best_wall best_cpu" (seconds)
best_of() {
  local n="$1"; shift; local bw="" bc="" w c
  for ((r = 0; r < n; r++)); do
    /usr/bin/time -f "%e %U %S" -o "$scratch/time.txt" "$@" >/dev/null
    read -r w u s < "$scratch/time.txt"; c=$(python3 -c "print($u + $s)")
    bw=$(python3 -c "print(min(x for x in [$w, ${bw:-1e30}]))"); bc=$(python3 -c "print(min(x for x in [$c, ${bc:-1e30}]))")
  done
  echo "$bw $bc"
}

# 1. the runner without the KL work, once per model; then with the scored positions' logits
# computed (no distribution read): the part of the KL work that is llama.cpp's forward pass
plain_s=0; plain_cpu=0; plain_tok=0; plain_rate_in=""; plain_rss=0; logits_s=0; logits_cpu=0
for kind in plain logits; do
  for m in "$base" "$cand"; do
    out="$scratch/$kind.$RANDOM"; mkdir -p "$out"
    extra=""; [ "$kind" = logits ] && extra=',"logits":true'
    printf '{"node_modules":"%s","model":"%s","threads":%d,"ctx":%d,"chunks":%d,"gen":0,"warmup":0,"probs":false%s,"out_dir":"%s","texts":[{"name":"t","file":"%s"}]}' \
      "$nm" "$m" "$threads" "$ctx" "$chunks" "$extra" "$out" "$text" > "$out/job.json"
    read -r w c < <(best_of "$reps" node "$here/runner/llm_evidence.js" "$out/job.json")
    read -r nch rate rss < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['texts'][0]['chunks'], r['prompt_tokens_per_s'], r['peak_rss_bytes'])" "$out/result.json")
    if [ "$kind" = plain ]; then
      plain_s=$(python3 -c "print($plain_s + $w)"); plain_cpu=$(python3 -c "print($plain_cpu + $c)")
      plain_tok=$((plain_tok + nch * ctx)); plain_rss=$((plain_rss + rss))
      plain_rate_in="$plain_rate_in $rate"
    else
      logits_s=$(python3 -c "print($logits_s + $w)"); logits_cpu=$(python3 -c "print($logits_cpu + $c)")
    fi
    echo "{\"run\":\"$kind\",\"model\":\"$m\",\"chunks\":$nch,\"seconds\":$w,\"cpu_seconds\":$c,\"in_runner_tokens_per_s\":$rate,\"peak_rss_bytes\":$rss}"
  done
done

# 2. the evidence (both models, probabilities, scoring in C), no decode steps, no warmup
read -r ev_s ev_cpu < <(best_of "$reps" sh -c 'rm -f "$1"; shift; exec "$@"' _ "$scratch/ev.json" env TM_NODE_MODULES="$nm" \
  "$bin" evidence "$base" "$cand" --text "$text" --ctx "$ctx" --chunks "$chunks" --gen 0 --warmup 0 --threads "$threads" -o "$scratch/ev.json" -q)
python3 - "$scratch/ev.json" "$plain_s" "$plain_tok" "$ev_s" "$ctx" "$plain_cpu" "$ev_cpu" "$logits_s" "$logits_cpu" $plain_rate_in <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
plain_s, plain_tok, ev_s, ctx = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
plain_cpu, ev_cpu = float(sys.argv[6]), float(sys.argv[7])
logits_s, logits_cpu = float(sys.argv[8]), float(sys.argv[9])
plain_in = [float(x) for x in sys.argv[10:12]]
chunks = d["llm"]["protocol"]["chunks"]
ev_tok = 2 * chunks * ctx
m = d["models"]
ev_in = [m["baseline"]["prompt_tokens_per_s"], m["candidate"]["prompt_tokens_per_s"]]
rss = [m["baseline"]["peak_rss_bytes"], m["candidate"]["peak_rss_bytes"]]
print(json.dumps({"run": "evidence", "chunks": chunks, "seconds": ev_s, "cpu_seconds": ev_cpu, "in_runner_tokens_per_s": ev_in, "peak_rss_bytes": rss}))
ratio = (ev_tok / ev_s) / (plain_tok / plain_s)
ratio_cpu = (ev_tok / ev_cpu) / (plain_tok / plain_cpu)
ratio_in = [e / p for e, p in zip(ev_in, plain_in)]
print(json.dumps({"verdict": "ok" if ratio >= 0.9 else "below target", "ratio_wall": ratio, "ratio_cpu": ratio_cpu, "ratio_in_runner": ratio_in,
                  "target": 0.9, "evidence_tokens_per_s": ev_tok / ev_s, "plain_tokens_per_s": plain_tok / plain_s,
                  "logits_only_ratio_wall": plain_s / logits_s, "logits_only_ratio_cpu": plain_cpu / logits_cpu}))
PY

# 3. memory: one more evidence run (a fresh base cache written), its process tree's RSS summed
python3 - "$scratch" "$plain_rss" env TM_NODE_MODULES="$nm" "$bin" evidence "$base" "$cand" --text "$text" --ctx "$ctx" \
  --chunks "$chunks" --gen 0 --warmup 0 --threads "$threads" --base-cache "$scratch/base.cache" -o "$scratch/ev2.json" -q <<'PY'
import json, os, subprocess, sys, time
scratch, plain_rss, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def tree_rss(root):
    kids, rss = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            st = open(f"/proc/{p}/stat").read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
            rss[int(p)] = int(open(f"/proc/{p}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            kids.setdefault(ppid, []).append(int(p))
        except (OSError, ValueError): pass
    total, todo = 0, [root]
    while todo:
        q = todo.pop(); total += rss.get(q, 0); todo += kids.get(q, [])
    return total
pr = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
peak = 0
while pr.poll() is None:
    peak = max(peak, tree_rss(pr.pid)); time.sleep(0.02)
if pr.returncode: sys.exit(f"bench/llm_evidence_speed.sh: the evidence run with --base-cache failed ({pr.returncode})")
cache = os.path.getsize(os.path.join(scratch, "base.cache"))
bound = plain_rss + cache
print(json.dumps({"memory": "ok" if peak <= bound else "above bound", "peak_tree_rss_bytes": peak, "bound_bytes": bound,
                  "runtime_rss_bytes_both": plain_rss, "base_cache_bytes": cache}))
PY
