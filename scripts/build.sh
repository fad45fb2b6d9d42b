#!/usr/bin/env bash
# Configures and builds Merak in build/ (or $MERAK_BUILD_DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_BUILD_DIR:-$root/build}"
bash "$root/scripts/install-deps.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -- -j"$(nproc)"
