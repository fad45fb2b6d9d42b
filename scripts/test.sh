#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, runs ctest
# (lit tests, one per file, and GoogleTest units).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_BUILD_DIR:-$root/build}"
start=$SECONDS
bash "$root/scripts/build.sh"
echo "test.sh: installing and building took $((SECONDS - start)) s"
cd "$build"
ctest --output-on-failure -j"$(nproc)" </dev/null
