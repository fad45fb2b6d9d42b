#!/usr/bin/env bash
# Builds the runtime side of Merak with the sanitizers (GCC, MERAK_SANITIZE):
# merak-exec and the runtime's unit tests, and runs them and a part of the
# lit suite under them, the tests taking the main build's merak-opt and
# merak-translate (scripts/build.sh builds it first where needed); exits
# non-zero when a test failed or a sanitizer reported anything, in any
# process (docs/sanitizers.md).
#
# Usage: scripts/sanitize.sh [address|thread]
#   address (default): AddressSanitizer, LeakSanitizer and
#     UndefinedBehaviorSanitizer in build-san/ ($MERAK_SANITIZE_BUILD_DIR);
#     the runtime's GoogleTest units and the lit tests listed below.
#   thread: ThreadSanitizer in build-tsan/ ($MERAK_TSAN_BUILD_DIR); the
#     executor's units, overlapped collectives and the pipelines.
# Reports are written to <build>/sanitizer-logs/ (one file per process
# that reported) and printed at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-address}"
case "$mode" in
  address)
    build="${MERAK_SANITIZE_BUILD_DIR:-$root/build-san}"
    sanitize=address,undefined
    ;;
  thread)
    build="${MERAK_TSAN_BUILD_DIR:-$root/build-tsan}"
    sanitize=thread
    ;;
  *)
    echo "sanitize.sh: the mode is address or thread, not '$mode'" >&2
    exit 2
    ;;
esac

# Units run whole, one process per binary: ctest would start one per suite,
# each loading LibTorch and MLIR under the sanitizer.
if [ "$mode" = address ]; then
  units=(MerakRuntimeTests MerakProgramLoweringTests MerakCpuKernelTests
    MerakCommunicatorTests)
  # The runtime's files, options and errors, and training against
  # PyTorch: one rank, data parallel by hand, tensor and data parallel
  # plans (with ZeRO and sequence parallelism), overlapped collectives, a
  # pipeline (interleaved 1F1B, saved and resumed). The compiler's passes
  # are not instrumented here: the fuzz step runs the MLIR parser, the
  # verifier and the lowering to rank programs under ASan and UBSan.
  lit_tests=(
    Runtime/bad-sizes.test
    Runtime/check-numerics.test
    Runtime/checkpoint-fields.test
    Runtime/dropout.test
    Runtime/errors.test
    Runtime/huge-shapes.test
    Runtime/linear-regression.mlir
    Runtime/nonfinite.test
    Runtime/print-program.mlir
    Runtime/resume.test
    Runtime/stale-temporaries.test
    Runtime/synthetic.mlir
    Runtime/tokens.mlir
    Runtime/unsupported-op.mlir
    e2e/train-gpt2-sgd.test
    e2e/train-llama-adamw.test
    e2e/distributed/linear-dp.mlir
    e2e/distributed/overlapped-collectives.test
    e2e/parallel/train-gpt2-parallel.test
    e2e/pipeline/checkpoint.test
    e2e/eval/evaluate.test
  )
else
  # The executor's units (pipeline plans, the trainer, lowering and
  # running steps), collectives among in-process ranks, and multi-rank
  # runs: overlapped collectives, ranks that fail (heartbeat and watchdog
  # threads), every pipeline schedule on 2 and 4 stages and in 3D. Not the
  # kernels on several threads: OpenMP (libgomp) is not instrumented, so
  # TSan sees no order between a parallel region and the code around it;
  # the runs here use --threads 1. Not the pipelines' random-fault tests:
  # their 2 s rendezvous time-out is shorter than a rank's start under TSan
  # on a busy machine.
  units=(MerakRuntimeTests MerakProgramLoweringTests MerakCommunicatorTests)
  lit_tests=(
    e2e/distributed/linear-dp.mlir
    e2e/distributed/mlp-collectives.test
    e2e/distributed/overlapped-collectives.test
    e2e/distributed/rank-failure.test
    e2e/pipeline/checkpoint.test
    e2e/pipeline/errors.test
    e2e/pipeline/train-3d.test
    e2e/pipeline/train-gpt2-pp2.test
    e2e/pipeline/train-gpt2-pp4.test
  )
fi

# The lit tests are the main build's, run with this build's merak-exec
# ahead of its tools (MERAK_SANITIZED_TOOLS_DIR, test/lit.cfg.py).
main_build="${MERAK_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"

start=$SECONDS
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1 (with the line tables MERAK_SANITIZE adds): quicker to build than
  # -O3 and stacks that keep their frames. Assertions off, as in the main
  # build.
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DMERAK_SANITIZE="$sanitize" -DMERAK_BUILD_RUNTIME_VARIANTS=OFF >/dev/null
fi
cmake --build "$build" --target merak-exec "${units[@]}" -- -j"$(nproc)"
echo "sanitize: configure and build took $((SECONDS - start)) s"

logs="$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
supp="$root/scripts/sanitizers"
symbolizer=/usr/lib/llvm-19/bin/llvm-symbolizer
# Every report goes to a file of its own, so that one in a rank that
# merak-exec started, under `not`, or in a test that expects a failure
# still fails the run. A process stops at its first report, by abort: a
# crash, which `not` does not accept either. Allocations too large to make
# fail as they do without the sanitizers (allocator_may_return_null), which
# the runtime reports as out of memory.
common="log_path=$logs/report:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1:external_symbolizer_path=$symbolizer"
if [ "$mode" = address ]; then
  # LLVM's allocators poison what they hand out only in code built with
  # ASan, and Debian's libMLIR is not: user poisoning is off (as in
  # fuzz/MlirFuzzer.cpp), ASan's own checks stay.
  export ASAN_OPTIONS="$common:detect_leaks=1:check_initialization_order=1:allow_user_poisoning=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export UBSAN_OPTIONS="$common:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
else
  # merak-exec ends a run of several ranks with _exit(0), on purpose, with
  # threads that finished but were never joined (the waits of the last
  # transfers, the heartbeat); TSan would report them at that exit.
  export TSAN_OPTIONS="$common:second_deadlock_stack=1:report_thread_leaks=0:suppressions=$supp/tsan.supp:print_suppressions=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
fi

failed=0
start=$SECONDS
for u in "${units[@]}"; do
  bin="$(find "$build/unittests" -name "$u" -type f -perm -u+x | head -1)"
  echo "sanitize: $u"
  if [ -z "$bin" ] || ! "$bin" --gtest_brief=1 </dev/null; then
    echo "sanitize: $u FAILED" >&2
    failed=1
  fi
done
echo "sanitize: units took $((SECONDS - start)) s"

start=$SECONDS
paths=()
for t in "${lit_tests[@]}"; do
  paths+=("$main_build/test/$t")
done
if ! MERAK_SANITIZED_TOOLS_DIR="$build/bin" /usr/bin/python3 \
  /usr/lib/llvm-19/build/utils/lit/lit.py -sv -j"$(nproc)" "${paths[@]}" \
  </dev/null; then
  failed=1
fi
echo "sanitize: lit tests took $((SECONDS - start)) s"

# A log holds warnings too (an allocation refused under
# allocator_may_return_null, which the code reports as out of memory);
# only errors count.
mapfile -t reports < <(grep -lE 'ERROR: [A-Za-z]+Sanitizer|runtime error:|WARNING: ThreadSanitizer' "$logs"/report.* 2>/dev/null || true)
if [ ${#reports[@]} -gt 0 ]; then
  failed=1
  echo "sanitize: ${#reports[@]} sanitizer report(s) in $logs:" >&2
  for r in "${reports[@]}"; do
    echo "--- $r" >&2
    head -80 "$r" >&2
  done
fi
if [ "$failed" -eq 0 ]; then
  echo "sanitize ($sanitize): no report, every test passed"
else
  echo "sanitize ($sanitize): FAILED" >&2
fi
exit "$failed"
