#!/usr/bin/env bash
# One device run of the GPU checks and benchmarks, sized for a short lease
# of a one-GPU machine: scripts/gpu-check.sh as three instances side by
# side (kernel cases, GPT-2 and LLaMA with every row that needs them, GPT-2
# on two GPUs with NCCL where there are two, and the compute-sanitizer
# runs; BERT, T5, ResNet-18, ViT and text generation; GPT-2's partitioned
# plans with their ranks sharing the GPU),
# then, alone on the GPU, bench/gpu_attention.py and bench/gpu_gpt2.py.
# Results land in OUT_DIR: table.md (every row), kernels-notok.txt,
# attention.md, bench.md, check-a.log, check-b.log, check-c.log and
# logs.tgz (the rows' logs without weights and batches).
#
# Usage, from this repository's root on the GPU machine, with the bundle of
# scripts/gpu-bundle.sh carried there:
#   scripts/gpu-session.sh BUNDLE.tar.xz OUT_DIR
# Time limits (seconds): CHECK_T (each instance, 250), SAN_T (each
# compute-sanitizer run, 60), ATT_T (70), BENCH_T (180); BENCH_ARGS for
# bench/gpu_gpt2.py run (default --no-compile: torch.compile's compilation
# takes a minute or more; pass "" to time it too).
set -u
BUNDLE=${1:?usage: gpu-session.sh BUNDLE.tar.xz OUT_DIR}
OUT=${2:?usage: gpu-session.sh BUNDLE.tar.xz OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
T0=$(date +%s)
elapsed() { echo "[$(($(date +%s) - T0)) s] $*"; }
B=$(mktemp -d)
tar xJf "$BUNDLE" -C "$B"
elapsed "bundle unpacked"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
SECTIONS="kernels models nccl sanitizer" MODELS="gpt2 llama" SANITIZER_TIMEOUT=${SAN_T:-60} \
  timeout "${CHECK_T:-250}" bash scripts/gpu-check.sh "$B" "$B/oa" > "$OUT/check-a.log" 2>&1 &
a=$!
SECTIONS="models generation" MODELS="bert t5 resnet18 vit_b_16" \
  timeout "${CHECK_T:-250}" bash scripts/gpu-check.sh "$B" "$B/ob" > "$OUT/check-b.log" 2>&1 &
SECTIONS="models shared" MODELS="gpt2" \
  timeout "${CHECK_T:-250}" bash scripts/gpu-check.sh "$B" "$B/oc" > "$OUT/check-c.log" 2>&1 &
wait $a
elapsed "check a: status $?"
wait
elapsed "checks b and c done"
# The rows as they were printed (a check cut short prints no table).
cat "$OUT/check-a.log" "$OUT/check-b.log" "$OUT/check-c.log" | grep '^| ' | sort -u > "$OUT/table.md"
cat "$OUT/table.md"
grep -v '^ok ' "$B/oa/kernels.txt" > "$OUT/kernels-notok.txt" 2> /dev/null
# The benchmarks run the bundle's binaries directly: its libraries first.
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout "${ATT_T:-70}" python3 bench/gpu_attention.py --kernel-check "$B/bin/merak-kernel-check" \
  --out "$B/attention-cases.json" > "$OUT/attention.md" 2>&1
elapsed "attention benchmark: status $?"
cat "$OUT/attention.md"
timeout "${BENCH_T:-180}" python3 bench/gpu_gpt2.py run --dir "$B/bench" \
  --merak-exec "$B/bin/merak-exec" ${BENCH_ARGS---no-compile} > "$OUT/bench.md" 2>&1
elapsed "GPT-2 small benchmark: status $?"
cat "$OUT/bench.md"
tar czf "$OUT/logs.tgz" --exclude='*.safetensors' --exclude=fixtures -C "$B" oa ob oc 2> /dev/null
elapsed done
