#!/usr/bin/env bash
# Checks the CUDA backend on a machine with an NVIDIA GPU, CUDA and a
# PyTorch with CUDA, and nothing else of this project's package list. It
# runs from a bundle made by scripts/gpu-bundle.sh on a machine with the
# full build (the runtime built alone with the CUDA backend, rank
# programs, kernel cases), and prints a table:
#
#  1. every kernel case (test/cuda/cases) on the GPU against the CPU
#     backend's results (ATen's kernels), and the FlashAttention-form
#     cases again on the WMMA kernels (--flash-kernels=wmma);
#  2. each model fixture trained 10 steps on the GPU, every loss
#     against PyTorch eager (the fixture's module, not its trace) on the
#     same GPU from the same weights and
#     batches (TF32 off on both sides, dropout off), within 1e-4 relative;
#     GPT-2 in bf16 mixed precision within twice the distance of PyTorch's
#     bf16 autocast from its fp32 run; GPT-2 in fp16 with dynamic loss
#     scaling, its scale by the rule and its first loss within 1e-3;
#     GPT-2 run twice gives the same losses bit for bit;
#     LLaMA with its fused kernels (the default) within 1e-6 of it unfused;
#     GPT-2 in bf16 with the casts around its loss and layer norms folded
#     into them (the default) within 1e-6 of it unfolded;
#     GPT-2 and LLaMA with FlashAttention-form attention (tiled kernels)
#     against PyTorch within 1e-4;
#  3. where the machine has two GPUs or more, GPT-2 on two ranks with NCCL
#     (one GPU each; the ranks meet in a directory, as the runtime built
#     alone does): data-parallel, tensor-parallel, and pipelines (1F1B and
#     the dynamic schedule) with their transfers on NCCL and again with
#     --p2p=shm (GPU to GPU through CUDA IPC), each within 1e-4 of
#     PyTorch's run on one GPU; with one GPU, the two pipelines with
#     --p2p=shm, their two ranks sharing it;
#  4. plans of every kind (GPT-2 data, tensor and sequence parallel,
#     ZeRO 1-3, pipelines of every schedule, and their combinations up to
#     8 ranks; two mixture-of-experts decoders expert-parallel) with all
#     their ranks on one GPU: collectives on Gloo through host copies
#     (--comm=gloo), pipeline transfers through CUDA IPC (--p2p=shm), each
#     within 1e-4 of PyTorch's run on one GPU;
#  5. compute-sanitizer memcheck and racecheck on one step of GPT-2, with
#     attention in either form;
#  6. with BENCH=1, after the table, the GPT-2 small benchmark
#     (bench/gpu_gpt2.py run).
#
# Usage: gpu-check.sh [--build SOURCE_DIR] BUNDLE_DIR [OUT_DIR]
#   (exit status 1 if a row fails). With --build, the runtime is built here
#   first from SOURCE_DIR (this repository) with the bundle's abseil and
#   nlohmann-json, for this GPU's architecture (nvidia-smi's compute
#   capability), and runs instead of the bundle's binaries.
#   SECTIONS (default "kernels models generation sanitizer") and MODELS
#   choose what runs, so that two instances with different OUT_DIRs can
#   share a GPU (the rows after the models need GPT-2's and LLaMA's).
set -uo pipefail
SOURCE=
if [[ ${1:-} == --build ]]; then
  SOURCE=$(cd "${2:?--build needs the source directory}" && pwd)
  shift 2
fi
B=$(cd "${1:?usage: gpu-check.sh [--build SOURCE_DIR] BUNDLE_DIR [OUT_DIR]}" && pwd)
O=${2:-gpu-check-out}
mkdir -p "$O" && O=$(cd "$O" && pwd)
BIN=$B/bin
PY=${PYTHON:-python3}
STEPS=${STEPS:-10}
MODELS=${MODELS:-"gpt2 llama bert t5 resnet18 vit_b_16"}
SECTIONS=${SECTIONS:-"kernels models generation nccl shared sanitizer"}
wanted() { [[ " $SECTIONS " == *" $1 "* ]]; }
# DEVICE=cpu runs the same rows on the CPU (a dry run of this script).
DEVICE=${DEVICE:-cuda}

# The CUDA libraries: the toolkit's, else those PyTorch's wheels bring.
libs=$B/lib
for d in /usr/local/cuda/lib64 $("$PY" - <<'PYEOF'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
for r in roots:
    for d in sorted(set(os.path.dirname(p) for p in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True))):
        print(d)
PYEOF
); do libs=$libs:$d; done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONDONTWRITEBYTECODE=1
export PATH=$PATH:/usr/local/cuda/bin

rows=()
failed=0
row() {
  rows+=("$(printf '| %-28s | %-6s | %s |' "$1" "$2" "$3")")
  echo "${rows[-1]}"
  [[ $2 == ok || $2 == skip || $2 == info ]] || failed=1
}

if [[ -n $SOURCE ]]; then
  echo "== build"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  start=$(date +%s)
  deps=$B/deps
  if cmake -G Ninja -S "$SOURCE" -B "$O/build" -DCMAKE_BUILD_TYPE=Release \
      -DMERAK_COMPILER=OFF -DMERAK_CPU_BACKEND=OFF -DMERAK_BUILD_RUNTIME_VARIANTS=OFF \
      -DMERAK_CUDA_ARCHITECTURES="${arch:-90}" \
      -Dabsl_DIR="$deps/lib/x86_64-linux-gnu/cmake/absl" \
      -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" \
      -DMERAK_GLOO_ROOT="$deps" > "$O/build.log" 2>&1 &&
     cmake --build "$O/build" --target merak-exec merak-kernel-check >> "$O/build.log" 2>&1; then
    BIN=$O/build/bin
    row "build (sm_${arch:-90})" ok "runtime alone with the CUDA backend, $(( $(date +%s) - start )) s"
  else
    row "build (sm_${arch:-90})" FAIL "$(grep -m1 -E 'error|Error' "$O/build.log")"
  fi
fi

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/gpu.txt" ||
  echo "no nvidia-smi" | tee "$O/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$O/gpu.txt"
"$BIN/merak-exec" --help 2>&1 | grep -i "backends in this build" | tee -a "$O/gpu.txt"

if wanted kernels; then
  echo "== kernels"
  "$BIN/merak-kernel-check" --cases "$(ls "$B"/cases/*.json | paste -sd,)" \
    --device "$DEVICE" --expected "$B/cases/expected.safetensors" > "$O/kernels.txt" 2>&1
  status=$?
  grep -v "^ok " "$O/kernels.txt" | head -60
  summary=$(tail -1 "$O/kernels.txt")
  row "kernel cases" "$([[ $status == 0 ]] && echo ok || echo FAIL)" "$summary"
  # The FlashAttention form's bf16 and f16 cases again on the WMMA
  # kernels (the cases above ran the register-tile ones, the default).
  if [[ $DEVICE == cuda ]]; then
    "$BIN/merak-kernel-check" --cases "$B/cases/flash_attention.json" --device cuda \
      --flash-kernels wmma --expected "$B/cases/expected.safetensors" > "$O/kernels-wmma.txt" 2>&1
    status=$?
    grep -v "^ok " "$O/kernels-wmma.txt" | head -20
    row "flash attention cases, --flash-kernels=wmma" "$([[ $status == 0 ]] && echo ok || echo FAIL)" \
      "$(tail -1 "$O/kernels-wmma.txt")"
  fi
fi

echo "== models"
FIX=$O/fixtures
mkdir -p "$FIX"
wanted models || MODELS=
for m in $MODELS; do
  dir=$O/$m
  mkdir -p "$dir"
  # Optimizer, learning rate, weight decay, repeated batch, batch size
  # (scripts/gpu-bundle.sh says why ResNet-18's differ from its e2e test).
  read -r opt lr wd cycle batch < "$B/models/$m.settings"
  rm -f "$dir"/*.jsonl
  pt=$B/models/$m.pt
  if [[ ! -f $pt ]]; then
    # Traced here from the same model code (the archive is too large to
    # carry); the rank program was compiled from the same architecture.
    "$PY" "$B/src/test/fixtures/trace_all.py" --out "$FIX" --only "$m" --batch "$batch" > "$dir/trace.log" 2>&1 ||
      { row "$m" FAIL "tracing failed: $(tail -1 "$dir/trace.log")"; continue; }
    pt=$FIX/$m.pt
  else
    cp "$B/models/$m.inputs.json" "$FIX/"
  fi
  "$PY" "$B/src/python/merak_trace.py" weights "$pt" "$dir/weights.safetensors" > "$dir/weights.log" 2>&1 ||
    { row "$m" FAIL "weights: $(tail -1 "$dir/weights.log")"; continue; }
  "$PY" "$B/src/test/e2e/make_batches.py" --fixture "$m" --fixtures-dir "$FIX" \
    --steps "$STEPS" --seed 0 --cycle "$cycle" --out "$dir/batches.safetensors" > "$dir/batches.log" 2>&1 ||
    { row "$m" FAIL "batches: $(tail -1 "$dir/batches.log")"; continue; }
  start=$(date +%s%N)
  "$BIN/merak-exec" "$B/models/$m.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
    --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/merak.jsonl" \
    > "$dir/merak.log" 2>&1 ||
    { row "$m" FAIL "merak-exec: $(grep -m1 error "$dir/merak.log" || tail -1 "$dir/merak.log")"; continue; }
  merak_s=$(( ($(date +%s%N) - start) / 1000000 ))
  start=$(date +%s%N)
  # PyTorch trains the fixture's eager module (the archive's weights): a
  # trace fixes the device of tensors it made and cuDNN's TF32 setting.
  "$PY" "$B/src/test/e2e/reference.py" --model "$pt" --fixture "$m" --data "$dir/batches.safetensors" \
    --steps "$STEPS" --optimizer "$opt" --lr "$lr" --weight-decay "$wd" --device "$DEVICE" \
    --out-jsonl "$dir/ref.jsonl" > "$dir/ref.log" 2>&1 ||
    { row "$m" FAIL "PyTorch: $(tail -1 "$dir/ref.log")"; continue; }
  ref_s=$(( ($(date +%s%N) - start) / 1000000 ))
  if "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/merak.jsonl" "$dir/ref.jsonl" \
      --rtol 1e-4 > "$dir/compare.log" 2>&1; then
    verdict=ok
  else
    verdict=FAIL
  fi
  # PyTorch's convolutions on cuDNN take the algorithms its heuristic
  # ranks first, Winograd and FFT ones included, which lose float32
  # digits (the CUDA backend leaves them out: Convolution.cpp); with cuDNN
  # off PyTorch convolves exactly (its own kernels on cuBLAS, TF32 off).
  # A model outside 1e-4 of the cuDNN run is checked against that one.
  reference=$dir/ref.jsonl note=
  if [[ $verdict != ok && $DEVICE == cuda ]] &&
     "$PY" "$B/src/test/e2e/reference.py" --model "$pt" --fixture "$m" --data "$dir/batches.safetensors" \
       --steps "$STEPS" --optimizer "$opt" --lr "$lr" --weight-decay "$wd" --device cuda --no-cudnn \
       --out-jsonl "$dir/ref-no-cudnn.jsonl" > "$dir/ref-no-cudnn.log" 2>&1 &&
     "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/merak.jsonl" "$dir/ref-no-cudnn.jsonl" \
       --rtol 1e-4 > "$dir/no-cudnn-compare.log" 2>&1; then
    verdict=ok reference=$dir/ref-no-cudnn.jsonl
    note="; against PyTorch on this GPU with cuDNN off (with cuDNN: $(tail -1 "$dir/compare.log"))"
  fi
  worst=$("$PY" - "$dir/merak.jsonl" "$reference" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
a = {r["step"]: r["loss"] for r in a}
b = {r["step"]: r["loss"] for r in b}
rel = max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) for s in b if s in a)
print("first loss %.6f, last %.6f (PyTorch %.6f), largest relative difference %.2e"
      % (a[min(a)], a[max(a)], b[max(b)], rel))
PYEOF
)
  row "$m ($opt, ${STEPS} steps, fp32)" "$verdict" "$worst; wall ${merak_s} ms vs PyTorch ${ref_s} ms$note"
  if [[ $verdict != ok ]]; then
    head -20 "$dir/compare.log"
    # How far PyTorch's own run on the CPU is from its run here: a model
    # whose training amplifies rounding parts from itself too.
    if [[ $DEVICE != cpu ]] &&
       "$PY" "$B/src/test/e2e/reference.py" --model "$pt" --fixture "$m" --data "$dir/batches.safetensors" \
         --steps "$STEPS" --optimizer "$opt" --lr "$lr" --weight-decay "$wd" --device cpu \
         --out-jsonl "$dir/ref-cpu.jsonl" > "$dir/ref-cpu.log" 2>&1; then
      "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/ref-cpu.jsonl" "$dir/ref.jsonl" \
        --rtol 1e-4 > "$dir/ref-cpu-compare.log" 2>&1
      "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/merak.jsonl" "$dir/ref-cpu.jsonl" \
        --rtol 1e-4 > "$dir/merak-cpu-compare.log" 2>&1
      row "$m: PyTorch CPU vs its GPU run" info "$(tail -1 "$dir/ref-cpu-compare.log")"
      row "$m: merak-exec vs PyTorch CPU" info "$(tail -1 "$dir/merak-cpu-compare.log")"
      head -14 "$dir/ref-cpu-compare.log"
    fi
  fi
done

# Deterministic kernels: the same program, weights and batches give the
# same losses, bit for bit, run after run.
dir=$O/gpt2
if [[ -f $dir/merak.jsonl ]]; then
  rm -f "$dir/again.jsonl"
  "$BIN/merak-exec" "$B/models/gpt2.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
    --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/again.jsonl" > "$dir/again.log" 2>&1
  if "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/again.jsonl" "$dir/merak.jsonl" \
      --rtol 0 --atol 0 > "$dir/again-compare.log" 2>&1; then
    row "gpt2 run twice" ok "the same $STEPS losses bit for bit"
  else
    row "gpt2 run twice" FAIL "$(tail -1 "$dir/again-compare.log")"
  fi
fi

# A row: rank program $2 (in $B/models) run with --fuse-elementwise=off in
# directory $3 within 1e-6 of its run with fusion on ($3/$4), under the
# name $1; $5 names the files of the unfused run.
unfused_row() {
  local name=$1 mrp=$2 d=$3 fused=$4 out=$5
  rm -f "$d/$out.jsonl"
  "$BIN/merak-exec" "$B/models/$mrp" --device "$DEVICE" --init "$d/weights.safetensors" \
    --data "$d/batches.safetensors" --steps "$STEPS" --fuse-elementwise=off \
    --log-jsonl "$d/$out.jsonl" > "$d/$out.log" 2>&1
  if "$PY" "$B/src/test/e2e/compare_losses.py" "$d/$fused" "$d/$out.jsonl" \
      --rtol 1e-6 > "$d/$out-compare.log" 2>&1; then
    row "$name" ok "$(tail -1 "$d/$out-compare.log")"
  else
    row "$name" FAIL "$(grep -m1 -i error "$d/$out.log" || tail -1 "$d/$out-compare.log")"
  fi
}

# Fused kernels (on by default, as in every row above) against the same
# step op by op: LLaMA has the most chains (RMS norm, rotary embeddings,
# SwiGLU, their gradients) and an AdamW group; within 1e-6.
dir=$O/llama
if [[ -f $dir/merak.jsonl ]]; then
  unfused_row "llama fused vs unfused" llama.mrp "$dir" merak.jsonl unfused
fi

# Dropout in training fused with its neighbours (GELU, the mask, the
# product: the kernel draws the mask from the Philox counters the dropout
# kernel would take) against the same step op by op: the MLP of
# test/Runtime/dropout.test, p = 0.3; within 1e-6 (one mask drawn
# otherwise moves a loss by far more).
d=$B/models/dropout
if wanted models && [[ -f $d/mlp.mrp ]]; then
  dir=$O/dropout
  mkdir -p "$dir"
  cp "$d/weights.safetensors" "$d/batches.safetensors" "$dir/"
  rm -f "$dir/fused.jsonl"
  if "$BIN/merak-exec" "$d/mlp.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
       --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/fused.jsonl" \
       > "$dir/fused.log" 2>&1; then
    unfused_row "dropout fused vs unfused" dropout/mlp.mrp "$dir" fused.jsonl unfused
  else
    row "dropout fused vs unfused" FAIL "$(grep -m1 -i error "$dir/fused.log" || tail -1 "$dir/fused.log")"
  fi
fi

# Attention in the FlashAttention form: the tiled kernels
# (FlashAttention.h) in the training step, against PyTorch's run above.
for m in gpt2 llama; do
  dir=$O/$m
  [[ -f $B/models/$m-flash.mrp && -f $dir/ref.jsonl ]] || continue
  rm -f "$dir/flash.jsonl"
  "$BIN/merak-exec" "$B/models/$m-flash.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
    --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/flash.jsonl" \
    > "$dir/flash.log" 2>&1
  if "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/flash.jsonl" "$dir/ref.jsonl" \
      --rtol 1e-4 > "$dir/flash-compare.log" 2>&1; then
    row "$m flash attention (fp32)" ok "$(tail -1 "$dir/flash-compare.log")"
  else
    row "$m flash attention (fp32)" FAIL "$(grep -m1 -i error "$dir/flash.log" || tail -1 "$dir/flash-compare.log")"
  fi
done

# Mixed precision: GPT-2 with bf16 matrix products and fp32 master weights
# against PyTorch's fp32 run, within twice the distance PyTorch's own bf16
# autocast keeps from it (as test/e2e/train-gpt2-bf16.test on the CPU).
dir=$O/gpt2
if [[ -f $B/models/gpt2-bf16.mrp && -f $dir/ref.jsonl ]]; then
  rm -f "$dir"/bf16*.jsonl
  if "$BIN/merak-exec" "$B/models/gpt2-bf16.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
       --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/bf16.jsonl" > "$dir/bf16.log" 2>&1 &&
     "$PY" "$B/src/test/e2e/reference.py" --model "$B/models/gpt2.pt" --fixture gpt2 \
       --data "$dir/batches.safetensors" --steps "$STEPS" --optimizer adamw --lr 1e-3 \
       --weight-decay 0.1 --device "$DEVICE" --autocast bfloat16 \
       --out-jsonl "$dir/bf16-autocast.jsonl" > "$dir/bf16-ref.log" 2>&1; then
    if "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/bf16.jsonl" "$dir/ref.jsonl" \
        --gap "$dir/bf16-autocast.jsonl" --gap-factor 2 > "$dir/bf16-compare.log" 2>&1; then
      verdict=ok
    else
      verdict=FAIL
    fi
    row "gpt2 (adamw, bf16 mixed)" "$verdict" "$(tail -1 "$dir/bf16-compare.log")"
  else
    row "gpt2 (adamw, bf16 mixed)" FAIL "$(grep -m1 -i error "$dir/bf16.log" "$dir/bf16-ref.log" || tail -1 "$dir/bf16-ref.log")"
  fi
  # The casts folded into the loss and the layer norms (and the residual
  # chains and AdamW groups fused), as by default, against the same step
  # op by op: the folded kernels compute in float32 and round once where
  # the casts did; within 1e-6, as LLaMA's fused kernels.
  if [[ -f $dir/bf16.jsonl ]]; then
    unfused_row "gpt2 bf16 casts folded vs not" gpt2-bf16.mrp "$dir" bf16.jsonl bf16-unfolded
  fi
fi

# fp16 with dynamic loss scaling: the scale follows the rule step by step
# (halved after each overflow, doubled after 3 clean steps), and the first
# step, before any update, is within 1e-3 of PyTorch's fp32 loss.
if [[ -f $B/models/gpt2-fp16.mrp && -f $dir/ref.jsonl ]]; then
  rm -f "$dir"/fp16*.jsonl
  if "$BIN/merak-exec" "$B/models/gpt2-fp16.mrp" --device "$DEVICE" --init "$dir/weights.safetensors" \
       --data "$dir/batches.safetensors" --steps "$STEPS" --log-jsonl "$dir/fp16.jsonl" > "$dir/fp16.log" 2>&1; then
    if "$PY" "$B/src/test/e2e/Inputs/check_loss_scale.py" "$dir/fp16.jsonl" --init 1048576 \
         --window 3 > "$dir/fp16-rule.log" 2>&1 &&
       "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/fp16.jsonl" "$dir/ref.jsonl" --steps 1 \
         --rtol 1e-3 > "$dir/fp16-compare.log" 2>&1; then
      verdict=ok
    else
      verdict=FAIL
    fi
    row "gpt2 (adamw, fp16, loss scaling)" "$verdict" \
      "$(tail -1 "$dir/fp16-rule.log"); $(tail -1 "$dir/fp16-compare.log")"
  else
    row "gpt2 (adamw, fp16, loss scaling)" FAIL "$(grep -m1 -i error "$dir/fp16.log" || tail -1 "$dir/fp16.log")"
  fi
fi

# Text generation (the key-value cache's update_slice and the decode
# step): greedy tokens from prompts of different lengths in one batch equal
# PyTorch's, which recomputes the whole sequence for each token, as
# test/e2e/generate/greedy.test on the CPU.
GEN=$B/src/test/e2e/generate/Inputs/generate_reference.py
for m in gpt2 llama; do
  wanted generation || break
  [[ -f $B/models/$m-gen.mrp && -f $B/models/$m.pt ]] || continue
  dir=$O/$m-gen
  mkdir -p "$dir"
  printf '5 17 33 2 60 14\n71 8 90\n' > "$dir/prompts.txt"
  if "$PY" "$GEN" weights "$B/models/$m.pt" --sharpen 20 --out "$dir/weights.safetensors" > "$dir/weights.log" 2>&1 &&
     "$BIN/merak-exec" "$B/models/$m-gen.mrp" --device "$DEVICE" --generate \
       --init "$dir/weights.safetensors" --prompts "$dir/prompts.txt" --max-new-tokens 9 > "$dir/merak.out" 2>&1 &&
     "$PY" "$GEN" greedy --fixture "$m" --weights "$dir/weights.safetensors" \
       --prompts "$dir/prompts.txt" --max-new-tokens 9 > "$dir/ref.out" 2>&1; then
    if diff <(grep '^prompt' "$dir/ref.out") <(grep '^prompt' "$dir/merak.out") > "$dir/diff.txt"; then
      row "$m generation (greedy)" ok "tokens equal PyTorch's; $(grep -m1 -o 'in [0-9.]* s.*' "$dir/merak.out" || tail -1 "$dir/merak.out")"
    else
      row "$m generation (greedy)" FAIL "tokens differ: $(head -3 "$dir/diff.txt" | tr '\n' ' ')"
    fi
  else
    row "$m generation (greedy)" FAIL "$(grep -h -m1 -i error "$dir"/*.log "$dir"/*.out | head -1)"
  fi
done

echo "== nccl"
# Two ranks with a GPU each, collectives and pipeline transfers on NCCL
# (--comm and --p2p default to it), against PyTorch's run of GPT-2 on one
# GPU above (the pipelines' against one over the same micro-batches). With
# DEVICE=cpu, the same rows on Gloo.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
dir=$O/gpt2
if ! wanted nccl; then
  :
elif [[ $DEVICE == cuda && $gpus -lt 1 ]]; then
  row "nccl (two ranks)" skip "no GPU here"
elif [[ ! -f $dir/ref.jsonl ]]; then
  row "nccl (two ranks)" skip "GPT-2 not run"
else
  export MERAK_RENDEZVOUS_DIR=$O/rendezvous
  "$PY" "$B/src/test/e2e/make_batches.py" --fixture gpt2 --fixtures-dir "$FIX" --steps "$STEPS" \
    --seed 0 --cycle 1 --microbatches 2 --out "$dir/batches-mb2.safetensors" > /dev/null 2>&1
  "$PY" "$B/src/test/e2e/reference.py" --model "$B/models/gpt2.pt" --fixture gpt2 \
    --data "$dir/batches-mb2.safetensors" --steps "$STEPS" --optimizer adamw --lr 1e-3 \
    --weight-decay 0.1 --device "$DEVICE" --microbatches 2 \
    --out-jsonl "$dir/ref-mb2.jsonl" > "$dir/ref-mb2.log" 2>&1
  on=$([[ $DEVICE == cuda ]] && echo "NCCL (2 GPUs)" || echo "Gloo (2 CPU ranks)")
  # Each plan on the default transfers; the pipelines again with --p2p=shm
  # (with CUDA: GPU to GPU through a ring in the receiver's memory, CUDA
  # IPC; on CPU ranks: POSIX shared memory).
  runs="dp2 tp2 pp2 pp2-dynamic pp2:shm pp2-dynamic:shm"
  shm_via=$([[ $DEVICE == cuda ]] && echo "NCCL, transfers on CUDA IPC (2 GPUs)" || echo "Gloo, transfers on /dev/shm")
  if [[ $DEVICE == cuda && $gpus -lt 2 ]]; then
    # One GPU: NCCL's collectives need a GPU per rank of a mesh, but the
    # pipelines' stages (a rank each) may share it, their transfers
    # through CUDA IPC.
    row "nccl (two ranks)" skip "$gpus GPU here: NCCL needs a GPU per rank of a mesh (the pipelines below share it)"
    runs="pp2:shm pp2-dynamic:shm"
    shm_via="CUDA IPC (2 ranks on 1 GPU)"
  fi
  for run in $runs; do
    plan=${run%%:*} p2p=() via=$on tag=$plan
    if [[ $run == *:shm ]]; then
      p2p=(--p2p shm) tag=$plan-shm via=$shm_via
    fi
    [[ -f $B/models/gpt2-$plan.mrp ]] || continue
    data=$dir/batches.safetensors ref=$dir/ref.jsonl
    [[ $plan == pp2* ]] && data=$dir/batches-mb2.safetensors ref=$dir/ref-mb2.jsonl
    rm -f "$dir/nccl-$tag.jsonl"
    start=$(date +%s%N)
    "$BIN/merak-exec" "$B/models/gpt2-$plan.mrp" --nproc 2 --device "$DEVICE" "${p2p[@]}" \
      --init "$dir/weights.safetensors" --data "$data" --steps "$STEPS" \
      --comm-timeout 120 --log-jsonl "$dir/nccl-$tag.jsonl" > "$dir/nccl-$tag.log" 2>&1
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    if "$PY" "$B/src/test/e2e/compare_losses.py" "$dir/nccl-$tag.jsonl" "$ref" \
        --rtol 1e-4 > "$dir/nccl-$tag-compare.log" 2>&1; then
      row "gpt2 $plan on $via" ok "$(tail -1 "$dir/nccl-$tag-compare.log"); wall $ms ms"
    else
      row "gpt2 $plan on $via" FAIL "$(grep -m1 -i error "$dir/nccl-$tag.log" || tail -1 "$dir/nccl-$tag-compare.log")"
    fi
  done
  unset MERAK_RENDEZVOUS_DIR
fi

echo "== shared"
# Every kind of partitioned plan with its ranks sharing one GPU (the
# first): collectives on Gloo through host copies of the GPU's tensors
# (--comm=gloo; NCCL refuses two ranks on one device), pipeline transfers
# between the ranks' GPU memory through CUDA IPC (--p2p=shm), each against
# PyTorch's run of its model on one GPU over the same micro-batches: GPT-2
# (its weights and batches from the models section), and the
# mixture-of-experts decoders for expert parallelism, each also on one
# rank. With DEVICE=cpu, the same rows on CPU ranks.
dir=$O/gpt2
if ! wanted shared || [[ ! -f $B/models/shared-plans.txt ]]; then
  :
elif [[ $DEVICE == cuda && $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') -lt 1 ]]; then
  row "shared (ranks on one GPU)" skip "no GPU here"
elif [[ ! -f $dir/ref.jsonl ]]; then
  row "shared (ranks on one GPU)" skip "GPT-2 not run"
elif ! grep -q "communicators:.*gloo" <<< "$("$BIN/merak-exec" --help 2>&1)"; then
  row "shared (ranks on one GPU)" FAIL "this merak-exec has no --comm=gloo (built without the Gloo library)"
else
  export MERAK_RENDEZVOUS_DIR=$O/rendezvous-shared
  first=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | head -1)
  on=$([[ $DEVICE == cuda ]] && echo GPU || echo CPU)
  while read -r name nproc mb model options; do
    if [[ $model == gpt2 ]]; then
      weights=$dir/weights.safetensors data=$dir/batches.safetensors ref=$dir/ref.jsonl
      if (( mb > 1 )); then
        data=$dir/batches-mb$mb.safetensors ref=$dir/ref-mb$mb.jsonl
        [[ -f $ref ]] || {
          "$PY" "$B/src/test/e2e/make_batches.py" --fixture gpt2 --fixtures-dir "$FIX" \
            --steps "$STEPS" --seed 0 --cycle 1 --microbatches "$mb" --out "$data" > /dev/null 2>&1
          "$PY" "$B/src/test/e2e/reference.py" --model "$B/models/gpt2.pt" --fixture gpt2 \
            --data "$data" --steps "$STEPS" --optimizer adamw --lr 1e-3 --weight-decay 0.1 \
            --device "$DEVICE" --microbatches "$mb" --out-jsonl "$ref" > "$dir/ref-mb$mb.log" 2>&1
        }
      fi
    else
      mkdir -p "$O/$model"
      weights=$B/models/$model.weights.safetensors data=$B/models/$model.data.safetensors
      ref=$O/$model/ref.jsonl
      [[ -f $ref ]] ||
        "$PY" "$B/src/test/e2e/reference.py" --model "$B/models/$model.pt" \
          --eager "$B/src/test/e2e/models/Inputs/moe_models.py:$(cat "$B/models/$model.eager")" \
          --data "$data" --steps "$STEPS" --optimizer adamw --lr 1e-3 --device "$DEVICE" \
          --out-jsonl "$ref" > "$O/$model/ref.log" 2>&1
    fi
    log=$O/$model/shared-$name
    rm -f "$log.jsonl"
    start=$(date +%s%N)
    ${first:+env CUDA_VISIBLE_DEVICES=$first} \
      "$BIN/merak-exec" "$B/models/shared-$name.mrp" --nproc "$nproc" --device "$DEVICE" \
      --comm gloo --p2p shm --init "$weights" --data "$data" --steps "$STEPS" \
      --comm-timeout 120 --log-jsonl "$log.jsonl" > "$log.log" 2>&1
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    label="$name, $nproc rank$( ((nproc > 1)) && echo s) on 1 $on"
    [[ $options == - ]] && options="one rank"
    if "$PY" "$B/src/test/e2e/compare_losses.py" "$log.jsonl" "$ref" --rtol 1e-4 \
        > "$log-compare.log" 2>&1; then
      row "$label" ok "$options: $(tail -1 "$log-compare.log"); wall $ms ms"
    else
      row "$label" FAIL "$options: $(grep -m1 -i error "$log.log" || tail -1 "$log-compare.log")"
    fi
  done < "$B/models/shared-plans.txt"
  unset MERAK_RENDEZVOUS_DIR
fi

echo "== compute-sanitizer"
# One GPT-2 step with each attention form (the tiled FlashAttention kernels
# share tiles between warps through shared memory: racecheck's concern).
if ! wanted sanitizer; then
  :
elif [[ $DEVICE == cuda ]] && command -v compute-sanitizer > /dev/null && [[ -f $O/gpt2/weights.safetensors ]]; then
  for program in gpt2-flash gpt2; do
    [[ -f $B/models/$program.mrp ]] || continue
    for tool in memcheck racecheck; do
      timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$BIN/merak-exec" "$B/models/$program.mrp" \
        --device "$DEVICE" --init "$O/gpt2/weights.safetensors" --data "$O/gpt2/batches.safetensors" \
        --steps 1 > "$O/sanitizer-$program-$tool.log" 2>&1
      s=$?
      row "compute-sanitizer $tool ($program)" "$([[ $s == 0 ]] && echo ok || echo FAIL)" \
        "one step: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/sanitizer-$program-$tool.log" || { [[ $s == 124 ]] && echo "timed out"; } || tail -1 "$O/sanitizer-$program-$tool.log")"
    done
  done
else
  row "compute-sanitizer" skip "compute-sanitizer not found or GPT-2 not run"
fi
# The attention kernel cases alone (the tensor-core kernels take the bf16
# and f16 ones whose heads are multiples of 16, which the fixtures' heads
# are not).
if wanted sanitizer && [[ $DEVICE == cuda ]] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$BIN/merak-kernel-check" --cases "$B/cases/flash_attention.json" --device cuda \
      --expected "$B/cases/expected.safetensors" > "$O/sanitizer-flash-cases-$tool.log" 2>&1
    s=$?
    row "compute-sanitizer $tool (flash attention cases)" "$([[ $s == 0 ]] && echo ok || echo FAIL)" \
      "$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/sanitizer-flash-cases-$tool.log" || { [[ $s == 124 ]] && echo "timed out"; } || tail -1 "$O/sanitizer-flash-cases-$tool.log"); $(grep -E '^[0-9]+ passed' "$O/sanitizer-flash-cases-$tool.log" | tail -1)"
  done
fi

{
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$O/table.md"

# Last, so that the table is complete even if the benchmark is cut short.
if [[ -n ${BENCH:-} && -f $B/bench/gpt2-small-bf16.mrp ]]; then
  echo "== benchmark: GPT-2 small"
  "$PY" "$B/src/bench/gpu_gpt2.py" run --dir "$B/bench" --merak-exec "$BIN/merak-exec" \
    ${BENCH_ARGS:-} 2>&1 | tee "$O/bench.md"
fi
exit $failed
