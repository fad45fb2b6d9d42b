#!/usr/bin/env bash
# Makes the folder scripts/gpu-check.sh runs from on a GPU machine that has
# CUDA and a PyTorch with CUDA but none of this project's packages: the
# runtime built alone with the CUDA backend (no MLIR, no LibTorch) and the
# shared libraries it needs beyond the CUDA ones, the kernel cases with the
# CPU backend's results, the model fixtures compiled to rank programs, and
# the Python scripts that make weights and batches and train PyTorch's side.
#
# Usage: scripts/gpu-bundle.sh [BUNDLE_DIR]   (default .gpu, and .gpu.tar.xz
# beside it; run after
# scripts/build.sh, from the repository root; BUILD=DIR for another build,
# RUNTIME=DIR for other binaries than BUILD/runtime-minimal's)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$ROOT/.gpu}
RUNTIME=${RUNTIME:-$BUILD/runtime-minimal}
FIXTURES=$BUILD/test/fixtures
MODELS=(gpt2 llama bert t5 resnet18 vit_b_16)

die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
[[ -x $BUILD/bin/merak-opt ]] || die "$BUILD/bin/merak-opt is missing: build first (scripts/build.sh)"
[[ -x $RUNTIME/bin/merak-exec ]] || die "$RUNTIME/bin/merak-exec is missing: the runtime variants are built with the main build"
ldd "$RUNTIME/bin/merak-exec" | grep -q libcudnn || [[ -n ${ALLOW_NO_CUDA:-} ]] ||
  die "$RUNTIME/bin/merak-exec has no CUDA backend (no CUDA toolkit at configure time?)"

rm -rf "$OUT"
mkdir -p "$OUT"/{bin,lib,cases,models,src/test/e2e,src/test/fixtures,src/python,src/scripts}
cp "$RUNTIME/bin/merak-exec" "$RUNTIME/bin/merak-kernel-check" "$OUT/bin/"
# The shared libraries a machine without this project's packages lacks:
# everything but the C and C++ runtimes and the CUDA libraries.
ldd "$RUNTIME/bin/merak-exec" "$RUNTIME/bin/merak-kernel-check" |
  awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*)\.so|libcublas|libcudnn|libcuda|libnccl' |
  while read -r lib; do cp -L "$lib" "$OUT/lib/"; done

# What building the runtime there needs beyond CUDA, CMake and a C++
# compiler (gpu-check.sh --build): abseil and nlohmann-json from this
# machine's packages, as a relocatable prefix (their CMake files find
# their libraries relative to themselves).
DEPS=$OUT/deps
mkdir -p "$DEPS/include" "$DEPS/lib/x86_64-linux-gnu/cmake" "$DEPS/share/cmake"
cp -r /usr/include/absl /usr/include/nlohmann "$DEPS/include/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/absl "$DEPS/lib/x86_64-linux-gnu/cmake/"
cp -a /usr/lib/x86_64-linux-gnu/libabsl_*.so* "$DEPS/lib/x86_64-linux-gnu/"
cp -r /usr/share/cmake/nlohmann_json "$DEPS/share/cmake/"
# The Gloo library (--comm=gloo of the runtime built alone: ranks sharing
# a GPU): its headers and library; the libraries it needs are in lib/
# with merak-exec's.
GLOO_LIB=$(ldd "$RUNTIME/bin/merak-exec" | awk '/libgloo/{print $3}')
if [[ -n $GLOO_LIB ]]; then
  cp -r /usr/include/gloo "$DEPS/include/"
  mkdir -p "$DEPS/lib"
  cp -a "$(dirname "$GLOO_LIB")"/libgloo.so* "$DEPS/lib/"
fi

# Kernel cases: each op alone on the CPU backend (ATen's kernels).
cp "$ROOT"/test/cuda/cases/*.json "$OUT/cases/"
"$BUILD/bin/merak-kernel-check" --cases "$(ls "$OUT"/cases/*.json | paste -sd,)" \
  --device cpu --write-expected "$OUT/cases/expected.safetensors" \
  --max-case-bytes "${MAX_CASE_BYTES:-1100000}" | tail -2

# The fixtures' training steps, compiled here; weights and batches are
# made there from the archives (the large vision archives are traced again
# there, from the same model code). Each model's settings: optimizer, learning rate, weight decay, whether
# one batch is repeated (--cycle) and the batch size, as its
# test/e2e/train-*-adamw.test has them, except ResNet-18: batch norm over
# the fixture's two samples and AdamW's sign-like first steps make its
# training chaotic (on the CPU, oneDNN's GEMMs instead of the BLAS's move
# the loss by 1.4e-3 relative by step 10), so it trains 16 samples with
# plain SGD, where the same change moves it by 1e-7.
declare -A SETTINGS=([gpt2]="adamw 1e-3 0.1 1 2" [llama]="adamw 1e-3 0.1 1 2"
  [bert]="adamw 1e-3 0.1 1 2" [t5]="adamw 1e-3 0.1 1 2"
  [resnet18]="sgd 1e-3 0 0 16" [vit_b_16]="adamw 1e-4 0.1 0 2")
mkdir -p "$OUT/fixtures"
for m in "${MODELS[@]}"; do
  read -r opt lr wd cycle batch <<< "${SETTINGS[$m]}"
  echo "$opt $lr $wd $cycle $batch" > "$OUT/models/$m.settings"
  src=$FIXTURES
  if [[ $batch != 2 ]]; then
    "${PYTHON:-python3}" "$ROOT/test/fixtures/trace_all.py" --out "$OUT/fixtures" \
      --only "$m" --batch "$batch" > /dev/null
    src=$OUT/fixtures
  fi
  "$BUILD/bin/merak-opt" "$src/$m.pt" \
    --merak-train="optimizer=$opt lr=$lr weight-decay=$wd" -o "$OUT/models/$m.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/$m.mlir" --merak-to-rank-program \
    -o "$OUT/models/$m.mrp"
  rm "$OUT/models/$m.mlir"
  cp "$src/$m.inputs.json" "$OUT/models/"
  if (( $(stat -c %s "$src/$m.pt") < 4000000 )); then
    cp "$src/$m.pt" "$OUT/models/"
  fi
done
rm -rf "$OUT/fixtures"
# GPT-2 in mixed precision (fp32 master weights): bf16 matrix products, as
# test/e2e/train-gpt2-bf16.test trains it on the CPU, and fp16 ones with a
# dynamic loss scale from 2^20 doubling after 3 clean steps, as
# test/e2e/train-gpt2-fp16.test.
for precision in "bf16" "fp16 loss-scale-init=1048576 loss-scale-window=3"; do
  name=gpt2-${precision%% *}
  "$BUILD/bin/merak-opt" "$FIXTURES/gpt2.pt" \
    --merak-train="optimizer=adamw lr=1e-3 weight-decay=0.1 precision=$precision" \
    -o "$OUT/models/$name.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/$name.mlir" --merak-to-rank-program \
    -o "$OUT/models/$name.mrp"
  rm "$OUT/models/$name.mlir"
done
# An MLP with dropout in training (p = 0.3, test/Runtime/dropout.test):
# gpu-check.sh trains it with the mask drawn inside a fused kernel and op
# by op by the dropout kernel.
"${PYTHON:-python3}" "$ROOT/test/Runtime/Inputs/make_dropout.py" "$OUT/models/dropout" \
  --seed 5 --steps 10 > /dev/null
"$BUILD/bin/merak-opt" "$OUT/models/dropout/mlp.pt" --merak-train="optimizer=sgd lr=0.1" \
  -o "$OUT/models/dropout/mlp.mlir"
"$BUILD/bin/merak-translate" "$OUT/models/dropout/mlp.mlir" --merak-to-rank-program \
  -o "$OUT/models/dropout/mlp.mrp"
"${PYTHON:-python3}" "$ROOT/python/merak_trace.py" weights "$OUT/models/dropout/mlp.pt" \
  "$OUT/models/dropout/weights.safetensors" > /dev/null
rm "$OUT/models/dropout/mlp.mlir" "$OUT/models/dropout/mlp.pt" "$OUT/models/dropout/reference.jsonl"
# GPT-2 and LLaMA with attention in the FlashAttention form (the rows'
# log-sum-exp kept, the tiled kernels), fp32, as
# test/e2e/train-flash-attention.test trains them on the CPU.
for m in gpt2 llama; do
  read -r opt lr wd cycle batch < "$OUT/models/$m.settings"
  "$BUILD/bin/merak-opt" "$FIXTURES/$m.pt" \
    --merak-train="optimizer=$opt lr=$lr weight-decay=$wd flash-attention=true" \
    -o "$OUT/models/$m-flash.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/$m-flash.mlir" --merak-to-rank-program \
    -o "$OUT/models/$m-flash.mrp"
  rm "$OUT/models/$m-flash.mlir"
done
# GPT-2 over two GPUs on NCCL (gpu-check.sh's "nccl" section, where the
# machine has two): data-parallel, tensor-parallel, and a 1F1B pipeline of
# 2 micro-batches and the dynamic schedule (pipeline transfers on NCCL),
# as test/e2e/distributed and test/e2e/pipeline train them on CPU ranks.
declare -A PLANS=([dp2]="--merak-parallelize=dp=2" [tp2]="--merak-parallelize=tp=2"
  [pp2]="--merak-parallelize=pp=2 microbatches=2"
  [pp2-dynamic]="--merak-parallelize=pp=2 microbatches=2 schedule=dynamic")
for plan in "${!PLANS[@]}"; do
  "$BUILD/bin/merak-opt" "$FIXTURES/gpt2.pt" \
    --merak-train="optimizer=adamw lr=1e-3 weight-decay=0.1" "${PLANS[$plan]}" \
    -o "$OUT/models/gpt2-$plan.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/gpt2-$plan.mlir" --merak-to-rank-program \
    -o "$OUT/models/gpt2-$plan.mrp"
  rm "$OUT/models/gpt2-$plan.mlir"
done
# Partitioned plans with their ranks sharing one GPU (gpu-check.sh's
# "shared" section): a plan of every kind test/e2e trains on CPU ranks,
# collectives on Gloo through host copies of the GPU's tensors
# (--comm=gloo) and pipeline transfers between the ranks' GPU memory
# (--p2p=shm). Each: name, ranks, micro-batches, model, then the
# --merak-parallelize options ("-": none, the model on one rank). GPT-2
# for data, tensor, sequence and pipeline parallelism and ZeRO; the
# mixture-of-experts decoders of test/e2e/models/language-moe.test
# (traced here, their weights and batches carried) for expert parallelism.
SHARED_PLANS=(
  "dp2 2 1 gpt2 dp=2"
  "tp2 2 1 gpt2 tp=2"
  "sp-megatron 2 1 gpt2 tp=2 sp=megatron"
  "sp-ulysses 2 1 gpt2 sp=ulysses sp-size=2"
  "zero1 2 1 gpt2 dp=2 zero=1"
  "zero2 2 1 gpt2 dp=2 zero=2"
  "zero3 2 1 gpt2 dp=2 zero=3"
  "dp2-tp2 4 1 gpt2 dp=2 tp=2"
  "dp2-tp2-zero3 4 1 gpt2 dp=2 tp=2 zero=3"
  "pp2-gpipe 2 2 gpt2 pp=2 microbatches=2 schedule=gpipe"
  "pp2-1f1b 2 2 gpt2 pp=2 microbatches=2 schedule=1f1b"
  "pp2-interleaved 2 2 gpt2 pp=2 virtual=2 stages=1,2,4 microbatches=2 schedule=interleaved-1f1b"
  "pp2-zb-h1 2 2 gpt2 pp=2 microbatches=2 schedule=zb-h1"
  "pp2-dynamic 2 2 gpt2 pp=2 microbatches=2 schedule=dynamic"
  "pp2-shifted 2 4 gpt2 pp=2 microbatches=4 schedule=merak-shifted-critical-path"
  "dp2-pp2 4 4 gpt2 dp=2 pp=2 microbatches=4"
  "dp2-tp2-pp2 8 4 gpt2 dp=2 tp=2 pp=2 microbatches=4 schedule=1f1b"
  "deepseek 1 1 moe-ds -"
  "deepseek-ep2-tp2 4 1 moe-ds ep=2 tp=2"
  "deepseek-ep2-zero1 2 1 moe-ds ep=2 zero=1"
  "mixtral 1 1 moe-mx -"
  "mixtral-dp2-ep2 4 1 moe-mx dp=2 ep=2"
  "mixtral-ep2-pp2 4 1 moe-mx8 ep=2 pp=2 microbatches=2"
)
# The mixture-of-experts models: archive, weights, 10 steps of batches
# (Mixtral's 8 samples a step for the pipeline's micro-batches) and the
# eager module PyTorch trains.
mkdir -p "$OUT/src/test/e2e/models/Inputs"
cp "$ROOT/test/e2e/models/Inputs/moe_models.py" "$OUT/src/test/e2e/models/Inputs/"
for spec in "moe-ds deepseek DeepSeekForCausalLM" "moe-mx mixtral MixtralForCausalLM" \
    "moe-mx8 mixtral MixtralForCausalLM 8"; do
  read -r model kind class batch <<< "$spec"
  "${PYTHON:-python3}" "$ROOT/test/e2e/models/Inputs/moe_models.py" "$kind" \
    "$OUT/models/$model.pt" "$OUT/models/$model.data.safetensors" 10 $batch > /dev/null
  "${PYTHON:-python3}" "$ROOT/python/merak_trace.py" weights "$OUT/models/$model.pt" \
    "$OUT/models/$model.weights.safetensors" > /dev/null
  echo "$class()" > "$OUT/models/$model.eager"
done
: > "$OUT/models/shared-plans.txt"
for entry in "${SHARED_PLANS[@]}"; do
  read -r name nproc mb model options <<< "$entry"
  source=$FIXTURES/$model.pt train="optimizer=adamw lr=1e-3 weight-decay=0.1"
  if [[ $model == moe-* ]]; then
    source=$OUT/models/$model.pt train="optimizer=adamw lr=1e-3"
  fi
  plan=()
  [[ $options == - ]] || plan=(--merak-parallelize="$options")
  "$BUILD/bin/merak-opt" "$source" --merak-train="$train" "${plan[@]}" \
    -o "$OUT/models/shared-$name.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/shared-$name.mlir" \
    --merak-to-rank-program -o "$OUT/models/shared-$name.mrp"
  rm "$OUT/models/shared-$name.mlir"
  echo "$name $nproc $mb $model $options" >> "$OUT/models/shared-plans.txt"
done
# Text generators (--merak-kv-cache: @prefill and @decode), as
# test/e2e/generate/greedy.test makes them on the CPU.
for m in gpt2 llama; do
  "$BUILD/bin/merak-opt" "$FIXTURES/$m.pt" --merak-kv-cache -o "$OUT/models/$m-gen.mlir"
  "$BUILD/bin/merak-translate" "$OUT/models/$m-gen.mlir" --merak-to-rank-program \
    -o "$OUT/models/$m-gen.mrp"
  rm "$OUT/models/$m-gen.mlir"
done
mkdir -p "$OUT/src/test/e2e/Inputs" "$OUT/src/test/e2e/generate/Inputs"
cp "$ROOT/test/e2e/generate/Inputs/generate_reference.py" "$OUT/src/test/e2e/generate/Inputs/"
cp "$ROOT"/test/e2e/{reference.py,compare_losses.py,make_batches.py} "$OUT/src/test/e2e/"
cp "$ROOT"/test/e2e/Inputs/check_loss_scale.py "$OUT/src/test/e2e/Inputs/"
cp "$ROOT"/test/fixtures/*.py "$OUT/src/test/fixtures/"
cp "$ROOT"/python/*.py "$OUT/src/python/"
cp "$ROOT/scripts/gpu-check.sh" "$OUT/src/scripts/"
# The GPT-2 small benchmark's compiled steps (bench/gpu_gpt2.py).
mkdir -p "$OUT/src/bench" "$OUT/bench"
cp "$ROOT/bench/gpu_gpt2.py" "$OUT/src/bench/"
"${PYTHON:-python3}" "$ROOT/bench/gpu_gpt2.py" prepare --build "$BUILD" \
  --out "$OUT/bench" 2> /dev/null
du -sh "$OUT"
# One compressed file to carry: tar xJf BUNDLE.tar.xz -C DIR there. A
# dictionary larger than either binary, so that the second one's kernels
# (the same machine code as the first's) cost next to nothing: 48 MB
# instead of 62 with xz's default.
tar -C "$OUT" -cf - . | xz -T0 --lzma2=preset=6,dict=128MiB > "$OUT.tar.xz"
du -sh "$OUT.tar.xz"
