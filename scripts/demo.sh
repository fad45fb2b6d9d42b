#!/usr/bin/env bash
# The main job: traces the in-tree GPT-2-style model with PyTorch, imports it
# with merak-opt, prints a summary (parameter count, op histogram) and the
# first lines of the IR.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
out="$build/demo"
mkdir -p "$out"

echo "== tracing the GPT-2-style model (python3-torch)"
/usr/bin/python3 "$root/test/fixtures/trace_all.py" --only gpt2 --out "$out"

echo "== importing with merak-opt"
"$build/bin/merak-opt" "$out/gpt2.pt" --merak-model-summary -o "$out/gpt2.mlir"

echo "== first lines of $out/gpt2.mlir"
head -n 20 "$out/gpt2.mlir" | cut -c1-160
