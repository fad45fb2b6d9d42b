#!/usr/bin/env bash
# Trains one fixture's step on the CPU backend (the full merak-exec, on the
# module) and on the CUDA backend as the CUDA emulator runs it (the runtime
# built alone, on the compiled .mrp), from the same weights and batches,
# and compares the losses.
#   compare-training.sh OUT FIXTURES_DIR EMULATED_EXEC PYTHON SRC \
#     MODEL STEPS CYCLE RTOL TRAIN_OPTIONS [MERAK_EXEC_FLAGS...]
set -euo pipefail
out=$1 fixtures=$2 emulated=$3 python=$4 src=$5 model=$6 steps=$7 cycle=$8
rtol=$9 train=${10}
shift 10
name=$model-$(echo "$train" | tr -c 'a-z0-9\n' '_' | cut -c1-60)
mkdir -p "$out"
"$python" "$src/test/e2e/make_batches.py" --fixture "$model" \
  --fixtures-dir "$fixtures" --steps "$steps" --seed 0 --cycle "$cycle" \
  --out "$out/$name.data.safetensors" > /dev/null
"$python" "$src/python/merak_trace.py" weights "$fixtures/$model.pt" \
  "$out/$name.weights.safetensors" > /dev/null
merak-opt "$fixtures/$model.pt" --merak-train="$train" -o "$out/$name.mlir"
merak-translate "$out/$name.mlir" --merak-to-rank-program -o "$out/$name.mrp"
rm -f "$out/$name.cpu.jsonl" "$out/$name.cuda.jsonl"
merak-exec "$out/$name.mlir" --init "$fixtures/$model.pt" \
  --data "$out/$name.data.safetensors" --steps "$steps" --threads 1 \
  --log-jsonl "$out/$name.cpu.jsonl" "$@" > /dev/null
"$emulated" "$out/$name.mrp" --device cuda \
  --init "$out/$name.weights.safetensors" \
  --data "$out/$name.data.safetensors" --steps "$steps" \
  --log-jsonl "$out/$name.cuda.jsonl" "$@"
"$python" "$src/test/e2e/compare_losses.py" "$out/$name.cuda.jsonl" \
  "$out/$name.cpu.jsonl" --rtol "$rtol" --atol 0
