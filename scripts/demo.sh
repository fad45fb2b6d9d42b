#!/usr/bin/env bash
# The main job: traces the in-tree GPT-2-style model with PyTorch, imports it
# with merak-opt (summary: parameter count, op histogram), compiles its
# training step (autodiff + AdamW in the IR), partitions it for a 2x2 mesh
# (data x tensor parallelism) and trains it on 4 local ranks with
# merak-exec, printing the loss of every step and comparing the losses with
# single-process PyTorch.
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

echo "== partitioning for 4 ranks: data parallel x tensor parallel (dp=2 tp=2)"
"$build/bin/merak-opt" "$out/step.mlir" --merak-parallelize="dp=2 tp=2" \
  -o "$out/plan.mlir"
echo "   plan: $out/plan.mlir; collectives per step:"
grep -oE 'mesh\.(all_reduce|all_gather|reduce_scatter|all_to_all|all_slice) .*mesh_axes = \[[0-9, ]*\]' \
  "$out/plan.mlir" | sed -E 's/^mesh\.([a-z_]+) .*mesh_axes = \[([0-9, ]*)\]/\1 over axis \2/' \
  | sed -e 's/axis 0$/dp/' -e 's/axis 1$/tp/' -e 's/axis 0, 1$/dp and tp/' \
  | sort | uniq -c | sed 's/^/     /'

echo "== training 20 steps on 4 local ranks (Gloo), 8 recurring batches"
$py "$root/test/e2e/make_batches.py" --fixture gpt2 --fixtures-dir "$out" \
  --steps 20 --seed 0 --cycle 8 --out "$out/batches.safetensors"
rm -f "$out/train.jsonl"
"$build/bin/merak-exec" "$out/plan.mlir" --nproc 4 --init "$out/gpt2.pt" \
  --data "$out/batches.safetensors" --steps 20 --threads 1 \
  --log-jsonl "$out/train.jsonl" --save "$out/checkpoint.safetensors"
echo "   log: $out/train.jsonl  checkpoint: $out/checkpoint.safetensors (one shard file per rank + index)"

echo "== the same 20 steps in single-process PyTorch"
$py "$root/test/e2e/reference.py" --model "$out/gpt2.pt" \
  --data "$out/batches.safetensors" --steps 20 --optimizer adamw --lr 3e-3 \
  --weight-decay 0.1 --threads 1 --out-jsonl "$out/reference.jsonl" > /dev/null
$py "$root/test/e2e/compare_losses.py" "$out/train.jsonl" \
  "$out/reference.jsonl" --rtol 1e-4 | tail -1
