#!/usr/bin/env bash
# bundle_fresh.sh: the committed bundle web/dist/arch.js is what esbuild (web/node_modules, pinned
# by web/package-lock.json) builds from web/arch/ now, byte for byte, with the arguments the build
# uses (CMakeLists.txt TM_ARCH_BUNDLE_ARGS), and it stays under 2 MiB. Exit 77 (skipped) without
# node or web/node_modules unless TM_REQUIRE_BROWSER=1 (scripts/setup.sh installs them).
set -euo pipefail
src="${TM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
committed="$src/web/dist/arch.js"
esb="$src/web/node_modules/esbuild/bin/esbuild"
if ! command -v node >/dev/null 2>&1 || [[ ! -f "$esb" ]]; then
  if [[ "${TM_REQUIRE_BROWSER:-}" == 1 ]]; then echo "FAIL: node or web/node_modules missing (TM_REQUIRE_BROWSER=1; run scripts/setup.sh)"; exit 1; fi
  echo "SKIP: node or web/node_modules missing (run scripts/setup.sh)"
  exit 77
fi
[[ -f "$committed" ]] || { echo "FAIL: $committed is missing"; exit 1; }
size=$(stat -c %s "$committed")
if ((size >= 2 * 1024 * 1024)); then echo "FAIL: web/dist/arch.js is $size bytes, over 2 MiB"; exit 1; fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# the same arguments as CMakeLists.txt (TM_ARCH_BUNDLE_ARGS), read from it so the two cannot drift
args=$(sed -n '/^set(TM_ARCH_BUNDLE_ARGS/,/)$/p' "$src/CMakeLists.txt" | tr '\n' ' ' |
       sed -e 's/^set(TM_ARCH_BUNDLE_ARGS//' -e 's/)[[:space:]]*$//' -e "s#\${CMAKE_SOURCE_DIR}#$src#g")
[[ -n "$args" ]] || { echo "FAIL: TM_ARCH_BUNDLE_ARGS not found in CMakeLists.txt"; exit 1; }
# shellcheck disable=SC2086
(cd "$src/web" && node "$esb" $args --outfile="$out/arch.js")
if ! cmp -s "$out/arch.js" "$committed"; then
  echo "FAIL: web/dist/arch.js is stale: it differs from the bundle of web/arch/ now" \
       "(cmake --build build --target web_bundle && cp build/gen/web/arch.js web/dist/arch.js)"
  exit 1
fi
echo "ok   web/dist/arch.js ($size bytes) = esbuild's bundle of web/arch/"
