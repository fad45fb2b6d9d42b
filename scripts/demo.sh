#!/usr/bin/env bash
# The main job: traces the in-tree GPT-2-style model with PyTorch, imports it
# with merak-opt (summary: parameter count, op histogram), compiles its
# training step (autodiff + AdamW in the IR) and trains it with merak-exec,
# printing the loss of every step.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
out="$build/demo"
mkdir -p "$out"
py=/usr/bin/python3

echo "== tracing the GPT-2-style model (python3-torch)"
$py "$root/test/fixtures/trace_all.py" --only gpt2 --out "$out"

echo "== importing with merak-opt"
"$build/bin/merak-opt" "$out/gpt2.pt" --merak-model-summary -o "$out/gpt2.mlir"
echo "   IR: $out/gpt2.mlir ($(wc -l < "$out/gpt2.mlir") lines)"

echo "== compiling the training step (autodiff + AdamW)"
"$build/bin/merak-opt" "$out/gpt2.pt" \
  --merak-train="optimizer=adamw lr=3e-3 weight-decay=0.1" -o "$out/step.mlir"
echo "   IR: $out/step.mlir ($(grep -c 'merak\.' "$out/step.mlir") merak ops and attributes)"

echo "== training 20 steps on 8 recurring batches"
$py "$root/test/e2e/make_batches.py" --fixture gpt2 --fixtures-dir "$out" \
  --steps 20 --seed 0 --cycle 8 --out "$out/batches.safetensors"
rm -f "$out/train.jsonl"
"$build/bin/merak-exec" "$out/step.mlir" --init "$out/gpt2.pt" \
  --data "$out/batches.safetensors" --steps 20 --threads 1 \
  --log-jsonl "$out/train.jsonl" --save "$out/checkpoint.safetensors"
echo "   log: $out/train.jsonl  checkpoint: $out/checkpoint.safetensors"
