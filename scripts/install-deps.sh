#!/usr/bin/env bash
# Installs the Debian 12 packages that Merak's build, tests and demo need.
# Idempotent: does nothing when everything is present. With --fuzz, also
# clang 19 and its runtimes (libFuzzer, the sanitizers, OpenMP) for the
# fuzz targets (scripts/fuzz.sh).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ ccache git
  llvm-19-dev libmlir-19-dev mlir-19-tools llvm-19-tools
  libtorch-dev python3-torch python3-torchvision python3-torchaudio python3-numpy
  libgloo-dev libabsl-dev nlohmann-json3-dev libopenblas0-pthread libdnnl-dev
  libsleef-dev libsentencepiece-dev python3-sentencepiece libyaml-cpp-dev
  zlib1g-dev
  chromium
  libgtest-dev libbenchmark-dev
)
if [ "${1:-}" = "--fuzz" ]; then
  PACKAGES+=(clang-19 libclang-rt-19-dev libomp-19-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "merak: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "merak: these packages are missing and this user cannot install them." >&2
  echo "Run as root:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q </dev/null
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
