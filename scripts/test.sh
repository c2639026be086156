#!/usr/bin/env bash
# test.sh [release|asan|fuzz|all]: build and run the test suite. Budget on 2 cores: release
# build + tests ~3 min, ASan+UBSan build + tests ~6 min, fuzzing FUZZ_SECONDS per target.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
jobs="$(nproc 2>/dev/null || echo 2)"
fuzz_seconds="${FUZZ_SECONDS:-30}"

run_suite() { # name, cmake args...
  local dir="build-$1"; shift
  echo "== $dir: configure and build" >&2
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  echo "== $dir: ctest" >&2
  (cd "$dir" && ctest --output-on-failure -j "$jobs")
}

if [[ "$what" == all || "$what" == release ]]; then
  run_suite release -DCMAKE_BUILD_TYPE=Release
fi
if [[ "$what" == all || "$what" == asan ]]; then
  TM_MODELS_MATRIX=subset ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite asan -DCMAKE_BUILD_TYPE=Debug -DTM_SANITIZE=ON
fi
if [[ "$what" == all || "$what" == fuzz ]]; then
  echo "== fuzz: build with clang + libFuzzer" >&2
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTM_FUZZ=ON -DTM_BUILD_TESTS=OFF \
    -DCMAKE_C_FLAGS='-fsanitize=fuzzer-no-link,address,undefined' >/dev/null
  cmake --build build-fuzz -j "$jobs"
  for f in build-fuzz/fuzz_*; do
    [[ -x "$f" && ! -d "$f" ]] || continue
    name="$(basename "$f")"; corpus="fuzz/corpus/${name#fuzz_}"
    corpus="${corpus%_open}"
    work="$(mktemp -d)"
    [[ -d "$corpus" ]] && cp -r "$corpus"/. "$work"/
    echo "== fuzz: $name for ${fuzz_seconds}s" >&2
    "$f" -max_total_time="$fuzz_seconds" -print_final_stats=1 "$work" 2>&1 | tail -n 12
    rm -rf "$work"
  done
fi
echo "test.sh: $what passed"
