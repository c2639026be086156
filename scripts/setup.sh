#!/usr/bin/env bash
# setup.sh: install the Debian packages Tensormorph needs that are missing (Debian 12, as root
# or with sudo), then the Node.js runner's npm packages (runner/: onnxruntime-node, the CPU build of
# ONNX Runtime that `tensormorph evidence` and the ONNX round-trip test run models with; and
# node-llama-cpp 3.21.1 with its prebuilt linux-x64 CPU binaries, llama.cpp for the evidence of
# GGUF language models, about 83 MB: --omit=optional keeps npm from pulling the CUDA/Vulkan
# variants, over 600 MB).
# Then web/'s build tools (esbuild, @dagrejs/dagre, axe-core) with `npm ci` from web/package-lock.json.
# Usage: scripts/setup.sh [--test]   (--test adds clang + libFuzzer runtime, chromium and
# playwright-core for the browser tests (axe-core comes with web/), Slurm (slurmctld, slurmd,
# slurm-client) and munge for the job-array test; there a failed npm install is an error, not a warning)
set -euo pipefail
pkgs=(cmake make gcc pkg-config git libjansson-dev libssl-dev libcmocka-dev libmicrohttpd-dev libpng-dev)
pkgs+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev)  # ONNX reader: protoc-c + onnx.proto
pkgs+=(libzip-dev zlib1g-dev)  # .npz and PyTorch zip checkpoints; zlib: CRC-32 of stored members
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)  # the runner (runner/)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(chromium)  # the browser test (tests/browser)
  pkgs+=(clang libclang-rt-14-dev)
  pkgs+=(slurmctld slurmd slurm-client munge)  # the Slurm job-array test (tests/slurm, docs/scale-out.md)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The runner's npm package, into runner/node_modules (ignored by git). --ignore-scripts: the
# package's install script only downloads optional GPU providers, which offline machines cannot.
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_install() {  # npm_install DIR [extra packages, not saved]
  local dir="$1"; shift
  if (($#)); then
    npm install --ignore-scripts --omit=optional --no-audit --no-fund --no-save --prefix "$dir" "$@" >/dev/null
  else
    npm install --ignore-scripts --omit=optional --no-audit --no-fund --prefix "$dir" >/dev/null
  fi
}
if [[ ! -f "$root/runner/node_modules/onnxruntime-node/package.json" ||
      ! -f "$root/runner/node_modules/node-llama-cpp/package.json" ||
      ! -f "$root/runner/node_modules/@node-llama-cpp/linux-x64/package.json" ]]; then
  # exact versions from runner/package.json + package-lock.json: onnxruntime-node 1.30.0,
  # node-llama-cpp 3.21.1 and @node-llama-cpp/linux-x64 3.21.1
  echo "setup: npm install --ignore-scripts --omit=optional in runner/ (onnxruntime-node, node-llama-cpp)" >&2
  if ! npm_install "$root/runner"; then
    if [[ "${1:-}" == "--test" ]]; then echo "setup: npm install in runner/ failed" >&2; exit 1; fi
    echo "setup: warning: npm install in runner/ failed; 'tensormorph evidence' needs it" \
         "(cd runner && npm install --ignore-scripts --omit=optional)" >&2
  fi
fi
# The web UI's build tools, into web/node_modules (ignored by git), exactly as web/package-lock.json
# pins them: esbuild 0.28.2 (+ its @esbuild/<platform> binary, an optional dependency, so no
# --omit=optional) bundles web/arch/ with @dagrejs/dagre 3.1.3 at `cmake --build` time; axe-core
# 4.14.1 is the browser test's accessibility check. --ignore-scripts: esbuild's install script only
# checks the binary. Without them the build embeds the committed bundle web/dist/arch.js.
if [[ ! -f "$root/web/node_modules/esbuild/package.json" || ! -f "$root/web/node_modules/@dagrejs/dagre/package.json" ||
      ! -f "$root/web/node_modules/axe-core/package.json" ]]; then
  echo "setup: npm ci --ignore-scripts in web/ (esbuild, @dagrejs/dagre, axe-core)" >&2
  if ! (cd "$root/web" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null); then
    if [[ "${1:-}" == "--test" ]]; then echo "setup: npm ci in web/ failed" >&2; exit 1; fi
    echo "setup: warning: npm ci in web/ failed; the build embeds the committed web/dist/arch.js" \
         "(cd web && npm ci --ignore-scripts)" >&2
  fi
fi
if [[ "${1:-}" == "--test" && ! -f "$root/runner/node_modules/playwright-core/package.json" ]]; then
  echo "setup: npm install playwright-core into runner/node_modules (browser tests)" >&2
  npm_install "$root/runner" playwright-core
fi
