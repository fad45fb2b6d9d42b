#!/usr/bin/env bash
# The main job. First the quick start: `merak train` trains a GPT-2 from a
# text file with one YAML file (examples/gpt2-text), then resumes it. Then
# each step by hand: traces the in-tree GPT-2-style model with PyTorch, imports it
# with merak-opt (summary: parameter count, op histogram), compiles its
# training step (autodiff + AdamW in the IR), partitions it in 3D (data x
# tensor x pipeline parallelism, 2x2x2, 1F1B over 4 micro-batches) and trains
# it on 8 local ranks with merak-exec, printing the loss of every step and the
# measured pipeline bubble, writing a trace a browser opens, and comparing the
# losses with single-process PyTorch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
out="$build/demo"
mkdir -p "$out"
py=/usr/bin/python3

echo "== one command and a YAML file: merak train examples/gpt2-text/run.yaml"
echo "   (a 4-layer GPT-2 from model.py, trained on docs/runtime.md with a"
echo "   512-piece tokenizer trained on it, 4 local ranks: dp=2 x a 1F1B"
echo "   pipeline of 2 stages, evaluation and a checkpoint every 50 steps;"
echo "   every 50th step line shown)"
text="$out/gpt2-text"
rm -rf "$text"
keys=(--run.dir="$text" --checkpoint.dir="$text/checkpoints"
      --log.jsonl="$text/train.jsonl" --log.trace="$text/trace.json"
      --log.plan-report="$text/plan.html" --log.run-report="$text/run.html")
every50th() { awk '!/^step / || /^step [0-9]*[05]0\// { print; fflush() }'; }
"$build/bin/merak" train "$root/examples/gpt2-text/run.yaml" "${keys[@]}" \
  --train.steps=180 | every50th
echo "== the same command with --train.steps=300 resumes from the newest checkpoint"
"$build/bin/merak" train "$root/examples/gpt2-text/run.yaml" "${keys[@]}" \
  --train.steps=300 2>&1 | every50th
echo "   log: $text/train.jsonl  checkpoints: $text/checkpoints"
echo "   reports (open in a browser): $text/plan.html $text/run.html"

echo "== tracing the GPT-2-style model (python3-torch)"
$py "$root/test/fixtures/trace_all.py" --only gpt2 --out "$out"

echo "== importing with merak-opt"
"$build/bin/merak-opt" "$out/gpt2.pt" --merak-model-summary -o "$out/gpt2.mlir"
echo "   IR: $out/gpt2.mlir ($(wc -l < "$out/gpt2.mlir") lines)"

echo "== compiling the training step (autodiff + AdamW)"
"$build/bin/merak-opt" "$out/gpt2.pt" \
  --merak-train="optimizer=adamw lr=3e-3 weight-decay=0.1" -o "$out/step.mlir"
echo "   IR: $out/step.mlir ($(grep -c 'merak\.' "$out/step.mlir") merak ops and attributes)"

echo "== partitioning for 8 ranks: data x tensor x pipeline parallelism (dp=2 tp=2 pp=2)"
"$build/bin/merak-opt" "$out/step.mlir" \
  --merak-parallelize="dp=2 tp=2 pp=2 microbatches=4 schedule=1f1b" \
  -o "$out/plan.mlir"
echo "   plan: $out/plan.mlir; stage functions and the collectives in them:"
for f in $(grep -oE 'func\.func @stage[0-9]+_[a-z_]+' "$out/plan.mlir" | sed 's/func.func @//'); do
  n=$(awk "/func.func @$f\(/,/^  }/" "$out/plan.mlir" | grep -cE 'mesh\.(all_reduce|all_gather|reduce_scatter|all_to_all)' || true)
  printf '     %-24s %s collectives\n' "$f" "$n"
done
echo "   schedule of pipeline rank 0: $(grep -oE 'ranks = \[\[[^]]*\]' "$out/plan.mlir" | head -1 | cut -c11-200)..."

echo "== training 20 steps on 8 local ranks (Gloo), 4 micro-batches of 2 per step"
$py "$root/test/e2e/make_batches.py" --fixture gpt2 --fixtures-dir "$out" \
  --steps 20 --seed 0 --cycle 8 --microbatches 4 --out "$out/batches.safetensors"
rm -f "$out/train.jsonl"
"$build/bin/merak-exec" "$out/plan.mlir" --nproc 8 --init "$out/gpt2.pt" \
  --data "$out/batches.safetensors" --steps 20 --threads 1 \
  --log-jsonl "$out/train.jsonl" --save "$out/checkpoint.safetensors" \
  --trace "$out/trace.json"
echo "   log: $out/train.jsonl  checkpoint: $out/checkpoint.safetensors (shard files + index)"
echo "   trace: $out/trace.json (open in https://ui.perfetto.dev or chrome://tracing)"

echo "== the same 20 steps in single-process PyTorch (accumulating the micro-batches)"
$py "$root/test/e2e/reference.py" --model "$out/gpt2.pt" \
  --data "$out/batches.safetensors" --steps 20 --optimizer adamw --lr 3e-3 \
  --weight-decay 0.1 --microbatches 4 --threads 1 \
  --out-jsonl "$out/reference.jsonl" > /dev/null
$py "$root/test/e2e/compare_losses.py" "$out/train.jsonl" \
  "$out/reference.jsonl" --rtol 1e-4 | tail -1
