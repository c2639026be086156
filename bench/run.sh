#!/usr/bin/env bash
# bench/run.sh: run the quantize benchmark (`make bench` builds first; this script builds nothing).
#   bash bench/run.sh [extra bench_quantize options, e.g. --reps 3 --layers 3]
# Environment:
#   TM_BENCH_DIR   scratch directory parent (default /tmp/tm-bench); needs ~5 GB free
#                  (3-layer checkpoints: 2.43 GB F32 + 1.21 GB BF16, plus one output at a time)
#   BUILD          build directory holding tensormorph and bench_quantize (default build)
# Results: JSON Lines on stdout, a human table on stderr. Nothing is written into the
# repository; the scratch files are removed at the end, also on failure or Ctrl-C.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac
bin="$build/tensormorph"
bench="$build/bench_quantize"
for f in "$bin" "$bench"; do
  if [ ! -x "$f" ]; then
    echo "bench/run.sh: $f not found; run 'make bench' (or 'make build') first" >&2
    exit 2
  fi
done
command -v sha256sum >/dev/null || { echo "bench/run.sh: sha256sum not found" >&2; exit 2; }

parent="${TM_BENCH_DIR:-/tmp/tm-bench}"
mkdir -p "$parent"
scratch="$(mktemp -d "$parent/run.XXXXXX")"
cleanup() { rm -rf -- "$scratch"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench/run.sh: $("$bin" version), scratch $scratch" >&2
"$bench" "$@" "$bin" "$scratch"
