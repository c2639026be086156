#!/usr/bin/env bash
# setup.sh: install the Debian packages Tensormorph needs that are missing (Debian 12, as root
# or with sudo). Usage: scripts/setup.sh [--test]   (--test adds clang + libFuzzer runtime)
set -euo pipefail
pkgs=(cmake make gcc pkg-config git libjansson-dev libssl-dev libcmocka-dev libmicrohttpd-dev libpng-dev)
pkgs+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev)  # ONNX reader: protoc-c + onnx.proto
pkgs+=(libzip-dev)  # .npz and PyTorch zip checkpoints
if [[ "${1:-}" == "--test" ]]; then
  # the browser test (tests/browser): Debian's chromium, and node + npm unless a node is installed
  pkgs+=(chromium)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs npm)
  pkgs+=(clang libclang-rt-14-dev)
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
